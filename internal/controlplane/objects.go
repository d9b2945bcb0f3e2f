package controlplane

import (
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/components"
	"github.com/nestdev/nest/internal/etcdmember"
	"github.com/nestdev/nest/internal/images"
	"github.com/nestdev/nest/internal/syncer/contract"
	"github.com/nestdev/nest/internal/version"
)

// Options are the operator-wide settings the builders need.
type Options struct {
	// DefaultServiceType is the tenant API server Service's type for
	// VirtualClusters that set no spec.controlPlane.service.type; empty
	// means NodePort.
	DefaultServiceType corev1.ServiceType
	// KubeImageRepository holds the Kubernetes multi-call images (etcd
	// and every control-plane binary), one per supported version: a
	// component of version v runs images.KubeImage(KubeImageRepository, v).
	KubeImageRepository string
	// Versions are the versions of the VirtualCluster's components, which
	// its upgrade moves step by step (UpgradePlan); zero runs every one at
	// spec.kubernetesVersion.
	Versions ComponentVersions
	// SyncerImage runs nest-syncer; CoreDNSImage the tenant's CoreDNS.
	SyncerImage, CoreDNSImage string
	// ImagePullPolicy of the control-plane containers.
	ImagePullPolicy corev1.PullPolicy
	// HostNetwork holds the host cluster's address ranges, which tenant
	// pods may not reach.
	HostNetwork HostNetwork
	// ManagerNamespace is nest-manager's namespace; its pods may reach
	// tenant API servers.
	ManagerNamespace string
	// HostMetadata is the allow-list of tenant label and annotation keys
	// copied to host pods when a VirtualCluster names none
	// (spec.virtualNode.hostMetadata unset).
	HostMetadata contract.MetadataAllowList
	// NodeNetwork says the node network agent runs on the host nodes:
	// hostNetwork tenant pods then get the virtual node's address and host
	// ports (contract.Translation.NodeNetwork).
	NodeNetwork bool
	// HostStorageClasses are the host's StorageClasses, as the manager last
	// listed them: the VirtualCluster's storage classes are resolved
	// against them (StorageClassesFor).
	HostStorageClasses []storagev1.StorageClass
	// ImageRegistryDenylist are registries no tenant image may come from,
	// besides the host's own ranges (contract.ImagePolicy.Denied entries).
	ImageRegistryDenylist []string
	// AlwaysPullImages makes host pods pull every tenant image, for host
	// kubelets that do not check pull credentials of cached images
	// (contract.Translation.AlwaysPullImages).
	AlwaysPullImages bool
	// NetworkFence is HOST:PORT, the host API server's Service, which the
	// isolation policies refuse tenant pods; "" runs no fence
	// (contract.Translation.NetworkFence).
	NetworkFence string
}

// controlPlaneNodeLabel marks host nodes meant for control planes; tenant
// control planes prefer them, as in kubenest, so promoted worker nodes never
// carry one.
const controlPlaneNodeLabel = "node-role.kubernetes.io/control-plane"

const etcdDataDir = "/var/lib/etcd"

// controlPlaneUID is the user and group the control-plane containers run as.
const controlPlaneUID int64 = 65532

// ServiceFor returns the Service in front of the tenant API server: of
// spec.controlPlane.service.type, or defaultType when that is unset
// (Options.DefaultServiceType), or NodePort when both are.
func ServiceFor(vc *nestv1.VirtualCluster, defaultType corev1.ServiceType) *corev1.Service {
	n := NamesOf(vc)
	typ := corev1.ServiceType(vc.Spec.ControlPlane.Service.Type)
	if typ == "" {
		typ = defaultType
	}
	if typ == "" {
		typ = corev1.ServiceTypeNodePort
	}
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: n.Service(), Namespace: n.Namespace, Labels: n.Labels()},
		Spec: corev1.ServiceSpec{
			Type:                     typ,
			Selector:                 n.Labels(),
			PublishNotReadyAddresses: publishNotReady(vc),
			Ports: []corev1.ServicePort{{
				Name: "https", Port: Port, TargetPort: intstr.FromInt32(Port), Protocol: corev1.ProtocolTCP,
			}},
		},
	}
}

