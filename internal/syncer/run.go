package syncer

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	vklog "github.com/virtual-kubelet/virtual-kubelet/log"
	"github.com/virtual-kubelet/virtual-kubelet/node"
	"github.com/virtual-kubelet/virtual-kubelet/node/api"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/nestdev/nest/internal/kindsync"
	"github.com/nestdev/nest/internal/syncer/contract"
	"github.com/nestdev/nest/internal/syncer/kinds"
	"github.com/nestdev/nest/internal/syncer/kinds/hostcopy"
	"github.com/nestdev/nest/internal/syncer/kinds/service"
	"github.com/nestdev/nest/internal/syncer/kinds/serviceaccounttoken"
)

// Options configure one nest-syncer: its flags (contract.Flags, which
// cmd/nest-syncer reads and the VirtualCluster controller writes) and what
// the process sets itself.
type Options struct {
	contract.Flags
	// Host is the host API server; nil means the in-cluster configuration.
	Host *rest.Config
	// Member names the member cluster that Host reaches, when this syncer
	// places the pods of one member node (see contract.MemberPlacement); empty for the
	// host's virtual nodes. A member syncer copies pods, ConfigMaps,
	// Secrets and tokens only: Services, DNS and node ports stay the host
	// syncer's.
	Member string
	// KubeletPort is the port of the kubelet API on NodeIP; 0 is
	// contract.VirtualNodeKubeletPort. Each member node has its own.
	KubeletPort int32
}

// translator is the pod translation of o.
func (o Options) translator() Translator {
	return Translator{Translation: o.Translation, Share: o.Capacity}
}

// kubeletPort is the port of this syncer's kubelet API.
func (s *syncer) kubeletPort() int32 { return cmp.Or(s.o.KubeletPort, contract.VirtualNodeKubeletPort) }

// Run runs the syncer until ctx ends; with o.LeaderElect, only while this
// replica holds the syncer lease (runElected). With o.EgressProxySocket it
// also serves the egress proxy of the API server in its pod
// (runWithEgressProxy).
func Run(ctx context.Context, o Options) error {
	vklog.L = newVKLogger()
	if o.EgressProxySocket != "" {
		return runWithEgressProxy(ctx, o)
	}
	return runSyncer(ctx, o)
}

// runWithEgressProxy runs the egress proxy (runEgressProxy) beside the
// syncer, in every replica whether it leads or not: each replica's API
// server dials through its own pod's proxy. A proxy that stops while the
// syncer runs ends both with its error, so the kubelet restarts the
// container rather than leave the API server without a way to nodes and
// pods.
func runWithEgressProxy(ctx context.Context, o Options) error {
	host, err := hostClient(o)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	proxied := make(chan struct{})
	var proxyErr error
	go func() {
		defer close(proxied)
		err := runEgressProxy(ctx, o, host)
		if ctx.Err() == nil {
			proxyErr = fmt.Errorf("egress proxy stopped: %w", cmp.Or(err, errors.New("no error")))
			cancel()
		}
	}()
	err = runSyncer(ctx, o)
	cancel()
	<-proxied
	return cmp.Or(proxyErr, err)
}

// runSyncer runs the syncer until ctx ends, elected or not.
func runSyncer(ctx context.Context, o Options) error {
	if o.LeaderElect {
		if o.Host == nil {
			var err error
			if o.Host, err = rest.InClusterConfig(); err != nil {
				return fmt.Errorf("host credentials: %w", err)
			}
		}
		return runElected(ctx, o)
	}
	s, err := newSyncer(ctx, o)
	if err != nil {
		return err
	}
	return s.run(ctx)
}

