package syncer

import (
	vklog "github.com/virtual-kubelet/virtual-kubelet/log"
	"github.com/virtual-kubelet/virtual-kubelet/log/klogv2"
	"k8s.io/klog/v2"
)

// vkLogger sends virtual-kubelet's logs to klog through virtual-kubelet's
// own klog adapter, whose Info lines (one per pod created and per status
// written) are kept for verbosity 2. Without it virtual-kubelet logs
// nothing, not even why a pod could not be created.
type vkLogger struct{ vklog.Logger }

// newVKLogger is the logger nest-syncer gives virtual-kubelet (vklog.L).
func newVKLogger() vklog.Logger { return vkLogger{klogv2.New(nil)} }

const vkInfoVerbosity = 2

func (l vkLogger) Info(args ...any) {
	if klog.V(vkInfoVerbosity).Enabled() {
		l.Logger.Info(args...)
	}
}

func (l vkLogger) Infof(format string, args ...any) {
	if klog.V(vkInfoVerbosity).Enabled() {
		l.Logger.Infof(format, args...)
	}
}

func (l vkLogger) WithField(key string, val any) vklog.Logger {
	return vkLogger{l.Logger.WithField(key, val)}
}

func (l vkLogger) WithFields(fields vklog.Fields) vklog.Logger {
	return vkLogger{l.Logger.WithFields(fields)}
}

func (l vkLogger) WithError(err error) vklog.Logger {
	return vkLogger{l.Logger.WithError(err)}
}
