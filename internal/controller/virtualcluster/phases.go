package virtualcluster

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/controlplane"
)

// reconcileService creates or updates the Service and gathers the host node
// IPs, which the serving certificate and a NodePort endpoint need. A
// Service it creates asks for the address nestv1.AnnotationRequestedAddress
// names, if any (requestAddress); a request the host cannot meet is
// dropped with a Warning event.
func (r *Reconciler) reconcileService(ctx context.Context, s *reconcileState) (bool, error) {
	requested := r.requestedAddress(s.vc)
	svc, err := r.applyService(ctx, s.vc, requested)
	if err != nil && requested != nil && isNodePortRefused(err) {
		r.Recorder.Eventf(s.vc, nil, corev1.EventTypeWarning, ReasonAddressTaken, "Reconcile",
			"node port %d, which the tenant had, cannot be given (%v): the Service gets another and kubeconfigs made before must be fetched again (nest kubeconfig)", requested.NodePort, err)
		svc, err = r.applyService(ctx, s.vc, nil)
	}
	if err != nil {
		return false, err
	}
	if requested != nil {
		if err := r.dropUnmetAddress(ctx, s.vc, svc, time.Now()); err != nil {
			return false, err
		}
	}
	ips, err := r.nodeIPs(ctx)
	if err != nil {
		return false, err
	}
	s.service, s.nodeIPs = svc, ips
	return true, nil
}

// ReasonAddressTaken is the Warning event of a VirtualCluster whose
// requested address (nestv1.AnnotationRequestedAddress) the host could
// not give.
const ReasonAddressTaken = "AddressTaken"

// addressGrace is how long a LoadBalancer Service that asked for an address
// waits for it before the request is dropped: MetalLB gives a free address
// in a second or two, a cloud load balancer in a minute or so.
const addressGrace = 2 * time.Minute

// applyService creates or patches the API server's Service; one it creates
// asks for requested.
func (r *Reconciler) applyService(ctx context.Context, vc *nestv1.VirtualCluster, requested *nestv1.RequestedAddress) (*corev1.Service, error) {
	desired := controlplane.ServiceFor(vc, r.ControlPlane.DefaultServiceType)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: desired.Name, Namespace: desired.Namespace}}
	if _, err := controllerutil.CreateOrPatch(ctx, r.Client, svc, func() error {
		svc.Labels = desired.Labels
		svc.Spec.Type = desired.Spec.Type
		svc.Spec.Selector = desired.Spec.Selector
		svc.Spec.PublishNotReadyAddresses = desired.Spec.PublishNotReadyAddresses
		svc.Spec.Ports = mergePorts(svc.Spec.Ports, desired.Spec.Ports, desired.Spec.Type)
		if svc.CreationTimestamp.IsZero() {
			requestAddress(svc, requested)
		}
		if desired.Spec.Type != corev1.ServiceTypeLoadBalancer {
			// A requested address goes with the type that had it.
			svc.Spec.LoadBalancerIP = ""
		}
		return controllerutil.SetControllerReference(vc, svc, r.Scheme)
	}); err != nil {
		return nil, fmt.Errorf("reconcile Service %s: %w", klog.KObj(svc), err)
	}
	return svc, nil
}

// requestedAddress is the VirtualCluster's
// nestv1.AnnotationRequestedAddress, or nil; a value that does not parse
// is a Warning event and asks for nothing.
func (r *Reconciler) requestedAddress(vc *nestv1.VirtualCluster) *nestv1.RequestedAddress {
	v, ok := vc.Annotations[nestv1.AnnotationRequestedAddress]
	if !ok {
		return nil
	}
	a := &nestv1.RequestedAddress{}
	if err := json.Unmarshal([]byte(v), a); err != nil {
		r.Recorder.Eventf(vc, nil, corev1.EventTypeWarning, ReasonAddressTaken, "Reconcile",
			"annotation %s %q is not {\"loadBalancerIP\": ..., \"nodePort\": ...}: no address is asked for: %v", nestv1.AnnotationRequestedAddress, v, err)
		return nil
	}
	return a
}