// publishNotReady says whether the control plane's Services keep a pod
// that is not ready among their endpoints: with a single replica. Its
// readiness then only decides between a slow answer and "connection
// refused" (the Service has no other endpoint), and an API server
// starved of CPU misses its readiness probe before it stops answering, so
// it stays reachable, slower. With several replicas a pod that is not
// ready leaves them, for the others to answer.
func publishNotReady(vc *nestv1.VirtualCluster) bool { return Replicas(vc) == 1 }

// MaxReplicas is the most control-plane replicas a VirtualCluster has
// (spec.controlPlane.replicas is 1 or 3).
const MaxReplicas = 3

// Replicas is spec.controlPlane.replicas, 1 when unset.
func Replicas(vc *nestv1.VirtualCluster) int32 {
	return ptr.Deref(vc.Spec.ControlPlane.Replicas, 1)
}

// leaderElect says whether the control plane's controllers elect a leader:
// with more than one replica. A single replica does not, so a restart never
// waits for its previous lease to lapse.
func leaderElect(vc *nestv1.VirtualCluster) bool { return Replicas(vc) > 1 }

// StatefulSetFor returns the StatefulSet that runs the tenant control plane:
// Replicas pods, each with an etcd member (data on a PersistentVolumeClaim)
// and its etcd-member helper, kube-apiserver, nest-syncer,
// kube-controller-manager, kube-scheduler and CoreDNS. ips are the host
// ClusterIPs of the API server's and CoreDNS' Services.
//
// Pods start together (the StatefulSet's Parallel policy), so a control
// plane whose pods all went (a host restarted) comes back with a quorum:
// each member restarts from its data. A new cluster is started by the
// member EtcdBootstrapConfigMapFor names, and the others join it as
// learners, one at a time (etcd admits one learner at a time; their
// helpers retry). The pods spread over the host nodes they may run on,
// never two on one node while such a node has none.
func StatefulSetFor(vc *nestv1.VirtualCluster, o Options, ips ServiceIPs) *appsv1.StatefulSet {
	n := NamesOf(vc)
	o.Versions = versionsOf(vc, o)
	pod := corev1.PodSpec{
		// The etcd-member helper, etcd and kube-apiserver are sidecars: the
		// kubelet starts them in order, each once the one before passed its
		// startup probe (the helper's: the initial cluster is written), and
		// starts the rest only once the API server's startup probe (/readyz)
		// passes, so nothing crash-loops on an API server that is not up yet.
		InitContainers: []corev1.Container{sidecar(etcdMemberContainer(vc, o)), sidecar(etcdContainer(n, o)), sidecar(apiServerContainer(vc, o))},
		Containers:     []corev1.Container{controllerManagerContainer(vc, o), schedulerContainer(vc, o), syncerContainer(vc, o, ips), coreDNSContainer(o)},
		Volumes: append([]corev1.Volume{
			secretVolume("pki", n.PKISecret()),
			secretVolume("kubeconfig", n.ComponentKubeconfigSecret()),
			{Name: etcdMemberVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: ptr.To(resource.MustParse("1Mi"))}}},
			{Name: etcdBootstrapVolume, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: n.EtcdBootstrapConfigMap()}, Optional: ptr.To(true),
			}}},
			apiServerConfigVolumeFor(n),
			egressVolumeFor(),
		}, virtualNodeVolumes(n)...),
		TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{
			MaxSkew: 1, TopologyKey: corev1.LabelHostname, WhenUnsatisfiable: corev1.DoNotSchedule,
			LabelSelector: &metav1.LabelSelector{MatchLabels: n.Labels()},
			// A node the pods may not run on (tainted, cordoned) is no
			// domain: it would count as one holding none.
			NodeTaintsPolicy: ptr.To(corev1.NodeInclusionPolicyHonor),
		}},
		ServiceAccountName: n.SyncerServiceAccount(),
		Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{
				Weight:     100,
				Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: controlPlaneNodeLabel, Operator: corev1.NodeSelectorOpExists}}},
			}},
		}},
		Tolerations:                  []corev1.Toleration{{Key: controlPlaneNodeLabel, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
		AutomountServiceAccountToken: ptr.To(false),
		// The control plane needs no privilege: it runs as a fixed non-root
		// user that owns its secrets and etcd volume through fsGroup.
		SecurityContext: &corev1.PodSecurityContext{
			RunAsNonRoot:   ptr.To(true),
			RunAsUser:      ptr.To(controlPlaneUID),
			RunAsGroup:     ptr.To(controlPlaneUID),
			FSGroup:        ptr.To(controlPlaneUID),
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
		EnableServiceLinks: ptr.To(false),
		// kube-apiserver drains watches for a long time on SIGTERM.
		TerminationGracePeriodSeconds: ptr.To(terminationGracePeriod(vc)),
	}
	claim := corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: EtcdVolumeClaimTemplate, Labels: n.Labels()},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: vc.Spec.Datastore.StorageClassName,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: StorageSize(vc)}},
		},
	}
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: n.StatefulSet(), Namespace: n.Namespace, Labels: n.Labels()},
		Spec: appsv1.StatefulSetSpec{
			Replicas:             ptr.To(Replicas(vc)),
			ServiceName:          n.PeerService(),
			PodManagementPolicy:  appsv1.ParallelPodManagement,
			Selector:             &metav1.LabelSelector{MatchLabels: n.Labels()},
			Template:             corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: n.Labels()}, Spec: pod},
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{claim},
			PersistentVolumeClaimRetentionPolicy: &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{
				// Tenant data is deleted only with the VirtualCluster; the
				// finalizer deletes the claim explicitly.
				WhenDeleted: appsv1.RetainPersistentVolumeClaimRetentionPolicyType,
				WhenScaled:  appsv1.RetainPersistentVolumeClaimRetentionPolicyType,
			},
		},
	}
}

