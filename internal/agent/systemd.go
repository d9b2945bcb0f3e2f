package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	godbus "github.com/godbus/dbus/v5"
)

// systemdConn is the part of go-systemd's D-Bus connection the agent uses,
// small so that tests can stand in for systemd.
type systemdConn interface {
	StartUnitContext(ctx context.Context, name, mode string, ch chan<- string) (int, error)
	StopUnitContext(ctx context.Context, name, mode string, ch chan<- string) (int, error)
	GetUnitPropertyContext(ctx context.Context, unit, propertyName string) (*sddbus.Property, error)
	Connected() bool
	Close()
}

// dialSystemd connects to systemd: through the system bus, or, for root on
// a host without a D-Bus daemon, systemd's private socket. The connection
// lives as long as the agent, so it must not be bound to a request's
// context, which would close it when the request ends.
func dialSystemd() (systemdConn, error) {
	return sddbus.NewWithContext(context.Background())
}

// SystemdServices starts and stops the kubelet and kube-proxy as systemd
// units through systemd's D-Bus API, the one systemctl uses: results are
// typed (a unit's ActiveState, a job's result) instead of exit codes and
// text. It connects on first use and again whenever systemd dropped the
// connection (systemctl daemon-reexec does).
type SystemdServices struct {
	units SystemdUnits
	dial  func() (systemdConn, error)
	// connPoll is how often a wait for a job checks that the connection
	// still stands: a job whose result was lost with it never reports.
	connPoll time.Duration

	mu   sync.Mutex
	conn systemdConn
}

var _ Services = (*SystemdServices)(nil)

// NewSystemdServices returns the Services of the units names.
func NewSystemdServices(units SystemdUnits) *SystemdServices {
	return &SystemdServices{units: units, dial: dialSystemd, connPoll: time.Second}
}

// Close closes the connection to systemd, if any.
func (s *SystemdServices) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn != nil {
		s.conn.Close()
		s.conn = nil
	}
}

// connection is the connection to systemd, made anew if it was lost.
func (s *SystemdServices) connection() (systemdConn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn != nil && s.conn.Connected() {
		return s.conn, nil
	}
	if s.conn != nil {
		s.conn.Close()
		s.conn = nil
	}
	conn, err := s.dial()
	if err != nil {
		return nil, fmt.Errorf("connect to systemd over D-Bus (the agent runs as root on a host that systemd boots): %w", err)
	}
	s.conn = conn
	return conn, nil
}

// Running reports whether svc's unit runs or is about to: systemd counts a
// unit waiting to restart after a crash (Restart=) as activating, and such
// a kubelet comes back by itself, so a reset must not go on meanwhile. A
// unit systemd does not know is an error, not a stopped service: the
// configuration names the wrong unit.
func (s *SystemdServices) Running(ctx context.Context, svc Service) (bool, error) {
	unit, field, err := s.units.Unit(svc)
	if err != nil {
		return false, err
	}
	conn, err := s.connection()
	if err != nil {
		return false, err
	}
	load, err := unitProperty(ctx, conn, unit, "LoadState")
	if err != nil {
		return false, err
	}
	if load == "not-found" {
		return false, noSuchUnitError(field, unit)
	}
	active, err := unitProperty(ctx, conn, unit, "ActiveState")
	if err != nil {
		return false, err
	}
	switch active {
	case "active", "reloading", "refreshing", "activating", "deactivating":
		return true, nil
	case "inactive", "failed":
		return false, nil
	}
	return false, fmt.Errorf("%s is %q, a state the agent does not know: see systemctl status %s", unit, active, unit)
}

// unitProperty is the string property name of unit.
func unitProperty(ctx context.Context, conn systemdConn, unit, name string) (string, error) {
	p, err := conn.GetUnitPropertyContext(ctx, unit, name)
	if err != nil {
		return "", fmt.Errorf("ask systemd for the %s of %s: %w", name, unit, err)
	}
	v, ok := p.Value.Value().(string)
	if !ok {
		return "", fmt.Errorf("systemd answered %s for the %s of %s, not a string", p.Value.String(), name, unit)
	}
	return v, nil
}

// Start starts svc's unit and waits until systemd's start job is done (for
// Type=notify units, until the service says it is ready). A running unit
// is left as it is: systemd's start job finds nothing to do.
func (s *SystemdServices) Start(ctx context.Context, svc Service) error {
	return s.job(ctx, svc, "start", func(conn systemdConn) jobFunc { return conn.StartUnitContext })
}

// Stop stops svc's unit and waits until it has stopped. A stopped unit is
// left as it is: systemd's stop job finds nothing to do.
func (s *SystemdServices) Stop(ctx context.Context, svc Service) error {
	return s.job(ctx, svc, "stop", func(conn systemdConn) jobFunc { return conn.StopUnitContext })
}

// jobFunc enqueues a systemd job and reports its result on ch.
type jobFunc func(ctx context.Context, name, mode string, ch chan<- string) (int, error)

// job runs one start or stop job of svc's unit and waits for its result.
// Mode "replace" is systemctl's default: the job replaces a queued job of
// the other kind, so a stop wins over a pending restart.
func (s *SystemdServices) job(ctx context.Context, svc Service, verb string, method func(systemdConn) jobFunc) error {
	unit, field, err := s.units.Unit(svc)
	if err != nil {
		return err
	}
	conn, err := s.connection()
	if err != nil {
		return err
	}
	// Buffered: go-systemd delivers every job result from one goroutine,
	// which an abandoned wait must not block.
	result := make(chan string, 1)
	if _, err := method(conn)(ctx, unit, "replace", result); err != nil {
		if dbusErrorName(err) == "org.freedesktop.systemd1.NoSuchUnit" {
			return noSuchUnitError(field, unit)
		}
		return fmt.Errorf("systemd refused to %s %s: %w", verb, unit, err)
	}
	tick := time.NewTicker(s.connPoll)
	defer tick.Stop()
	for {
		select {
		case r := <-result:
			if r == "done" {
				return nil
			}
			return fmt.Errorf("systemd could not %s %s: the job ended %q: see journalctl -u %s", verb, unit, r, unit)
		case <-tick.C:
			if !conn.Connected() {
				return fmt.Errorf("%s %s: the connection to systemd closed before the job ended: ask again", verb, unit)
			}
		case <-ctx.Done():
			return fmt.Errorf("%s %s: gave up waiting for systemd's job, which goes on: %w", verb, unit, ctx.Err())
		}
	}
}

func noSuchUnitError(field, unit string) error {
	return fmt.Errorf("%s: systemd has no unit %s on this node: install it, or set %s in the agent's configuration to the unit that runs the service", field, unit, field)
}

// dbusErrorName is the D-Bus name of the error err carries, if any.
func dbusErrorName(err error) string {
	var value godbus.Error
	if errors.As(err, &value) {
		return value.Name
	}
	var ptr *godbus.Error
	if errors.As(err, &ptr) {
		return ptr.Name
	}
	return ""
}

// RunSystemd serves the agent of a host whose kubelet and kube-proxy are
// the systemd units cfg.Systemd names, until ctx ends (`nest agent`). It
// asks systemd about both units first, so a host without them, or without
// systemd, fails at start rather than at the first request.
func RunSystemd(ctx context.Context, cfg Config) error {
	services := NewSystemdServices(cfg.Systemd)
	defer services.Close()
	for _, s := range []Service{ServiceKubelet, ServiceKubeProxy} {
		if _, err := services.Running(ctx, s); err != nil {
			return err
		}
	}
	return Run(ctx, cfg, services)
}
