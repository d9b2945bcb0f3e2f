package service

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/nestdev/nest/internal/atomicfile"
	"github.com/nestdev/nest/internal/kindsync"
	"github.com/nestdev/nest/internal/syncer/contract"
	"github.com/nestdev/nest/internal/syncer/kinds/hostcopy"
	"github.com/nestdev/nest/internal/syncer/tenantmsg"
)

// Syncer mirrors tenant Services on the host and keeps the tenant's
// DNS records pointing at their host ClusterIPs, or at the pods behind
// headless Services.
type Syncer struct {
	tr             Translator
	host           kubernetes.Interface
	recorder       record.EventRecorder
	dnsDir         string
	tenantServices corelisters.ServiceLister
	tenantSlices   discoverylisters.EndpointSliceLister
	hostServices   corelisters.ServiceNamespaceLister
	// dns rewrites the hosts file; every Service change asks it to, and
	// nodePorts (nil without node ports) to re-read the tenant's node ports.
	// Both are nil until RunDNS or Register makes them: a member syncer
	// reads Services and writes no DNS.
	dns, nodePorts *kindsync.Syncer
	last           []byte
	// lastZone and zoneSerial are the zone file's last records and serial;
	// zoneWritten says this writer wrote it (lastZone is then its records).
	lastZone    []string
	zoneSerial  uint32
	zoneWritten bool
}

// Config is what a Syncer reads and writes. Host and Recorder may be nil
// for a Syncer that only writes DNS (a follower replica's).
type Config struct {
	Translator
	Host     kubernetes.Interface
	Recorder record.EventRecorder
	// DNSDir is where the tenant CoreDNS' files are written.
	DNSDir         string
	TenantServices corelisters.ServiceLister
	TenantSlices   discoverylisters.EndpointSliceLister
	// HostServices lists the host copies, in the host namespace.
	HostServices corelisters.ServiceNamespaceLister
}

// New is the Syncer of cfg, without queues.
func New(cfg Config) *Syncer {
	return &Syncer{tr: cfg.Translator, host: cfg.Host, recorder: cfg.Recorder, dnsDir: cfg.DNSDir,
		tenantServices: cfg.TenantServices, tenantSlices: cfg.TenantSlices, hostServices: cfg.HostServices}
}

// DNSQueue makes the queue ("dns") that rewrites the tenant CoreDNS'
// files when DNSChanged asks, and returns it for its owner to run.
func (s *Syncer) DNSQueue() *kindsync.Syncer {
	s.dns = kindsync.New("dns", 1, s.syncDNS, func() []string { return []string{hostsKey} })
	return s.dns
}

// DNSChanged asks the DNS queue, if there is one, to rewrite the tenant
// CoreDNS' files.
func (s *Syncer) DNSChanged() {
	if s.dns != nil {
		s.dns.Add(hostsKey)
	}
}

// TenantServices lists the tenant's Services.
func (s *Syncer) TenantServices() corelisters.ServiceLister { return s.tenantServices }

func (s *Syncer) copies() hostcopy.Copies[*corev1.Service] {
	return hostcopy.Copies[*corev1.Service]{
		Kind: "Service", Client: s.host.CoreV1().Services(s.tr.HostNamespace), Cached: s.hostServices.Get,
		Differs: func(have, want *corev1.Service) bool {
			return ServiceNeedsUpdate(have, want) || have.Annotations[contract.AnnotationTenantUID] != want.Annotations[contract.AnnotationTenantUID]
		},
		Merged: func(have, want *corev1.Service) *corev1.Service {
			upd := have.DeepCopy()
			upd.Labels, upd.Annotations = want.Labels, want.Annotations
			upd.Spec.Selector, upd.Spec.Ports = want.Spec.Selector, want.Spec.Ports
			upd.Spec.SessionAffinity, upd.Spec.SessionAffinityConfig = want.Spec.SessionAffinity, want.Spec.SessionAffinityConfig
			upd.Spec.PublishNotReadyAddresses = want.Spec.PublishNotReadyAddresses
			return upd
		},
	}
}