// PeerServiceFor returns the headless Service that governs the
// StatefulSet: each control-plane pod's DNS name (Names.MemberHost), which
// its etcd peers dial, resolves while the pod is not ready too, as a
// joining member is not.
func PeerServiceFor(vc *nestv1.VirtualCluster) *corev1.Service {
	n := NamesOf(vc)
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: n.PeerService(), Namespace: n.Namespace, Labels: n.Labels()},
		Spec: corev1.ServiceSpec{
			Type:                     corev1.ServiceTypeClusterIP,
			ClusterIP:                corev1.ClusterIPNone,
			Selector:                 n.Labels(),
			PublishNotReadyAddresses: true,
			Ports: []corev1.ServicePort{
				{Name: "etcd-client", Port: components.EtcdClientPort, TargetPort: intstr.FromInt32(components.EtcdClientPort), Protocol: corev1.ProtocolTCP},
				{Name: "etcd-peer", Port: components.EtcdPeerPort, TargetPort: intstr.FromInt32(components.EtcdPeerPort), Protocol: corev1.ProtocolTCP},
			},
		},
	}
}

// PodDisruptionBudgetFor returns the PodDisruptionBudget of the control
// plane: one pod at a time may be evicted, which keeps a quorum of 3 etcd
// members (2) through a drain and lets a single replica's node drain.
func PodDisruptionBudgetFor(vc *nestv1.VirtualCluster) *policyv1.PodDisruptionBudget {
	n := NamesOf(vc)
	return &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: n.PodDisruptionBudget(), Namespace: n.Namespace, Labels: n.Labels()},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable: ptr.To(intstr.FromInt32(1)),
			Selector:       &metav1.LabelSelector{MatchLabels: n.Labels()},
		},
	}
}

func sidecar(c corev1.Container) corev1.Container {
	c.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)
	return c
}

