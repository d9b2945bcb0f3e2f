package controlplane

import (
	"bytes"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/utils/ptr"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/pki"
	"github.com/nestdev/nest/internal/version"
)

var names = Names{VirtualCluster: "alpha", Namespace: "tenant-a"}

func endpoints() Endpoints {
	return Endpoints{ServiceIP: "10.96.5.5", NodeIPs: []string{"198.51.100.10"}, HostClusterDomain: "cluster.local",
		TenantClusterDomain: "cluster.local", TenantServiceCIDR: "10.96.0.0/16"}
}

func TestReconcilePKIIsStable(t *testing.T) {
	first, changed, err := ReconcilePKI(nil, names, endpoints(), Renewal{})
	if err != nil || !changed {
		t.Fatalf("first issue: changed=%v err=%v", changed, err)
	}
	second, changed, err := ReconcilePKI(first, names, endpoints(), Renewal{})
	if err != nil || changed {
		t.Fatalf("second reconcile changed=%v err=%v; want no change", changed, err)
	}
	for k := range first {
		if !bytes.Equal(first[k], second[k]) {
			t.Errorf("%s changed on a no-op reconcile", k)
		}
	}
}

func TestReconcilePKIReissuesServingCertForNewEndpoint(t *testing.T) {
	first, _, _ := ReconcilePKI(nil, names, endpoints(), Renewal{})
	e := endpoints()
	e.ExternalIPs = []string{"203.0.113.7"}
	second, changed, err := ReconcilePKI(first, names, e, Renewal{})
	if err != nil || !changed {
		t.Fatalf("changed=%v err=%v", changed, err)
	}
	if !bytes.Equal(first[CACert], second[CACert]) || !bytes.Equal(first[ServiceAccountKey], second[ServiceAccountKey]) {
		t.Error("the CA or service-account key changed: tenants would lose their credentials and tokens")
	}
	if bytes.Equal(first[APIServerCert], second[APIServerCert]) {
		t.Fatal("the serving certificate was not reissued")
	}
	cert, _ := pki.ParseCertificate(second[APIServerCert])
	for _, host := range []string{"203.0.113.7", "198.51.100.10", "10.96.5.5", "10.96.0.1", "alpha.tenant-a.svc", "kubernetes.default.svc.cluster.local"} {
		if err := cert.VerifyHostname(host); err != nil {
			t.Errorf("serving certificate does not name %s: %v", host, err)
		}
	}
	if !bytes.Equal(first[EtcdServerCert], second[EtcdServerCert]) {
		t.Error("an unrelated certificate was reissued")
	}
}

func TestReconcilePKIReplacesLeavesOfAnotherCA(t *testing.T) {
	first, _, _ := ReconcilePKI(nil, names, endpoints(), Renewal{})
	delete(first, CACert)
	delete(first, CAKey)
	second, _, err := ReconcilePKI(first, names, endpoints(), Renewal{})
	if err != nil {
		t.Fatal(err)
	}
	if !SignedBy(second[APIServerCert], second[CACert]) || !SignedBy(second[SyncerServingCert], second[CACert]) {
		t.Error("leaves were kept although the CA was replaced")
	}
}

func TestKubeconfigsFollowEndpointAndCA(t *testing.T) {
	pkiData, _, _ := ReconcilePKI(nil, names, endpoints(), Renewal{})
	admin, changed, err := ReconcileAdminKubeconfig(nil, pkiData, names, "https://198.51.100.10:30001", Renewal{})
	if err != nil || !changed {
		t.Fatal(changed, err)
	}
	if _, changed, _ := ReconcileAdminKubeconfig(admin, pkiData, names, "https://198.51.100.10:30001", Renewal{}); changed {
		t.Error("unchanged endpoint reissued the kubeconfig")
	}
	moved, changed, _ := ReconcileAdminKubeconfig(admin, pkiData, names, "https://198.51.100.11:30001", Renewal{})
	if !changed || !strings.Contains(string(moved[KubeconfigKey]), "198.51.100.11") {
		t.Error("a new endpoint did not update the kubeconfig")
	}
	if !strings.Contains(string(moved[KubeconfigInternalKey]), names.InternalServer()) {
		t.Error("the internal kubeconfig does not use the Service name")
	}
	comp, _, err := ReconcileComponentKubeconfigs(nil, pkiData, names, Renewal{})
	if err != nil || len(comp[ControllerManagerKubeconfig]) == 0 || len(comp[SchedulerKubeconfig]) == 0 {
		t.Fatalf("component kubeconfigs: %v", err)
	}
}

