package devcluster

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestProcessStartTimeOfSelf(t *testing.T) {
	a, err := processStartTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	b, _ := processStartTime(os.Getpid())
	if a == 0 || a != b {
		t.Fatalf("start time %d then %d; want a stable non-zero value", a, b)
	}
	p := Process{PID: os.Getpid(), StartTime: a}
	if !p.Alive() {
		t.Error("this process is not Alive")
	}
	p.StartTime++
	if p.Alive() {
		t.Error("a process with another start time (a reused PID) counts as alive")
	}
}

func TestProcessRecordRoundTrip(t *testing.T) {
	l := Layout{Root: t.TempDir()}
	want := Process{Name: "nest-worker.kubelet", PID: 42, StartTime: 7, Command: []string{"kube", "kubelet"}}
	if err := writeProcess(l, want); err != nil {
		t.Fatal(err)
	}
	got, err := RecordedProcesses(l)
	if err != nil || len(got) != 1 || got[0].Name != want.Name || got[0].PID != 42 || got[0].StartTime != 7 {
		t.Fatalf("read %v, %v", got, err)
	}
	if nodes := recordedNodes(got); len(nodes) != 1 || nodes[0] != "nest-worker" {
		t.Errorf("recordedNodes = %v", nodes)
	}
}

func TestRecordedProcessesIgnoresInterruptedWrites(t *testing.T) {
	l := Layout{Root: t.TempDir()}
	if err := writeProcess(l, Process{Name: "etcd", PID: 1, StartTime: 1}); err != nil {
		t.Fatal(err)
	}
	// What writeFileAtomic leaves when the writer is killed before the rename.
	if err := os.WriteFile(filepath.Join(l.RunDir(), ".kube-apiserver.pid.123"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := RecordedProcesses(l)
	if err != nil || len(got) != 1 || got[0].Name != "etcd" {
		t.Fatalf("RecordedProcesses = %v, %v; want only etcd", got, err)
	}
}

func TestStopOfGoneProcessIsNoop(t *testing.T) {
	p := Process{Name: "gone", PID: os.Getpid(), StartTime: 1}
	if err := p.stop(time.Second); err != nil {
		t.Fatal(err)
	}
}
