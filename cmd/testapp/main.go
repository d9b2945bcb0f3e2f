// Command testapp is the small HTTP server Nest's end-to-end tests run in pods.
//
// It serves:
//
//	GET /hostname   the pod's host name (its pod name)
//	GET /healthz    "ok"
//	GET /echo?msg=X X
//
// and writes one log line per request, so tests can read it with kubectl logs.
// With "testapp get URL" it is instead a client: it prints the body of URL and
// exits non-zero on any error or non-2xx status.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) > 2 && os.Args[1] == "get" {
		if err := get(os.Args[2]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
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

func get(url string) error {
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get(url)
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
