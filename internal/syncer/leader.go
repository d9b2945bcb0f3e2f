package syncer

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"

	"github.com/nestdev/nest/internal/kindsync"
	"github.com/nestdev/nest/internal/syncer/contract"
	"github.com/nestdev/nest/internal/syncer/kinds"
	"github.com/nestdev/nest/internal/syncer/kinds/service"
)

// Leader election timings: client-go's and kube-controller-manager's
// defaults. A leader that stops cleanly releases the lease at once; one that
// dies is replaced once the lease lapses.
const (
	leaseDuration = 15 * time.Second
	renewDeadline = 10 * time.Second
	retryPeriod   = 2 * time.Second
)

// errLostLease ends a syncer that lost its lease while still running: it
// exits, and its container starts again as a follower, so two syncers
// never write to the host at once.
var errLostLease = errors.New("lost the syncer lease")

// runElected runs the syncer while this replica holds the host Lease, and
// until then keeps the replica's CoreDNS answering: a follower writes the
// tenant's DNS records from the tenant's and the host's Services, as the
// leader does, and writes nothing to either cluster.
func runElected(ctx context.Context, o Options) error {
	tenant, host, err := clients(o)
	if err != nil {
		return err
	}
	identity, err := electionIdentity(o.Identity)
	if err != nil {
		return err
	}
	log := klog.FromContext(ctx)
	var current atomic.Pointer[syncer]
	go serveHealth(ctx, o.HealthAddr, func() bool {
		s := current.Load()
		return s != nil && s.ready.Load()
	})
	// The elector runs until the syncer has stopped: on SIGTERM the syncer
	// stops first and only then is the lease released, so a successor
	// never writes beside it.
	electorCtx, stopElector := context.WithCancel(context.WithoutCancel(ctx))
	defer stopElector()
	followerCtx, stopFollower := context.WithCancel(ctx)
	followerDone := make(chan struct{})
	var followerErr error
	go func() {
		defer close(followerDone)
		err := runDNSFollower(followerCtx, o, tenant, host)
		if followerCtx.Err() == nil {
			followerErr = cmp.Or(err, errors.New("stopped"))
		}
	}()
	var (
		mu     sync.Mutex
		runErr = errLostLease
	)
	setErr := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		runErr = err
	}
	leading := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
		case <-followerDone:
			// A follower whose CoreDNS records stopped must not stay Ready.
			if followerErr != nil {
				setErr(fmt.Errorf("follower DNS records: %w", followerErr))
				stopElector()
			}
			return
		case <-leading:
			return
		}
		// SIGTERM while following: nothing to hand over but the lease.
		select {
		case <-leading:
		default:
			stopElector()
		}
	}()
	leaderelection.RunOrDie(electorCtx, leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: o.HostNamespace, Name: contract.LeaseName(o.VirtualCluster)},
			Client:     host.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: identity},
		},
		LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod,
		ReleaseOnCancel: true,
		Name:            "nest-syncer",
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(leaseCtx context.Context) {
				close(leading)
				// Lost lease or SIGTERM: the syncer stops, then the elector.
				defer stopElector()
				log.Info("Leading: running the virtual node", "identity", identity)
				stopFollower()
				<-followerDone
				runCtx, stopRun := context.WithCancel(leaseCtx)
				defer stopRun()
				context.AfterFunc(ctx, stopRun)
				s, err := newSyncerFor(runCtx, o, tenant, host)
				if err != nil {
					setErr(err)
					return
				}
				current.Store(s)
				if err := s.run(runCtx); err != nil && runCtx.Err() == nil {
					setErr(err)
				}
			},
			OnStoppedLeading: func() { log.Info("No longer leading", "identity", identity) },
			OnNewLeader: func(leader string) {
				if leader != identity {
					log.Info("Following", "leader", leader)
				}
			},
		},
	})
	stopFollower()
	mu.Lock()
	defer mu.Unlock()
	if ctx.Err() != nil && errors.Is(runErr, errLostLease) {
		// Stopped from outside (SIGTERM): the lease is released.
		return nil
	}
	return runErr
}

