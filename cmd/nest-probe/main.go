// Command nest-probe is the exec probe of tenant control-plane containers
// whose health endpoints listen on loopback only (etcd, nest-syncer,
// CoreDNS), where the kubelet's HTTP probes cannot reach.
//
// Usage: nest-probe [-timeout 5s] URL
//
// It sends one GET to the http URL and exits 0 on a 2xx answer, 1 with a
// one-line reason on stderr on any other answer or error, and 2 on bad usage.
//
// With -fence HOST:PORT -allowed HOST:PORT it is the network fence of
// tenant host pods instead (fence.go): it exits 0 once the -fence address
// refuses the pod while the -allowed one answers, twice in a row, and 1
// when -timeout (default 2m) passes first.
// It uses the standard library only, but for internal/version (its
// --version), and is built static, to sit in images that have nothing else.
package main

import (
	"cmp"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/nestdev/nest/internal/version"
)

// defaultTimeout bounds the whole request, connection to body.
const defaultTimeout = 5 * time.Second

// bodyExcerpt is how much of a failing answer's body the reason quotes.
const bodyExcerpt = 200

func main() {
	if version.HandleFlag(os.Args[1:], "nest-probe", os.Stdout) {
		return
	}
	os.Exit(run(os.Args[1:], os.Stderr))
}

// run probes the URL in args and returns the exit code, writing the reason
// for a failure to stderr.
func run(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("nest-probe", flag.ContinueOnError)
	fs.SetOutput(stderr)
	timeout := fs.Duration("timeout", 0, "give up after this long (default 5s, or 2m with -fence)")
	fenceAddr := fs.String("fence", "", "HOST:PORT the pod's isolation refuses: wait until it is refused while -allowed connects, twice in a row, then exit 0")
	allowedAddr := fs.String("allowed", "", "with -fence: HOST:PORT the pod's isolation allows (its own API server)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: nest-probe [-timeout 5s] http://127.0.0.1:PORT/PATH\n       nest-probe -fence HOST:PORT -allowed HOST:PORT [-timeout 2m]")
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *fenceAddr != "" {
		if fs.NArg() != 0 || *allowedAddr == "" {
			fs.Usage()
			return 2
		}
		if err := runFence(*fenceAddr, *allowedAddr, cmp.Or(*timeout, defaultFenceBy)); err != nil {
			fmt.Fprintln(stderr, "nest-probe:", oneLine(err.Error()))
			return 1
		}
		return 0
	}
	*timeout = cmp.Or(*timeout, defaultTimeout)
	if fs.NArg() != 1 {
		fs.Usage()
		return 2
	}
	u, err := url.Parse(fs.Arg(0))
	if err != nil || u.Scheme != "http" || u.Host == "" {
		fmt.Fprintf(stderr, "nest-probe: %q is not an http URL: give one such as http://127.0.0.1:10248/healthz\n", fs.Arg(0))
		return 2
	}
	if err := probe(u.String(), *timeout); err != nil {
		fmt.Fprintln(stderr, "nest-probe:", oneLine(err.Error()))
		return 1
	}
	return 0
}

// probe returns nil when GET url answers 2xx within timeout.
func probe(url string, timeout time.Duration) error {
	client := &http.Client{
		Timeout: timeout,
		// A health endpoint answers itself; a redirect is a failure.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Transport:     &http.Transport{Proxy: nil, DisableKeepAlives: true},
	}
	resp, err := client.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, bodyExcerpt))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

// oneLine folds s onto one line, for the probe's event.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