// StorageSize is the size of each etcd volume of vc:
// spec.datastore.storageSize, 1Gi when unset (the API's default).
func StorageSize(vc *nestv1.VirtualCluster) resource.Quantity {
	if vc.Spec.Datastore.StorageSize != nil {
		return *vc.Spec.Datastore.StorageSize
	}
	return resource.MustParse("1Gi")
}

func secretVolume(name, secret string) corev1.Volume {
	// Group-readable: the files belong to root and to the pod's fsGroup.
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: secret, DefaultMode: ptr.To[int32](0o440)}}}
}

func pkiFile(f string) string { return tenantPKI.Path(f) }

func mounts(withEtcd bool) []corev1.VolumeMount {
	m := []corev1.VolumeMount{{Name: "pki", MountPath: PKIDir, ReadOnly: true}, {Name: "kubeconfig", MountPath: KubeconfigDir, ReadOnly: true}}
	if withEtcd {
		m = append(m, corev1.VolumeMount{Name: EtcdVolumeClaimTemplate, MountPath: etcdDataDir})
	}
	return m
}

// container returns a control-plane container with the resources r and its
// Go runtime tuned for them (goRuntimeEnv).
func container(name string, o Options, r corev1.ResourceRequirements, args []string) corev1.Container {
	return corev1.Container{
		Name: name, Image: o.kubeImageOf(name), ImagePullPolicy: o.ImagePullPolicy,
		Command: []string{"/usr/local/bin/" + name}, Args: args,
		Resources: r,
		Env:       goRuntimeEnv(r),
		SecurityContext: &corev1.SecurityContext{
			AllowPrivilegeEscalation: ptr.To(false),
			ReadOnlyRootFilesystem:   ptr.To(true),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		},
	}
}

// kubeImageOf is the kube image that runs the component name: etcd's and
// the API server's at their own versions, the others at the controllers'.
func (o Options) kubeImageOf(name string) string {
	v := o.Versions.Controllers
	switch name {
	case etcdName:
		v = o.Versions.Etcd
	case apiServerName:
		v = o.Versions.APIServer
	}
	return images.KubeImage(o.KubeImageRepository, v)
}

// tenantEtcd is a control-plane pod's etcd member, named for its pod and
// reached by its peers at the pod's DNS name. Unlike the host's it requires
// TLS client certificates: every container of the control-plane pod shares
// its loopback and mounts the PKI Secret; the etcd CA is the tenant's own,
// and no certificate it signs is ever given to the tenant.
func tenantEtcd(n Names) components.Etcd {
	return components.Etcd{
		Name: "$(POD_NAME)", DataDir: etcdDataDir + "/data", TLS: true, PKI: tenantPKI,
		Member: &components.EtcdMember{
			Host:     "$(POD_NAME)." + n.PeerService() + "." + n.Namespace + ".svc",
			ListenIP: "$(POD_IP)",
			DNSNames: []string{"*." + n.PeerService() + "." + n.Namespace + ".svc"},
		},
		// Tenant only: etcd runs under a memory limit here, and the raft log
		// it keeps in memory grows with the commits between snapshots. 10000
		// is also etcd 3.6's default; stating it keeps it should that move.
		SnapshotCount: 10000,
	}
}

// etcdMemberVolume holds the initial cluster file the etcd-member helper
// writes for etcd, afresh in every pod.
const etcdMemberVolume = "etcd-member"

// etcdBootstrapVolume is EtcdBootstrapConfigMapFor's ConfigMap, where the
// helper reads which member may start a new cluster.
const etcdBootstrapVolume = "etcd-bootstrap"

// EtcdBootstrapKey is the key of the etcd bootstrap ConfigMap that names
// the member that may start a new etcd cluster; empty, none may.
const EtcdBootstrapKey = "member"

// etcdBootstrapDir is where the ConfigMap is mounted in the helper.
const etcdBootstrapDir = "/etc/nest/etcd-bootstrap"

