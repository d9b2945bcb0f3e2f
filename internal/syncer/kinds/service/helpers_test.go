package service

import (
	"github.com/nestdev/nest/internal/syncer/contract"
)

var tr = Translator{Translation: contract.Translation{
	VirtualCluster: "alpha", HostNamespace: "vc-alpha", ClusterDomain: "cluster.local",
	APIServerHost: "10.96.0.5", APIServerPort: 6443, DNSServer: "10.96.0.6",
}}
