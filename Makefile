# Nest build, test and demo entry points. See README.md.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c

OUT := $(CURDIR)/_output
BIN := $(OUT)/bin
export CGO_ENABLED := 0
export GOFLAGS := -trimpath

# The host's Kubernetes version (k8s/) and the other versions tenants may
# run (version.Supported; each from its own module, k8s/vMAJOR.MINOR).
K8S_VERSION := $(shell sed -n 's/^const Kubernetes = "\(.*\)"/\1/p' internal/version/version.go)
K8S_OTHER_VERSIONS := $(shell sed -n '/^var Supported = /p' internal/version/version.go | grep -o 'v[0-9]*\.[0-9]*\.[0-9]*')
k8s_minor = $(word 1,$(subst ., ,$(1))).$(word 2,$(subst ., ,$(1)))
K8S_VERSION_PKGS := k8s.io/component-base/version k8s.io/client-go/pkg/version
# Without these the components report v0.0.0-master.
k8s_ldflags = -s -w $(foreach p,$(K8S_VERSION_PKGS),-X $(p).gitVersion=$(1) -X $(p).gitMajor=1 -X $(p).gitMinor=$(word 2,$(subst ., ,$(1))) -X $(p).gitTreeState=clean)
K8S_LDFLAGS := $(call k8s_ldflags,$(K8S_VERSION))

NODES ?= 2

.PHONY: all deps build build-k8s build-nest build-peers test unit e2e e2e-prepare e2e-compile e2e-run e2e-faults demo demo-dedicated down clean bench bench-member bench-density bench-snapshot bench-peers conformance-build conformance generate envtest-assets lint dashboard-assets

all: build

## deps: install the Debian packages Nest needs (root only; a no-op when present)
deps:
	hack/install-deps.sh

## build: every binary into _output/bin; go's build cache makes a second run cheap
build: build-k8s build-nest

# The Kubernetes components live in their own module (k8s/) so the main module
# does not inherit k8s.io/kubernetes' replace lines; CoreDNS, the
# NetworkPolicy enforcer (kube-network-policies), the LoadBalancer
# implementation (MetalLB), the registry (Distribution) and containerd in
# one more each. containerd's
# version is the one k8s/containerd/go.mod pins.
CONTAINERD := github.com/containerd/containerd/v2
build-k8s:
	cd k8s && go build -ldflags '$(K8S_LDFLAGS)' -o $(BIN)/kube-$(K8S_VERSION) ./cmd/kube
	ln -sfn kube-$(K8S_VERSION) $(BIN)/kube
	$(foreach v,$(K8S_OTHER_VERSIONS),cd k8s/$(call k8s_minor,$(v)) && go build -ldflags '$(call k8s_ldflags,$(v))' -o $(BIN)/kube-$(v) ./cmd/kube && cd $(CURDIR);)
	cd k8s/coredns && go build -ldflags '-s -w' -o $(BIN)/coredns .
	cd k8s/netpol && go build -ldflags '-s -w' -o $(BIN)/kube-network-policies sigs.k8s.io/kube-network-policies/cmd/kube-network-policies/standard
	# Static: MetalLB runs from an image that has no C library.
	cd k8s/metallb && CGO_ENABLED=0 go build -ldflags '-s -w' -o $(BIN)/metallb-controller go.universe.tf/metallb/controller && \
		CGO_ENABLED=0 go build -ldflags '-s -w' -o $(BIN)/metallb-speaker go.universe.tf/metallb/speaker
	# The local host cluster's OCI registry (CNCF Distribution), static too.
	cd k8s/registry && CGO_ENABLED=0 go build -ldflags '-s -w' -o $(BIN)/registry github.com/distribution/distribution/v3/cmd/registry
	cd k8s/containerd && v=$$(go list -m -f '{{.Version}}' $(CONTAINERD)) && \
		go build -ldflags "-s -w -X $(CONTAINERD)/version.Version=$$v" -o $(BIN)/ $(addprefix $(CONTAINERD)/cmd/,containerd containerd-shim-runc-v2 ctr)

