// Command testapp is the small HTTP server Nest's end-to-end tests run in pods.
//
// It serves:
//
//	GET /hostname   the pod's host name (its pod name)
//	GET /healthz    "ok"
//	GET /echo?msg=X X
//
// and writes one log line per request, so tests can read it with kubectl logs.
// Other forms make it a one-shot client that exits non-zero on any error or
// non-2xx status:
//
//	testapp get URL              print the body of URL
//	testapp get-insecure URL     the same, without verifying an HTTPS
//	                             server's certificate
//	testapp cat FILE             print a file (the image has no shell)
//	testapp kube PATH [SERVER]   GET PATH from the Kubernetes API the way an
//	                             in-cluster client does: the service-account
//	                             token and CA, and KUBERNETES_SERVICE_HOST/PORT
//	                             unless SERVER (https://host:port) is given
//	testapp kube-watch PATH SECONDS
//	                             do what kube does once a second for SECONDS,
//	                             reading the token afresh each time; print
//	                             "ok <token digest>" per call and stop at the
//	                             first failure: a token rotated in place keeps
//	                             every call working
//	testapp dial HOST:PORT       open a TCP connection within 3 seconds
//	testapp first-dial ADDR...   dial each address once, at once, each within
//	                             5 seconds, and print "connected ADDR" or
//	                             "refused ADDR: ERROR"
//	testapp wait-dial HOST:PORT  dial every 20 ms for up to a minute; on the
//	                             first connection print the wall clock in
//	                             Unix nanoseconds
//	testapp hold HOST:PORT      open one TCP connection and, every 250 ms
//	                             for up to an hour, send GET /echo over it
//	                             and print "ok N" for each answer; at the
//	                             first request not answered within 2 s,
//	                             print "cut after N: ERROR" and sleep,
//	                             never dialling again (a pod's command: a
//	                             connection held since before a policy)
//	testapp dns NAME [SERVER]    resolve NAME, through SERVER (host:port,
//	                             UDP) instead of resolv.conf if given
//	testapp statfs PATH          print the size in bytes of PATH's file system
//	testapp spawn N              start up to N sleeping child processes and
//	                             print how many started before the first
//	                             failure (exits 0 either way)
//	testapp ignore-term          sleep an hour, ignoring SIGTERM
//	testapp write-once FILE TEXT write TEXT to FILE unless FILE exists
package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nestdev/nest/internal/version"
)

func main() {
	if version.HandleFlag(os.Args[1:], "testapp", os.Stdout) {
		return
	}
	// A command word, with or without arguments (ignore-term takes none:
	// it must never fall through to the server, which stops on SIGTERM).
	if len(os.Args) > 1 {
		if cmd, ok := clients[os.Args[1]]; ok {
			if err := run(cmd, os.Args[2:]); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			return
		}
	}
	addr := flag.String("listen", ":8080", "address to serve on")
	flag.Parse()
	if err := serve(*addr); err != nil {
		log.Fatal(err)
	}
}

// run runs a client command; one given too few arguments fails with an
// error rather than a panic.
func run(cmd func([]string) error, args []string) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%s: missing arguments (%v); see the package comment", os.Args[1], r)
		}
	}()
	return cmd(args)
}

func serve(addr string) error {
	host, _ := os.Hostname()
	mux := http.NewServeMux()
	mux.HandleFunc("/hostname", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, host) })
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") })
	mux.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, r.URL.Query().Get("msg")) })
	logged := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		log.Printf("request method=%s path=%s remote=%s", r.Method, r.URL.Path, r.RemoteAddr)
		mux.ServeHTTP(w, r)
	})
	srv := &http.Server{Addr: addr, Handler: logged, ReadHeaderTimeout: 10 * time.Second}
	// As PID 1 a Go program ignores SIGTERM unless it handles it, and pod deletion
	// would wait out the whole grace period.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	log.Printf("serving addr=%s hostname=%s", addr, host)
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