type syncer struct {
	o Options
	// running are the queues and runners startSyncers started.
	running     sync.WaitGroup
	provider    *podProvider
	serviceSync *service.Syncer
	// registration is what the rows of kindTable run in this syncer's mode.
	registration kinds.Registration
	// The queues of the runtime's own kinds, which other kinds and tests
	// reach; nil when their row does not run in this mode.
	configMaps, secrets, tokens, orphans, tenantDeletes *kindsync.Syncer
	// nodeNetworks keeps the node network of hostNetwork pods, keyed by
	// virtual node (nodenetwork.go); nil unless Options.NodeNetwork.
	nodeNetworks *kindsync.Syncer
	tenantF      informers.SharedInformerFactory
	// nodes are the virtual nodes' names; pods are the tenant pods bound
	// to them.
	nodes  []string
	pods   *podsOnNodes
	hostF  informers.SharedInformerFactory
	events informers.SharedInformerFactory
	// dedicatedF watches the one host ConfigMap with the pod CIDRs of the
	// tenant's dedicated nodes (contract.DedicatedNodesConfigMap), which nest-manager
	// writes and so does not carry the labels of the syncer's copies.
	dedicatedF informers.SharedInformerFactory
	// membersF watches the one host Secret with the tenant's member
	// placements (contract.MembersSecret); members starts and stops a member
	// syncer per placement (host syncer only).
	membersF informers.SharedInformerFactory
	members  *kindsync.Syncer
	placer   *memberPlacer
	// held retries the pods a member syncer holds back over the grant
	// (member syncers only).
	held *kindsync.Syncer
	// network keeps the path from member pods back to the tenant (member
	// syncers with a node-port address only; see memberNetwork).
	network *kindsync.Syncer
	// nodeStatus and nodeSpec are the last virtual node's, kept to
	// update its status (member syncers: Ready, capacity).
	// kubeletSrv serves the kubelet API, once serveKubeletAPI started it.
	kubeletSrv *http.Server
	nodeMu     sync.Mutex
	nodeStatus *node.NaiveNodeProviderV2
	nodeSpec   *corev1.Node
	// placement is the member placement nest-manager last wrote (member
	// syncers only): the member node's readiness follows it.
	placement atomic.Pointer[contract.MemberPlacement]
	tenant    kubernetes.Interface
	recorder  record.EventRecorder
	ready     atomic.Bool
	started   time.Time
}

func newSyncer(ctx context.Context, o Options) (*syncer, error) {
	if o.Host == nil {
		var err error
		if o.Host, err = rest.InClusterConfig(); err != nil {
			return nil, fmt.Errorf("host credentials: %w", err)
		}
	}
	tenant, host, err := clients(o)
	if err != nil {
		return nil, err
	}
	return newSyncerFor(ctx, o, tenant, host)
}

// newSyncerFor wires the informers, the pod provider and the kind syncers
// over a tenant and a host client.
func newSyncerFor(ctx context.Context, o Options, tenant, host kubernetes.Interface) (*syncer, error) {
	security, err := NewPodSecurity(o.PodSecurityLevel)
	if err != nil {
		return nil, err
	}
	security.HostPathOnDisk = o.NodeDisk != nil
	security.ConfinePrivileged = o.ConfinePrivileged
	// The agent forwards to the node's address; member clusters run none.
	o.NodeNetwork = o.NodeNetwork && o.NodeIP != "" && o.Member == ""
	s := &syncer{o: o, tenant: tenant, started: time.Now()}
	s.tenantF = informers.NewSharedInformerFactory(tenant, 0)
	s.nodes = NodeNames(o.NodeName, max(o.VirtualNodes, 1))
	s.pods = newPodsOnNodes(tenant, s.nodes)
	ours := labels.SelectorFromSet(labels.Set{contract.LabelTenantOf: o.VirtualCluster}).String()
	s.hostF = informers.NewSharedInformerFactoryWithOptions(host, 0, informers.WithNamespace(o.HostNamespace),
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) { lo.LabelSelector = ours }))
	s.events = informers.NewSharedInformerFactoryWithOptions(host, 0, informers.WithNamespace(o.HostNamespace))
	dedicatedName := contract.DedicatedNodesConfigMap(o.VirtualCluster)
	s.dedicatedF = informers.NewSharedInformerFactoryWithOptions(host, 0, informers.WithNamespace(o.HostNamespace),
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
			lo.FieldSelector = fields.OneTermEqualSelector("metadata.name", dedicatedName).String()
		}))

	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: tenant.CoreV1().Events("")})
	s.recorder = broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "nest-syncer", Host: o.NodeName})

	podInformer := s.pods.Informer()
	if err := podInformer.AddIndexers(cache.Indexers{referencesIndex: o.translator().podReferences}); err != nil {
		return nil, err
	}
	hostConfigMaps := s.hostF.Core().V1().ConfigMaps().Lister().ConfigMaps(o.HostNamespace)
	hostSecrets := s.hostF.Core().V1().Secrets().Lister().Secrets(o.HostNamespace)
	objects := &objectSyncer{
		tr:               o.translator(),
		budget:           hostcopy.NewBudget(o.DataBudgetBytes, o.VirtualCluster, hostConfigMaps, hostSecrets),
		tenantConfigMaps: s.tenantF.Core().V1().ConfigMaps().Lister(), tenantSecrets: s.tenantF.Core().V1().Secrets().Lister(),
		hostSecrets: hostSecrets,
		pods:        podInformer.GetIndexer(),
	}
	tenantPods := s.pods.Lister()
	tokens := &serviceaccounttoken.Issuer{Tenant: tenant, MaxAge: o.TokenMaxAge}
	s.provider = &podProvider{
		tr: o.translator(), metadata: o.HostMetadata, security: security, host: host, hostCfg: o.Host, tenant: tenant, objects: objects,
		tokens:     tokens,
		recorder:   s.recorder,
		tenantPods: tenantPods,
		hostPods:   s.hostF.Core().V1().Pods().Lister().Pods(o.HostNamespace),
		member:     o.Member,
	}
	s.provider.capacity = &admission{capacity: map[string]corev1.ResourceList{}, pods: tenantPods, onHost: s.provider.runsOnHost,
		nodes: s.tenantF.Core().V1().Nodes().Lister()}
	for i, c := range SplitCapacity(o.Capacity, len(s.nodes)) {
		s.provider.capacity.capacity[s.nodes[i]] = c
	}
	// Member syncers read the tenant's Services for pods' variables too.
	s.serviceSync = service.New(service.Config{
		Translator: service.Translator{Translation: o.Translation}, Host: host, Recorder: s.recorder, DNSDir: o.DNSDir,
		TenantServices: s.tenantF.Core().V1().Services().Lister(),
		TenantSlices:   s.tenantF.Discovery().V1().EndpointSlices().Lister(),
		HostServices:   s.hostF.Core().V1().Services().Lister().Services(o.HostNamespace),
	})
	s.provider.services = s.serviceSync.Addresses
	if err := s.registerKinds(s.kindContext(tenant, host)); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *syncer) run(ctx context.Context) error {
	if !s.o.LeaderElect {
		go serveHealth(ctx, s.o.HealthAddr, s.ready.Load)
	}
	if err := s.startSyncers(ctx); err != nil {
		return err
	}
	if err := s.serveKubeletAPI(ctx); err != nil {
		return err
	}
	return s.runNode(ctx)
}

