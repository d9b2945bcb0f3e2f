package etcdmember

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/klog/v2"
)

// Command is the helper's name as a nest-syncer subcommand:
// `nest-syncer etcd-member [members] --flags`.
const Command = "etcd-member"

// MembersCommand lists the members as JSON (Member) instead of running
// the helper: `nest-syncer etcd-member members --flags`.
const MembersCommand = "members"

// StartedPath is served on Config's ready address once the initial cluster
// file is written: the helper's startup probe, which holds etcd back
// until then.
const StartedPath = "/started"

// ReadyPort is the loopback port of StartedPath.
const ReadyPort = 2382

// Member is one member as MembersCommand prints it.
type Member struct {
	Name      string   `json:"name"`
	ID        string   `json:"id"`
	PeerURLs  []string `json:"peerURLs"`
	IsLearner bool     `json:"isLearner"`
	// Started is false for a member added that has not joined yet.
	Started bool `json:"started"`
}

// Flags are the helper's command line, as the control-plane pod template
// gives it to every replica alike: each replica finds its own part from
// its name at run time.
type Flags struct {
	// Name is the member's name, "$(POD_NAME)" in the template.
	Name string
	// PeerURL is the URL its peers reach it at.
	PeerURL string
	// LocalClientURL is its client URL on loopback.
	LocalClientURL string
	// MemberClientURLs are the client URLs of every member the cluster is
	// to have, its own among them (told apart by PeerURL's host).
	MemberClientURLs []string
	// BootstrapFile is a file naming the one member that may start a new
	// cluster when no peer answers (nest-manager's ConfigMap, mounted);
	// read at every try. Missing or empty, no member may.
	BootstrapFile string
	// DataDir is etcd's --data-dir; InitialClusterFile the file the
	// helper writes for etcd.
	DataDir, InitialClusterFile string
	// CAFile, CertFile and KeyFile are the etcd client identity.
	CAFile, CertFile, KeyFile string
}

// Args renders f; Main parses them back.
func (f Flags) Args() []string {
	return []string{
		"--name=" + f.Name,
		"--peer-url=" + f.PeerURL,
		"--local-client-url=" + f.LocalClientURL,
		"--member-client-urls=" + strings.Join(f.MemberClientURLs, ","),
		"--bootstrap-file=" + f.BootstrapFile,
		"--data-dir=" + f.DataDir,
		"--initial-cluster-file=" + f.InitialClusterFile,
		"--cacert=" + f.CAFile, "--cert=" + f.CertFile, "--key=" + f.KeyFile,
	}
}

// parse reads the flags Args renders into the member's Config.
func parse(args []string) (Config, error) {
	var f Flags
	var members string
	fs := flag.NewFlagSet(Command, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&f.Name, "name", "", "the member's name (the pod's)")
	fs.StringVar(&f.PeerURL, "peer-url", "", "the URL peers reach the member at")
	fs.StringVar(&f.LocalClientURL, "local-client-url", "", "the member's client URL on loopback")
	fs.StringVar(&members, "member-client-urls", "", "client URLs of every member, comma-separated")
	fs.StringVar(&f.BootstrapFile, "bootstrap-file", "", "file naming the member that may start a new cluster when no peer answers")
	fs.StringVar(&f.DataDir, "data-dir", "", "etcd's --data-dir")
	fs.StringVar(&f.InitialClusterFile, "initial-cluster-file", "", "file to write ETCD_INITIAL_CLUSTER and ETCD_INITIAL_CLUSTER_STATE to")
	fs.StringVar(&f.CAFile, "cacert", "", "etcd CA file")
	fs.StringVar(&f.CertFile, "cert", "", "etcd client certificate file")
	fs.StringVar(&f.KeyFile, "key", "", "etcd client key file")
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	var missing []string
	for _, m := range []struct{ flag, value string }{
		{"name", f.Name}, {"peer-url", f.PeerURL}, {"local-client-url", f.LocalClientURL},
		{"data-dir", f.DataDir}, {"initial-cluster-file", f.InitialClusterFile},
	} {
		if m.value == "" {
			missing = append(missing, "--"+m.flag)
		}
	}
	if len(missing) > 0 {
		return Config{}, fmt.Errorf("missing %s", strings.Join(missing, ", "))
	}
	if members != "" {
		f.MemberClientURLs = strings.Split(members, ",")
	}
	return f.config(), nil
}