// EtcdBootstrapConfigMapFor returns the ConfigMap that tells the
// etcd-member helpers which member may start a new etcd cluster when it
// has no data and no peer answers: the first replica while the tenant has
// one replica, or has never been Ready; else none, so a member that lost
// its volume always joins its peers and never splits an empty cluster
// from the tenant's. The ConfigMap is read at every try, not at start, so
// withdrawing it restarts nothing.
//
// A VirtualCluster that nest restore made (nestv1.AnnotationRestoring)
// names its first replica with etcdmember.RestoreMarker instead: it starts
// from the snapshot nest restore sends it, and no member starts an empty
// cluster.
func EtcdBootstrapConfigMapFor(vc *nestv1.VirtualCluster, mayBootstrap bool) *corev1.ConfigMap {
	n := NamesOf(vc)
	member := ""
	switch {
	case vc.Annotations[nestv1.AnnotationRestoring] != "":
		member = etcdmember.RestoreMarker + n.ControlPlanePod()
	case mayBootstrap:
		member = n.ControlPlanePod()
	}
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: n.EtcdBootstrapConfigMap(), Namespace: n.Namespace, Labels: n.Labels()},
		Data:       map[string]string{EtcdBootstrapKey: member},
	}
}

// initialClusterFile is that file's path in both containers.
const initialClusterFile = "/run/etcd-member/initial-cluster.env"

// etcdMemberFlags is the etcd-member helper's command line: the same for
// every replica, which finds its own part from its pod's name.
func etcdMemberFlags(vc *nestv1.VirtualCluster) etcdmember.Flags {
	n := NamesOf(vc)
	e := tenantEtcd(n)
	var members []string
	for i := range int(Replicas(vc)) {
		member := e
		member.Member = &components.EtcdMember{Host: n.MemberHost(i)}
		members = append(members, member.MemberClientURL())
	}
	return etcdmember.Flags{
		Name: e.Name, PeerURL: e.MemberPeerURL(), LocalClientURL: e.ClientURL(),
		MemberClientURLs: members, BootstrapFile: path.Join(etcdBootstrapDir, EtcdBootstrapKey),
		DataDir: e.DataDir, InitialClusterFile: initialClusterFile,
		CAFile: pkiFile(EtcdCACert), CertFile: pkiFile(EtcdClientCert), KeyFile: pkiFile(EtcdClientKey),
	}
}

func etcdMemberContainer(vc *nestv1.VirtualCluster, o Options) corev1.Container {
	c := container(etcdMemberName, o, componentResources[etcdMemberName], append([]string{etcdmember.Command}, etcdMemberFlags(vc).Args()...))
	c.Image, c.Command = o.SyncerImage, []string{contract.SyncerBinary}
	c.Env = append(c.Env, podNameEnv())
	c.VolumeMounts = append(mounts(true), corev1.VolumeMount{Name: etcdMemberVolume, MountPath: path.Dir(initialClusterFile)},
		corev1.VolumeMount{Name: etcdBootstrapVolume, MountPath: etcdBootstrapDir, ReadOnly: true})
	c.StartupProbe = loopbackProbe(etcdmember.ReadyPort, etcdmember.StartedPath, 1, 600)
	c.LivenessProbe = loopbackProbe(etcdmember.ReadyPort, etcdmember.StartedPath, 10, 6)
	return c
}

func etcdContainer(n Names, o Options) corev1.Container {
	c := container(etcdName, o, componentResources[etcdName], tenantEtcd(n).Flags().Args())
	c.Env = append(c.Env, podIPEnv(), podNameEnv(),
		corev1.EnvVar{Name: components.InitialClusterFileEnv, Value: initialClusterFile})
	c.VolumeMounts = append(mounts(true), corev1.VolumeMount{Name: etcdMemberVolume, MountPath: path.Dir(initialClusterFile), ReadOnly: true})
	c.LivenessProbe = loopbackProbe(components.EtcdMetricsPort, "/health?serializable=true", 10, 8)
	// Serializable: a joining member is a learner until the etcd-member
	// helper promotes it, and needs only to follow a leader to start; the
	// API server's startup probe then waits for its linearizable reads.
	c.StartupProbe = loopbackProbe(components.EtcdMetricsPort, "/health?serializable=true", 1, 60)
	return c
}