// requestAddress asks, on a Service about to be created, for the node port
// and LoadBalancer address of requested, where its type has them.
func requestAddress(svc *corev1.Service, requested *nestv1.RequestedAddress) {
	if requested == nil {
		return
	}
	if requested.NodePort != 0 && svc.Spec.Type != corev1.ServiceTypeClusterIP && len(svc.Spec.Ports) > 0 {
		svc.Spec.Ports[0].NodePort = requested.NodePort
	}
	if requested.LoadBalancerIP != "" && svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
		svc.Spec.LoadBalancerIP = requested.LoadBalancerIP
	}
}

// isNodePortRefused reports whether err is the API server's refusal of a
// node port: another Service holds it, or it is outside this host's
// node-port range.
func isNodePortRefused(err error) bool {
	return apierrors.IsInvalid(err) && strings.Contains(err.Error(), "nodePort")
}

// dropUnmetAddress clears the LoadBalancer address a Service asked for
// when, addressGrace after its creation, the load balancer has not given
// it (another Service holds it, or it is outside the pools), so the load
// balancer picks one. It is called only while the VirtualCluster asks for
// an address (nestv1.AnnotationRequestedAddress).
func (r *Reconciler) dropUnmetAddress(ctx context.Context, vc *nestv1.VirtualCluster, svc *corev1.Service, now time.Time) error {
	if svc.Spec.LoadBalancerIP == "" || len(svc.Status.LoadBalancer.Ingress) > 0 || now.Sub(svc.CreationTimestamp.Time) < addressGrace {
		return nil
	}
	ip := svc.Spec.LoadBalancerIP
	patch := client.MergeFrom(svc.DeepCopy())
	svc.Spec.LoadBalancerIP = ""
	if err := r.Patch(ctx, svc, patch); err != nil {
		return fmt.Errorf("drop the address %s Service %s asked for: %w", ip, klog.KObj(svc), err)
	}
	r.Recorder.Eventf(vc, nil, corev1.EventTypeWarning, ReasonAddressTaken, "Reconcile",
		"LoadBalancer address %s, which the tenant had, was not given in %s (taken, or outside the pools): the Service gets another and kubeconfigs made before must be fetched again (nest kubeconfig)", ip, addressGrace)
	return nil
}

// mergePorts keeps the node port the host assigned when the port is otherwise
// unchanged, unless the Service becomes a ClusterIP (typ).
func mergePorts(current, desired []corev1.ServicePort, typ corev1.ServiceType) []corev1.ServicePort {
	out := slices.Clone(desired)
	if typ == corev1.ServiceTypeClusterIP {
		// A ClusterIP Service has no node ports; the API server refuses
		// one kept from a NodePort or LoadBalancer past.
		return out
	}
	for i := range out {
		for _, c := range current {
			if c.Name == out[i].Name && out[i].NodePort == 0 {
				out[i].NodePort = c.NodePort
			}
		}
	}
	return out
}

// nodeIPs lists the host nodes' internal IPs: control-plane nodes first (where
// tenant control planes prefer to run), then by name. A node that node
// promotion moved into a tenant cluster has no host Node while it is away,
// but keeps its place through its GlobalNode's nodeIP: the list, which the
// tenant API server's certificate names, stays the same while nodes move,
// so a promotion does not roll every tenant control plane.
func (r *Reconciler) nodeIPs(ctx context.Context) ([]string, error) {
	var nodes corev1.NodeList
	if err := r.List(ctx, &nodes); err != nil {
		return nil, fmt.Errorf("list host nodes: %w", err)
	}
	var globalNodes nestv1.GlobalNodeList
	if err := r.List(ctx, &globalNodes); err != nil {
		return nil, fmt.Errorf("list GlobalNodes: %w", err)
	}
	return hostNodeIPs(nodes.Items, globalNodes.Items), nil
}

// hostNodeIP is one host node's address and where it sorts.
type hostNodeIP struct {
	name, ip     string
	controlPlane bool
}

// hostNodeIPs orders the InternalIPs of nodes, and the nodeIPs of the
// GlobalNodes that have no Node, control-plane nodes first, then by name.
func hostNodeIPs(nodes []corev1.Node, globalNodes []nestv1.GlobalNode) []string {
	var all []hostNodeIP
	present := map[string]bool{}
	for _, n := range nodes {
		present[n.Name] = true
		_, cp := n.Labels["node-role.kubernetes.io/control-plane"]
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				all = append(all, hostNodeIP{n.Name, a.Address, cp})
			}
		}
	}
	for _, gn := range globalNodes {
		if !present[gn.Name] && gn.Spec.NodeIP != "" {
			all = append(all, hostNodeIP{gn.Name, gn.Spec.NodeIP, false})
		}
	}
	sort.SliceStable(all, func(i, j int) bool {
		if all[i].controlPlane != all[j].controlPlane {
			return all[i].controlPlane
		}
		return all[i].name < all[j].name
	})
	ips := make([]string, 0, len(all))
	for _, n := range all {
		ips = append(ips, n.ip)
	}
	return ips
}

