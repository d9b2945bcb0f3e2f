// Command coredns is CoreDNS built with the plugins a Kubernetes cluster DNS needs
// and nothing else: no cloud backends, and no forwarding plugin compiled in, so a
// Nest cluster's DNS answers only for its own names and never queries another server.
package main

import (
	"github.com/coredns/coredns/coremain"

	// Each import registers one plugin with CoreDNS' server at init time.
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/file"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/hosts"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/metrics"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
	_ "github.com/coredns/coredns/plugin/rewrite"
	_ "github.com/coredns/coredns/plugin/whoami"
)

func main() {
	coremain.Run()
}