// shutdownDelay is --shutdown-delay-duration of replicated API servers.
const shutdownDelay = 5 * time.Second

// terminationGracePeriod is the control-plane pod's, in seconds. The
// kubelet stops the containers first (nest-syncer, after its preStop
// sleep of shutdownDelay, hands over its leases), then the sidecars in
// reverse order, etcd last: a replicated API server's shutdownDelay comes
// on top of the others' stop, and a kill at the end of the period would
// cut the requests it still serves. A single replica keeps 10 s: a
// restart (an upgrade) waits for it, and it has no delay.
func terminationGracePeriod(vc *nestv1.VirtualCluster) int64 {
	const single = 10
	if Replicas(vc) > 1 {
		return single + 2*int64(shutdownDelay/time.Second) + 5
	}
	return single
}

// runtimeConfig is the --runtime-config of an API server of version v for
// spec.controlPlane.runtimeConfig: "GROUP/VERSION=true,...", sorted, of the
// group versions v serves once on (version.OptionalAPIs); "" for none.
// RuntimeConfigNotServed names the others.
func runtimeConfig(vc *nestv1.VirtualCluster, v string) string {
	var on []string
	for _, gv := range version.OptionalAPIs[v] {
		if vc.Spec.ControlPlane.RuntimeConfig[gv] == "true" {
			on = append(on, gv+"=true")
		}
	}
	return strings.Join(on, ",")
}

// RuntimeConfigNotServed lists, sorted, the group versions of
// spec.controlPlane.runtimeConfig that an API server of version v serves
// nothing of, which its --runtime-config leaves out: those whose last
// resources v removed, after an upgrade the pre-flight's override let go.
func RuntimeConfigNotServed(vc *nestv1.VirtualCluster, v string) []string {
	var out []string
	for gv := range vc.Spec.ControlPlane.RuntimeConfig {
		if !version.ServesOptionalAPI(v, gv) {
			out = append(out, gv)
		}
	}
	slices.Sort(out)
	return out
}

// goawayChance is --goaway-chance of replicated API servers: the share of
// requests whose HTTP/2 connection is closed after its answer.
const goawayChance = "0.001"