// SyncService keeps the host copy of the tenant Service key
// ("namespace/name") in step, and deletes it once the Service is gone or is
// of a kind the host does not copy. A failure, such as an exhausted host quota
// on Services, is also an event on the tenant Service: the tenant sees why its
// name does not resolve.
func (s *Syncer) SyncService(ctx context.Context, key string) (time.Duration, error) {
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return 0, kindsync.Terminal(err)
	}
	defer s.DNSChanged()
	if s.nodePorts != nil {
		defer s.nodePorts.Add(nodePortsKey)
	}
	hostName := contract.HostName(s.tr.VirtualCluster, namespace, name)
	svc, err := s.tenantServices.Services(namespace).Get(name)
	if err != nil && !apierrors.IsNotFound(err) {
		return 0, err
	}
	var want *corev1.Service
	copied := false
	if err == nil {
		want, copied = s.tr.HostService(svc)
	}
	if !copied {
		if _, err := s.hostServices.Get(hostName); apierrors.IsNotFound(err) {
			return 0, nil
		}
		if err := s.copies().Delete(ctx, s.tr.VirtualCluster, hostName, namespace, name); err != nil {
			return 0, fmt.Errorf("delete host Service of %s: %w", key, err)
		}
		return 0, nil
	}
	err = s.copies().Apply(ctx, want)
	if err != nil && apierrors.IsInvalid(err) && want.Spec.ClusterIP != "" && want.Spec.ClusterIP != corev1.ClusterIPNone {
		// The host has given the tenant's ClusterIP to another Service: the
		// copy takes an address of its own, which DNS and service variables
		// give, while spec.clusterIP in the tenant does not route. The
		// host's words (its namespace, the copy's name) go to the log.
		klog.FromContext(ctx).Info("The tenant Service's ClusterIP is taken on the host", "service", key, "clusterIP", want.Spec.ClusterIP, "err", err)
		s.recorder.Eventf(svc, corev1.EventTypeWarning, "ClusterIPTaken", "The host cluster has given ClusterIP %s to another Service: the Service's name resolves to another address, and spec.clusterIP does not route", want.Spec.ClusterIP)
		want.Spec.ClusterIP = ""
		err = s.copies().Apply(ctx, want)
	}
	if err != nil {
		s.recorder.Eventf(svc, corev1.EventTypeWarning, "HostServiceFailed", "The Service's copy on the host could not be written, so its name may not resolve or may be out of date: %s", s.scope(svc).Error(err))
		return 0, fmt.Errorf("host Service %s/%s of %s: %w", want.Namespace, want.Name, key, err)
	}
	return 0, nil
}

// scope is what an event on the tenant Service svc may name of the host
// (tenantmsg): its own ClusterIPs, not the host's names.
func (s *Syncer) scope(svc *corev1.Service) tenantmsg.Scope {
	sc := tenantmsg.Scope{VirtualCluster: s.tr.VirtualCluster, HostNamespace: s.tr.HostNamespace}.In(svc.Namespace)
	sc.Addresses = svc.Spec.ClusterIPs
	return sc.WithName(contract.HostName(s.tr.VirtualCluster, svc.Namespace, svc.Name), svc.Name)
}

// hostsKey is the one key of the DNS syncer: the hosts file is written whole.
const hostsKey = contract.HostsFileName

// syncDNS rewrites the hosts file when a record changed.
func (s *Syncer) syncDNS(context.Context, string) (time.Duration, error) {
	return 0, s.writeHosts()
}

// Records returns the tenant's DNS records: the API server, every tenant
// Service with a ClusterIP (its host copy's when it has one), and the
// endpoints of headless Services.
func (s *Syncer) Records() []DNSRecord {
	records := []DNSRecord{s.tr.APIServerRecord()}
	tenant, _ := s.tenantServices.List(labels.Everything())
	for _, svc := range tenant {
		if svc.Spec.ClusterIP == corev1.ClusterIPNone {
			endpoints, _ := s.tenantSlices.EndpointSlices(svc.Namespace).List(labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: svc.Name}))
			records = append(records, s.tr.HeadlessRecords(svc, endpoints)...)
			continue
		}
		// A Service with no host copy answers with its own, as in any cluster.
		ip := svc.Spec.ClusterIP
		if hostIP := s.hostIP(svc); hostIP != "" {
			ip = hostIP
		}
		if r, ok := s.tr.ServiceRecord(svc.Namespace, svc.Name, ip); ok {
			records = append(records, r)
		}
	}
	return records
}