// startSyncers starts the informers and, once they have synced, what every
// kind registered.
func (s *syncer) startSyncers(ctx context.Context) error {
	// Factories no kind asked anything of start nothing.
	factories := []informers.SharedInformerFactory{s.tenantF, s.hostF, s.events, s.dedicatedF}
	if s.membersF != nil {
		factories = append(factories, s.membersF)
	}
	for _, f := range factories {
		f.Start(ctx.Done())
	}
	go s.pods.Informer().RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), s.pods.Informer().HasSynced) {
		return fmt.Errorf("informer for tenant pods on the virtual nodes did not sync")
	}
	for _, f := range factories {
		for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
			if !ok {
				return fmt.Errorf("informer for %v did not sync", typ)
			}
		}
	}
	for _, q := range s.registration.Queues {
		s.running.Go(func() { q.Run(ctx) })
	}
	for _, run := range s.registration.Runners {
		s.running.Go(func() { run(ctx) })
	}
	return nil
}

// waitSyncers returns once every queue and runner startSyncers started has
// returned, after their context ended.
func (s *syncer) waitSyncers() { s.running.Wait() }

// podWorkers is how many tenant pods are translated at once.
const podWorkers = 32

// runNode runs virtual-kubelet's pod and node controllers: pods first, so
// the node is Ready only when its pods are handled.
func (s *syncer) runNode(ctx context.Context) error {
	pc, err := node.NewPodController(node.PodControllerConfig{
		PodClient:                            gatedStatusPods{s.tenant.CoreV1()},
		PodInformer:                          s.pods,
		EventRecorder:                        s.recorder,
		Provider:                             s.provider,
		ConfigMapInformer:                    s.tenantF.Core().V1().ConfigMaps(),
		SecretInformer:                       s.tenantF.Core().V1().Secrets(),
		ServiceInformer:                      s.tenantF.Core().V1().Services(),
		SyncPodsFromKubernetesRateLimiter:    kindsync.Limiter[any](),
		DeletePodsFromKubernetesRateLimiter:  kindsync.Limiter[any](),
		SyncPodStatusFromProviderRateLimiter: kindsync.Limiter[any](),
		SkipDownwardAPIResolution:            true,
	})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { _ = pc.Run(ctx, podWorkers) }()
	if err := waitReady(ctx, pc.Ready(), pc.Done(), pc.Err); err != nil {
		return fmt.Errorf("pod controller: %w", err)
	}
	if s.o.Member == "" {
		if err := s.removeExtraNodes(ctx); err != nil {
			return err
		}
	}
	done := make(chan error, len(s.nodes))
	for i, capacity := range SplitCapacity(s.o.Capacity, len(s.nodes)) {
		if err := s.runVirtualNode(ctx, s.nodes[i], capacity, done); err != nil {
			return err
		}
	}
	s.ready.Store(true)
	select {
	case <-pc.Done():
		return pc.Err()
	case err := <-done:
		return err
	case <-ctx.Done():
		return nil
	}
}