// reconcileVirtualNodeObjects creates what the virtual node needs on the host:
// the tenant CoreDNS' ConfigMap and Service, the ConfigMap of the API
// server's static admission and egress selector files, and the syncer's
// ServiceAccount and RoleBinding. The quotas are reconcileLimits'.
func (r *Reconciler) reconcileVirtualNodeObjects(ctx context.Context, s *reconcileState) (bool, error) {
	apiServer, err := controlplane.APIServerConfigMapFor(s.vc)
	if err != nil {
		return false, err
	}
	for _, wantCM := range []*corev1.ConfigMap{controlplane.DNSConfigMapFor(s.vc), apiServer} {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: wantCM.Name, Namespace: wantCM.Namespace}}
		if err := r.ensure(ctx, s, cm, func() { cm.Labels, cm.Data = wantCM.Labels, wantCM.Data }); err != nil {
			return false, err
		}
	}
	dns := controlplane.DNSServiceFor(s.vc)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: dns.Name, Namespace: dns.Namespace}}
	if err := r.ensure(ctx, s, svc, func() {
		svc.Labels, svc.Spec.Type, svc.Spec.Selector = dns.Labels, dns.Spec.Type, dns.Spec.Selector
		svc.Spec.PublishNotReadyAddresses = dns.Spec.PublishNotReadyAddresses
		svc.Spec.Ports = mergePorts(svc.Spec.Ports, dns.Spec.Ports, dns.Spec.Type)
	}); err != nil {
		return false, err
	}
	sa, wantSA := &corev1.ServiceAccount{}, controlplane.SyncerServiceAccountFor(s.vc)
	sa.ObjectMeta = metav1.ObjectMeta{Name: wantSA.Name, Namespace: wantSA.Namespace}
	if err := r.ensure(ctx, s, sa, func() {
		sa.Labels, sa.AutomountServiceAccountToken = wantSA.Labels, wantSA.AutomountServiceAccountToken
	}); err != nil {
		return false, err
	}
	rb, wantRB := &rbacv1.RoleBinding{}, controlplane.SyncerRoleBindingFor(s.vc)
	rb.ObjectMeta = metav1.ObjectMeta{Name: wantRB.Name, Namespace: wantRB.Namespace}
	if err := r.ensure(ctx, s, rb, func() { rb.Labels, rb.RoleRef, rb.Subjects = wantRB.Labels, wantRB.RoleRef, wantRB.Subjects }); err != nil {
		return false, err
	}
	s.ips = controlplane.ServiceIPs{APIServer: s.service.Spec.ClusterIP, DNS: svc.Spec.ClusterIP}
	return s.ips.APIServer != "" && s.ips.DNS != "", nil
}

// ensure creates or patches one host object owned by the VirtualCluster.
func (r *Reconciler) ensure(ctx context.Context, s *reconcileState, obj client.Object, mutate func()) error {
	if _, err := controllerutil.CreateOrPatch(ctx, r.Client, obj, func() error {
		mutate()
		return controllerutil.SetControllerReference(s.vc, obj, r.Scheme)
	}); err != nil {
		return fmt.Errorf("reconcile %T %s: %w", obj, klog.KObj(obj), err)
	}
	return nil
}