// Addresses are the tenant Services of namespace with the addresses host
// pods reach them at.
func (s *Syncer) Addresses(namespace string) []Address {
	tenant, _ := s.tenantServices.Services(namespace).List(labels.Everything())
	out := make([]Address, 0, len(tenant))
	for _, svc := range tenant {
		out = append(out, AddressOf(svc, s.hostIP(svc)))
	}
	return out
}

// hostIP is the ClusterIP at which host pods reach the tenant Service svc:
// its host copy's, or DNSServer for the cluster DNS Service, which fronts
// the control-plane pod as the host's in-cluster Service does; "" when the
// Service has no host copy.
func (s *Syncer) hostIP(svc *corev1.Service) string {
	if IsClusterDNSService(svc) {
		return s.tr.DNSServer
	}
	if host, err := s.hostServices.Get(contract.HostName(s.tr.VirtualCluster, svc.Namespace, svc.Name)); err == nil {
		return host.Spec.ClusterIP
	}
	return ""
}

// zoneRecords are the tenant's records the hosts file cannot hold (see
// Translator.ZoneRecords).
func (s *Syncer) zoneRecords() []string {
	var records []string
	tenant, _ := s.tenantServices.List(labels.Everything())
	for _, svc := range tenant {
		var endpoints []*discoveryv1.EndpointSlice
		if svc.Spec.ClusterIP == corev1.ClusterIPNone {
			endpoints, _ = s.tenantSlices.EndpointSlices(svc.Namespace).List(labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: svc.Name}))
		}
		records = append(records, s.tr.ZoneRecords(svc, endpoints)...)
	}
	slices.Sort(records)
	return records
}

// writeHosts rewrites the hosts file and the cluster zone file when their
// records changed. The zone's serial grows with every write, so CoreDNS
// reloads it.
func (s *Syncer) writeHosts() error {
	data := HostsFile(s.Records())
	if !bytes.Equal(data, s.last) {
		if err := atomicfile.Write(filepath.Join(s.dnsDir, contract.HostsFileName), data, 0o644); err != nil {
			return err
		}
		s.last = data
	}
	records := s.zoneRecords()
	if s.zoneWritten && slices.Equal(records, s.lastZone) {
		return nil
	}
	serial := max(s.zoneSerial+1, uint32(time.Now().Unix()))
	if err := atomicfile.Write(filepath.Join(s.dnsDir, contract.ZoneFileName), contract.ClusterZone(s.tr.ClusterDomain, serial, records), 0o644); err != nil {
		return err
	}
	s.zoneSerial, s.lastZone, s.zoneWritten = serial, records, true
	return nil
}

// Start makes the DNS directory and writes the first hosts file, with the API
// server's record, so CoreDNS answers for the API server at once.
func (s *Syncer) Start() error {
	if err := os.MkdirAll(s.dnsDir, 0o755); err != nil {
		return err
	}
	if err := s.writeEmptyMemberViews(); err != nil {
		return err
	}
	// The zone this pod's CoreDNS serves may come from another writer (the
	// follower before it led, a previous run): its serial must still grow,
	// or CoreDNS keeps the old zone.
	if data, err := os.ReadFile(filepath.Join(s.dnsDir, contract.ZoneFileName)); err == nil {
		s.zoneSerial = contract.ZoneSerial(data)
	}
	return s.writeHosts()
}

// writeEmptyMemberViews writes an empty hosts file for each member view
// that has none yet, so that CoreDNS' member views answer NXDOMAIN, not
// SERVFAIL, until a member syncer writes its own.
func (s *Syncer) writeEmptyMemberViews() error {
	for slot := range contract.MaxMembers {
		name := filepath.Join(s.dnsDir, contract.MemberHostsFileName(slot))
		if _, err := os.Stat(name); err == nil {
			continue
		}
		if err := atomicfile.Write(name, HostsFile(nil), 0o644); err != nil {
			return err
		}
	}
	return nil
}