func vc(mut func(*nestv1.VirtualCluster)) *nestv1.VirtualCluster {
	v := &nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: "alpha", Namespace: "tenant-a"}}
	if mut != nil {
		mut(v)
	}
	return v
}

func TestExternalServer(t *testing.T) {
	nodePort := &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Ports: []corev1.ServicePort{{NodePort: 31000}}}}
	lbNone := &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer}}
	lb := lbNone.DeepCopy()
	lb.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "203.0.113.9"}}
	clusterIP := &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP}}
	tests := []struct {
		name string
		vc   *nestv1.VirtualCluster
		svc  *corev1.Service
		ips  []string
		want string
	}{
		{"node port on first node", vc(nil), nodePort, []string{"198.51.100.10", "198.51.100.11"}, "https://198.51.100.10:31000"},
		{"node port on external IP", vc(func(v *nestv1.VirtualCluster) { v.Spec.ExternalIPs = []string{"2001:db8::1"} }), nodePort, nil, "https://[2001:db8::1]:31000"},
		{"node port without nodes", vc(nil), nodePort, nil, ""},
		{"load balancer pending", vc(nil), lbNone, nil, ""},
		{"load balancer", vc(nil), lb, nil, "https://203.0.113.9:6443"},
		{"cluster IP", vc(nil), clusterIP, nil, "https://alpha.tenant-a.svc:6443"},
	}
	for _, tt := range tests {
		if got := ExternalServer(tt.vc, tt.svc, tt.ips); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestStatefulSetFor(t *testing.T) {
	sts := StatefulSetFor(vc(func(v *nestv1.VirtualCluster) {
		v.Spec.ServiceCIDR = "10.100.0.0/16"
		v.Spec.ClusterDomain = "tenant.local"
	}),
		Options{KubeImageRepository: "kube", SyncerImage: "img", CoreDNSImage: "img", ImagePullPolicy: corev1.PullNever},
		ServiceIPs{APIServer: "10.96.0.5", DNS: "10.96.0.6"})
	pod := sts.Spec.Template.Spec
	if len(pod.InitContainers) != 3 || len(pod.Containers) != 4 {
		t.Fatalf("init containers %d, containers %d; want the etcd-member helper, etcd and kube-apiserver as sidecars, then four", len(pod.InitContainers), len(pod.Containers))
	}
	if *sts.Spec.Replicas != 1 || sts.Spec.ServiceName != "alpha-peers" || sts.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		t.Errorf("replicas %d, service %s, policy %s; want 1 governed by alpha-peers, Parallel", *sts.Spec.Replicas, sts.Spec.ServiceName, sts.Spec.PodManagementPolicy)
	}
	for _, c := range pod.Containers {
		if slices.Contains(c.Args, "--leader-elect=true") || slices.Contains(c.Args, "--leader-elect") {
			t.Errorf("%s elects a leader with one replica: a restart would wait for its old lease", c.Name)
		}
	}
	syncer := pod.Containers[2]
	if syncer.Name != "nest-syncer" || syncer.StartupProbe != nil || syncer.ReadinessProbe != nil {
		t.Errorf("%s: the syncer must not gate the pod's readiness, which gates the tenant API", syncer.Name)
	}
	syncerArgs := strings.Join(syncer.Args, " ")
	// Host pods reach the API server through the in-cluster Service, on the port the tenant sees.
	for _, want := range []string{"--api-server-host=10.96.0.6", "--api-server-port=443", "--dns-server=10.96.0.6", "--cluster-domain=tenant.local", "--capacity=cpu=2,memory=4Gi,pods=110", "--pod-security-level=baseline", "--kubernetes-version=" + version.Newest()} {
		if !strings.Contains(syncerArgs, want) {
			t.Errorf("nest-syncer lacks %s in %s", want, syncerArgs)
		}
	}
	for _, c := range append(pod.InitContainers, pod.Containers...) {
		for _, m := range c.VolumeMounts {
			if m.Name == "host-token" && c.Name != "nest-syncer" {
				t.Errorf("container %s mounts the syncer's host token", c.Name)
			}
		}
	}
	for _, c := range pod.InitContainers {
		if c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways || c.StartupProbe == nil {
			t.Errorf("%s is not a sidecar with a startup probe", c.Name)
		}
	}
	api := pod.InitContainers[2]
	args := strings.Join(api.Args, " ")
	for _, want := range []string{"--service-cluster-ip-range=10.100.0.0/16", "--etcd-servers=https://127.0.0.1:2379", "--service-account-issuer=https://kubernetes.default.svc.tenant.local", "--authorization-mode=Node,RBAC"} {
		if !strings.Contains(args, want) {
			t.Errorf("kube-apiserver lacks %s", want)
		}
	}
	// The Kubernetes components run the tenant's version's image.
	kubeImage := "kube:" + version.Newest()
	for _, c := range append(pod.InitContainers, pod.Containers...) {
		want := "img"
		if c.Name != "nest-syncer" && c.Name != "coredns" && c.Name != "etcd-member" {
			want = kubeImage
		}
		if c.Image != want || c.ImagePullPolicy != corev1.PullNever || c.Resources.Requests.Cpu().IsZero() || c.LivenessProbe == nil {
			t.Errorf("container %s: image %s (want %s) policy %s requests %v probe %v", c.Name, c.Image, want, c.ImagePullPolicy, c.Resources.Requests, c.LivenessProbe)
		}
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Error("the control plane must not get a host service-account token")
	}
	if sc := pod.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.FSGroup == nil {
		t.Errorf("pod security context %+v: want non-root with an fsGroup", sc)
	}
	for _, c := range append(pod.InitContainers, pod.Containers...) {
		sc := c.SecurityContext
		if sc == nil || *sc.AllowPrivilegeEscalation || !*sc.ReadOnlyRootFilesystem || len(sc.Capabilities.Drop) == 0 {
			t.Errorf("container %s security context %+v", c.Name, sc)
		}
	}
	if sts.Spec.Selector.MatchLabels[LabelVirtualCluster] != "alpha" {
		t.Errorf("selector %v", sts.Spec.Selector)
	}
}