// reconcilePKI issues what is missing or stale in the PKI Secret and the
// component kubeconfig Secret.
func (r *Reconciler) reconcilePKI(ctx context.Context, s *reconcileState) (bool, error) {
	n := controlplane.NamesOf(s.vc)
	endpoints := controlplane.EndpointsOf(s.vc, s.service, s.ips, s.nodeIPs, r.HostClusterDomain)
	members, err := r.memberAddresses(ctx, s.vc)
	if err != nil {
		return false, err
	}
	endpoints.MemberAddresses = members
	now := time.Now()
	if err := r.serveCARotation(ctx, s, now); err != nil {
		return false, err
	}
	if s.renewal, err = r.serveRotation(ctx, s, now); err != nil {
		return false, err
	}
	var before map[string][]byte
	pkiData, err := r.reconcileSecret(ctx, s, n.PKISecret(), func(existing map[string][]byte) (map[string][]byte, bool, error) {
		before = existing
		return controlplane.ReconcilePKI(existing, n, endpoints, s.renewal)
	})
	if err != nil {
		return false, err
	}
	if issued := changedKeys(before, pkiData); len(before) > 0 && len(issued) > 0 {
		r.Recorder.Eventf(s.vc, nil, corev1.EventTypeNormal, ReasonCertificatesIssued, "Reconcile", "issued anew: %s", strings.Join(issued, ", "))
	}
	components, err := r.reconcileSecret(ctx, s, n.ComponentKubeconfigSecret(), func(existing map[string][]byte) (map[string][]byte, bool, error) {
		return controlplane.ReconcileComponentKubeconfigs(existing, pkiData, n, s.renewal)
	})
	if err != nil {
		return false, err
	}
	manager, err := r.reconcileSecret(ctx, s, n.ManagerKubeconfigSecret(), func(existing map[string][]byte) (map[string][]byte, bool, error) {
		return controlplane.ReconcileManagerKubeconfig(existing, pkiData, n, s.renewal)
	})
	if err != nil {
		return false, err
	}
	s.secrets = map[string]map[string][]byte{n.PKISecret(): pkiData, n.ComponentKubeconfigSecret(): components, n.ManagerKubeconfigSecret(): manager}
	if s.vc.Status.Certificates == nil {
		s.vc.Status.Certificates = &nestv1.CertificatesStatus{}
	}
	s.vc.Status.Certificates.NotAfter = controlplane.FirstLeafExpiry(pkiData)
	if err := r.startDueCARotation(ctx, s, pkiData, now); err != nil {
		return false, err
	}
	s.pki = pkiData
	s.obs.certificates = true
	return true, nil
}

// ReasonCertificatesIssued is the Normal event of a VirtualCluster whose
// PKI Secret got new leaf certificates: renewed, rotated or first made
// for new endpoints.
const ReasonCertificatesIssued = "CertificatesIssued"

// serveRotation is the Renewal of the VirtualCluster at now. A new value
// of nestv1.AnnotationRotateCertificates is served here, before any leaf
// is issued for it: a status patch of its own records it in
// status.certificates.lastRotation with now, from which every leaf counts
// as new, so a later phase's failure cannot lose it and have it served
// again. A value over 64 characters is refused with a Warning event.
func (r *Reconciler) serveRotation(ctx context.Context, s *reconcileState, now time.Time) (controlplane.Renewal, error) {
	vc := s.vc
	req := vc.Annotations[nestv1.AnnotationRotateCertificates]
	st := vc.Status.Certificates
	switch {
	case req == "" || (st != nil && st.LastRotation != nil && st.LastRotation.Request == req):
	case len(req) > maxRotationRequest:
		r.Recorder.Eventf(vc, nil, corev1.EventTypeWarning, "InvalidRotation", "Reconcile",
			"annotation %s is %d characters, more than %d: set it to a time, as nest certs rotate does", nestv1.AnnotationRotateCertificates, len(req), maxRotationRequest)
	default:
		served := &nestv1.CertificateRotation{Request: req, Time: metav1.NewTime(now.Truncate(time.Second))}
		if err := r.patchCertificates(ctx, s, func(st *nestv1.CertificatesStatus) { st.LastRotation = served.DeepCopy() }); err != nil {
			return controlplane.Renewal{}, fmt.Errorf("record the rotation %q of %s: %w", req, klog.KObj(vc), err)
		}
		r.Recorder.Eventf(vc, nil, corev1.EventTypeNormal, "RotationStarted", "Reconcile", "every leaf certificate is issued anew (%s %s)", nestv1.AnnotationRotateCertificates, req)
	}
	return controlplane.RenewalOf(vc, now), nil
}

// maxRotationRequest is the longest nestv1.AnnotationRotateCertificates
// value served: status.certificates.lastRotation.request holds 64.
const maxRotationRequest = 64