var clients = map[string]func(args []string) error{
	"get": func(args []string) error { return get(&http.Client{Timeout: 10 * time.Second}, args[0], "") },
	// A pod has no CA of another cluster's API server; it only asks such a
	// server for public, unauthenticated paths.
	"get-insecure": func(args []string) error {
		insecure := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec
		return get(&http.Client{Timeout: 10 * time.Second, Transport: insecure}, args[0], "")
	},
	"cat": func(args []string) error {
		data, err := os.ReadFile(args[0])
		if err == nil {
			_, err = os.Stdout.Write(data)
		}
		return err
	},
	"kube": kube,
	// write-once writes CONTENT to FILE unless FILE exists, so a volume
	// keeps what its first pod wrote.
	"write-once": func(args []string) error {
		f, err := os.OpenFile(args[0], os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if errors.Is(err, os.ErrExist) {
			return nil
		}
		if err != nil {
			return err
		}
		_, err = f.WriteString(args[1])
		return errors.Join(err, f.Close())
	},
	"kube-watch": kubeWatch,
	"dial":       dial,
	"first-dial": firstDial,
	"wait-dial":  waitDial,
	"hold":       hold,
	"dns":        lookup,
	"statfs":     statfs,
	"spawn":      spawn,
	// sleep is what spawn's children run.
	"sleep": func([]string) error { time.Sleep(time.Hour); return nil },
	// ignore-term sleeps through SIGTERM, as a process that will not stop
	// does: only SIGKILL ends it.
	"ignore-term": func([]string) error {
		signal.Ignore(syscall.SIGTERM)
		time.Sleep(time.Hour)
		return nil
	},
}

func dial(args []string) error {
	conn, err := net.DialTimeout("tcp", args[0], 3*time.Second)
	if err != nil {
		return err
	}
	fmt.Println("connected", conn.RemoteAddr())
	return conn.Close()
}

// firstDialTimeout spans two SYN retransmissions (at 1 s and 3 s): on two
// busy cores the enforcer's verdict on a first packet can take over a second.
const firstDialTimeout = 5 * time.Second

// firstDial dials each address once, as the program's first instruction,
// and prints "connected ADDR" or "refused ADDR: ERROR" for each: a hostile
// pod that races its own isolation. Each dial waits firstDialTimeout, so
// a connection that a loaded enforcer lets through late is still seen.
func firstDial(args []string) error {
	for _, addr := range args {
		conn, err := net.DialTimeout("tcp", addr, firstDialTimeout)
		if err != nil {
			fmt.Println("refused", addr+":", err)
			continue
		}
		fmt.Println("connected", addr)
		_ = conn.Close()
	}
	return nil
}

func waitDial(args []string) error {
	deadline := time.Now().Add(time.Minute)
	for {
		conn, err := net.DialTimeout("tcp", args[0], 200*time.Millisecond)
		if err == nil {
			fmt.Println(time.Now().UnixNano())
			return conn.Close()
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond) // the polling interval
	}
}

// hold keeps one connection and uses it until it fails, then waits for
// the pod's end without dialling again, so its log tells what that one
// connection did.
func hold(args []string) error {
	conn, err := net.DialTimeout("tcp", args[0], 3*time.Second)
	if err != nil {
		return err
	}
	fmt.Println("connected", conn.RemoteAddr())
	r := bufio.NewReader(conn)
	for n := 1; n <= 4*3600; n++ {
		err := echoOver(conn, r, n)
		if err != nil {
			fmt.Println("cut after", n-1, err)
			time.Sleep(time.Hour) // the pod's end; never a second connection
			return nil
		}
		fmt.Println("ok", n)
		time.Sleep(250 * time.Millisecond) // the request interval
	}
	return nil
}

// echoOver sends GET /echo?msg=n over conn and reads the answer within 2 s.
func echoOver(conn net.Conn, r *bufio.Reader, n int) error {
	if err := conn.SetDeadline(time.Now().Add(2 * time.Second)); err != nil {
		return err
	}
	if _, err := fmt.Fprintf(conn, "GET /echo?msg=%d HTTP/1.1\r\nHost: hold\r\n\r\n", n); err != nil {
		return err
	}
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		return err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return err
	}
	if string(body) != strconv.Itoa(n) {
		return fmt.Errorf("answer %q, want %d", body, n)
	}
	return nil
}

func lookup(args []string) error {
	r := net.DefaultResolver
	if len(args) > 1 {
		server := args[1]
		r = &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "udp", server)
		}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	addrs, err := r.LookupHost(ctx, args[0])
	if err != nil {
		return err
	}
	fmt.Println(strings.Join(addrs, " "))
	return nil
}

func statfs(args []string) error {
	var st syscall.Statfs_t
	if err := syscall.Statfs(args[0], &st); err != nil {
		return err
	}
	fmt.Println(st.Blocks * uint64(st.Bsize))
	return nil
}

// spawn starts children until one fails to start (a pids limit), then
// kills them all.
func spawn(args []string) error {
	var n int
	if _, err := fmt.Sscan(args[0], &n); err != nil {
		return fmt.Errorf("spawn %q: want a number: %w", args[0], err)
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	var started []*exec.Cmd
	defer func() {
		for _, c := range started {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
	}()
	var failure error
	for len(started) < n {
		c := exec.Command(self, "sleep", "x")
		if failure = c.Start(); failure != nil {
			break
		}
		started = append(started, c)
	}
	fmt.Println(len(started), failure)
	return nil
}

const saDir = "/var/run/secrets/kubernetes.io/serviceaccount"

func kube(args []string) error {
	server := "https://" + net.JoinHostPort(os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT"))
	if len(args) > 1 {
		server = args[1]
	}
	token, err := os.ReadFile(saDir + "/token")
	if err != nil {
		return err
	}
	ca, err := os.ReadFile(saDir + "/ca.crt")
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	// Another server's certificate is not signed by this CA: the caller asks
	// for it on purpose, to check that the token is refused there.
	tlsConfig := &tls.Config{RootCAs: pool, InsecureSkipVerify: len(args) > 1} //nolint:gosec
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConfig}}
	return get(client, server+args[0], strings.TrimSpace(string(token)))
}

func kubeWatch(args []string) error {
	if len(args) != 2 {
		return fmt.Errorf("usage: testapp kube-watch PATH SECONDS")
	}
	seconds, err := strconv.Atoi(args[1])
	if err != nil {
		return fmt.Errorf("SECONDS %q: %w", args[1], err)
	}
	for end := time.Now().Add(time.Duration(seconds) * time.Second); time.Now().Before(end); time.Sleep(time.Second) {
		token, err := os.ReadFile(saDir + "/token")
		if err != nil {
			return err
		}
		if err := kube([]string{args[0]}); err != nil {
			return fmt.Errorf("%s: call failed: %w", time.Now().Format(time.RFC3339), err)
		}
		fmt.Printf("\nok %x\n", sha256.Sum256(token))
	}
	return nil
}

func get(client *http.Client, url, bearer string) error {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, body)
	}
	fmt.Print(string(body))
	return nil
}
