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
//	testapp cat FILE             print a file (the image has no shell)
//	testapp kube PATH [SERVER]   GET PATH from the Kubernetes API the way an
//	                             in-cluster client does: the service-account
//	                             token and CA, and KUBERNETES_SERVICE_HOST/PORT
//	                             unless SERVER (https://host:port) is given
package main

import (
	"context"
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
	"os/signal"
	"strings"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) > 2 {
		if cmd, ok := clients[os.Args[1]]; ok {
			if err := cmd(os.Args[2:]); err != nil {
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
	"cat": func(args []string) error {
		data, err := os.ReadFile(args[0])
		if err == nil {
			_, err = os.Stdout.Write(data)
		}
		return err
	},
	"kube": kube,
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