// changedKeys are the keys of after whose values differ from before's,
// sorted.
func changedKeys(before, after map[string][]byte) []string {
	var out []string
	for k, v := range after {
		if !bytes.Equal(before[k], v) {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// reconcileSecret creates or updates a Secret owned by the VirtualCluster whose
// data build derives from the current data. It returns the resulting data.
func (r *Reconciler) reconcileSecret(ctx context.Context, s *reconcileState, name string,
	build func(existing map[string][]byte) (map[string][]byte, bool, error)) (map[string][]byte, error) {
	n := controlplane.NamesOf(s.vc)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: n.Namespace}}
	if _, err := controllerutil.CreateOrPatch(ctx, r.Client, secret, func() error {
		data, changed, err := build(secret.Data)
		if err != nil {
			return err
		}
		if changed || secret.Data == nil {
			secret.Data = data
		}
		secret.Type = corev1.SecretTypeOpaque
		secret.Labels = n.Labels()
		return controllerutil.SetControllerReference(s.vc, secret, r.Scheme)
	}); err != nil {
		return nil, fmt.Errorf("reconcile Secret %s: %w", klog.KObj(secret), err)
	}
	return secret.Data, nil
}

// reconcileStatefulSet creates the control-plane StatefulSet, with the
// headless Service that governs it and its PodDisruptionBudget, or updates
// its pod template, replicas and labels. Volume claim templates cannot
// change; a StatefulSet whose governing Service or pod management policy
// differs (an older Nest's) is deleted, leaving its pods, and made again.
func (r *Reconciler) reconcileStatefulSet(ctx context.Context, s *reconcileState) (bool, error) {
	if err := r.reconcilePeerService(ctx, s); err != nil {
		return false, err
	}
	if err := r.reconcileEtcdBootstrap(ctx, s); err != nil {
		return false, err
	}
	pdb, wantPDB := &policyv1.PodDisruptionBudget{}, controlplane.PodDisruptionBudgetFor(s.vc)
	pdb.ObjectMeta = metav1.ObjectMeta{Name: wantPDB.Name, Namespace: wantPDB.Namespace}
	if err := r.ensure(ctx, s, pdb, func() { pdb.Labels, pdb.Spec = wantPDB.Labels, wantPDB.Spec }); err != nil {
		return false, err
	}
	opts, err := r.withHostStorageClasses(ctx, s.vc)
	if err != nil {
		return false, err
	}
	opts.Versions = s.upgrade.versions
	if gvs := controlplane.RuntimeConfigNotServed(s.vc, opts.Versions.APIServer); len(gvs) > 0 {
		r.Recorder.Eventf(s.vc, nil, corev1.EventTypeWarning, ReasonRuntimeConfigNotServed, "Reconcile",
			"spec.controlPlane.runtimeConfig: Kubernetes %s serves nothing of %s, so its API server runs without them: remove them from spec.controlPlane.runtimeConfig",
			opts.Versions.APIServer, strings.Join(gvs, ", "))
	}
	desired := controlplane.StatefulSetFor(s.vc, opts, s.ips)
	desired.Spec.Template.Annotations = map[string]string{annotationPKIHash: pkiRestartHash(s.pki)}
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: desired.Name, Namespace: desired.Namespace}}
	if replaced, err := r.replaceImmutablyDifferent(ctx, sts, desired); replaced || err != nil {
		return false, err
	}
	if _, err := controllerutil.CreateOrPatch(ctx, r.Client, sts, func() error {
		if sts.CreationTimestamp.IsZero() {
			sts.Spec = desired.Spec
			olderPods, err := r.podsOfAnOlderTemplate(ctx, s)
			if err != nil {
				return err
			}
			if olderPods {
				// It adopts pods an older Nest made: they roll first,
				// then the control plane grows.
				sts.Spec.Replicas = ptr.To[int32](1)
			}
		}
		sts.Labels = desired.Labels
		// Replicas of an existing StatefulSet change below, up only and
		// once it rolled out: never fewer, as a member removed that way
		// would cost the tenant its quorum (the API refuses lowering).
		if !equality.Semantic.DeepDerivative(desired.Spec.Template, sts.Spec.Template) {
			sts.Spec.Template = desired.Spec.Template
		}
		return controllerutil.SetControllerReference(s.vc, sts, r.Scheme)
	}); err != nil {
		return false, fmt.Errorf("reconcile StatefulSet %s: %w", klog.KObj(sts), err)
	}
	if growing(sts, *desired.Spec.Replicas) && rolledOut(sts) {
		patch := client.MergeFrom(sts.DeepCopy())
		sts.Spec.Replicas = desired.Spec.Replicas
		if err := r.Patch(ctx, sts, patch); err != nil {
			return false, fmt.Errorf("grow StatefulSet %s to %d replicas: %w", klog.KObj(sts), *desired.Spec.Replicas, err)
		}
		klog.FromContext(ctx).Info("Growing the control plane", "statefulSet", klog.KObj(sts), "replicas", *desired.Spec.Replicas)
	}
	s.obs.hostObjects = true
	s.obs.endpoint = controlplane.ExternalServer(s.vc, s.service, s.nodeIPs)
	s.obs.readyReplicas = sts.Status.ReadyReplicas
	s.obs.pkiRolledOut = rolledOut(sts) && sts.Spec.Template.Annotations[annotationPKIHash] == desired.Spec.Template.Annotations[annotationPKIHash]
	s.obs.podReady = sts.Status.ReadyReplicas >= 1
	if !s.obs.podReady {
		s.obs.availableMessage = fmt.Sprintf("StatefulSet %s has no ready replica yet", klog.KObj(sts))
	}
	return s.obs.endpoint != "", nil
}