// removeExtraNodes deletes the virtual nodes a larger count left: their
// leases stop, and the tenant's pod garbage collector deletes the pods bound
// to them, whose host pods the orphan syncer then deletes. Their disks go
// with them (deleteNodeDisk).
func (s *syncer) removeExtraNodes(ctx context.Context) error {
	for _, name := range NodeNames(s.o.NodeName, contract.MaxVirtualNodes)[len(s.nodes):] {
		if err := s.provider.deleteNodeDisk(ctx, name); err != nil {
			return err
		}
		n, err := s.tenant.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("read virtual node %s: %w", name, err)
		}
		if n.Labels["type"] != "virtual-kubelet" {
			continue
		}
		uid := n.UID
		if err := s.tenant.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete virtual node %s, beyond the count of %d: %w", name, len(s.nodes), err)
		}
		klog.FromContext(ctx).Info("Deleted a virtual node beyond the count", "node", name)
	}
	return nil
}

// runVirtualNode registers one virtual node, with its lease, and marks it
// Ready; done gets the node controller's error when it stops.
func (s *syncer) runVirtualNode(ctx context.Context, name string, capacity corev1.ResourceList, done chan<- error) error {
	spec := VirtualNode(name, s.o.NodeIP, s.o.KubernetesVersion, capacity)
	if s.o.Member != "" {
		spec = MemberNode(s.o.Member, s.o.NodeIP, s.o.KubernetesVersion, s.kubeletPort(), capacity)
	}
	status := node.NewNaiveNodeProvider()
	nc, err := node.NewNodeController(status, &spec, s.tenant.CoreV1().Nodes(),
		node.WithNodeEnableLeaseV1(s.tenant.CoordinationV1().Leases(corev1.NamespaceNodeLease), node.DefaultLeaseDuration))
	if err != nil {
		return err
	}
	go func() {
		_ = nc.Run(ctx)
		done <- fmt.Errorf("node controller of %s stopped: %w", name, nc.Err())
	}()
	if err := waitReady(ctx, nc.Ready(), nc.Done(), nc.Err); err != nil {
		return fmt.Errorf("node controller of %s: %w", name, err)
	}
	markReady(&spec)
	if p := s.placement.Load(); p != nil {
		// A member node starts as its member stands, not Ready by default.
		ready, reason, message := memberReadiness(0, *p, nil)
		setReadyCondition(&spec, ready, reason, message)
	}
	if err := status.UpdateStatus(ctx, &spec); err != nil {
		return fmt.Errorf("mark virtual node %s Ready: %w", name, err)
	}
	s.nodeMu.Lock()
	s.nodeStatus, s.nodeSpec = status, spec.DeepCopy()
	s.nodeMu.Unlock()
	klog.FromContext(ctx).Info("Virtual node is ready", "node", name)
	return nil
}

func waitReady(ctx context.Context, ready, done <-chan struct{}, errOf func() error) error {
	select {
	case <-ready:
		return nil
	case <-done:
		return errOf()
	case <-ctx.Done():
		return ctx.Err()
	}
}

// markReady sets the node's Ready condition, as a kubelet does once it runs.
func markReady(n *corev1.Node) {
	now := metav1.Now()
	n.Status.Phase = corev1.NodeRunning
	for i := range n.Status.Conditions {
		c := &n.Status.Conditions[i]
		c.LastHeartbeatTime, c.LastTransitionTime = now, now
		if c.Type == corev1.NodeReady {
			c.Status, c.Reason, c.Message = corev1.ConditionTrue, "KubeletReady", "nest-syncer is running the virtual node"
			continue
		}
		c.Status, c.Reason = corev1.ConditionFalse, "NotApplicable"
	}
}

