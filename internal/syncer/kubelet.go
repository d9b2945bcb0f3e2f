package syncer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	dto "github.com/prometheus/client_model/go"
	"github.com/virtual-kubelet/virtual-kubelet/node/api"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	utilexec "k8s.io/utils/exec"

	"github.com/nestdev/nest/internal/syncer/contract"
)

// The virtual node's kubelet API (logs, exec, attach, port-forward) is served
// by relaying each request to the host API server for the host pod. The
// syncer's host Role grants exactly these subresources in its namespace.
// virtual-kubelet answers the tenant's API server with the error it gets,
// which kubectl prints: the host's words in it (the host pod's name and
// namespace) are the tenant's pod's (tellKubelet).

// GetContainerLogs streams a container's log from the host pod.
func (p *podProvider) GetContainerLogs(ctx context.Context, namespace, podName, container string, o api.ContainerLogOpts) (io.ReadCloser, error) {
	opts := &corev1.PodLogOptions{Container: container, Follow: o.Follow, Previous: o.Previous, Timestamps: o.Timestamps}
	if o.Tail > 0 {
		opts.TailLines = ptrInt64(int64(o.Tail))
	}
	if o.LimitBytes > 0 {
		opts.LimitBytes = ptrInt64(int64(o.LimitBytes))
	}
	if o.SinceSeconds > 0 {
		opts.SinceSeconds = ptrInt64(int64(o.SinceSeconds))
	}
	if !o.SinceTime.IsZero() {
		opts.SinceTime = &metav1.Time{Time: o.SinceTime}
	}
	logs, err := p.host.CoreV1().Pods(p.tr.HostNamespace).GetLogs(contract.HostName(p.tr.VirtualCluster, namespace, podName), opts).Stream(ctx)
	if err != nil {
		return nil, p.tellKubelet(ctx, namespace, podName, err)
	}
	return logs, nil
}

// tellKubelet is the error of a kubelet API call on the tenant pod
// namespace/podName as the tenant reads it (tell). A command's exit status
// is left as it is: the tenant's kubectl exits with its code.
func (p *podProvider) tellKubelet(ctx context.Context, namespace, podName string, err error) error {
	var exit utilexec.ExitError
	if err == nil || errors.As(err, &exit) {
		return err
	}
	tenant, terr := p.tenantPods.Pods(namespace).Get(podName)
	if terr != nil {
		tenant = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: podName}}
	}
	host, herr := p.hostPods.Get(contract.HostName(p.tr.VirtualCluster, namespace, podName))
	if herr != nil {
		host = nil
	}
	return p.tell(ctx, tenant, host, err)
}

// RunInContainer runs a command in the host pod's container.
func (p *podProvider) RunInContainer(ctx context.Context, namespace, podName, container string, cmd []string, attach api.AttachIO) error {
	return p.tellKubelet(ctx, namespace, podName, p.stream(ctx, "exec", namespace, podName, &corev1.PodExecOptions{
		Container: container, Command: cmd,
		Stdin: attach.Stdin() != nil, Stdout: attach.Stdout() != nil, Stderr: attach.Stderr() != nil, TTY: attach.TTY(),
	}, attach))
}

// AttachToContainer attaches to the host pod's container.
func (p *podProvider) AttachToContainer(ctx context.Context, namespace, podName, container string, attach api.AttachIO) error {
	return p.tellKubelet(ctx, namespace, podName, p.stream(ctx, "attach", namespace, podName, &corev1.PodAttachOptions{
		Container: container,
		Stdin:     attach.Stdin() != nil, Stdout: attach.Stdout() != nil, Stderr: attach.Stderr() != nil, TTY: attach.TTY(),
	}, attach))
}