// growing reports whether sts exists with fewer replicas than want. More
// replicas wait until every current one runs the current template: a new
// replica's etcd member joins through its peers' members, which a replica
// of an older template (its member on loopback only) cannot answer. So
// 1 -> 3 first rolls the one replica to the new template, then adds the
// others (rolledOut).
func growing(sts *appsv1.StatefulSet, want int32) bool {
	return !sts.CreationTimestamp.IsZero() && ptr.Deref(sts.Spec.Replicas, 1) < want
}

// rolledOut reports whether every replica of sts runs its latest template
// and is ready, as its controller last saw it.
func rolledOut(sts *appsv1.StatefulSet) bool {
	current, st := ptr.Deref(sts.Spec.Replicas, 1), sts.Status
	return st.ObservedGeneration >= sts.Generation && st.UpdateRevision == st.CurrentRevision &&
		st.UpdatedReplicas == current && st.ReadyReplicas == current
}

// reconcilePeerService creates or updates the headless Service that governs
// the StatefulSet; its clusterIP None is set once, at creation.
func (r *Reconciler) reconcilePeerService(ctx context.Context, s *reconcileState) error {
	want := controlplane.PeerServiceFor(s.vc)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: want.Name, Namespace: want.Namespace}}
	return r.ensure(ctx, s, svc, func() {
		if svc.CreationTimestamp.IsZero() {
			svc.Spec.ClusterIP = want.Spec.ClusterIP
		}
		svc.Labels, svc.Spec.Type, svc.Spec.Selector = want.Labels, want.Spec.Type, want.Spec.Selector
		svc.Spec.PublishNotReadyAddresses, svc.Spec.Ports = want.Spec.PublishNotReadyAddresses, want.Spec.Ports
	})
}

// replaceImmutablyDifferent deletes sts, leaving its pods and claims, when
// it differs from desired in what cannot change (the governing Service, the
// pod management policy: an older Nest's StatefulSet): the next reconcile
// makes it again, and it adopts the pods and rolls them to the new
// template. It reports whether it deleted, or whether sts is still being
// deleted.
func (r *Reconciler) replaceImmutablyDifferent(ctx context.Context, sts, desired *appsv1.StatefulSet) (bool, error) {
	if err := r.Get(ctx, client.ObjectKeyFromObject(sts), sts); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	if !sts.DeletionTimestamp.IsZero() {
		return true, nil
	}
	if sts.Spec.ServiceName == desired.Spec.ServiceName && sts.Spec.PodManagementPolicy == desired.Spec.PodManagementPolicy {
		return false, nil
	}
	klog.FromContext(ctx).Info("Replacing the control-plane StatefulSet, whose governing Service or pod management cannot change; its pods stay",
		"statefulSet", klog.KObj(sts), "serviceName", sts.Spec.ServiceName, "podManagementPolicy", sts.Spec.PodManagementPolicy)
	uid := sts.UID
	err := r.Delete(ctx, sts, client.PropagationPolicy(metav1.DeletePropagationOrphan), client.Preconditions{UID: &uid})
	return true, client.IgnoreNotFound(err)
}