// config is the member's Config: its peers are the members but itself.
func (f Flags) config() Config {
	c := Config{
		Name: f.Name, PeerURL: f.PeerURL, LocalClientURL: f.LocalClientURL,
		DataDir: f.DataDir, InitialClusterFile: f.InitialClusterFile,
		Bootstrap: func() bool { return f.BootstrapFile != "" && bootstrapMember(f.BootstrapFile) == f.Name },
		Restore:   func() bool { return f.BootstrapFile != "" && bootstrapMember(f.BootstrapFile) == RestoreMarker+f.Name },
		CAFile:    f.CAFile, CertFile: f.CertFile, KeyFile: f.KeyFile,
	}
	self := HostOf(f.PeerURL)
	for _, u := range f.MemberClientURLs {
		if HostOf(u) != self {
			c.PeerClientURLs = append(c.PeerClientURLs, u)
		}
	}
	return c
}

// bootstrapMember is the member the file at path names, "" when it names
// none or cannot be read.
func bootstrapMember(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// Main runs the helper (or MembersCommand, writing to out) with args, the
// arguments after Command, until SIGTERM.
func Main(args []string, out io.Writer) error {
	if len(args) > 0 && args[0] == ReceiveCommand {
		return receiveMain(args[1:], os.Stdin)
	}
	if len(args) > 0 && args[0] == MembersCommand {
		c, err := parse(args[1:])
		if err != nil {
			return err
		}
		return printMembers(context.Background(), c, out)
	}
	c, err := parse(args)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	ctx = klog.NewContext(ctx, klog.Background().WithValues("member", c.Name))
	started := make(chan struct{})
	go serveStarted(ctx, started)
	if err := Join(ctx, c); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	close(started)
	Maintain(ctx, c)
	return nil
}

// receiveMain is ReceiveCommand: --data-dir, --size and --sha256, the
// snapshot on in.
func receiveMain(args []string, in io.Reader) error {
	fs := flag.NewFlagSet(Command+" "+ReceiveCommand, flag.ContinueOnError)
	dataDir := fs.String("data-dir", "", "etcd's --data-dir, where the member restores from the snapshot")
	sum := fs.String("sha256", "", "the snapshot's SHA-256, hex")
	size := fs.Int64("size", -1, "the snapshot's size in bytes")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dataDir == "" || *sum == "" || *size < 0 {
		return errors.New("--data-dir, --size and --sha256 are required")
	}
	return Receive(in, *size, *dataDir, *sum)
}

// serveStarted answers StartedPath on loopback: 200 once started is
// closed, 503 before.
func serveStarted(ctx context.Context, started <-chan struct{}) {
	mux := http.NewServeMux()
	mux.HandleFunc(StartedPath, func(w http.ResponseWriter, _ *http.Request) {
		select {
		case <-started:
			fmt.Fprintln(w, "ok")
		default:
			http.Error(w, "the member has not joined its cluster yet", http.StatusServiceUnavailable)
		}
	})
	srv := &http.Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(ReadyPort)), Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		klog.FromContext(ctx).Error(err, "Startup endpoint stopped")
	}
}

func printMembers(ctx context.Context, c Config, out io.Writer) error {
	members, err := Members(ctx, c)
	if err != nil {
		return err
	}
	list := make([]Member, 0, len(members))
	for _, m := range members {
		list = append(list, Member{Name: m.Name, ID: fmt.Sprintf("%x", m.ID), PeerURLs: m.PeerURLs, IsLearner: m.IsLearner, Started: m.Name != ""})
	}
	return json.NewEncoder(out).Encode(list)
}
