package membercluster

import (
	"strings"
	"testing"
	"time"
)

func TestRESTConfig(t *testing.T) {
	const head = "apiVersion: v1\nkind: Config\ncurrent-context: c\ncontexts: [{name: c, context: {cluster: m, user: u}}]\n"
	const cluster = "clusters: [{name: m, cluster: {server: \"https://10.20.0.5:6443\", certificate-authority-data: \"\"}}]\n"
	good := head + cluster + "users: [{name: u, user: {token: abc}}]\n"
	cfg, err := RESTConfig([]byte(good), 10*time.Second)
	if err != nil {
		t.Fatalf("a self-contained kubeconfig: %v", err)
	}
	if cfg.Host != "https://10.20.0.5:6443" || cfg.BearerToken != "abc" || cfg.Timeout != 10*time.Second {
		t.Errorf("config: host %q, token %q, timeout %v", cfg.Host, cfg.BearerToken, cfg.Timeout)
	}
	for _, tt := range []struct{ name, kubeconfig, want string }{
		{"garbage", "this is not: [a kubeconfig", "not a kubeconfig"},
		{"no current context", "apiVersion: v1\nkind: Config\n", "current-context is empty"},
		{"current context missing", "apiVersion: v1\nkind: Config\ncurrent-context: x\n", `current-context "x" names no context`},
		{"cluster missing", head + "users: [{name: u, user: {token: abc}}]\n", `names cluster "m", which is not in clusters`},
		{"user missing", head + cluster, `names user "u", which is not in users`},
		{"CA file", head + "clusters: [{name: m, cluster: {server: \"https://x:6443\", certificate-authority: /etc/ca.crt}}]\nusers: [{name: u, user: {token: abc}}]\n",
			"clusters[m].certificate-authority names a file"},
		{"client cert file", head + cluster + "users: [{name: u, user: {client-certificate: /c.crt, client-key-data: \"\"}}]\n", "users[u].client-certificate names a file"},
		{"client key file", head + cluster + "users: [{name: u, user: {client-key: /c.key}}]\n", "users[u].client-key names a file"},
		{"token file", head + cluster + "users: [{name: u, user: {tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token}}]\n", "users[u].tokenFile names a file"},
		{"exec", head + cluster + "users: [{name: u, user: {exec: {apiVersion: client.authentication.k8s.io/v1, command: aws}}}]\n", "users[u].exec runs a command"},
		{"auth provider", head + cluster + "users: [{name: u, user: {auth-provider: {name: oidc}}}]\n", "users[u].auth-provider runs a plugin"},
		{"no server", head + "clusters: [{name: m, cluster: {}}]\nusers: [{name: u, user: {token: abc}}]\n", "clusters[m].server is empty"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := RESTConfig([]byte(tt.kubeconfig), time.Second); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one saying %q", err, tt.want)
			}
		})
	}
}