// podsOfAnOlderTemplate reports whether a control-plane pod of the
// VirtualCluster runs without the etcd-member helper: an older Nest's,
// whose etcd member listens on loopback only and cannot take peers until
// it has rolled.
func (r *Reconciler) podsOfAnOlderTemplate(ctx context.Context, s *reconcileState) (bool, error) {
	pods, err := controlPlanePods(ctx, r.APIReader, s.vc)
	if err != nil {
		return false, err
	}
	for _, p := range pods {
		if !slices.ContainsFunc(p.Spec.InitContainers, func(c corev1.Container) bool { return c.Name == controlplane.EtcdMemberContainer }) {
			return true, nil
		}
	}
	return false, nil
}

// controlPlanePods lists vc's control-plane pods through reader, which
// reads the API server: the manager caches no pods.
func controlPlanePods(ctx context.Context, reader client.Reader, vc *nestv1.VirtualCluster) ([]corev1.Pod, error) {
	n := controlplane.NamesOf(vc)
	var pods corev1.PodList
	if err := reader.List(ctx, &pods, client.InNamespace(n.Namespace), client.MatchingLabels(n.Labels())); err != nil {
		return nil, fmt.Errorf("list control-plane pods of %s: %w", klog.KObj(vc), err)
	}
	return pods.Items, nil
}

// reconcileEtcdBootstrap writes the ConfigMap that names the member that
// may start a new etcd cluster (controlplane.EtcdBootstrapConfigMapFor).
func (r *Reconciler) reconcileEtcdBootstrap(ctx context.Context, s *reconcileState) error {
	n := controlplane.NamesOf(s.vc)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: n.EtcdBootstrapConfigMap(), Namespace: n.Namespace}}
	var current *corev1.ConfigMap
	if err := r.Get(ctx, client.ObjectKeyFromObject(cm), cm); err == nil {
		current = cm.DeepCopy()
	} else if !apierrors.IsNotFound(err) {
		return fmt.Errorf("read ConfigMap %s: %w", klog.KObj(cm), err)
	}
	sts := &appsv1.StatefulSet{}
	readyReplicas := int32(0)
	if err := r.Get(ctx, client.ObjectKey{Namespace: n.Namespace, Name: n.StatefulSet()}, sts); err == nil {
		readyReplicas = sts.Status.ReadyReplicas
	}
	want := controlplane.EtcdBootstrapConfigMapFor(s.vc, mayBootstrap(s.vc, current, readyReplicas))
	return r.ensure(ctx, s, cm, func() { cm.Labels, cm.Data = want.Labels, want.Data })
}

// mayBootstrap says whether the first replica may start a new etcd cluster:
// always with one replica (there are no peers to split from); with more,
// only until one replica was ready (the cluster exists from then on), and
// never again once withdrawn. current is the ConfigMap as it is (nil when
// missing: then a tenant that was ever Ready may not).
func mayBootstrap(vc *nestv1.VirtualCluster, current *corev1.ConfigMap, readyReplicas int32) bool {
	if controlplane.Replicas(vc) == 1 {
		return true
	}
	if readyReplicas > 0 {
		return false
	}
	if current != nil {
		return current.Data[controlplane.EtcdBootstrapKey] != ""
	}
	return vc.Status.ReadyReplicas == 0 && meta.FindStatusCondition(vc.Status.Conditions, nestv1.ConditionReady) == nil
}

// reconcileKubeconfig writes the tenant admin kubeconfig Secret and, base64
// encoded, spec.kubeconfig as kubenest does.
func (r *Reconciler) reconcileKubeconfig(ctx context.Context, s *reconcileState) (bool, error) {
	n := controlplane.NamesOf(s.vc)
	data, err := r.reconcileSecret(ctx, s, n.KubeconfigSecret(), func(existing map[string][]byte) (map[string][]byte, bool, error) {
		return controlplane.ReconcileAdminKubeconfig(existing, s.pki, n, s.obs.endpoint, s.renewal)
	})
	if err != nil {
		return false, err
	}
	s.secrets[n.KubeconfigSecret()] = data
	recordCertificateExpiry(s.vc, s.secrets)
	encoded := base64.StdEncoding.EncodeToString(data[controlplane.KubeconfigKey])
	if s.vc.Spec.Kubeconfig != encoded {
		patch := client.MergeFrom(s.vc.DeepCopy())
		s.vc.Spec.Kubeconfig = encoded
		// The patch reads the object back, status and all: what the
		// phases put in s.vc.Status is kept for the status patch.
		status := s.vc.Status.DeepCopy()
		if err := r.Patch(ctx, s.vc, patch); err != nil {
			return false, fmt.Errorf("write spec.kubeconfig of %s: %w", klog.KObj(s.vc), err)
		}
		s.vc.Status = *status
		s.patchedSpec()
	}
	s.internal = data[controlplane.KubeconfigInternalKey]
	s.obs.kubeconfig = true
	return true, nil
}