## build-peers: vcluster's OSS syncer (k8s/vcluster, goreleaser's flags), kine, the SQLite etcd shim it runs (k8s/kine, static with cgo), the CoreDNS its chart runs (k8s/vcluster-coredns) and the host Kubernetes components as separate binaries, into _output/peers
# Each from a module of its own, so their dependency graphs do not mix. kine's
# SQLite driver is C; the image it runs from has no C library, so it links
# glibc statically, with the tags that keep out what would need glibc's shared
# objects at run time (NSS lookups, dlopen of SQLite extensions and of the
# Antithesis SDK that the embedded NATS server pulls in).
PEERS := $(OUT)/peers
VCLUSTER := github.com/loft-sh/vcluster
KINE := github.com/k3s-io/kine
build-peers:
	# vcluster runs each component from a binary of its own, as its
	# Kubernetes image holds them: the same source as Nest's host kube.
	cd k8s && go build -ldflags '$(K8S_LDFLAGS)' -o $(PEERS)/ $(addprefix k8s.io/kubernetes/cmd/,kube-apiserver kube-controller-manager kube-scheduler)
	cd k8s/vcluster-coredns && go build -ldflags '-s -w' -o $(PEERS)/coredns github.com/coredns/coredns
	cd k8s/vcluster && v=$$(go list -m -f '{{.Version}}' $(VCLUSTER)) && \
		CGO_ENABLED=0 go build -ldflags "-s -w -X $(VCLUSTER)/pkg/telemetry.SyncerVersion=$${v#v}" -o $(PEERS)/vcluster $(VCLUSTER)/cmd/vcluster
	cd k8s/kine && v=$$(go list -m -f '{{.Version}}' $(KINE)) && \
		CGO_ENABLED=1 CGO_CFLAGS=-DSQLITE_USE_ALLOCA=1 go build -tags nats,netgo,osusergo,sqlite_omit_load_extension,no_antithesis_sdk \
		-ldflags "-s -w -X $(KINE)/pkg/version.Version=$$v -extldflags -static" -o $(PEERS)/kine $(KINE)

# Nest's version, which our binaries' --version prints (version.Nest).
NEST_VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
build-nest:
	go build -ldflags '-s -w -X github.com/nestdev/nest/internal/version.Nest=$(NEST_VERSION)' -o $(BIN)/ ./cmd/nest ./cmd/nest-manager ./cmd/nest-syncer ./cmd/nest-probe ./cmd/pause ./cmd/testapp ./cmd/nest-agent ./cmd/nest-node-network-agent

## test: every test CI runs: lint, then unit tests beside end-to-end tests on real local host clusters; ends with each step's and each end-to-end test's wall time
test:
	OUT=$(OUT) hack/steps.sh deps build lint e2e-prepare --beside unit e2e-run

STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2

## lint: go vet and staticcheck on the main module
lint:
	go vet ./...
	go run $(STATICCHECK) ./...

# envtest runs our own kube-apiserver and etcd: symlinks to the multi-call binary.
ENVTEST_ASSETS := $(OUT)/envtest
# It needs the kube binary, not a fresh build: `make test` runs the unit
# tests beside the end-to-end tests, whose clusters run that binary.
envtest-assets: $(BIN)/kube
	mkdir -p $(ENVTEST_ASSETS)
	for c in kube-apiserver etcd kubectl; do ln -sfn ../bin/kube $(ENVTEST_ASSETS)/$$c; done

$(BIN)/kube:
	$(MAKE) build-k8s

unit: envtest-assets
	KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) go test -count=1 ./api/... ./internal/... ./cmd/... ./hack/... ./test/e2e/framework/
	cd charts/nest/test && go test -count=1 ./...
	cd test/e2e/peers && go vet ./... && go test -count=1 ./...

