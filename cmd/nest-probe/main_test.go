package main

import (
	"bytes"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestRun(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ok":
			_, _ = w.Write([]byte("ok"))
		case "/fail":
			http.Error(w, "etcd:\nno leader", http.StatusServiceUnavailable)
		case "/moved":
			http.Redirect(w, r, "/ok", http.StatusFound)
		case "/hang":
			<-release
		}
	}))
	defer srv.Close()
	defer close(release)
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + closed.Addr().String() + "/healthz"
	closed.Close()

	tests := []struct {
		name   string
		args   []string
		code   int
		reason string
	}{
		{"2xx", []string{srv.URL + "/ok"}, 0, ""},
		{"5xx with its body on one line", []string{srv.URL + "/fail"}, 1, "503 Service Unavailable: etcd: no leader"},
		{"redirect", []string{srv.URL + "/moved"}, 1, "302 Found"},
		{"connection refused", []string{refused}, 1, "connection refused"},
		{"timeout", []string{"-timeout=100ms", srv.URL + "/hang"}, 1, "Client.Timeout"},
		{"https", []string{"https://127.0.0.1:6443/readyz"}, 2, "is not an http URL"},
		{"no URL", nil, 2, "usage: nest-probe"},
		{"two URLs", []string{srv.URL, srv.URL}, 2, "usage: nest-probe"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer
			if code := run(tt.args, &stderr); code != tt.code {
				t.Errorf("exit %d, want %d (stderr %q)", code, tt.code, stderr.String())
			}
			out := stderr.String()
			if !strings.Contains(out, tt.reason) {
				t.Errorf("stderr %q lacks %q", out, tt.reason)
			}
			if tt.code == 1 && strings.Count(out, "\n") != 1 {
				t.Errorf("reason %q is not one line", out)
			}
			if tt.code == 0 && out != "" {
				t.Errorf("success wrote %q", out)
			}
		})
	}
}
