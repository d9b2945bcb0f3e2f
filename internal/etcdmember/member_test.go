package etcdmember

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nestdev/nest/internal/components"
	"github.com/nestdev/nest/internal/testutil"
)

// etcdBinary is our etcd build (the kube multi-call binary), as envtest
// finds it: `make unit` sets KUBEBUILDER_ASSETS.
func etcdBinary(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set: run with `make unit`, which points it at our etcd build")
	}
	return filepath.Join(dir, "etcd")
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// member is one etcd member on loopback, plain HTTP, in a directory of the test.
type member struct {
	name, dir           string
	peerURL, clientURL  string
	metricsURL, envFile string
}

func newMember(t *testing.T, name string) *member {
	dir := filepath.Join(t.TempDir(), name)
	return &member{
		name: name, dir: dir,
		peerURL:    fmt.Sprintf("http://127.0.0.1:%d", freePort(t)),
		clientURL:  fmt.Sprintf("http://127.0.0.1:%d", freePort(t)),
		metricsURL: fmt.Sprintf("http://127.0.0.1:%d", freePort(t)),
		envFile:    filepath.Join(dir, "initial-cluster.env"),
	}
}

// config is the helper's view of m, with peers.
func (m *member) config(bootstrap bool, peers ...*member) Config {
	c := Config{Name: m.name, PeerURL: m.peerURL, LocalClientURL: m.clientURL, DataDir: filepath.Join(m.dir, "data"),
		InitialClusterFile: m.envFile, Bootstrap: func() bool { return bootstrap }}
	for _, p := range peers {
		c.PeerClientURLs = append(c.PeerClientURLs, p.clientURL)
	}
	return c
}

// start runs etcd for m with the helper's initial cluster file, as the
// control-plane pod does, and stops it when the test ends.
func (m *member) start(t *testing.T) {
	t.Helper()
	cmd := exec.Command(etcdBinary(t), "--name="+m.name, "--data-dir="+filepath.Join(m.dir, "data"),
		"--listen-client-urls="+m.clientURL, "--advertise-client-urls="+m.clientURL,
		"--listen-peer-urls="+m.peerURL, "--initial-advertise-peer-urls="+m.peerURL,
		"--listen-metrics-urls="+m.metricsURL, "--log-level=warn")
	// The name the control-plane pod gives etcd: a kube binary that reads
	// another fails this test.
	cmd.Env = append(os.Environ(), components.InitialClusterFileEnv+"="+m.envFile)
	log, err := os.Create(filepath.Join(m.dir, "etcd.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		log.Close()
		if t.Failed() {
			out, _ := os.ReadFile(log.Name())
			t.Logf("etcd %s:\n%s", m.name, out)
		}
	})
}

// members waits until m answers and returns its members by name; an
// unstarted member is "".
func (m *member) members(t *testing.T, c Config) []string {
	t.Helper()
	var names []string
	testutil.Eventually(t, 30*time.Second, "members of "+m.name, func() error {
		list, err := Members(context.Background(), c)
		if err != nil {
			return err
		}
		names = names[:0]
		for _, x := range list {
			n := x.Name
			if x.IsLearner {
				n += " (learner)"
			}
			names = append(names, n)
		}
		slices.Sort(names)
		return nil
	})
	return names
}

// The first member starts a cluster of one; a second joins it as a
// learner through the helper's file, which our etcd build loads, and is
// promoted once it caught up; a member whose join was interrupted before
// its etcd started is not added twice.
func TestMembersJoinOneAtATimeAsLearners(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a, b, c := newMember(t, "m-0"), newMember(t, "m-1"), newMember(t, "m-2")
	for _, m := range []*member{a, b, c} {
		if err := os.MkdirAll(m.dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}

	if err := Join(ctx, a.config(true, b, c)); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, a.envFile); !strings.Contains(got, "ETCD_INITIAL_CLUSTER_STATE=new") || !strings.Contains(got, "m-0="+a.peerURL) ||
		!strings.Contains(got, "ETCD_INITIAL_CLUSTER_TOKEN=nest-") {
		t.Fatalf("first member's initial cluster:\n%s\nwant a new cluster of itself, with a token of its own", got)
	}
	a.start(t)
	if got := a.members(t, a.config(true)); !slices.Equal(got, []string{"m-0"}) {
		t.Fatalf("members %v, want m-0 alone", got)
	}

	bc := b.config(false, a, c)
	if err := Join(ctx, bc); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, b.envFile); !strings.Contains(got, "ETCD_INITIAL_CLUSTER_STATE=existing") || !strings.Contains(got, "m-1="+b.peerURL) || !strings.Contains(got, "m-0="+a.peerURL) {
		t.Fatalf("joining member's initial cluster:\n%s", got)
	}
	b.start(t)
	go Maintain(ctx, bc)
	testutil.Eventually(t, time.Minute, "m-1 promoted", func() error {
		got := a.members(t, a.config(true))
		if !slices.Equal(got, []string{"m-0", "m-1"}) {
			return fmt.Errorf("members %v", got)
		}
		return nil
	})

	// An interrupted join: the helper added m-2, then was stopped before
	// etcd ran. Its next start must reuse the member, not add another.
	// (etcd refuses a member add for a while after a promotion, until the
	// leader has heard from every peer: Join tries again.)
	cc := c.config(false, a, b)
	for range 2 {
		if err := Join(ctx, cc); err != nil {
			t.Fatal(err)
		}
	}
	if got := a.members(t, a.config(true)); !slices.Equal(got, []string{" (learner)", "m-0", "m-1"}) {
		t.Errorf("after two joins of m-2: members %v, want one unstarted learner beside m-0 and m-1", got)
	}
}