// reconcileAvailability reads whether the tenant API server answered
// /readyz when the health prober last asked.
func (r *Reconciler) reconcileAvailability(ctx context.Context, s *reconcileState) (bool, error) {
	if !s.obs.podReady {
		return false, nil
	}
	th, probed := r.Health.Get(client.ObjectKeyFromObject(s.vc))
	if !probed || !th.Available {
		s.obs.availableMessage = th.AvailableMessage
		return false, nil
	}
	s.obs.available = true
	return true, nil
}

// reconcileVirtualNode waits for nest-syncer to register a Ready virtual
// node, as the health prober last saw it.
func (r *Reconciler) reconcileVirtualNode(ctx context.Context, s *reconcileState) (bool, error) {
	th, _ := r.Health.Get(client.ObjectKeyFromObject(s.vc))
	if !th.NodesReady {
		s.obs.nodesMessage = th.NodesMessage
		return false, nil
	}
	s.obs.nodesReady = true
	return true, nil
}

// annotationPKIHash, on the control-plane pod template, is pkiRestartHash.
const annotationPKIHash = "nest.dev/pki-hash"

// pkiRestartHash is a short, stable digest of the PKI Secret's data for the
// control-plane pod's template, which restarts the pod when a certificate
// it reads only at start changes. It leaves out the API server's serving
// certificate and key: the API server rereads them from the mounted Secret,
// and they change whenever a host node comes or goes (a NodePort or
// LoadBalancer control plane names the host nodes' IPs), which must not
// restart every tenant's control plane.
func pkiRestartHash(data map[string][]byte) string {
	h := fnv.New64a()
	for _, k := range slices.Sorted(maps.Keys(data)) {
		if k == controlplane.APIServerCert || k == controlplane.APIServerKey {
			continue
		}
		h.Write([]byte(k))
		h.Write([]byte{0})
		h.Write(data[k])
		h.Write([]byte{0})
	}
	return fmt.Sprintf("%016x", h.Sum64())
}

// memberAddresses lists, sorted, the hosts at which the virtual cluster's
// pods in member clusters reach its API server: those of every
// MemberCluster it has a grant on (controlplane.MemberAddressesOf). A grant
// on a MemberCluster that does not exist adds nothing.
func (r *Reconciler) memberAddresses(ctx context.Context, vc *nestv1.VirtualCluster) ([]string, error) {
	var out []string
	for _, g := range vc.Spec.Members {
		mc := &nestv1.MemberCluster{}
		if err := r.Get(ctx, client.ObjectKey{Name: g.Name}, mc); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return nil, fmt.Errorf("get MemberCluster %s of spec.members: %w", g.Name, err)
		}
		out = append(out, controlplane.MemberAddressesOf(mc)...)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// withHostStorageClasses returns the manager's control-plane options with
// the host's StorageClasses, against which the VirtualCluster's storage
// classes are resolved; an entry naming no host class is a Warning event
// on the VirtualCluster and left out.
func (r *Reconciler) withHostStorageClasses(ctx context.Context, vc *nestv1.VirtualCluster) (controlplane.Options, error) {
	opts := r.ControlPlane
	var list storagev1.StorageClassList
	if err := r.APIReader.List(ctx, &list); err != nil {
		return opts, fmt.Errorf("list host StorageClasses: %w", err)
	}
	opts.HostStorageClasses = list.Items
	_, missing := controlplane.StorageClassesFor(vc, list.Items)
	for _, m := range missing {
		r.Recorder.Eventf(vc, nil, corev1.EventTypeWarning, "StorageClassMissing", "Reconcile", "%s", m)
	}
	return opts, nil
}