// electionIdentity is this process's name in the election: the pod's name
// (or the host name) and a random suffix, so a replacement pod of the same
// name never takes its predecessor's lease for its own.
func electionIdentity(name string) (string, error) {
	if name == "" {
		var err error
		if name, err = os.Hostname(); err != nil {
			return "", fmt.Errorf("leader election identity: %w", err)
		}
	}
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return name + "_" + hex.EncodeToString(b), nil
}

// clients are the tenant and host clients of o.
func clients(o Options) (tenant, host kubernetes.Interface, err error) {
	tenantCfg, err := clientcmd.BuildConfigFromFlags("", o.TenantKubeconfig)
	if err != nil {
		return nil, nil, fmt.Errorf("tenant kubeconfig %s: %w", o.TenantKubeconfig, err)
	}
	tenantCfg.QPS, tenantCfg.Burst = 200, 400
	if tenant, err = kubernetes.NewForConfig(tenantCfg); err != nil {
		return nil, nil, err
	}
	if host, err = hostClient(o); err != nil {
		return nil, nil, err
	}
	return tenant, host, nil
}

// hostClient is the host client of o: o.Host, or the in-cluster
// configuration when it is nil.
func hostClient(o Options) (kubernetes.Interface, error) {
	hostCfg := o.Host
	if hostCfg == nil {
		var err error
		if hostCfg, err = rest.InClusterConfig(); err != nil {
			return nil, fmt.Errorf("host credentials: %w", err)
		}
	}
	hostCfg = rest.CopyConfig(hostCfg)
	hostCfg.QPS, hostCfg.Burst = 200, 400
	return kubernetes.NewForConfig(hostCfg)
}

// runDNSFollower keeps the tenant CoreDNS' files of this replica current
// until ctx ends: the records the leader's service.Syncer writes, read from
// the same informers, and nothing written to either cluster.
func runDNSFollower(ctx context.Context, o Options, tenant, host kubernetes.Interface) error {
	tenantF := informers.NewSharedInformerFactory(tenant, 0)
	ours := labels.SelectorFromSet(labels.Set{contract.LabelTenantOf: o.VirtualCluster}).String()
	hostF := informers.NewSharedInformerFactoryWithOptions(host, 0, informers.WithNamespace(o.HostNamespace),
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) { lo.LabelSelector = ours }))
	s := service.New(service.Config{
		Translator: service.Translator{Translation: o.Translation}, DNSDir: o.DNSDir,
		TenantServices: tenantF.Core().V1().Services().Lister(),
		TenantSlices:   tenantF.Discovery().V1().EndpointSlices().Lister(),
		HostServices:   hostF.Core().V1().Services().Lister().Services(o.HostNamespace),
	})
	dns := s.DNSQueue()
	changed := kinds.OnEvery(func(metav1.Object) { s.DNSChanged() })
	for _, inf := range []cache.SharedIndexInformer{
		tenantF.Core().V1().Services().Informer(), tenantF.Discovery().V1().EndpointSlices().Informer(), hostF.Core().V1().Services().Informer(),
	} {
		if _, err := inf.AddEventHandler(changed); err != nil {
			return err
		}
	}
	if err := s.Start(); err != nil {
		return err
	}
	tenantF.Start(ctx.Done())
	hostF.Start(ctx.Done())
	defer tenantF.Shutdown()
	defer hostF.Shutdown()
	for _, f := range []interface {
		WaitForCacheSync(<-chan struct{}) map[reflect.Type]bool
	}{tenantF, hostF} {
		for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
			if !ok {
				return fmt.Errorf("informer for %v did not sync", typ)
			}
		}
	}
	s.DNSChanged()
	dns.Run(ctx)
	return nil
}

// serveHealth serves /healthz (ok while the process serves: the liveness
// probe), /readyz (ok once ready says so) and /metrics on addr until ctx
// ends.
func serveHealth(ctx context.Context, addr string, ready func() bool) {
	mux := http.NewServeMux()
	// Liveness must not depend on the tenant or host API servers: a slow
	// start is not a wedged process, and a restart would not help.
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	// Metrics stay on loopback with the probes: reach them with kubectl
	// port-forward or a scraper in the pod.
	mux.Handle("/metrics", kindsync.MetricsHandler())
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !ready() {
			http.Error(w, "virtual node not registered yet", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		klog.FromContext(ctx).Error(err, "Health endpoint stopped")
	}
}