## generate: regenerate deepcopy, CRDs and RBAC from the Go markers, then the chart's copies of config/
# config/ is the one source of the install manifests; hack/chartgen derives
# charts/nest/crds/ and the chart's manager, RBAC and PriorityClass templates
# from it (internal/install's TestChartIsGeneratedFromConfig catches drift).
generate:
	go tool controller-gen object:headerFile=hack/boilerplate.go.txt paths=./api/... \
		crd paths=./api/... output:crd:artifacts:config=config/crd \
		rbac:roleName=nest-manager paths=./internal/controller/... output:rbac:artifacts:config=config/rbac
	go tool controller-gen rbac:roleName=nest-syncer paths=./internal/syncer/... output:rbac:artifacts:config=config/syncer
	go run ./hack/chartgen/cmd/chartgen
	d=$$(cd k8s/metallb && go list -m -f '{{.Dir}}' go.universe.tf/metallb) && \
		install -m 0644 $$d/config/crd/bases/*.yaml internal/devcluster/metallb/

# End-to-end packages run side by side (-p), and within a package the tests
# and cases marked parallel (-parallel at a time: more than any package has
# top-level tests, so all of them queue for their leases together; the
# isolation suite bounds its own cases). Each test leases a local host
# cluster of its own (test/e2e/framework/lease.go), at most E2E_CLUSTERS at
# once on the machine, longest expected test first (durations.tsv there):
# the suites are CPU-bound, and on two cores more clusters at once only
# slow every one of them down. gotestsum prints a line
# per finished test and, at the end, the output of every failed one under
# "=== Failed"; the whole event stream is kept in $(E2E_JSON) for the time
# table (hack/steps.sh). The test binaries are built first (running no
# test), so the packages' real runs only link and start together; each
# waits, at most three minutes, until every package has joined the lease
# queue (NEST_E2E_PACKAGES), or the first to link would be served first.
GOTESTSUM := gotest.tools/gotestsum@v1.13.0
E2E_PACKAGES ?= ./test/e2e/faults/ ./test/e2e/ ./test/conformance/ ./test/e2e/isolation/ ./test/e2e/dashboard/
E2E_PARALLEL ?= 16
E2E_CLUSTERS ?= 2
E2E_JSON := $(OUT)/e2e.json
e2e: conformance-build
	$(MAKE) e2e-run

# e2e-prepare: what the end-to-end tests need built (the conformance suite,
# the test binaries), so the unit tests that `make test` runs beside the
# end-to-end tests compile nothing at the same time as they do.
e2e-prepare: conformance-build e2e-compile

# e2e-compile builds the end-to-end test binaries and runs no test.
e2e-compile:
	go test -count=1 -run '^$$' $(E2E_PACKAGES)

# e2e-run: the end-to-end packages without the conformance build
# (hack/testtimes' test runs it on a stand-in package).
e2e-run: e2e-compile
	mkdir -p $(OUT)
	NEST_BIN_DIR=$(BIN) NEST_E2E_CLUSTERS=$(E2E_CLUSTERS) NEST_E2E_PACKAGES=$(words $(E2E_PACKAGES)) go run $(GOTESTSUM) --format testname --jsonfile $(E2E_JSON) -- \
		-p 5 -parallel $(E2E_PARALLEL) -count=1 -timeout 80m $(E2E_PACKAGES)

## e2e-faults: the fault-injection suite alone (root, about 15 minutes; also part of make e2e): ten faults against a churning 200-object workload each
e2e-faults: build
	NEST_BIN_DIR=$(BIN) go test -count=1 -timeout 45m -v ./test/e2e/faults/

## demo: the main job: a local host cluster with Nest, the virtual cluster "demo" and a tenant workload on its virtual node
demo: deps build
	BIN=$(BIN) OUT=$(OUT) NODES=$(NODES) hack/demo.sh

## demo-dedicated: dedicated nodes: a 3-node local host cluster, a worker promoted into the virtual cluster "dedi", pods on it and on the virtual node reaching each other by Service name, and the worker released
demo-dedicated: deps build
	BIN=$(BIN) OUT=$(OUT) hack/demo-dedicated.sh

## down: stop the local host cluster and remove its state
down:
	$(BIN)/nest dev down

clean:
	rm -rf $(OUT)

## bench: local host cluster up/down times and RSS; VirtualCluster create-to-Ready times and RSS; virtual node pod start latency and sync throughput; node promotion and release times; dashboard page weight
bench: build
	NEST_BIN_DIR=$(BIN) go test -run '^$$' -bench DevClusterUpDown -benchtime 3x -timeout 20m ./test/e2e/
	NEST_BIN_DIR=$(BIN) go test -run '^$$' -bench VirtualClusterCreate -benchtime 1x -timeout 30m ./test/e2e/
	NEST_BIN_DIR=$(BIN) go test -run '^$$' -bench VirtualNodePods -benchtime 1x -timeout 30m ./test/e2e/
	NEST_BIN_DIR=$(BIN) go test -run '^$$' -bench NetworkPolicyEnforcer -benchtime 1x -timeout 30m ./test/e2e/
	NEST_BIN_DIR=$(BIN) go test -run '^$$' -bench NodePromotion -benchtime 5x -timeout 30m ./test/e2e/
	go test -run '^$$' -bench PageWeight -benchtime 3x ./internal/dashboard/

## bench-peers: Nest and vcluster side by side on one local host cluster, the same suite for both (docs/performance.md); builds vcluster first
bench-peers: build build-peers
	cd test/e2e/peers && NEST_BIN_DIR=$(BIN) go test -run '^$$' -bench Peers -benchtime 1x -timeout 90m -v .

## bench-snapshot: a sealed snapshot with --include-volumes of a tenant with NEST_BENCH_VOLUME_MIB (default 100) MiB in a volume, and its restore
bench-snapshot: build
	NEST_BIN_DIR=$(BIN) go test -run '^$$' -bench SnapshotVolumes -benchtime 1x -timeout 30m ./test/e2e/

## bench-density: tenants one after another until NEST_DENSITY_TENANTS (default 20) or the host is full; memory, CPU and latency per tenant
## bench-member: member pod startup through a tenant against direct, 50 each way, on a host and a member cluster
bench-member: build
	NEST_BIN_DIR=$(BIN) go test -run '^$$' -bench MemberPodStartup -benchtime 1x -timeout 40m -v ./test/e2e/

bench-density: build
	NEST_BIN_DIR=$(BIN) go test -run '^$$' -bench Density -benchtime 1x -timeout 60m -v ./test/e2e/

## conformance-build: the upstream conformance suite (e2e.test, built from k8s/conformance at the pinned Kubernetes version), the ginkgo CLI and the binaries of the upstream test images (agnhost, nonewprivs, sample-apiserver, upstream busybox), into _output/bin
# Not part of build: a large compile that only conformance runs need (docs/conformance.md).
conformance-build:
	cd k8s && go test -c -ldflags '$(K8S_LDFLAGS)' -o $(BIN)/e2e.test ./conformance
	cd k8s && go build -ldflags '-s -w' -o $(BIN)/ github.com/onsi/ginkgo/v2/ginkgo k8s.io/kubernetes/test/images/agnhost k8s.io/kubernetes/test/images/nonewprivs k8s.io/sample-apiserver
	hack/build-busybox.sh $(BIN)/busybox

## conformance: every [Conformance] spec against a tenant of a fresh local host cluster (root, about 25 minutes with PROCS=12); FOCUS, SKIP (ginkgo regexps) and PROCS narrow it; KUBERNETES_VERSION picks the tenant's version (default the newest supported), UPGRADE_FROM a version it is made with and upgraded from in place first; report in _output/conformance
conformance: build conformance-build
	NEST_BIN_DIR=$(BIN) NEST_CONFORMANCE_FOCUS='$(or $(FOCUS),full)' NEST_CONFORMANCE_SKIP='$(SKIP)' NEST_CONFORMANCE_PROCS='$(PROCS)' \
		NEST_CONFORMANCE_VERSION='$(KUBERNETES_VERSION)' NEST_CONFORMANCE_UPGRADE_FROM='$(UPGRADE_FROM)' \
		go test -count=1 -timeout 4h -v -run TestConformance ./test/conformance/

## dashboard-assets: refresh the dashboard's vendored htmx from npm (pinned in the script); the build itself never downloads
dashboard-assets:
	hack/dashboard-assets.sh
