package syncer

import (
	"bytes"
	"context"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/nestdev/nest/internal/atomicfile"
)

// HostsFileName is the file the syncer writes for the tenant's CoreDNS.
const HostsFileName = "hosts"

// serviceSyncer mirrors tenant Services on the host and keeps the tenant's
// DNS records pointing at their host ClusterIPs, or at the pods behind
// headless Services.
type serviceSyncer struct {
	tr             Translator
	host           kubernetes.Interface
	recorder       record.EventRecorder
	dnsDir         string
	tenantServices corelisters.ServiceLister
	tenantSlices   discoverylisters.EndpointSliceLister
	hostServices   corelisters.ServiceNamespaceLister
	changed        chan struct{}
	last           []byte
}

func (s *serviceSyncer) copies() hostCopy[*corev1.Service] {
	return hostCopy[*corev1.Service]{
		kind: "Service", client: s.host.CoreV1().Services(s.tr.HostNamespace), cached: s.hostServices.Get,
		differs: func(have, want *corev1.Service) bool {
			return ServiceNeedsUpdate(have, want) || have.Annotations[AnnotationTenantUID] != want.Annotations[AnnotationTenantUID]
		},
		merged: func(have, want *corev1.Service) *corev1.Service {
			upd := have.DeepCopy()
			upd.Labels, upd.Annotations = want.Labels, want.Annotations
			upd.Spec.Selector, upd.Spec.Ports = want.Spec.Selector, want.Spec.Ports
			upd.Spec.SessionAffinity, upd.Spec.SessionAffinityConfig = want.Spec.SessionAffinity, want.Spec.SessionAffinityConfig
			upd.Spec.PublishNotReadyAddresses = want.Spec.PublishNotReadyAddresses
			return upd
		},
	}
}

// tenantServiceChanged copies a tenant Service to the host. A failure, such
// as an exhausted host quota on Services, is an event on the tenant Service:
// the tenant sees why its name does not resolve.
func (s *serviceSyncer) tenantServiceChanged(ctx context.Context, svc *corev1.Service) {
	defer s.trigger()
	want, ok := s.tr.HostService(svc)
	if !ok {
		return
	}
	if err := s.copies().apply(ctx, want); err != nil {
		klog.FromContext(ctx).Error(err, "Sync Service to the host", "service", klog.KObj(svc))
		s.recorder.Eventf(svc, corev1.EventTypeWarning, "HostServiceFailed", "Writing host Service %s/%s failed, so the Service's name may not resolve or may be out of date: %v", want.Namespace, want.Name, err)
	}
}

func (s *serviceSyncer) tenantServiceDeleted(ctx context.Context, svc *corev1.Service) {
	defer s.trigger()
	err := s.copies().delete(ctx, s.tr.VirtualCluster, HostName(s.tr.VirtualCluster, svc.Namespace, svc.Name), svc.Namespace, svc.Name)
	if err != nil {
		klog.FromContext(ctx).Error(err, "Delete host Service", "service", klog.KObj(svc))
	}
}

// trigger asks for the hosts file to be rewritten; bursts coalesce.
func (s *serviceSyncer) trigger() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// run rewrites the hosts file whenever a Service changes on either side.
func (s *serviceSyncer) run(ctx context.Context) {
	s.trigger()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.changed:
		}
		if err := s.writeHosts(); err != nil {
			klog.FromContext(ctx).Error(err, "Write DNS records")
		}
	}
}

// Records returns the tenant's DNS records: the API server, every tenant
// Service whose host copy has a ClusterIP, and the endpoints of headless
// Services.
func (s *serviceSyncer) Records() []DNSRecord {
	records := []DNSRecord{s.tr.APIServerRecord()}
	tenant, _ := s.tenantServices.List(labels.Everything())
	for _, svc := range tenant {
		if svc.Spec.ClusterIP == corev1.ClusterIPNone {
			endpoints, _ := s.tenantSlices.EndpointSlices(svc.Namespace).List(labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: svc.Name}))
			records = append(records, s.tr.HeadlessRecords(svc, endpoints)...)
			continue
		}
		host, err := s.hostServices.Get(HostName(s.tr.VirtualCluster, svc.Namespace, svc.Name))
		if err != nil {
			continue
		}
		if r, ok := s.tr.ServiceRecord(svc.Namespace, svc.Name, host.Spec.ClusterIP); ok {
			records = append(records, r)
		}
	}
	return records
}

func (s *serviceSyncer) writeHosts() error {
	data := HostsFile(s.Records())
	if bytes.Equal(data, s.last) {
		return nil
	}
	if err := atomicfile.Write(filepath.Join(s.dnsDir, HostsFileName), data, 0o644); err != nil {
		return err
	}
	s.last = data
	return nil
}

// start makes the DNS directory and writes the first hosts file, with the API
// server's record, so CoreDNS answers for the API server at once.
func (s *serviceSyncer) start() error {
	if err := os.MkdirAll(s.dnsDir, 0o755); err != nil {
		return err
	}
	return s.writeHosts()
}
