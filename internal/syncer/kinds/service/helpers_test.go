package service

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"

	"github.com/nestdev/nest/internal/syncer/contract"
	"github.com/nestdev/nest/internal/testutil"
)

var tr = Translator{Translation: contract.Translation{
	VirtualCluster: "alpha", HostNamespace: "vc-alpha", ClusterDomain: "cluster.local",
	APIServerHost: "10.96.0.5", APIServerPort: 6443, DNSServer: "10.96.0.6",
}}

func indexerOf(t *testing.T, objs ...runtime.Object) cache.Indexer {
	return testutil.Indexer(t, objs...)
}