// serveKubeletAPI serves logs, exec, attach, port-forward, stats and
// /metrics for the virtual node over TLS, to the tenant API server's kubelet client only.
func (s *syncer) serveKubeletAPI(ctx context.Context) error {
	tlsConfig, err := s.kubeletTLS()
	if err != nil {
		return err
	}
	// The API server dials the node's InternalIP, on the port the node
	// advertises.
	host, port, _ := net.SplitHostPort(s.o.KubeletAddr)
	if s.o.NodeIP != "" {
		host = s.o.NodeIP
	}
	if s.o.NodeIP != "" || s.o.KubeletPort != 0 {
		port = strconv.Itoa(int(s.kubeletPort()))
	}
	addr := net.JoinHostPort(host, port)
	l, err := tls.Listen("tcp", addr, tlsConfig)
	if err != nil {
		return fmt.Errorf("kubelet API listener: %w", err)
	}
	pods := s.pods.Lister()
	handler := api.PodHandler(api.PodHandlerConfig{
		RunInContainer:    s.provider.RunInContainer,
		AttachToContainer: s.provider.AttachToContainer,
		PortForward:       s.provider.PortForward,
		GetContainerLogs:  s.provider.GetContainerLogs,
		GetPods:           s.provider.GetPods,
		GetPodsFromKubernetes: func(context.Context) ([]*corev1.Pod, error) {
			return pods.List(labels.Everything())
		},
		GetStatsSummary:    s.provider.GetStatsSummary,
		GetMetricsResource: s.provider.GetMetricsResource,
	}, false)
	mux := http.NewServeMux()
	mux.Handle("/", handler)
	mux.Handle("/metrics", nodeMetricsHandler(pods))
	srv := &http.Server{Handler: onlyCommonName(s.o.KubeletClientName, mux), ReadHeaderTimeout: 10 * time.Second}
	s.kubeletSrv = srv
	serveUntilDone(ctx, srv, l, "Kubelet API")
	return nil
}

// serveUntilDone serves srv on l in the background and closes it when ctx
// ends; a failure is logged as what's.
func serveUntilDone(ctx context.Context, srv *http.Server, l net.Listener, what string) {
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.FromContext(ctx).Error(err, what+" stopped")
		}
	}()
}

// closeKubeletAPI closes the kubelet API's listener and connections.
func (s *syncer) closeKubeletAPI() {
	if s.kubeletSrv != nil {
		_ = s.kubeletSrv.Close()
	}
}

// VirtualNode is the tenant's view of its share of host capacity: a Ready
// node whose capacity and allocatable are the share. Its InternalIP is ip,
// the control-plane pod's, where the kubelet API and the tenant's node ports
// are served (loopback when ip is empty): the API server in the same pod
// and the tenant's own pods reach it, and nothing else does. It reports
// kubeletVersion as its kubelet's: the tenant control plane's version.
func VirtualNode(name, ip, kubeletVersion string, capacity corev1.ResourceList) corev1.Node {
	if ip == "" {
		ip = "127.0.0.1"
	}
	return corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			"type":                             "virtual-kubelet",
			"kubernetes.io/role":               "agent",
			"kubernetes.io/hostname":           name,
			"kubernetes.io/os":                 "linux",
			"kubernetes.io/arch":               runtime.GOARCH,
			"node.kubernetes.io/instance-type": "nest-virtual-node",
		}},
		Status: corev1.NodeStatus{
			Phase:       corev1.NodePending,
			Capacity:    capacity.DeepCopy(),
			Allocatable: capacity.DeepCopy(),
			Conditions: []corev1.NodeCondition{
				{Type: corev1.NodeReady}, {Type: corev1.NodeMemoryPressure}, {Type: corev1.NodeDiskPressure},
				{Type: corev1.NodePIDPressure}, {Type: corev1.NodeNetworkUnavailable},
			},
			Addresses:       []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}, {Type: corev1.NodeHostName, Address: name}},
			DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: contract.VirtualNodeKubeletPort}},
			NodeInfo: corev1.NodeSystemInfo{
				KubeletVersion: kubeletVersion, OperatingSystem: "linux", Architecture: runtime.GOARCH,
				OSImage: "Nest virtual node", KernelVersion: "n/a", ContainerRuntimeVersion: "host://shared",
			},
		},
	}
}

func (s *syncer) kubeletTLS() (*tls.Config, error) {
	pair, err := tls.LoadX509KeyPair(s.o.ServingCert, s.o.ServingKey)
	if err != nil {
		return nil, fmt.Errorf("kubelet serving certificate: %w", err)
	}
	caPEM, err := os.ReadFile(s.o.ClientCA)
	if err != nil {
		return nil, fmt.Errorf("kubelet client CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("kubelet client CA %s holds no certificate", s.o.ClientCA)
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}, nil
}

// onlyCommonName lets through only clients whose verified certificate has
// the given common name: the tenant API server's kubelet client.
func onlyCommonName(cn string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 || r.TLS.PeerCertificates[0].Subject.CommonName != cn {
			http.Error(w, "forbidden: only the tenant API server may use the kubelet API", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}