func apiServerContainer(vc *nestv1.VirtualCluster, o Options) corev1.Container {
	r := apiServerResources(vc)
	readOnly, mutating := APIServerInflight(r.Limits[corev1.ResourceMemory])
	args := components.APIServer{
		// The pod IP, which the kubelet substitutes from POD_IP.
		AdvertiseAddress: "$(POD_IP)",
		Port:             Port,
		PKI:              tenantPKI,
		Etcd:             tenantEtcd(NamesOf(vc)),
		ServiceCIDR:      serviceCIDR(vc),
		ClusterDomain:    ClusterDomain(vc),
	}.Flags()
	// Tenant only: the container's memory limit bounds the requests the API
	// server may serve at once (APIServerInflight).
	args = append(args,
		components.Flag{Name: "max-requests-inflight", Value: fmt.Sprint(readOnly)},
		components.Flag{Name: "max-mutating-requests-inflight", Value: fmt.Sprint(mutating)},
		// Tenant only: admission webhooks and aggregated API servers run in
		// tenant pods behind tenant Services. The API server dials their
		// endpoints, host pod IPs the control-plane pod reaches, rather than
		// the Service's tenant ClusterIP, which the host need not route.
		components.Flag{Name: "enable-aggregator-routing", Value: "true"},
	)
	// Tenant only: policies the tenant cannot remove, and egress to nodes
	// and pods through nest-syncer's proxy (APIServerConfigMapFor).
	args = append(args, apiServerConfigFlags()...)
	if rc := runtimeConfig(vc, o.Versions.APIServer); rc != "" {
		args = append(args, components.Flag{Name: "runtime-config", Value: rc})
	}
	if Replicas(vc) > 1 {
		// HTTP/2 clients keep one connection, so those that connected while
		// a replica was away would stay on the others for good: a GOAWAY
		// on one request in a thousand (upstream's suggested start for
		// servers behind a load balancer) has them connect again, through
		// the Service, spread over every replica.
		args = append(args, components.Flag{Name: "goaway-chance", Value: goawayChance})
		// A replica that goes (a rolling upgrade, a drain) keeps serving
		// for shutdownDelay after SIGTERM while its /readyz fails, so
		// kube-proxy and the load balancer take it out of the Service
		// before it stops listening, and no client is refused a
		// connection (upstream's advice for API servers behind a load
		// balancer). A single replica has no other to hand clients to.
		args = append(args, components.Flag{Name: "shutdown-delay-duration", Value: shutdownDelay.String()})
	}
	c := container(apiServerName, o, r, args.Args())
	c.Env = append(c.Env, podIPEnv())
	c.VolumeMounts = append(mounts(false), apiServerConfigMount(), egressMount(true))
	c.Ports = []corev1.ContainerPort{{Name: "https", ContainerPort: Port}}
	c.StartupProbe = httpProbe("/readyz", Port, corev1.URISchemeHTTPS, 1, 120)
	c.ReadinessProbe = httpProbe("/readyz", Port, corev1.URISchemeHTTPS, 2, 3)
	c.LivenessProbe = httpProbe("/livez", Port, corev1.URISchemeHTTPS, 10, 8)
	return c
}

// podIPEnv is POD_IP, the pod's IP, for $(POD_IP) in arguments.
func podIPEnv() corev1.EnvVar {
	return corev1.EnvVar{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}}
}

// podNameEnv is POD_NAME, the pod's name, for $(POD_NAME) in arguments.
func podNameEnv() corev1.EnvVar {
	return corev1.EnvVar{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}
}

// clientComponent is the controller-manager or scheduler with the kubeconfig
// kubeconfigFile. Unlike the host's, its HTTPS endpoint listens on the pod IP,
// where the kubelet probes it, and its replicas elect a leader when there
// are several.
func clientComponent(vc *nestv1.VirtualCluster, kubeconfigFile string) components.ClientComponent {
	return components.ClientComponent{Kubeconfig: path.Join(KubeconfigDir, kubeconfigFile), BindAddress: "0.0.0.0", LeaderElect: leaderElect(vc)}
}

func controllerManagerContainer(vc *nestv1.VirtualCluster, o Options) corev1.Container {
	args := components.ControllerManagerFlags(clientComponent(vc, ControllerManagerKubeconfig), tenantPKI, CASignerCert)
	c := container(controllerManagerName, o, componentResources[controllerManagerName], args.Args())
	c.VolumeMounts = mounts(false)
	c.LivenessProbe = httpProbe("/healthz", controllerManagerPort, corev1.URISchemeHTTPS, 10, 8)
	return c
}

func schedulerContainer(vc *nestv1.VirtualCluster, o Options) corev1.Container {
	args := append(components.SchedulerFlags(clientComponent(vc, SchedulerKubeconfig)),
		// Tenant only: the default client limit (50 requests/s) would cap
		// how fast a burst of tenant pods is bound to the virtual node.
		components.Flag{Name: "kube-api-qps", Value: "200"}, components.Flag{Name: "kube-api-burst", Value: "400"},
	)
	c := container(schedulerName, o, componentResources[schedulerName], args.Args())
	c.VolumeMounts = mounts(false)
	c.LivenessProbe = httpProbe("/healthz", schedulerPort, corev1.URISchemeHTTPS, 10, 8)
	return c
}

