package agent

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	godbus "github.com/godbus/dbus/v5"
	"k8s.io/apimachinery/pkg/util/wait"
)

// fakeUnit is one unit as the fake systemd knows it.
type fakeUnit struct {
	active string
	// jobResult is the result of the unit's next jobs; empty is "done".
	jobResult string
}

// fakeSystemd stands in for go-systemd's connection. Units it does not
// hold are "not-found", as systemd reports a unit it has no file for.
type fakeSystemd struct {
	mu        sync.Mutex
	units     map[string]*fakeUnit
	calls     []string
	connected bool
	closed    bool
	// propErr fails every property query.
	propErr error
	// activeValue, if set, is the ActiveState value as sent, of any type.
	activeValue any
	// silent jobs never report a result, as when the connection is lost.
	silent bool
}

func newFakeSystemd(units map[string]string) *fakeSystemd {
	f := &fakeSystemd{units: map[string]*fakeUnit{}, connected: true}
	for name, active := range units {
		f.units[name] = &fakeUnit{active: active}
	}
	return f
}

func (f *fakeSystemd) record(call string) {
	f.calls = append(f.calls, call)
}

func (f *fakeSystemd) job(name, mode, verb, after string, ch chan<- string) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record(verb + " " + name + " " + mode)
	u, ok := f.units[name]
	if !ok {
		return 0, godbus.Error{Name: "org.freedesktop.systemd1.NoSuchUnit", Body: []any{"Unit " + name + " not found."}}
	}
	result := u.jobResult
	if result == "" {
		result = "done"
		u.active = after
	} else if verb == "start" {
		u.active = "failed"
	}
	if !f.silent {
		// go-systemd reports the result later, from its signal loop.
		go func() { ch <- result }()
	}
	return 1, nil
}

func (f *fakeSystemd) StartUnitContext(_ context.Context, name, mode string, ch chan<- string) (int, error) {
	return f.job(name, mode, "start", "active", ch)
}

func (f *fakeSystemd) StopUnitContext(_ context.Context, name, mode string, ch chan<- string) (int, error) {
	return f.job(name, mode, "stop", "inactive", ch)
}

func (f *fakeSystemd) GetUnitPropertyContext(_ context.Context, unit, name string) (*sddbus.Property, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("get " + unit + " " + name)
	if f.propErr != nil {
		return nil, f.propErr
	}
	u, ok := f.units[unit]
	var value any
	switch name {
	case "LoadState":
		value = "loaded"
		if !ok {
			value = "not-found"
		}
	case "ActiveState":
		value = "inactive"
		if ok {
			value = u.active
		}
		if f.activeValue != nil {
			value = f.activeValue
		}
	default:
		return nil, godbus.Error{Name: "org.freedesktop.DBus.Error.UnknownProperty", Body: []any{"Unknown property " + name}}
	}
	return &sddbus.Property{Name: name, Value: godbus.MakeVariant(value)}, nil
}

func (f *fakeSystemd) Connected() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.connected
}

func (f *fakeSystemd) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	f.connected = false
}

func (f *fakeSystemd) setConnected(c bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.connected = c
}

func (f *fakeSystemd) state(unit string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.units[unit].active
}

// jobs are the start and stop calls so far.
func (f *fakeSystemd) jobs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, c := range f.calls {
		if !strings.HasPrefix(c, "get ") {
			out = append(out, c)
		}
	}
	return out
}

// systemdWith is SystemdServices for units, connected to fake.
func systemdWith(fake *fakeSystemd, units SystemdUnits) *SystemdServices {
	s := NewSystemdServices(units)
	s.dial = func() (systemdConn, error) { return fake, nil }
	s.connPoll = 5 * time.Millisecond
	return s
}

func TestSystemdRunningByActiveState(t *testing.T) {
	for state, want := range map[string]bool{
		"active":       true,
		"reloading":    true,
		"refreshing":   true,
		"activating":   true, // also a unit waiting to restart after a crash
		"deactivating": true,
		"inactive":     false,
		"failed":       false,
	} {
		t.Run(state, func(t *testing.T) {
			fake := newFakeSystemd(map[string]string{"kubelet.service": state, "kube-proxy.service": "inactive"})
			got, err := systemdWith(fake, SystemdUnits{}).Running(context.Background(), ServiceKubelet)
			if err != nil || got != want {
				t.Errorf("Running(kubelet) with ActiveState %s = %v, %v; want %v", state, got, err, want)
			}
		})
	}
}

func TestSystemdRunningUnknownStateIsAnError(t *testing.T) {
	fake := newFakeSystemd(map[string]string{"kubelet.service": "maintenance"})
	_, err := systemdWith(fake, SystemdUnits{}).Running(context.Background(), ServiceKubelet)
	if err == nil || !strings.Contains(err.Error(), `kubelet.service is "maintenance"`) || !strings.Contains(err.Error(), "systemctl status kubelet.service") {
		t.Errorf("Running() = %v, want an error naming the state and how to look", err)
	}
}