// stream runs an exec or attach session against the host pod and copies the
// streams both ways until it ends.
func (p *podProvider) stream(ctx context.Context, subresource, namespace, podName string, opts runtime.Object, attach api.AttachIO) error {
	url := p.host.CoreV1().RESTClient().Post().Resource("pods").Namespace(p.tr.HostNamespace).
		Name(contract.HostName(p.tr.VirtualCluster, namespace, podName)).SubResource(subresource).
		VersionedParams(opts, scheme.ParameterCodec).URL()
	exec, err := remotecommand.NewSPDYExecutor(p.hostCfg, http.MethodPost, url)
	if err != nil {
		return err
	}
	so := remotecommand.StreamOptions{Stdin: attach.Stdin(), Tty: attach.TTY()}
	// An interface holding a nil writer is not nil: only set the streams the
	// client asked for.
	if w := attach.Stdout(); w != nil {
		so.Stdout = w
	}
	if w := attach.Stderr(); w != nil {
		so.Stderr = w
	}
	if attach.TTY() {
		so.TerminalSizeQueue = resizeQueue{ctx: ctx, ch: attach.Resize()}
	}
	return exec.StreamWithContext(ctx, so)
}

// resizeQueue hands terminal resizes from the tenant client to the host.
type resizeQueue struct {
	ctx context.Context
	ch  <-chan api.TermSize
}

// Next blocks until the next resize, and returns nil once the client's
// stream or the request ends, as remotecommand.TerminalSizeQueue requires.
func (q resizeQueue) Next() *remotecommand.TerminalSize {
	select {
	case s, ok := <-q.ch:
		if !ok {
			return nil
		}
		return &remotecommand.TerminalSize{Width: s.Width, Height: s.Height}
	case <-q.ctx.Done():
		return nil
	}
}

// GetStatsSummary reports no statistics: the host's kubelets own them.
func (p *podProvider) GetStatsSummary(context.Context) (*statsv1alpha1.Summary, error) {
	return &statsv1alpha1.Summary{}, nil
}

// GetMetricsResource reports no metrics: the host's kubelets own them.
func (p *podProvider) GetMetricsResource(context.Context) ([]*dto.MetricFamily, error) {
	return nil, nil
}

// PortForward relays one forwarded connection to a port of the host pod,
// speaking the port-forward protocol to the host API server.
func (p *podProvider) PortForward(ctx context.Context, namespace, podName string, port int32, stream io.ReadWriteCloser) error {
	return p.tellKubelet(ctx, namespace, podName, p.portForward(ctx, namespace, podName, port, stream))
}

// portForward is PortForward with the error in the host's words.
func (p *podProvider) portForward(ctx context.Context, namespace, podName string, port int32, stream io.ReadWriteCloser) error {
	defer stream.Close()
	url := p.host.CoreV1().RESTClient().Post().Resource("pods").Namespace(p.tr.HostNamespace).
		Name(contract.HostName(p.tr.VirtualCluster, namespace, podName)).SubResource("portforward").URL()
	transport, upgrader, err := spdy.RoundTripperFor(p.hostCfg)
	if err != nil {
		return err
	}
	conn, _, err := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, http.MethodPost, url).Dial(portforward.PortForwardProtocolV1Name)
	if err != nil {
		return fmt.Errorf("port-forward to host pod: %w", err)
	}
	defer conn.Close()
	headers := http.Header{}
	headers.Set(corev1.StreamType, corev1.StreamTypeError)
	headers.Set(corev1.PortHeader, strconv.Itoa(int(port)))
	headers.Set(corev1.PortForwardRequestIDHeader, "0")
	errorStream, err := conn.CreateStream(headers)
	if err != nil {
		return err
	}
	_ = errorStream.Close() // the client never writes to the error stream
	headers.Set(corev1.StreamType, corev1.StreamTypeData)
	data, err := conn.CreateStream(headers)
	if err != nil {
		return err
	}
	remoteErr := make(chan error, 1)
	go func() {
		msg, _ := io.ReadAll(errorStream)
		if len(msg) > 0 {
			remoteErr <- fmt.Errorf("port-forward to port %d: %s", port, msg)
		}
		close(remoteErr)
	}()
	go func() {
		_, _ = io.Copy(data, stream)
		_ = data.Close()
	}()
	if _, err := io.Copy(stream, data); err != nil {
		return err
	}
	return <-remoteErr
}

func ptrInt64(v int64) *int64 { return &v }