func httpProbe(p string, port int32, scheme corev1.URIScheme, period, failures int32) *corev1.Probe {
	return &corev1.Probe{
		ProbeHandler:     corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: p, Port: intstr.FromInt32(port), Scheme: scheme}},
		PeriodSeconds:    period,
		FailureThreshold: failures,
		TimeoutSeconds:   5,
	}
}

// probeTimeout bounds one exec probe's HTTP request (nest-probe -timeout);
// the kubelet waits a second longer, so nest-probe's reason reaches the
// probe's event.
const probeTimeout = 5 * time.Second

// loopbackProbe runs nest-probe, from the container's image, against
// http://127.0.0.1:port/path: for servers that listen on loopback only, out
// of reach of the kubelet's HTTP probes and of other pods.
func loopbackProbe(port int, path string, period, failures int32) *corev1.Probe {
	return &corev1.Probe{
		ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{
			images.ProbePath, "-timeout=" + probeTimeout.String(), fmt.Sprintf("http://127.0.0.1:%d%s", port, path),
		}}},
		PeriodSeconds:    period,
		FailureThreshold: failures,
		TimeoutSeconds:   int32(probeTimeout/time.Second) + 1,
	}
}

func serviceCIDR(vc *nestv1.VirtualCluster) string {
	if vc.Spec.ServiceCIDR != "" {
		return vc.Spec.ServiceCIDR
	}
	return "10.96.0.0/16"
}

// EndpointsOf gathers what the serving certificate must name, from the
// VirtualCluster, its Service, its in-cluster Service's IP (ips.DNS) and the
// host nodes' IPs.
func EndpointsOf(vc *nestv1.VirtualCluster, svc *corev1.Service, ips ServiceIPs, nodeIPs []string, hostDomain string) Endpoints {
	e := Endpoints{
		ServiceIP:           svc.Spec.ClusterIP,
		InClusterIP:         ips.DNS,
		ExternalIPs:         vc.Spec.ExternalIPs,
		HostClusterDomain:   hostDomain,
		TenantClusterDomain: vc.Spec.ClusterDomain,
		TenantServiceCIDR:   serviceCIDR(vc),
	}
	if svc.Spec.Type == corev1.ServiceTypeNodePort || svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
		e.NodeIPs = nodeIPs
	}
	for _, ing := range svc.Status.LoadBalancer.Ingress {
		if ing.IP != "" {
			e.LoadBalancerIPs = append(e.LoadBalancerIPs, ing.IP)
		}
	}
	return e
}

// ExternalServer returns the URL tenants use, or "" while it is not known yet
// (a LoadBalancer with no address). NodePort uses the first external IP, else
// the first node IP; ClusterIP uses the in-cluster name.
func ExternalServer(vc *nestv1.VirtualCluster, svc *corev1.Service, nodeIPs []string) string {
	n := NamesOf(vc)
	switch svc.Spec.Type {
	case corev1.ServiceTypeNodePort:
		host := ""
		if len(vc.Spec.ExternalIPs) > 0 {
			host = vc.Spec.ExternalIPs[0]
		} else if len(nodeIPs) > 0 {
			host = nodeIPs[0]
		}
		if host == "" || len(svc.Spec.Ports) == 0 || svc.Spec.Ports[0].NodePort == 0 {
			return ""
		}
		return fmt.Sprintf("https://%s:%d", hostPort(host), svc.Spec.Ports[0].NodePort)
	case corev1.ServiceTypeLoadBalancer:
		for _, ing := range svc.Status.LoadBalancer.Ingress {
			if ing.IP != "" {
				return fmt.Sprintf("https://%s:%d", hostPort(ing.IP), Port)
			}
			if ing.Hostname != "" {
				return fmt.Sprintf("https://%s:%d", ing.Hostname, Port)
			}
		}
		return ""
	default:
		return n.InternalServer()
	}
}

// hostPort brackets IPv6 addresses for use in a URL.
func hostPort(ip string) string {
	for _, c := range ip {
		if c == ':' {
			return "[" + ip + "]"
		}
	}
	return ip
}