func TestSystemdRunningMissingUnitNamesTheField(t *testing.T) {
	fake := newFakeSystemd(map[string]string{"kubelet.service": "active"})
	_, err := systemdWith(fake, SystemdUnits{}).Running(context.Background(), ServiceKubeProxy)
	if err == nil || !strings.HasPrefix(err.Error(), "systemd.kubeProxyUnit: systemd has no unit kube-proxy.service") {
		t.Errorf("Running(kube-proxy) = %v, want an error naming systemd.kubeProxyUnit and kube-proxy.service", err)
	}
}

func TestSystemdRunningPropertyErrors(t *testing.T) {
	fake := newFakeSystemd(map[string]string{"kubelet.service": "active"})
	fake.propErr = errors.New("access denied")
	_, err := systemdWith(fake, SystemdUnits{}).Running(context.Background(), ServiceKubelet)
	if err == nil || !strings.Contains(err.Error(), "LoadState of kubelet.service: access denied") {
		t.Errorf("Running() = %v, want the property and systemd's error", err)
	}

	fake = newFakeSystemd(map[string]string{"kubelet.service": "active"})
	fake.activeValue = uint32(1)
	_, err = systemdWith(fake, SystemdUnits{}).Running(context.Background(), ServiceKubelet)
	if err == nil || !strings.Contains(err.Error(), "not a string") {
		t.Errorf("Running() = %v, want an error for an ActiveState that is no string", err)
	}
}

func TestSystemdUsesTheConfiguredUnits(t *testing.T) {
	fake := newFakeSystemd(map[string]string{"kubelet-nest.service": "inactive", "proxy@eth0.service": "inactive"})
	s := systemdWith(fake, SystemdUnits{KubeletUnit: "kubelet-nest.service", KubeProxyUnit: "proxy@eth0.service"})
	ctx := context.Background()
	if err := s.Start(ctx, ServiceKubelet); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx, ServiceKubeProxy); err != nil {
		t.Fatal(err)
	}
	want := []string{"start kubelet-nest.service replace", "start proxy@eth0.service replace"}
	if got := fake.jobs(); !slices.Equal(got, want) {
		t.Errorf("jobs = %q, want %q", got, want)
	}
}

func TestSystemdStartAndStopAreIdempotent(t *testing.T) {
	fake := newFakeSystemd(map[string]string{"kubelet.service": "inactive", "kube-proxy.service": "inactive"})
	s := systemdWith(fake, SystemdUnits{})
	ctx := context.Background()
	for range 2 {
		if err := s.Start(ctx, ServiceKubelet); err != nil {
			t.Fatalf("Start(kubelet) = %v", err)
		}
		if running, err := s.Running(ctx, ServiceKubelet); err != nil || !running {
			t.Fatalf("after Start, Running = %v, %v", running, err)
		}
	}
	for range 2 {
		if err := s.Stop(ctx, ServiceKubelet); err != nil {
			t.Fatalf("Stop(kubelet) = %v", err)
		}
		if running, err := s.Running(ctx, ServiceKubelet); err != nil || running {
			t.Fatalf("after Stop, Running = %v, %v", running, err)
		}
	}
	if err := s.Stop(ctx, ServiceKubeProxy); err != nil {
		t.Errorf("Stop of a stopped kube-proxy = %v, want nil", err)
	}
	if fake.state("kube-proxy.service") != "inactive" {
		t.Errorf("kube-proxy is %s", fake.state("kube-proxy.service"))
	}
}

func TestSystemdStopStopsAUnitWaitingToRestart(t *testing.T) {
	fake := newFakeSystemd(map[string]string{"kubelet.service": "activating"})
	s := systemdWith(fake, SystemdUnits{})
	if err := s.Stop(context.Background(), ServiceKubelet); err != nil {
		t.Fatal(err)
	}
	if got := fake.jobs(); !slices.Equal(got, []string{"stop kubelet.service replace"}) {
		t.Errorf("jobs = %q, want one stop", got)
	}
	if fake.state("kubelet.service") != "inactive" {
		t.Errorf("kubelet is %s, want inactive", fake.state("kubelet.service"))
	}
}

func TestSystemdStartFromFailed(t *testing.T) {
	fake := newFakeSystemd(map[string]string{"kubelet.service": "failed"})
	s := systemdWith(fake, SystemdUnits{})
	if err := s.Start(context.Background(), ServiceKubelet); err != nil {
		t.Fatal(err)
	}
	if fake.state("kubelet.service") != "active" {
		t.Errorf("kubelet is %s, want active", fake.state("kubelet.service"))
	}
}

func TestSystemdFailedJobSaysWhereToLook(t *testing.T) {
	fake := newFakeSystemd(map[string]string{"kubelet.service": "inactive"})
	fake.units["kubelet.service"].jobResult = "failed"
	err := systemdWith(fake, SystemdUnits{}).Start(context.Background(), ServiceKubelet)
	want := `systemd could not start kubelet.service: the job ended "failed": see journalctl -u kubelet.service`
	if err == nil || err.Error() != want {
		t.Errorf("Start() = %v, want %q", err, want)
	}
}