// A member with data (a write-ahead log) restarts as it was, whatever its
// peers say; a member/ directory without a log is what a failed join left,
// and is cleared before the member joins again.
func TestMemberWithDataRestartsAsItWas(t *testing.T) {
	m := newMember(t, "m-0")
	wal := filepath.Join(m.dir, "data", "member", "wal")
	if err := os.MkdirAll(wal, 0o755); err != nil {
		t.Fatal(err)
	}
	got, err := joinOnce(context.Background(), m.config(true, newMember(t, "m-1")))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(got, "ETCD_INITIAL_CLUSTER_STATE=new") {
		t.Errorf("a member/ without a log: initial cluster %q, want a new cluster (nothing answers, and it may bootstrap)", got)
	}
	if _, err := os.Stat(wal); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the failed join's member/ was left: %v", err)
	}
	if err := os.MkdirAll(wal, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(wal, "0000000000000000-0000000000000000.wal"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err = joinOnce(context.Background(), m.config(false, newMember(t, "m-1")))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(got, "ETCD_INITIAL_CLUSTER_STATE=existing") {
		t.Errorf("a member with a log: initial cluster %q, want existing", got)
	}
}

// Only a member nest-manager names may start a cluster of its own, and
// never while a peer answers.
func TestOnlyTheNamedMemberBootstraps(t *testing.T) {
	ctx := context.Background()
	m, peer := newMember(t, "m-1"), newMember(t, "m-0")
	if _, err := joinOnce(ctx, m.config(false, peer)); err == nil {
		t.Error("a member not named to bootstrap, with no peer answering, joined")
	}
	f := Flags{Name: "m-0", PeerURL: "http://m-0:2380", LocalClientURL: "http://127.0.0.1:2379", DataDir: "d", InitialClusterFile: "f",
		BootstrapFile: filepath.Join(t.TempDir(), "bootstrap-member")}
	c := f.config()
	if c.Bootstrap() {
		t.Error("no bootstrap file: the member may bootstrap")
	}
	if err := os.WriteFile(f.BootstrapFile, []byte("m-0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if !c.Bootstrap() {
		t.Error("the file names the member, and it may not bootstrap")
	}
	if err := os.WriteFile(f.BootstrapFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if c.Bootstrap() {
		t.Error("the file was emptied (the tenant was Ready), and the member may still bootstrap")
	}
}

// Flags round-trip, and each replica finds its peers among the members.
func TestFlagsRoundTrip(t *testing.T) {
	f := Flags{
		Name: "alpha-1", PeerURL: "https://alpha-1.alpha-peers.ns.svc:2380", LocalClientURL: "https://127.0.0.1:2379",
		MemberClientURLs: []string{"https://alpha-0.alpha-peers.ns.svc:2379", "https://alpha-1.alpha-peers.ns.svc:2379", "https://alpha-2.alpha-peers.ns.svc:2379"},
		BootstrapFile:    "/etc/nest/etcd-bootstrap/member", DataDir: "/var/lib/etcd/data", InitialClusterFile: "/run/etcd-member/initial-cluster.env",
		CAFile: "ca", CertFile: "cert", KeyFile: "key",
	}
	c, err := parse(f.Args())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.PeerClientURLs, []string{f.MemberClientURLs[0], f.MemberClientURLs[2]}) || c.Bootstrap() {
		t.Errorf("config %+v: want the two other members as peers, and no bootstrap without the file", c)
	}
	if _, err := parse([]string{"--name=x"}); err == nil || !strings.Contains(err.Error(), "--peer-url") {
		t.Errorf("missing flags: %v, want them named", err)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
