package devcluster

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Process is a long-running process of the cluster, recorded in a PID file so a
// later `nest dev` invocation can check and stop it.
type Process struct {
	// Name is unique in the cluster: "kube-apiserver", or "<node>.kubelet".
	Name string `json:"name"`
	PID  int    `json:"pid"`
	// StartTime is field 22 of /proc/PID/stat (clock ticks since boot). It tells
	// our process from an unrelated one that was later given the same PID.
	StartTime uint64   `json:"startTime"`
	Command   []string `json:"command"`
}

// processSpec says how to start one process.
type processSpec struct {
	name string
	node Node
	path string
	args []string
	env  []string
}

// startProcess starts spec detached from this process (own session, output to
// its log file), inside the node's network namespace and tracking cgroup, and
// records it under the run directory. It returns once the process exists; the
// caller waits for readiness.
func startProcess(l Layout, spec processSpec) (Process, error) {
	if err := os.MkdirAll(l.LogDir(), 0o755); err != nil {
		return Process{}, err
	}
	logFile, err := os.OpenFile(filepath.Join(l.LogDir(), spec.name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return Process{}, err
	}
	defer logFile.Close()

	// nsenter enters the namespace and execs the program, so the PID we get is the
	// program's own. `ip netns exec` would remount /sys and hide the cgroup mounts.
	argv := append([]string{"--net=" + spec.node.NetnsPath(), "--", spec.path}, spec.args...)
	cmd := exec.Command("nsenter", argv...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = append(os.Environ(), spec.env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	cg, err := trackingCgroup(spec.node)
	if err != nil {
		return Process{}, err
	}
	if cg != nil {
		defer cg.Close()
		cmd.SysProcAttr.UseCgroupFD = true
		cmd.SysProcAttr.CgroupFD = int(cg.Fd())
	}
	if err := cmd.Start(); err != nil {
		return Process{}, fmt.Errorf("start %s: %w", spec.name, err)
	}
	pid := cmd.Process.Pid
	// Nobody waits for it: when this command exits, init adopts it.
	_ = cmd.Process.Release()
	start, err := processStartTime(pid)
	if err != nil {
		return Process{}, fmt.Errorf("start %s: it exited at once, see %s: %w", spec.name, filepath.Join(l.LogDir(), spec.name+".log"), err)
	}
	p := Process{Name: spec.name, PID: pid, StartTime: start, Command: append([]string{spec.path}, spec.args...)}
	return p, writeProcess(l, p)
}

// Alive reports whether the recorded process still runs.
func (p Process) Alive() bool {
	start, err := processStartTime(p.PID)
	return err == nil && start == p.StartTime
}

// stop sends SIGTERM, waits up to grace for the process to exit, then sends
// SIGKILL. It never signals a process whose start time differs from the record.
func (p Process) stop(grace time.Duration) error {
	if !p.Alive() {
		return nil
	}
	if err := syscall.Kill(p.PID, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("stop %s (pid %d): %w", p.Name, p.PID, err)
	}
	if waitGone(p, grace) {
		return nil
	}
	if err := syscall.Kill(p.PID, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("kill %s (pid %d): %w", p.Name, p.PID, err)
	}
	if !waitGone(p, 10*time.Second) {
		return fmt.Errorf("%s (pid %d) still runs after SIGKILL", p.Name, p.PID)
	}
	return nil
}

func waitGone(p Process, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if !p.Alive() {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return !p.Alive()
}

func pidFile(l Layout, name string) string { return filepath.Join(l.RunDir(), name+".pid") }

func writeProcess(l Layout, p Process) error {
	data, err := json.Marshal(p)
	if err != nil {
		return err
	}
	return writeFileAtomic(pidFile(l, p.Name), data, 0o644)
}

// RecordedProcesses returns every process recorded under the run directory of
// l. Only complete records count: a record is written to a temporary file and
// renamed into place, so a run killed mid-write leaves no half record behind.
func RecordedProcesses(l Layout) ([]Process, error) {
	entries, err := os.ReadDir(l.RunDir())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Process
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".pid") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(l.RunDir(), e.Name()))
		if err != nil {
			return nil, err
		}
		var p Process
		if err := json.Unmarshal(data, &p); err != nil {
			return nil, fmt.Errorf("read %s: %w", e.Name(), err)
		}
		out = append(out, p)
	}
	return out, nil
}

// processStartTime reads field 22 (starttime) of /proc/PID/stat. The command
// name in field 2 may hold spaces and parentheses, so parsing starts after the
// last ')'.
func processStartTime(pid int) (uint64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	fields := strings.Fields(s[i+1:])
	// fields[0] is field 3 (state); starttime is field 22.
	if len(fields) < 20 {
		return 0, fmt.Errorf("parse /proc/%d/stat: %d fields", pid, len(fields))
	}
	if fields[0] == "Z" {
		return 0, fmt.Errorf("process %d is a zombie", pid)
	}
	return strconv.ParseUint(fields[19], 10, 64)
}

// logTail returns the last lines of a process's log, for error messages.
func logTail(l Layout, name string, lines int) string {
	f, err := os.Open(filepath.Join(l.LogDir(), name+".log"))
	if err != nil {
		return ""
	}
	defer f.Close()
	var ring []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		ring = append(ring, sc.Text())
		if len(ring) > lines {
			ring = ring[1:]
		}
	}
	return strings.Join(ring, "\n")
}