func TestSystemdJobOnMissingUnitNamesTheField(t *testing.T) {
	fake := newFakeSystemd(nil)
	s := systemdWith(fake, SystemdUnits{KubeletUnit: "kubelet-x.service"})
	for name, op := range map[string]func(context.Context, Service) error{"start": s.Start, "stop": s.Stop} {
		err := op(context.Background(), ServiceKubelet)
		if err == nil || !strings.HasPrefix(err.Error(), "systemd.kubeletUnit: systemd has no unit kubelet-x.service") {
			t.Errorf("%s = %v, want an error naming systemd.kubeletUnit", name, err)
		}
	}
}

func TestSystemdWaitEndsWithTheContext(t *testing.T) {
	fake := newFakeSystemd(map[string]string{"kubelet.service": "inactive"})
	fake.silent = true
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := systemdWith(fake, SystemdUnits{}).Start(ctx, ServiceKubelet)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "start kubelet.service: gave up waiting") {
		t.Errorf("Start() = %v, want a deadline error naming the unit", err)
	}
}

func TestSystemdWaitEndsWhenTheConnectionCloses(t *testing.T) {
	fake := newFakeSystemd(map[string]string{"kubelet.service": "active"})
	fake.silent = true
	s := systemdWith(fake, SystemdUnits{})
	done := make(chan error, 1)
	go func() { done <- s.Stop(context.Background(), ServiceKubelet) }()
	// Only once the job is queued: the wait for its result must be what
	// notices the lost connection.
	if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		return len(fake.jobs()) == 1, nil
	}); err != nil {
		t.Fatalf("Stop() queued no job: %v", err)
	}
	fake.setConnected(false)
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "connection to systemd closed") {
			t.Errorf("Stop() = %v, want an error about the lost connection", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Stop() still waits after the connection closed")
	}
}

func TestSystemdReconnectsAfterALostConnection(t *testing.T) {
	first := newFakeSystemd(map[string]string{"kubelet.service": "active"})
	second := newFakeSystemd(map[string]string{"kubelet.service": "inactive"})
	conns := []*fakeSystemd{first, second}
	dials := 0
	s := NewSystemdServices(SystemdUnits{})
	s.dial = func() (systemdConn, error) {
		c := conns[dials]
		dials++
		return c, nil
	}
	ctx := context.Background()
	if running, err := s.Running(ctx, ServiceKubelet); err != nil || !running {
		t.Fatalf("Running() = %v, %v on the first connection", running, err)
	}
	if running, err := s.Running(ctx, ServiceKubelet); err != nil || !running || dials != 1 {
		t.Fatalf("Running() = %v, %v after %d dials; want the first connection kept", running, err, dials)
	}
	first.setConnected(false)
	if running, err := s.Running(ctx, ServiceKubelet); err != nil || running || dials != 2 {
		t.Fatalf("Running() = %v, %v after %d dials; want a new connection", running, err, dials)
	}
	if !first.closed {
		t.Error("the lost connection was not closed")
	}
	s.Close()
	if !second.closed {
		t.Error("Close() left the connection open")
	}
}

func TestSystemdDialErrorSaysWhatIsNeeded(t *testing.T) {
	s := NewSystemdServices(SystemdUnits{})
	s.dial = func() (systemdConn, error) { return nil, errors.New("no such file or directory") }
	_, err := s.Running(context.Background(), ServiceKubelet)
	if err == nil || !strings.Contains(err.Error(), "connect to systemd over D-Bus") || !strings.Contains(err.Error(), "no such file or directory") {
		t.Errorf("Running() = %v, want the connection error", err)
	}
}

func TestSystemdUnknownService(t *testing.T) {
	fake := newFakeSystemd(nil)
	err := systemdWith(fake, SystemdUnits{}).Start(context.Background(), Service("containerd"))
	if err == nil || !strings.Contains(err.Error(), `"containerd"`) {
		t.Errorf("Start(containerd) = %v, want an error naming the service", err)
	}
	if len(fake.calls) != 0 {
		t.Errorf("systemd was asked %q", fake.calls)
	}
}

// The agent's operations, through systemd: Stop stops kube-proxy first,
// and Reset sees both units stopped.
func TestNodeOperationsThroughSystemd(t *testing.T) {
	env := newSavedEnv(t)
	fake := newFakeSystemd(map[string]string{"kubelet.service": "active", "kube-proxy.service": "active"})
	env.node.services = systemdWith(fake, SystemdUnits{})
	ctx := context.Background()
	if err := env.node.Reset(ctx); !isConflictError(err) {
		t.Fatalf("Reset() while the units run = %v, want a conflict", err)
	}
	if err := env.node.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := env.node.Reset(ctx); err != nil {
		t.Fatalf("Reset() after Stop = %v", err)
	}
	want := []string{"stop kube-proxy.service replace", "stop kubelet.service replace"}
	if got := fake.jobs(); !slices.Equal(got, want) {
		t.Errorf("jobs = %q, want %q", got, want)
	}
}

// isConflictError reports whether err is a ConflictError.
func isConflictError(err error) bool {
	var c *ConflictError
	return errors.As(err, &c)
}