// Three replicas: the same pod in each, whose controllers elect a leader,
// whose etcd-member helper knows every member, spread over host nodes.
func TestStatefulSetForThreeReplicas(t *testing.T) {
	sts := StatefulSetFor(vc(func(v *nestv1.VirtualCluster) { v.Spec.ControlPlane.Replicas = ptr.To[int32](3) }), Options{}, ServiceIPs{})
	if *sts.Spec.Replicas != 3 {
		t.Errorf("replicas %d, want 3", *sts.Spec.Replicas)
	}
	pod := sts.Spec.Template.Spec
	args := map[string]string{}
	for _, c := range append(pod.InitContainers, pod.Containers...) {
		args[c.Name] = strings.Join(c.Args, " ")
	}
	for name, want := range map[string]string{
		"kube-controller-manager": "--leader-elect=true",
		"kube-scheduler":          "--leader-elect=true",
		"nest-syncer":             "--leader-elect --identity=$(POD_NAME)",
		"etcd-member": "--member-client-urls=https://alpha-0.alpha-peers.tenant-a.svc:2379,https://alpha-1.alpha-peers.tenant-a.svc:2379,https://alpha-2.alpha-peers.tenant-a.svc:2379" +
			" --bootstrap-file=/etc/nest/etcd-bootstrap/member",
		"etcd":           "--initial-advertise-peer-urls=https://$(POD_NAME).alpha-peers.tenant-a.svc:2380",
		"kube-apiserver": "--goaway-chance=0.001 --shutdown-delay-duration=5s",
	} {
		if !strings.Contains(args[name], want) {
			t.Errorf("%s lacks %s in %s", name, want, args[name])
		}
	}
	// nest-syncer, which serves the API server's egress, keeps serving
	// while a deleted replica leaves the endpoints.
	syncerStop := time.Duration(0)
	for _, c := range pod.Containers {
		if c.Name == "nest-syncer" && c.Lifecycle != nil && c.Lifecycle.PreStop != nil && c.Lifecycle.PreStop.Sleep != nil {
			syncerStop = time.Duration(c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
		}
	}
	if syncerStop != shutdownDelay {
		t.Errorf("3 replicas: nest-syncer sleeps %s before it stops, want the API server's shutdown delay %s", syncerStop, shutdownDelay)
	}
	// The grace period holds nest-syncer's sleep, the other containers'
	// stop and the API server's shutdown delay with room to spare, so no
	// kill cuts a request.
	if grace := time.Duration(*pod.TerminationGracePeriodSeconds) * time.Second; grace < syncerStop+shutdownDelay+10*time.Second {
		t.Errorf("3 replicas: termination grace %s, want nest-syncer's sleep and the shutdown delay (%s each) and 10 s more", grace, shutdownDelay)
	}
	single := StatefulSetFor(vc(nil), Options{}, ServiceIPs{}).Spec.Template.Spec
	for _, c := range single.Containers {
		if c.Lifecycle != nil {
			t.Errorf("a single replica's %s waits before it stops: no other replica takes its clients", c.Name)
		}
	}
	found := false
	for _, c := range append(single.InitContainers, single.Containers...) {
		if c.Name != "kube-apiserver" {
			continue
		}
		found = true
		if strings.Contains(strings.Join(c.Args, " "), "--goaway-chance") {
			t.Error("a single API server closes connections (--goaway-chance): its clients have no other replica to go to")
		}
		if strings.Contains(strings.Join(c.Args, " "), "--shutdown-delay-duration") {
			t.Error("a single API server delays its shutdown: no other replica takes its clients, the restart only takes longer")
		}
	}
	if !found {
		t.Error("no kube-apiserver container in a single replica's pod")
	}
	if strings.Contains(args["etcd"], "--initial-cluster=") {
		t.Error("etcd has --initial-cluster on its command line: it must come from the helper's file, or etcd refuses the variable")
	}
	spread := pod.TopologySpreadConstraints
	if len(spread) != 1 || spread[0].TopologyKey != corev1.LabelHostname || spread[0].WhenUnsatisfiable != corev1.DoNotSchedule || spread[0].MaxSkew != 1 ||
		ptr.Deref(spread[0].NodeTaintsPolicy, "") != corev1.NodeInclusionPolicyHonor {
		t.Errorf("topology spread %+v: want at most one more replica on a host node than on another", spread)
	}
	pdb := PodDisruptionBudgetFor(vc(nil))
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 || pdb.Spec.Selector.MatchLabels[LabelVirtualCluster] != "alpha" {
		t.Errorf("PodDisruptionBudget %+v: want one replica at a time, of this control plane", pdb.Spec)
	}
	peers := PeerServiceFor(vc(nil))
	if peers.Spec.ClusterIP != corev1.ClusterIPNone || !peers.Spec.PublishNotReadyAddresses {
		t.Errorf("peer Service %+v: want headless, publishing pods not ready yet (a joining member is not)", peers.Spec)
	}
}

func TestASingleReplicaStaysBehindItsServicesWhenNotReady(t *testing.T) {
	for _, replicas := range []int32{1, 3} {
		v := vc(func(v *nestv1.VirtualCluster) { v.Spec.ControlPlane.Replicas = ptr.To(replicas) })
		want := replicas == 1
		for _, svc := range []*corev1.Service{ServiceFor(v, ""), DNSServiceFor(v)} {
			if svc.Spec.PublishNotReadyAddresses != want {
				t.Errorf("%d replicas: Service %s publishes pods not ready = %v, want %v (only a single replica, which has no other to hand over to)",
					replicas, svc.Name, svc.Spec.PublishNotReadyAddresses, want)
			}
		}
	}
}

func TestNthServiceIP(t *testing.T) {
	if ip, _ := NthServiceIP("10.96.0.0/16", 10); ip.String() != "10.96.0.10" {
		t.Errorf("dns ip = %s", ip)
	}
	if ip, _ := FirstServiceIP("10.100.7.0/24"); ip.String() != "10.100.7.1" {
		t.Errorf("first ip = %s", ip)
	}
	if _, err := FirstServiceIP("nope"); err == nil || !strings.Contains(err.Error(), "spec.serviceCIDR") {
		t.Errorf("bad CIDR error %v", err)
	}
}

// A leaf is due with a third of its life left by default, RenewBefore
// before its expiry when set, when it lives longer than a lowered
// LeafLifetime, and when it was issued before a rotation.
func TestRenewalDue(t *testing.T) {
	ca, _ := pki.NewCA("ca")
	pair, _ := ca.Issue(pki.CertSpec{CommonName: "x", Usage: pki.ClientAuth})
	cert, _ := pki.ParseCertificate(pair.CertPEM)
	life := cert.NotAfter.Sub(cert.NotBefore)
	issued := pki.IssuedAt(cert)
	for _, tc := range []struct {
		name string
		r    Renewal
		want bool
	}{
		{"half its life left", Renewal{Now: cert.NotBefore.Add(life / 2)}, false},
		{"a quarter left", Renewal{Now: cert.NotBefore.Add(life * 3 / 4)}, true},
		{"expired", Renewal{Now: cert.NotAfter.Add(time.Hour)}, true},
		{"renewBefore not reached", Renewal{Now: cert.NotAfter.Add(-48 * time.Hour), RenewBefore: 24 * time.Hour}, false},
		{"renewBefore reached", Renewal{Now: cert.NotAfter.Add(-12 * time.Hour), RenewBefore: 24 * time.Hour}, true},
		{"renewBefore past half the lifetime falls back to a third", Renewal{Now: issued.Add(time.Hour), RenewBefore: pki.LeafValidity * 3 / 4}, false},
		{"a rotation served by a clock ahead counts from now", Renewal{Now: issued, IssuedAfter: issued.Add(time.Hour)}, false},
		{"lives longer than a lowered lifetime", Renewal{Now: issued.Add(time.Minute), LeafLifetime: time.Hour}, true},
		{"issued before a rotation", Renewal{Now: issued.Add(time.Minute), IssuedAfter: issued.Add(time.Second)}, true},
		{"issued after a rotation", Renewal{Now: issued.Add(time.Minute), IssuedAfter: issued.Add(-time.Second)}, false},
	} {
		if got := tc.r.Due(cert, ca.Certificate()); got != tc.want {
			t.Errorf("%s: due = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// A leaf cut to its CA's expiry is not due for its time, however little
// is left: a new one would be cut the same.
func TestRenewalOfALeafCutToItsCA(t *testing.T) {
	ca, _ := pki.NewCA("ca")
	pair, _ := ca.Issue(pki.CertSpec{CommonName: "x", Usage: pki.ClientAuth, Validity: 20 * 365 * 24 * time.Hour})
	cert, _ := pki.ParseCertificate(pair.CertPEM)
	if !cert.NotAfter.Equal(ca.Certificate().NotAfter) {
		t.Fatalf("the leaf ends %s, its CA %s: not cut, the test proves nothing", cert.NotAfter, ca.Certificate().NotAfter)
	}
	if (Renewal{Now: cert.NotAfter.Add(-time.Hour)}).Due(cert, ca.Certificate()) {
		t.Error("a leaf cut to its CA is due an hour before the end: it would be issued anew for ever")
	}
	if !(Renewal{Now: cert.NotAfter.Add(-time.Hour), IssuedAfter: cert.NotAfter.Add(-2 * time.Hour)}).Due(cert, ca.Certificate()) {
		t.Error("a rotation does not reach a leaf cut to its CA")
	}
}

// A rotation reissues every leaf of the PKI once.
func TestReconcilePKIRotatesEveryLeafOnce(t *testing.T) {
	data, _, _ := ReconcilePKI(nil, names, endpoints(), Renewal{})
	r := Renewal{IssuedAfter: time.Now().Add(time.Second), Now: time.Now().Add(2 * time.Second)}
	rotated, changed, err := ReconcilePKI(data, names, endpoints(), r)
	if err != nil || !changed {
		t.Fatalf("changed=%v err=%v; want every leaf issued anew", changed, err)
	}
	for k, v := range data {
		cert, err := pki.ParseCertificate(v)
		if err != nil || cert.IsCA {
			continue
		}
		if bytes.Equal(rotated[k], v) {
			t.Errorf("%s was not issued anew", k)
		}
	}
	for _, k := range []string{CACert, CAKey, ServiceAccountKey} {
		if !bytes.Equal(rotated[k], data[k]) {
			t.Errorf("%s changed: a rotation of leaves keeps the authorities", k)
		}
	}
	r.IssuedAfter = r.IssuedAfter.Add(-2 * time.Second)
	if _, changed, _ := ReconcilePKI(rotated, names, endpoints(), Renewal{IssuedAfter: r.IssuedAfter}); changed {
		t.Error("the same rotation issued the leaves again")
	}
}

func TestReconcilePKIRenewsCertificatesNearExpiry(t *testing.T) {
	data, _, _ := ReconcilePKI(nil, names, endpoints(), Renewal{})
	etcdCA, _ := pki.LoadCA(pki.KeyPair{CertPEM: data[EtcdCACert], KeyPEM: data[EtcdCAKey]})
	// Ninety seconds on, a two-minute certificate has less than a third of
	// its life left.
	short, err := etcdCA.Issue(pki.CertSpec{CommonName: "kube-apiserver-etcd-client", Usage: pki.ClientAuth, Validity: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	later := Renewal{Now: time.Now().Add(90 * time.Second)}
	if cert, _ := pki.ParseCertificate(short.CertPEM); !later.Due(cert, etcdCA.Certificate()) {
		t.Fatal("the short certificate is not due for renewal; the test proves nothing")
	}
	data[EtcdClientCert], data[EtcdClientKey] = short.CertPEM, short.KeyPEM
	renewed, changed, err := ReconcilePKI(data, names, endpoints(), later)
	if err != nil || !changed {
		t.Fatalf("changed=%v err=%v; want the near-expiry certificate renewed", changed, err)
	}
	cert, _ := pki.ParseCertificate(renewed[EtcdClientCert])
	if time.Until(cert.NotAfter) < 300*24*time.Hour {
		t.Errorf("renewed certificate expires at %s", cert.NotAfter)
	}
	if !bytes.Equal(renewed[APIServerCert], data[APIServerCert]) {
		t.Error("a certificate that was not due was renewed too")
	}
}

func TestTenantQuotaFor(t *testing.T) {
	v := vc(func(v *nestv1.VirtualCluster) {
		v.Spec.PromoteResources.Resources = corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("4"), "nvidia.com/gpu": resource.MustParse("2"),
		}
	})
	q := TenantQuotaFor(v)
	// limits are LimitOvercommit (4) times the share.
	want := map[corev1.ResourceName]string{"requests.cpu": "4", "requests.memory": "4Gi", "pods": "110", "requests.nvidia.com/gpu": "2",
		"limits.cpu": "16", "limits.memory": "16Gi"}
	if len(q.Spec.Hard) != len(want) {
		t.Errorf("hard = %v, want %v", q.Spec.Hard, want)
	}
	for name, v := range want {
		if got := q.Spec.Hard[name]; got.String() != v {
			t.Errorf("hard[%s] = %s, want %s", name, got.String(), v)
		}
	}
	sel := q.Spec.ScopeSelector.MatchExpressions
	if len(sel) != 1 || sel[0].ScopeName != corev1.ResourceQuotaScopePriorityClass || sel[0].Values[0] != TenantPriorityClass {
		t.Errorf("scope selector %v: want the tenant priority class only", sel)
	}
}

// The spec's type wins; unset, nest-manager's default; with neither,
// NodePort.
func TestServiceTypeIsTheSpecsElseTheManagersDefault(t *testing.T) {
	lb := vc(func(v *nestv1.VirtualCluster) { v.Spec.ControlPlane.Service.Type = "LoadBalancer" })
	for _, c := range []struct {
		vc   *nestv1.VirtualCluster
		def  corev1.ServiceType
		want corev1.ServiceType
	}{
		{vc(nil), "", corev1.ServiceTypeNodePort},
		{vc(nil), corev1.ServiceTypeLoadBalancer, corev1.ServiceTypeLoadBalancer},
		{lb, corev1.ServiceTypeClusterIP, corev1.ServiceTypeLoadBalancer},
		{lb, "", corev1.ServiceTypeLoadBalancer},
	} {
		if got := ServiceFor(c.vc, c.def).Spec.Type; got != c.want {
			t.Errorf("spec type %q, default %q: Service type %s, want %s", c.vc.Spec.ControlPlane.Service.Type, c.def, got, c.want)
		}
	}
}

// A tenant of another supported version runs that version's kube image,
// and its virtual nodes report that version.
func TestStatefulSetRunsTheTenantsVersion(t *testing.T) {
	newest := version.Supported[len(version.Supported)-1]
	sts := StatefulSetFor(vc(func(v *nestv1.VirtualCluster) { v.Spec.KubernetesVersion = newest }),
		Options{KubeImageRepository: "nest.local/kube", SyncerImage: "syncer", CoreDNSImage: "coredns"}, ServiceIPs{})
	pod := sts.Spec.Template.Spec
	images := map[string]string{}
	for _, c := range append(pod.InitContainers, pod.Containers...) {
		images[c.Name] = c.Image
		if c.Name == syncerName && !slices.Contains(c.Args, "--kubernetes-version="+newest) {
			t.Errorf("nest-syncer args %v lack --kubernetes-version=%s", c.Args, newest)
		}
	}
	for _, name := range []string{etcdName, apiServerName, controllerManagerName, schedulerName} {
		if want := "nest.local/kube:" + newest; images[name] != want {
			t.Errorf("%s runs %s, want %s", name, images[name], want)
		}
	}
}

// spec.controlPlane.runtimeConfig turns group versions on in the API server,
// sorted, those its version serves: no runtime config, no flag; one its
// version serves nothing of (after an upgrade) left out and named.
func TestAPIServerTurnsOnTheRuntimeConfig(t *testing.T) {
	o := Options{KubeImageRepository: "nest.local/kube", SyncerImage: "syncer", CoreDNSImage: "coredns"}
	runtimeConfigArgs := func(v *nestv1.VirtualCluster) []string {
		var out []string
		pod := StatefulSetFor(v, o, ServiceIPs{}).Spec.Template.Spec
		for _, c := range append(pod.InitContainers, pod.Containers...) {
			for _, a := range c.Args {
				if strings.HasPrefix(a, "--runtime-config") {
					out = append(out, c.Name+" "+a)
				}
			}
		}
		return out
	}
	if got := runtimeConfigArgs(vc(nil)); len(got) != 0 {
		t.Errorf("no runtimeConfig: args %v, want none", got)
	}
	at := func(v string) *nestv1.VirtualCluster {
		return vc(func(vc *nestv1.VirtualCluster) {
			vc.Spec.KubernetesVersion = v
			vc.Spec.ControlPlane.RuntimeConfig = map[string]string{"resource.k8s.io/v1beta2": "true", "networking.k8s.io/v1beta1": "true"}
		})
	}
	old, newest := version.Supported[0], version.Newest()
	want := []string{apiServerName + " --runtime-config=networking.k8s.io/v1beta1=true,resource.k8s.io/v1beta2=true"}
	if got := runtimeConfigArgs(at(old)); !slices.Equal(got, want) {
		t.Errorf("%s: args %v, want %v", old, got, want)
	}
	if got := RuntimeConfigNotServed(at(old), old); len(got) != 0 {
		t.Errorf("%s: not served %v, want none", old, got)
	}
	want = []string{apiServerName + " --runtime-config=resource.k8s.io/v1beta2=true"}
	if got := runtimeConfigArgs(at(newest)); !slices.Equal(got, want) {
		t.Errorf("%s: args %v, want %v", newest, got, want)
	}
	if got := RuntimeConfigNotServed(at(newest), newest); !slices.Equal(got, []string{"networking.k8s.io/v1beta1"}) {
		t.Errorf("%s: not served %v, want networking.k8s.io/v1beta1", newest, got)
	}
}

// The bootstrap ConfigMap names the first replica as the member that may
// start a cluster, none when it may not, and, while nest restore makes the
// VirtualCluster, the first replica as the one that restores.
func TestEtcdBootstrapConfigMapNamesTheMemberAndWhetherItRestores(t *testing.T) {
	restoring := vc(func(v *nestv1.VirtualCluster) {
		v.Annotations = map[string]string{nestv1.AnnotationRestoring: "abc"}
	})
	for _, tc := range []struct {
		vc           *nestv1.VirtualCluster
		mayBootstrap bool
		want         string
	}{
		{vc(nil), true, "alpha-0"},
		{vc(nil), false, ""},
		{restoring, true, "restore:alpha-0"},
		{restoring, false, "restore:alpha-0"},
	} {
		if got := EtcdBootstrapConfigMapFor(tc.vc, tc.mayBootstrap).Data[EtcdBootstrapKey]; got != tc.want {
			t.Errorf("restoring %t, may bootstrap %t: %q, want %q", tc.vc.Annotations != nil, tc.mayBootstrap, got, tc.want)
		}
	}
}
