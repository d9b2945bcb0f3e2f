package v1alpha1

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nestdev/nest/internal/version"
)

// MaxNameLength is the longest VirtualCluster name: host object names are
// derived from it. The CRD rule on VirtualCluster says the same number.
const MaxNameLength = 40

// SupportedVersions are the Kubernetes versions a tenant control plane can run:
// the versions of the kube images Nest builds (internal/version.Supported).
var SupportedVersions = version.Supported

// Phase is the coarse lifecycle stage of a VirtualCluster, as kubenest names it.
// Conditions carry the detail.
// +kubebuilder:validation:Enum=Preparing;Initialized;Updating;Completed;Pending;Deleting
type Phase string

const (
	// PhasePreparing: the PKI and host objects are being created.
	PhasePreparing Phase = "Preparing"
	// PhaseInitialized: the host objects exist; the control plane is starting.
	PhaseInitialized Phase = "Initialized"
	// PhaseUpdating: a spec change is being rolled out to a running control plane.
	PhaseUpdating Phase = "Updating"
	// PhaseCompleted: the control plane answers /readyz and the kubeconfig is written.
	PhaseCompleted Phase = "Completed"
	// PhasePending: waiting on something outside Nest, such as a LoadBalancer address.
	PhasePending Phase = "Pending"
	// PhaseDeleting: the finalizer is removing the host objects.
	PhaseDeleting Phase = "Deleting"
)

// AnnotationIgnoreRemovedAPIs, set to "true" on a VirtualCluster, lets its
// upgrade start although a client asked the tenant API server for an API
// the new version no longer serves (the pre-flight check that otherwise
// holds it, naming the API). Those clients fail after the upgrade.
const AnnotationIgnoreRemovedAPIs = "nest.dev/upgrade-ignore-removed-apis"

// AnnotationRestoring, set by nest restore on the VirtualCluster it makes
// from a snapshot, says its first etcd member starts from that snapshot,
// which nest restore sends it, and never as a new, empty cluster; its value
// is the snapshot's etcd SHA-256. nest restore removes it once the
// VirtualCluster is Ready.
const AnnotationRestoring = "nest.dev/restoring"

// AnnotationRequestedAddress, set by nest restore on the VirtualCluster it
// brings back under its own name, asks that the Service in front of its
// API server, when it is made, get the address the tenant had when the
// snapshot was taken, so kubeconfigs made before work again unchanged. Its
// value is a RequestedAddress as JSON. nest-manager asks the host for it
// once, when it creates the Service; an address taken meanwhile is a
// Warning event (reason AddressTaken) and the host picks another. nest
// restore removes it with AnnotationRestoring.
const AnnotationRequestedAddress = "nest.dev/requested-address"

// RequestedAddress is AnnotationRequestedAddress's value: the LoadBalancer
// address (spec.loadBalancerIP, which MetalLB and most cloud load
// balancers honour) and the node port of the API server's Service; zero
// values ask for nothing.
type RequestedAddress struct {
	LoadBalancerIP string `json:"loadBalancerIP,omitempty"`
	NodePort       int32  `json:"nodePort,omitempty"`
}

// AnnotationSnapshotRequested asks the snapshot schedule controller for a
// snapshot now, outside spec.snapshots' schedule, to the schedule's
// repository and in its keep rotation: each new value (`nest snapshot
// request NAME` and the dashboard's "Snapshot now" write the time; at most
// 64 characters, else the SnapshotsSucceeding condition refuses it) is
// served once, and status.snapshots.lastRequest says which was. Without
// spec.snapshots it does nothing (the CLI and dashboard refuse it).
const AnnotationSnapshotRequested = "nest.dev/snapshot-requested"

// Condition types of a VirtualCluster.
const (
	// ConditionReady is True when tenants can use the cluster: the control plane
	// is available, the kubeconfig is written and the virtual node is Ready.
	ConditionReady = "Ready"
	// ConditionControlPlaneAvailable is True when the tenant API server answers /readyz.
	ConditionControlPlaneAvailable = "ControlPlaneAvailable"
	// ConditionCertificatesReady is True when every certificate and kubeconfig Secret exists.
	ConditionCertificatesReady = "CertificatesReady"
	// ConditionNodesReady is True when the virtual node is Ready in the tenant
	// cluster, so tenant pods can be scheduled.
	ConditionNodesReady = "NodesReady"
	// ConditionNodesAssigned is True when the VirtualCluster holds every
	// GlobalNode its promotePolicies and promoteResources.nodeInfos ask for
	// (status.assignedNodes), or asks for none. It is False, naming the
	// policy or node, when they cannot all be met: no new node is then
	// claimed. Written by node assignment, not the VirtualCluster controller.
	ConditionNodesAssigned = "NodesAssigned"
	// ConditionUpgrading is True while the control plane moves from
	// status.version to spec.kubernetesVersion, its reason the step
	// (UpgradeEtcd, UpgradeAPIServer, UpgradeControllers, or
	// UpgradeControlPlane for one replica), and False otherwise: reason
	// UpgradePending while the pre-flight checks have not run,
	// UpgradeBlocked while one holds the upgrade (the message names what),
	// UpgradeRefused for a move the rules refuse, UpToDate when the control
	// plane runs spec.kubernetesVersion.
	ConditionUpgrading = "Upgrading"
	// ConditionSnapshotsSucceeding is True while spec.snapshots is set and
	// its last scheduled snapshot was taken and pushed (reason
	// SnapshotTaken, or Waiting before the first), and False, the message
	// saying why, when it failed: reason InvalidSchedule, InvalidRequest,
	// NoRecipients, SnapshotFailed or PruneFailed. Written by the snapshot schedule
	// controller of nest-manager; absent without spec.snapshots.
	ConditionSnapshotsSucceeding = "SnapshotsSucceeding"
)

// ServiceType is how the tenant API server is exposed.
// +kubebuilder:validation:Enum=NodePort;LoadBalancer;ClusterIP
type ServiceType string

// VirtualClusterSpec is the desired tenant cluster.
//
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.clusterDomain) || (has(self.clusterDomain) && self.clusterDomain == oldSelf.clusterDomain)",message="clusterDomain is immutable: create a new VirtualCluster to change it"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.serviceCIDR) || (has(self.serviceCIDR) && self.serviceCIDR == oldSelf.serviceCIDR)",message="serviceCIDR is immutable: create a new VirtualCluster to change it"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.datastore) || (has(self.datastore) && self.datastore == oldSelf.datastore)",message="datastore is immutable: the tenant's etcd data lives on it"
// +kubebuilder:validation:XValidation:rule="!has(self.snapshots) || !has(self.snapshots.includeVolumes) || !self.snapshots.includeVolumes || !has(self.virtualNode) || !has(self.virtualNode.podSecurityLevel) || self.virtualNode.podSecurityLevel != 'restricted'",message="spec.snapshots.includeVolumes is refused with spec.virtualNode.podSecurityLevel restricted: the pod that copies a volume runs as root, which that level forbids; use baseline, or leave includeVolumes out"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.controlPlane) || !has(oldSelf.controlPlane.replicas) || (has(self.controlPlane) && has(self.controlPlane.replicas) && self.controlPlane.replicas >= oldSelf.controlPlane.replicas)",message="spec.controlPlane.replicas cannot be lowered or removed: etcd members are not removed from a live tenant; keep the count or make a new VirtualCluster"
type VirtualClusterSpec struct {
	// KubernetesVersion of the tenant control plane: v1.36.3 or v1.37.2 (the
	// default, the newest). Changing it upgrades the control plane in place
	// (status.version says what runs, the Upgrading condition the step): a
	// later patch, or a patch of the next minor; downgrades and skipped
	// minors are refused.
	// +optional
	// +kubebuilder:default="v1.37.2"
	// +kubebuilder:validation:MaxLength=16
	// +kubebuilder:validation:XValidation:rule="self in ['v1.36.3', 'v1.37.2']",message="unsupported kubernetesVersion: the supported versions are v1.36.3 and v1.37.2"
	// +kubebuilder:validation:XValidation:rule="self == oldSelf || !(self in ['v1.36.3', 'v1.37.2']) || int(self.split('.')[1]) > int(oldSelf.split('.')[1]) || (int(self.split('.')[1]) == int(oldSelf.split('.')[1]) && int(self.split('.')[2]) > int(oldSelf.split('.')[2]))",message="kubernetesVersion cannot go down: downgrades are refused (etcd's data and the API's stored versions do not go back)"
	// +kubebuilder:validation:XValidation:rule="self == oldSelf || !(self in ['v1.36.3', 'v1.37.2']) || int(self.split('.')[1]) <= int(oldSelf.split('.')[1]) + 1",message="kubernetesVersion may move up one minor version at a time: upgrade to each minor in between first"
	KubernetesVersion string `json:"kubernetesVersion,omitempty"`

	// ExternalIPs are extra addresses clients use to reach the tenant API
	// server. Each is added to its serving certificate; the first is used in the
	// kubeconfig when the Service is a NodePort.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=45
	// +kubebuilder:validation:items:XValidation:rule="isIP(self)",message="each externalIPs entry must be an IPv4 or IPv6 address, such as 198.51.100.7"
	ExternalIPs []string `json:"externalIPs,omitempty"`

	// ControlPlane configures the tenant control-plane pod.
	// +optional
	ControlPlane ControlPlaneSpec `json:"controlPlane,omitempty"`

	// Datastore configures the tenant's etcd storage. Immutable, and set
	// (defaulted) from creation on, so it cannot be added later.
	// +optional
	// +kubebuilder:default={}
	Datastore DatastoreSpec `json:"datastore,omitempty"`

	// ClusterDomain is the tenant's Service DNS suffix. Immutable.
	// +optional
	// +kubebuilder:default="cluster.local"
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	ClusterDomain string `json:"clusterDomain,omitempty"`

	// ServiceCIDR is the tenant's Service ClusterIP range. Immutable.
	// +optional
	// +kubebuilder:default="10.96.0.0/16"
	// +kubebuilder:validation:MaxLength=49
	// +kubebuilder:validation:XValidation:rule="isCIDR(self) && cidr(self).ip().family() == 4 && cidr(self).prefixLength() >= 12 && cidr(self).prefixLength() <= 24",message="serviceCIDR must be an IPv4 CIDR with a prefix length from /12 to /24, such as 10.96.0.0/16"
	ServiceCIDR string `json:"serviceCIDR,omitempty"`

	// PromotePolicies select host nodes to promote into the tenant cluster as
	// dedicated nodes: nodeCount GlobalNodes whose labels match labelSelector
	// (an empty selector matches every node). Node assignment claims them for
	// the VirtualCluster (status.assignedNodes), and node promotion drains
	// each one in the host and joins it to the tenant cluster; released, it
	// brings them back to the host.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	PromotePolicies []PromotePolicy `json:"promotePolicies,omitempty"`

	// PromoteResources is the tenant's share of host capacity: the virtual
	// node's capacity, and the host ResourceQuota of the tenant's pods.
	// +optional
	PromoteResources PromoteResources `json:"promoteResources,omitempty"`

	// VirtualNode configures the virtual node that runs tenant pods on host
	// capacity (shared mode).
	// +optional
	VirtualNode VirtualNodeSpec `json:"virtualNode,omitempty"`

	// Network restricts what the tenant's pods may reach from the host network.
	// Tenant pods always reach their own virtual cluster's pods, API server and
	// DNS, and never the host API server, node ports or other namespaces.
	// +optional
	Network NetworkSpec `json:"network,omitempty"`

	// Members are the member clusters the tenant may place pods in, and its
	// share of each. The tenant sees one more node per member,
	// nest-member-<name>, sized to the smaller of the grant and what the
	// member offers, and tainted so that only pods tolerating
	// nest.dev/member=<name> land there. A member must also select the
	// VirtualCluster (spec.virtualClusterSelector of the MemberCluster).
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=8
	Members []MemberGrant `json:"members,omitempty"`

	// Snapshots makes nest-manager take snapshots of the tenant on a
	// schedule, each as `nest snapshot create` takes one, push them to an
	// OCI repository and keep the newest few (status.snapshots, the
	// SnapshotsSucceeding condition).
	// +optional
	Snapshots *SnapshotSchedule `json:"snapshots,omitempty"`

	// Certificates sets how long the tenant's leaf certificates live and
	// when nest-manager renews them.
	// +optional
	Certificates CertificatesSpec `json:"certificates,omitempty"`

	// Kubeconfig is the tenant's admin kubeconfig, base64 encoded, written by
	// the operator for kubenest compatibility. Prefer the Secret named in
	// status.kubeconfigSecretRef.
	// +optional
	// +kubebuilder:validation:MaxLength=65536
	Kubeconfig string `json:"kubeconfig,omitempty"`
}

// SnapshotSchedule is when and where nest-manager takes a tenant's
// snapshots.
//
// +kubebuilder:validation:XValidation:rule="has(self.recipientSecretRef) != (has(self.insecurePlaintextKeys) && self.insecurePlaintextKeys)",message="snapshots: name the Secret of the age recipients the keys and etcd's data are encrypted to (recipientSecretRef), or set insecurePlaintextKeys to store them unencrypted; not both"
type SnapshotSchedule struct {
	// Schedule is when snapshots are taken, in cron's five fields (minute,
	// hour, day of month, month, day of week), in UTC, or a descriptor such
	// as @hourly or @daily, as a CronJob's schedule. A time missed while
	// nest-manager was down is taken once when it is back.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	Schedule string `json:"schedule"`

	// To is the OCI repository the snapshots are pushed to,
	// oci://REGISTRY/REPOSITORY, without a tag: each is tagged
	// auto-<time it was scheduled for>-<8 hex digits of the SHA-256 of
	// namespace/name>, such as auto-20261129t150400z-1f2e3d4c.
	// nest-manager pushes with the credentials of a Docker config in its
	// pod ($DOCKER_CONFIG, ~/.docker/config.json; the chart mounts none,
	// so anonymously), over HTTPS, or plain HTTP to a loopback or RFC 1918
	// address or with plainHTTP. file:// is refused: nest-manager keeps no
	// files.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="self.matches('^oci://[a-zA-Z0-9.-]+(:[0-9]+)?(/[a-z0-9]+(([._]|__|-+)[a-z0-9]+)*)+$')",message="snapshots.to must be an OCI repository without a tag or digest, in lower case, such as oci://registry.example:5000/backups/team-a (file:// is refused: nest-manager keeps no files)"
	To string `json:"to"`

	// Keep is how many of this VirtualCluster's snapshots tagged auto- in
	// the repository (scheduled or requested) are kept: once a new one is
	// pushed, the tags of older ones past the newest Keep are deleted.
	// Other tags, such as those nest snapshot create pushed, are never
	// deleted.
	// +optional
	// +kubebuilder:default=7
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	Keep int32 `json:"keep,omitempty"`

	// RecipientSecretRef names a Secret in the VirtualCluster's namespace
	// whose key "recipients" holds the age recipients (age1..., one a line,
	// # comments) the keys and etcd's data are encrypted to.
	// +optional
	RecipientSecretRef *corev1.LocalObjectReference `json:"recipientSecretRef,omitempty"`

	// InsecurePlaintextKeys stores the CA and service-account keys and
	// etcd's data unencrypted, with no recipient.
	// +optional
	InsecurePlaintextKeys bool `json:"insecurePlaintextKeys,omitempty"`

	// PlainHTTP reaches the registry over plain HTTP when HTTPS fails, as
	// `nest snapshot create --plain-http` does: for a registry at an
	// address that is neither loopback nor RFC 1918.
	// +optional
	PlainHTTP bool `json:"plainHTTP,omitempty"`

	// IncludeVolumes copies the files of every bound tenant
	// PersistentVolumeClaim into each snapshot, as `nest snapshot create
	// --include-volumes` does: each by a short-lived pod in the host
	// namespace that mounts the claim's host volume read-only, as root with
	// only the DAC_OVERRIDE capability. Refused when
	// spec.virtualNode.podSecurityLevel is restricted, under which no such
	// pod may run.
	// +optional
	IncludeVolumes bool `json:"includeVolumes,omitempty"`
}

// CertificatesSpec is the lifetime and renewal of a VirtualCluster's leaf
// certificates: the API server's, etcd's, the front proxy's, the kubelet
// client's and nest-syncer's serving certificate, and the client
// certificates of the component, manager and admin kubeconfigs.
// nest-manager issues a leaf anew when RenewBefore or less of it is left,
// when it lives longer than LeafLifetime (after LeafLifetime is lowered),
// or when it was issued before the last rotation asked for
// (AnnotationRotateCertificates); a new one restarts the control-plane
// pods that read it at start one at a time, as any PKI change does. A leaf
// cut to its CA's expiry is not renewed for its time: its CA is, by a CA
// rotation (AnnotationRotateCA), which nest-manager starts by itself for
// a CA with a third of its life or less left.
//
// +kubebuilder:validation:XValidation:rule="!has(self.renewBefore) || 2 * duration(self.renewBefore).getSeconds() <= (has(self.leafLifetime) ? duration(self.leafLifetime) : duration('8760h')).getSeconds()",message="certificates.renewBefore must be at most half of certificates.leafLifetime (8760h when unset): a leaf renewed sooner would restart the control plane almost at once"
type CertificatesSpec struct {
	// LeafLifetime is how long a leaf certificate is valid from its issue,
	// such as 8760h (the default, one year, as kubeadm's) or 10m; never
	// past its CA's expiry.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('5m') && duration(self) <= duration('87600h')",message="certificates.leafLifetime must be from 5m to 87600h (ten years), such as 8760h"
	LeafLifetime *metav1.Duration `json:"leafLifetime,omitempty"`

	// RenewBefore is how long before its expiry a leaf is renewed, at most
	// half of LeafLifetime; unset, when a third of its lifetime is left, as
	// the kubelet renews its own.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1m')",message="certificates.renewBefore must be at least 1m, such as 720h"
	RenewBefore *metav1.Duration `json:"renewBefore,omitempty"`

	// CALifetime is how long a certificate authority nest-manager makes
	// (the cluster, etcd and front-proxy CAs, at creation and at each CA
	// rotation) is valid, such as 87600h (the default, ten years, as
	// kubeadm's) or 720h. A CA with a third of it or less left is rotated
	// (AnnotationRotateCA) with a grace of a tenth of it. Existing CAs
	// keep their expiry until they rotate. The kubelet-client CA, which
	// only the virtual node trusts, does not rotate and lives ten years.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1h') && duration(self) <= duration('175200h')",message="certificates.caLifetime must be from 1h to 175200h (twenty years), such as 87600h"
	CALifetime *metav1.Duration `json:"caLifetime,omitempty"`
}

// AnnotationRotateCA, set on a VirtualCluster (nest certs rotate-ca), asks
// nest-manager to replace certificate authorities, in phases (see
// CARotationPhase). Its value is JSON: {"request": an id of at most 64
// characters, "authorities": a list of cluster, etcd, front-proxy and
// service-account (empty: all four), "grace": how long the old CA stays
// trusted once every leaf is issued from the new one, such as "24h"
// (unset: DefaultCARotationGrace)}. Each new request is served once;
// one that arrives while another rotation runs waits, with a Warning
// event, and starts once that one ended.
const AnnotationRotateCA = "nest.dev/rotate-ca"

// CARotationRequest is the value of AnnotationRotateCA, as JSON.
type CARotationRequest struct {
	// Request identifies it, at most 64 characters (nest certs rotate-ca
	// sets the time).
	Request string `json:"request"`
	// Authorities are the CAs to replace; empty is every CAName.
	Authorities []CAName `json:"authorities,omitempty"`
	// Grace is how long phase Grace lasts; unset is
	// DefaultCARotationGrace.
	Grace *metav1.Duration `json:"grace,omitempty"`
}

// AnnotationFinishCARotation, set to the request of the CA rotation in
// phase Grace (nest certs rotate-ca --finish), ends its grace at once.
const AnnotationFinishCARotation = "nest.dev/finish-ca-rotation"

// DefaultCARotationGrace is how long the old CA stays trusted after a CA
// rotation issued every leaf from the new one, unless the request says:
// long enough for every kubelet-refreshed token (an hour at most) and for
// clients that refetch their kubeconfig daily.
const DefaultCARotationGrace = 24 * time.Hour

// CAName names a certificate authority of a VirtualCluster that rotates:
// the cluster CA (the API server's serving and client certificates, the
// tenant's kube-root-ca.crt), etcd's, the front proxy's, and the
// service-account signing key.
// +kubebuilder:validation:Enum=cluster;etcd;front-proxy;service-account
type CAName string

// The authorities a CA rotation replaces.
const (
	CACluster        CAName = "cluster"
	CAEtcd           CAName = "etcd"
	CAFrontProxy     CAName = "front-proxy"
	CAServiceAccount CAName = "service-account"
)

// CANames are every CAName, in the order a rotation lists them.
var CANames = []CAName{CACluster, CAEtcd, CAFrontProxy, CAServiceAccount}

// CARotationPhase is where a CA rotation stands. Each of Trust, Reissue
// and Retire restarts the control-plane pods one at a time and ends when
// the last is Ready.
// +kubebuilder:validation:Enum=Trust;Reissue;Grace;Retire;Done
type CARotationPhase string

const (
	// CAPhaseTrust: a new CA (a new key, for the service-account key) is
	// added beside the old one to every trust bundle: the API server's,
	// etcd's, the tenant's kube-root-ca.crt, every kubeconfig's. The old
	// one still signs.
	CAPhaseTrust CARotationPhase = "Trust"
	// CAPhaseReissue: the new CA signs, and every leaf and kubeconfig
	// client certificate is issued from it. The API server's certificate
	// comes with the new CA cross-signed by the old, so a client that
	// trusts the old CA alone still verifies it.
	CAPhaseReissue CARotationPhase = "Reissue"
	// CAPhaseGrace: the old CA is still trusted, until retireAfter or
	// AnnotationFinishCARotation.
	CAPhaseGrace CARotationPhase = "Grace"
	// CAPhaseRetire: the old CA leaves every bundle; a client certificate
	// or token it signed is refused from then on.
	CAPhaseRetire CARotationPhase = "Retire"
	// CAPhaseDone: the rotation ended (status.certificates.lastCARotation).
	CAPhaseDone CARotationPhase = "Done"
)

// AnnotationRotateCertificates, set on a VirtualCluster (nest certs
// rotate), asks nest-manager to issue every leaf certificate anew: each
// new value is served once, and status.certificates.lastRotation records
// it with the time from which leaves count as new.
const AnnotationRotateCertificates = "nest.dev/rotate-certificates"

// CertificatesStatus is how a VirtualCluster's certificates stand.
type CertificatesStatus struct {
	// LastRotation is the last rotation nest-manager served.
	// +optional
	LastRotation *CertificateRotation `json:"lastRotation,omitempty"`
	// NotAfter is when the first of the tenant's leaf certificates
	// expires.
	// +optional
	NotAfter *metav1.Time `json:"notAfter,omitempty"`
	// CARotation is the CA rotation under way.
	// +optional
	CARotation *CARotation `json:"caRotation,omitempty"`
	// LastCARotation is the last CA rotation that ended, in phase Done.
	// +optional
	LastCARotation *CARotation `json:"lastCARotation,omitempty"`
	// LastCARequest is the last AnnotationRotateCA request started, so
	// each is served once, whatever rotations nest-manager starts by
	// itself in between.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	LastCARequest string `json:"lastCARequest,omitempty"`
}

// CARotation is a rotation of certificate authorities.
type CARotation struct {
	// Request is the AnnotationRotateCA request it serves.
	// +kubebuilder:validation:MaxLength=64
	Request string `json:"request"`
	// Authorities are the CAs it replaces.
	// +kubebuilder:validation:MaxItems=4
	Authorities []CAName `json:"authorities"`
	// Phase is where it stands.
	Phase CARotationPhase `json:"phase"`
	// PhaseTime is when Phase began.
	PhaseTime metav1.Time `json:"phaseTime"`
	// Grace is how long phase Grace lasts.
	Grace metav1.Duration `json:"grace"`
	// RetireAfter is when phase Grace ends, set when it begins.
	// +optional
	RetireAfter *metav1.Time `json:"retireAfter,omitempty"`
	// RolledOutCAHash is the hash (pki.BundleHash: hex SHA-256) of the
	// cluster CA bundle, ca.crt, that every control-plane replica runs
	// with in this phase, set once they all do, from phase Reissue on;
	// empty before, in Trust, and when the cluster CA is not rotating.
	// Dedicated nodes rejoin with that bundle (their kubelets bootstrap a
	// client certificate from the signer of the phase), and a phase ends
	// only once each has: GlobalNode status.caBundleHash.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	RolledOutCAHash string `json:"rolledOutCAHash,omitempty"`
}

// CertificateRotation is a rotation of every leaf certificate.
type CertificateRotation struct {
	// Request is the AnnotationRotateCertificates value it served.
	// +kubebuilder:validation:MaxLength=64
	Request string `json:"request"`
	// Time is nest-manager's time when it served it: a leaf issued before
	// is issued anew.
	Time metav1.Time `json:"time"`
}

// DefaultSnapshotKeep is spec.snapshots.keep's default (the CRD's
// default marker says the same; a test compares them).
const DefaultSnapshotKeep = 7

// RecipientsKey is the key of a snapshot schedule's recipient Secret that
// holds the age recipients.
const RecipientsKey = "recipients"

// SnapshotsStatus is how a VirtualCluster's snapshot schedule stands.
type SnapshotsStatus struct {
	// Since is when the controller first saw the schedule: scheduled times
	// count from it until the first snapshot, so a schedule added to an
	// old VirtualCluster does not take one at once for a time before it.
	// +optional
	Since *metav1.Time `json:"since,omitempty"`
	// LastScheduleTime is the scheduled time of the last snapshot the
	// schedule pushed; a failed one does not move it, so it is tried again.
	// +optional
	LastScheduleTime *metav1.Time `json:"lastScheduleTime,omitempty"`
	// LastRequest is the value of the nest.dev/snapshot-requested
	// annotation the last snapshot served.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	LastRequest string `json:"lastRequest,omitempty"`
	// LastSnapshot is the newest snapshot the schedule pushed.
	// +optional
	LastSnapshot *SnapshotRecord `json:"lastSnapshot,omitempty"`
	// Kept is how many scheduled snapshots of the VirtualCluster the
	// repository held after the last prune.
	// +optional
	Kept int32 `json:"kept,omitempty"`
}

// SnapshotRecord is one snapshot in a repository.
type SnapshotRecord struct {
	// URL is oci://REGISTRY/REPOSITORY:TAG.
	URL string `json:"url"`
	// Digest is its manifest's digest, sha256:....
	Digest string `json:"digest,omitempty"`
	// Time is when etcd's snapshot was taken.
	Time metav1.Time `json:"time"`
	// Size is the archive's size in bytes.
	Size int64 `json:"size,omitempty"`
	// EtcdRevision is etcd's revision it holds every write up to.
	EtcdRevision int64 `json:"etcdRevision,omitempty"`
}

// MemberGrant is a VirtualCluster's share of one member cluster.
type MemberGrant struct {
	// Name of the MemberCluster.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=40
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="members[].name must be a MemberCluster name of at most 40 lower-case letters, digits and '-', such as gpu-pool"
	Name string `json:"name"`

	// Resources is the most the tenant's pods in the member may request
	// together, per resource (cpu, memory, nvidia.com/gpu, pods, ...). A
	// pod that would exceed it stays Pending in the tenant (reason
	// QuotaExceeded) and is never created in the member. cpu, memory,
	// ephemeral-storage and pods it does not name are bounded only by what
	// the member offers (name them to bound them); another resource it
	// does not name (an extended resource) may not be requested there.
	// +required
	// +kubebuilder:validation:Type=object
	// +kubebuilder:validation:MinProperties=1
	// +kubebuilder:validation:MaxProperties=16
	// +kubebuilder:validation:XValidation:rule="self.all(k, type(self[k]) == int ? self[k] >= 0 : !self[k].startsWith('-'))",message="members[].resources: every quantity must be zero or more, such as nvidia.com/gpu: 1"
	Resources corev1.ResourceList `json:"resources"`
}

// ControlPlaneSpec configures the tenant control-plane pod.
type ControlPlaneSpec struct {
	// Replicas of the control plane: 1 or 3 pods, each with an etcd member,
	// an API server, CoreDNS, and kube-controller-manager, kube-scheduler
	// and nest-syncer, which elect a leader when there are 3. Raising 1 to 3
	// keeps every object: the new etcd members join one at a time, as
	// learners first. Lowering it is refused (removing etcd members from a
	// live tenant is not supported); make a new VirtualCluster instead.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Enum=1;3
	// +kubebuilder:validation:XValidation:rule="self >= oldSelf",message="spec.controlPlane.replicas cannot be lowered: etcd members are not removed from a live tenant; keep the count or make a new VirtualCluster"
	Replicas *int32 `json:"replicas,omitempty"`

	// Resources of the kube-apiserver container. The other containers get
	// fixed, small requests.
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`

	// Service exposes the tenant API server.
	// +optional
	Service ServiceSpec `json:"service,omitempty"`

	// RuntimeConfig turns on API group versions that the tenant API server
	// leaves off by default, as kube-apiserver's --runtime-config (and
	// kind's runtimeConfig) does: each key a group version, each value
	// "true". Accepted: resource.k8s.io/v1beta1 and resource.k8s.io/v1beta2,
	// which every supported version serves, and networking.k8s.io/v1beta1
	// and storage.k8s.io/v1beta1, which only v1.36.3 serves (v1.37 removed
	// their last resources; nest create refuses them for v1.37.2). A group
	// version the API server's version serves nothing of (after an upgrade,
	// or set on a v1.37.2 VirtualCluster) is left out of its
	// --runtime-config, and each reconcile says so in a
	// RuntimeConfigNotServed warning event. Turning
	// default APIs off is not offered: Nest's own components use them.
	// Changing it restarts the API servers. Clients of networking.k8s.io/v1beta1
	// or storage.k8s.io/v1beta1 hold an upgrade to v1.37 (see the
	// nest.dev/upgrade-ignore-removed-apis annotation).
	// +optional
	// +kubebuilder:validation:MaxProperties=8
	// +kubebuilder:validation:XValidation:rule="self.all(k, k in ['networking.k8s.io/v1beta1', 'resource.k8s.io/v1beta1', 'resource.k8s.io/v1beta2', 'storage.k8s.io/v1beta1'])",message="spec.controlPlane.runtimeConfig: each key must be a group version off by default that a supported version serves once on: networking.k8s.io/v1beta1, resource.k8s.io/v1beta1, resource.k8s.io/v1beta2 or storage.k8s.io/v1beta1"
	// +kubebuilder:validation:XValidation:rule="self.all(k, self[k] == 'true')",message="spec.controlPlane.runtimeConfig: every value must be \"true\": only turning a group version on is supported"
	RuntimeConfig map[string]string `json:"runtimeConfig,omitempty"`
}

// ServiceSpec configures the Service in front of the tenant API server.
type ServiceSpec struct {
	// Type of the Service: NodePort, LoadBalancer or ClusterIP. Unset,
	// nest-manager's --default-service-type decides, now and whenever it
	// changes (NodePort unless the platform sets it, as for a host with a
	// LoadBalancer implementation). A LoadBalancer tenant's kubeconfig names the
	// Service's LoadBalancer address, and the VirtualCluster waits in phase
	// Pending until it has one; a NodePort tenant's names a host node's
	// address, so it is cut off while that node is down.
	// +optional
	Type ServiceType `json:"type,omitempty"`
}

// DatastoreSpec configures the tenant etcd's PersistentVolumeClaim.
type DatastoreSpec struct {
	// StorageSize of the etcd volume.
	// +optional
	// +kubebuilder:default="1Gi"
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).isGreaterThan(quantity('0'))",message="datastore.storageSize must be above zero, such as 1Gi"
	StorageSize *resource.Quantity `json:"storageSize,omitempty"`

	// StorageClassName of the etcd volume; the host's default class when unset.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	StorageClassName *string `json:"storageClassName,omitempty"`
}

// PodSecurityLevel is a Pod Security Standard level a tenant pod must meet
// before nest-syncer runs it on the host. "privileged" is not offered: it
// would let a tenant pod escape onto the host.
// +kubebuilder:validation:Enum=baseline;restricted
type PodSecurityLevel string

// Pod Security levels a VirtualCluster may ask for.
const (
	// PodSecurityBaseline prevents known privilege escalations; the default.
	PodSecurityBaseline PodSecurityLevel = "baseline"
	// PodSecurityRestricted also enforces current pod hardening practice.
	PodSecurityRestricted PodSecurityLevel = "restricted"
)

// ContainerLimits says whether the host gives a tenant container that states
// no cpu or memory limit a default one.
// +kubebuilder:validation:Enum=Default;None
type ContainerLimits string

// ContainerLimits policies a VirtualCluster may ask for.
const (
	// ContainerLimitsDefault gives every tenant container without a cpu or
	// memory limit the host namespace's default limits, and the host quota
	// holds the limits of the tenant's pods to a multiple of its share: a
	// tenant cannot take spare host cpu or memory beyond them. The default.
	ContainerLimitsDefault ContainerLimits = "Default"
	// ContainerLimitsNone runs tenant containers with exactly the limits the
	// tenant states, as any cluster does: a container without limits may
	// use spare cpu and memory of its host node, and the host quota holds
	// requests only. The host node is still protected by its kubelet's
	// eviction, which evicts pods above their requests first. Upstream
	// conformance needs it: its resize specs read unlimited cgroups.
	ContainerLimitsNone ContainerLimits = "None"
)

// PrivilegedContainers says what the virtual node does with a tenant
// container that asks for securityContext.privileged.
// +kubebuilder:validation:Enum=Refuse;Confine
type PrivilegedContainers string

// PrivilegedContainers policies a VirtualCluster may ask for.
const (
	// PrivilegedContainersRefuse refuses the pod, naming the field, as the
	// host's Pod Security level would. The default.
	PrivilegedContainersRefuse PrivilegedContainers = "Refuse"
	// PrivilegedContainersConfine runs the container with the privileges
	// the virtual node has to give, which are none of the host's: no host
	// devices, no capabilities beyond the Pod Security level, the runtime's
	// default seccomp profile. The tenant pod gets a Warning event
	// (PrivilegedConfined) that says so. For workloads that ask for
	// privileged without needing it, such as the upstream conformance
	// suite's Job pods (privileged for SELinux hosts only); a container that
	// needs host privileges fails at the call that needs them.
	PrivilegedContainersConfine PrivilegedContainers = "Confine"
)

// VirtualNodeSpec configures the virtual node and nest-syncer.
type VirtualNodeSpec struct {
	// PodSecurityLevel every pod on the virtual node must meet, checked by
	// nest-syncer with the upstream Pod Security admission checks. Tenants
	// cannot lower it: namespace labels in the tenant cluster do not apply.
	// +optional
	// +kubebuilder:default=baseline
	PodSecurityLevel PodSecurityLevel `json:"podSecurityLevel,omitempty"`
	// TokenMaxAge bounds how long a service-account token delivered to a host
	// pod is used before nest-syncer refreshes it in place. Tokens are also
	// refreshed at 80% of their lifetime, as the kubelet does.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('10s') && duration(self) <= duration('24h')",message="tokenMaxAge must be from 10s to 24h, such as 1h"
	TokenMaxAge *metav1.Duration `json:"tokenMaxAge,omitempty"`

	// HostMetadata is the allow-list of tenant pod label and annotation keys
	// copied onto host pods. Unset lists take the manager's defaults
	// (--host-label-allowlist, --host-annotation-allowlist). Keys Nest or host
	// add-ons act on (nest.dev/, kubernetes.io/, k8s.io/ and the control-plane
	// selector labels) are never copied, whatever the list says.
	// +optional
	HostMetadata *HostMetadataSpec `json:"hostMetadata,omitempty"`

	// ObjectBudget bounds what the tenant's synced objects may take on the host.
	// +optional
	ObjectBudget ObjectBudgetSpec `json:"objectBudget,omitempty"`

	// Count is how many virtual nodes the tenant sees, 1 to 16. The share
	// (promoteResources.resources) is split evenly across them, the first
	// also taking what does not divide evenly; a pod fits on one node only.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=16
	Count *int32 `json:"count,omitempty"`

	// ContainerLimits is Default (tenant containers without a cpu or memory
	// limit get the host's default limits) or None (they run without).
	// +optional
	// +kubebuilder:default=Default
	ContainerLimits ContainerLimits `json:"containerLimits,omitempty"`

	// PrivilegedContainers is Refuse (a pod with a privileged container is
	// refused) or Confine (the container runs without host privileges).
	// +optional
	// +kubebuilder:default=Refuse
	PrivilegedContainers PrivilegedContainers `json:"privilegedContainers,omitempty"`

	// NodeDisk gives each virtual node a disk of its own on the host, where
	// the tenant's hostPath volumes live: the virtual node's filesystem,
	// never the host's. Unset: hostPath volumes are refused.
	// +optional
	NodeDisk *NodeDiskSpec `json:"nodeDisk,omitempty"`

	// Storage gives the tenant PersistentVolumeClaims: StorageClasses that
	// mirror host classes, and host claims behind the tenant's claims.
	// +optional
	Storage StorageSpec `json:"storage,omitempty"`

	// MaxTerminationGracePeriodSeconds bounds, in seconds, how long the host
	// pod of a tenant pod may take to stop: a pod's
	// terminationGracePeriodSeconds and a deletion's grace period above it
	// are cut to it, and the pod gets a Warning event (GracePeriodCut). A
	// pod force-deleted in the tenant cluster is stopped on the host at
	// once, as the kubelet stops a pod removed from its API server.
	// +optional
	// +kubebuilder:default=300
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=86400
	MaxTerminationGracePeriodSeconds *int64 `json:"maxTerminationGracePeriodSeconds,omitempty"`

	// ImageRegistries, when set, are the only registries tenant images may
	// come from: a host (registry.example.com), a host and port
	// (registry.example.com:5000), a domain suffix (*.example.com), or a CIDR
	// for registries written as IP addresses; docker.io stands for Docker
	// Hub. A pod naming an image from another registry is refused, with the
	// field named. Registries the platform denies stay denied whatever this
	// says: loopback, link-local and localhost names, the host's own
	// ranges, and nest-manager's --image-registry-denylist.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=261
	// +kubebuilder:validation:items:XValidation:rule="isCIDR(self) || self.matches('^([*][.])?[a-z0-9]([-a-z0-9.]*[a-z0-9])?(:[0-9]{1,5})?$')",message="each imageRegistries entry must be a lower-case registry host, host:port, *.domain or CIDR, such as registry.example.com:5000"
	ImageRegistries []string `json:"imageRegistries,omitempty"`
}

// StorageSpec is what the tenant's PersistentVolumeClaims may use of the
// host's storage. Each tenant claim of a class listed here becomes a host
// claim of the host class in the tenant's host namespace, which the
// tenant's pods on the virtual node mount.
type StorageSpec struct {
	// Classes are the host StorageClasses the tenant sees, each under its
	// host name or the name given. Unset: the host's default StorageClass,
	// under its name, as the tenant's default. An empty list gives none.
	// +optional
	// +listType=map
	// +listMapKey=hostName
	// +kubebuilder:validation:MaxItems=16
	Classes []StorageClassMapping `json:"classes,omitempty"`
	// Requests bounds the storage all the tenant's claims request together
	// (the host quota's requests.storage, beside the etcd claim and node
	// disks). Default 10Gi.
	// +optional
	// +kubebuilder:validation:XValidation:rule="!quantity(string(self)).isLessThan(quantity('0'))",message="storage.requests must not be negative: give a size such as 10Gi"
	Requests *resource.Quantity `json:"requests,omitempty"`
	// Claims bounds how many claims the tenant has on the host at once.
	// Default 20.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10000
	Claims *int32 `json:"claims,omitempty"`
}

// StorageClassMapping shows a host StorageClass to the tenant.
type StorageClassMapping struct {
	// HostName is the host StorageClass.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	HostName string `json:"hostName"`
	// Name is the tenant's name for it. Default: HostName.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name,omitempty"`
	// Default makes it the tenant's default StorageClass.
	// +optional
	Default bool `json:"default,omitempty"`
}

// NodeDiskSpec is the disk of each virtual node: a host
// PersistentVolumeClaim (ReadWriteOnce) per virtual node, made when a pod on
// that node first mounts a hostPath volume. The restricted Pod Security
// level refuses hostPath volumes whatever this says. A tenant hostPath volume is a
// directory or file at its path on the disk, shared by the pods of the
// virtual node, as a node's directories are, and kept while the
// VirtualCluster lives. The host pods that mount it run on the host node
// the volume is attached to.
type NodeDiskSpec struct {
	// Size of each virtual node's disk, such as 1Gi: the claim's request.
	// The host namespace's object quota holds the claims to one per
	// virtual node and to their sizes; the StorageClass must enforce the
	// size for it to bound what a tenant writes.
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).isGreaterThan(quantity('0'))",message="nodeDisk.size must be above zero, such as 1Gi"
	Size resource.Quantity `json:"size"`
	// StorageClassName of the claims. Unset: the host's default
	// StorageClass.
	// +optional
	StorageClassName *string `json:"storageClassName,omitempty"`
}

// HostMetadataSpec lists the tenant label and annotation keys that reach host
// pods. An entry is a whole key ("app", "app.kubernetes.io/name") or a prefix
// ending in "*" ("example.com/*"). An empty list copies nothing.
type HostMetadataSpec struct {
	// Labels are the label keys copied to host pods.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=317
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:XValidation:rule="self.matches('^[^*]*[*]?$')",message="a * may only end an entry, such as example.com/*"
	Labels []string `json:"labels,omitempty"`
	// Annotations are the annotation keys copied to host pods.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=317
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:XValidation:rule="self.matches('^[^*]*[*]?$')",message="a * may only end an entry, such as example.com/*"
	Annotations []string `json:"annotations,omitempty"`
}

// ObjectBudgetSpec bounds the tenant objects copied to the host. Past a
// budget the tenant pod that needs the copy waits with an event naming it.
type ObjectBudgetSpec struct {
	// ConfigMaps is the most host copies of tenant ConfigMaps. Default 500.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100000
	ConfigMaps *int32 `json:"configMaps,omitempty"`
	// Secrets is the most host copies of tenant Secrets, not counting the
	// per-pod token Secrets Nest makes. Default 500.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100000
	Secrets *int32 `json:"secrets,omitempty"`
	// Services is the most host copies of tenant Services. Default 200.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10000
	Services *int32 `json:"services,omitempty"`
	// DataBytes bounds the data of all host copies of tenant ConfigMaps and
	// Secrets together. Default 64Mi.
	// +optional
	// +kubebuilder:validation:XValidation:rule="!quantity(string(self)).isLessThan(quantity('0'))",message="objectBudget.dataBytes must not be negative: give a size such as 64Mi"
	DataBytes *resource.Quantity `json:"dataBytes,omitempty"`
}

// NetworkSpec restricts tenant pods' traffic.
type NetworkSpec struct {
	// EgressCIDRs, when set, are the only addresses outside the host cluster's
	// pod, Service and node ranges that tenant pods may connect to. Unset
	// allows every such address.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=49
	// +kubebuilder:validation:items:XValidation:rule="isCIDR(self)",message="each network.egressCIDRs entry must be a CIDR, such as 203.0.113.0/24"
	EgressCIDRs []string `json:"egressCIDRs,omitempty"`
}

// PromotePolicy selects host nodes to promote into the tenant cluster.
type PromotePolicy struct {
	// LabelSelector selects candidate host nodes.
	// +required
	LabelSelector metav1.LabelSelector `json:"labelSelector"`

	// NodeCount is how many of the selected nodes to promote.
	// +required
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	NodeCount int32 `json:"nodeCount"`
}

// PromoteResources is the tenant's share of host capacity.
type PromoteResources struct {
	// NodeInfos names host nodes to promote by name: GlobalNodes the
	// VirtualCluster holds in addition to those its promotePolicies select.
	// +optional
	// +listType=map
	// +listMapKey=nodeName
	// +kubebuilder:validation:MaxItems=1000
	NodeInfos []NodeInfo `json:"nodeInfos,omitempty"`

	// Resources is the capacity of the tenant's virtual node: cpu, memory,
	// pods, and extended resources such as nvidia.com/gpu. Unset names default
	// to cpu 2, memory 4Gi and pods 110.
	// +optional
	// +kubebuilder:validation:Type=object
	// +kubebuilder:validation:MaxProperties=32
	// +kubebuilder:validation:XValidation:rule="self.all(k, type(self[k]) == int ? self[k] >= 0 : !self[k].startsWith('-'))",message="promoteResources.resources: every quantity must be zero or more, such as cpu: 4"
	Resources corev1.ResourceList `json:"resources,omitempty"`
}

// NodeInfo names one host node.
type NodeInfo struct {
	// NodeName is the host node's name.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	NodeName string `json:"nodeName"`
}

// VirtualClusterStatus is the observed state of a tenant cluster.
type VirtualClusterStatus struct {
	// Phase is the coarse lifecycle stage.
	// +optional
	Phase Phase `json:"phase,omitempty"`

	// Conditions: Ready, ControlPlaneAvailable, CertificatesReady, NodesReady,
	// NodesAssigned, Upgrading, SnapshotsSucceeding.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Version is the Kubernetes version the control plane runs: every
	// component's. It differs from spec.kubernetesVersion while an upgrade
	// is under way (the Upgrading condition).
	// +optional
	Version string `json:"version,omitempty"`

	// Endpoint is the URL of the tenant API server that the kubeconfig uses.
	// +optional
	Endpoint string `json:"endpoint,omitempty"`

	// ReadyReplicas is how many control-plane pods are ready: each serves
	// the tenant API.
	// +optional
	ReadyReplicas int32 `json:"readyReplicas,omitempty"`

	// KubeconfigSecretRef names the Secret holding the tenant's admin
	// kubeconfig under the keys "kubeconfig" (Endpoint) and
	// "kubeconfig-internal" (the in-cluster Service address).
	// +optional
	KubeconfigSecretRef *corev1.LocalObjectReference `json:"kubeconfigSecretRef,omitempty"`

	// Members is how each member grant stands: whether Nest set it up in
	// the member, and the node the tenant sees.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=8
	Members []MemberGrantStatus `json:"members,omitempty"`

	// MemberUsage is what the tenant's pods used in each member, as the
	// memberusage controller of nest-manager recorded it (billing). It is
	// a field of its own, written only by that controller, so it and the
	// grant controller (status.members) never overwrite each other.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	MemberUsage []MemberUsageStatus `json:"memberUsage,omitempty"`

	// AssignedNodes are the names of the GlobalNodes the VirtualCluster
	// holds (nest.dev/held-by), sorted. Node promotion moves each one into
	// the tenant cluster; the GlobalNode's status.phase says where it is. A
	// released node leaves this list at once, while node promotion brings
	// it home.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=17000
	// +kubebuilder:validation:items:MaxLength=253
	AssignedNodes []string `json:"assignedNodes,omitempty"`

	// Snapshots is how spec.snapshots stands: written by the snapshot
	// schedule controller of nest-manager, only.
	// +optional
	Snapshots *SnapshotsStatus `json:"snapshots,omitempty"`

	// Certificates is how the tenant's leaf certificates stand.
	// +optional
	Certificates *CertificatesStatus `json:"certificates,omitempty"`
}

// MemberGrantStatus is the state of one member grant.
type MemberGrantStatus struct {
	// Name of the MemberCluster.
	Name string `json:"name"`
	// Ready is true when the tenant's namespace, credentials and quota
	// exist in the member and nest-syncer has what it needs to place pods.
	Ready bool `json:"ready"`
	// Reason is a CamelCase word when Ready is false: MemberNotFound,
	// NotSelected, MemberUnreachable, NoPathToTenant or SetupFailed; Removing for a grant
	// removed from the spec whose member namespace is still being deleted.
	// +optional
	Reason string `json:"reason,omitempty"`
	// Message says what went wrong, or what the member node offers.
	// +optional
	Message string `json:"message,omitempty"`
	// Namespace is the tenant's namespace in the member.
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// Allocatable is what the tenant's member node offers: for each
	// resource the grant names, the smaller of the grant and the member's
	// allocatable; cpu, memory, ephemeral-storage and pods the grant does
	// not name as the member has them.
	// +optional
	Allocatable corev1.ResourceList `json:"allocatable,omitempty"`
	// InjectorReady is true when the member's network injector admits pods
	// into Namespace: a server-side dry run of a pod there came back with
	// the tenant's API server and DNS set. Always false when Network is
	// DNSAddress (no injector).
	// +optional
	InjectorReady bool `json:"injectorReady,omitempty"`
	// APIServerAddress is host:port where the tenant's pods in the member
	// reach its API server: the MemberCluster's network.apiServerAddress,
	// else the tenant's host LoadBalancer address.
	// +optional
	APIServerAddress string `json:"apiServerAddress,omitempty"`
	// Network is how the tenant's pods in the member reach its DNS, its
	// exposed Services and the member's network injector: LoadBalancer
	// (the address of a host LoadBalancer Service of the grant's own),
	// NodePort (host node ports at the MemberCluster's
	// network.nodePortAddress), or DNSAddress (the tenant's DNS at
	// network.dnsAddress only: no Services, no injector).
	// +optional
	// +kubebuilder:validation:Enum=LoadBalancer;NodePort;DNSAddress
	Network MemberNetworkPath `json:"network,omitempty"`
}

// MemberNetworkPath is how a tenant's pods in a member reach their tenant
// (status.members[].network).
type MemberNetworkPath string

// The paths of MemberNetworkPath.
const (
	// MemberNetworkLoadBalancer: through a host LoadBalancer Service of the
	// grant's own, used when the tenant's host Service is a LoadBalancer
	// and the MemberCluster names no network.nodePortAddress.
	MemberNetworkLoadBalancer MemberNetworkPath = "LoadBalancer"
	// MemberNetworkNodePort: through a host NodePort Service of the
	// grant's own, at the MemberCluster's network.nodePortAddress.
	MemberNetworkNodePort MemberNetworkPath = "NodePort"
	// MemberNetworkDNSAddress: member pods use the MemberCluster's
	// network.dnsAddress as nameserver and reach no tenant Service but the
	// API server.
	MemberNetworkDNSAddress MemberNetworkPath = "DNSAddress"
)

// VirtualCluster is one tenant's Kubernetes cluster: a dedicated control plane
// (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, CoreDNS) run
// in the VirtualCluster's namespace of the host cluster, with its own PKI.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=vc,categories=nest
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Replicas",type=string,JSONPath=`.status.readyReplicas`,description="ready control-plane replicas"
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.status.version`,description="the Kubernetes version the control plane runs"
// +kubebuilder:printcolumn:name="Wanted",type=string,JSONPath=`.spec.kubernetesVersion`,priority=1,description="the Kubernetes version asked for"
// +kubebuilder:printcolumn:name="Endpoint",type=string,JSONPath=`.status.endpoint`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 40",message="metadata.name must be at most 40 characters: host object names are derived from it"
// The DNS-label rule holds on create only: a VirtualCluster made before it
// must still take updates, its finalizer's removal among them.
// +kubebuilder:validation:XValidation:rule="oldSelf.hasValue() || self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",optionalOldSelf=true,message="metadata.name must be a DNS label, lower-case letters, digits and '-', starting and ending with a letter or digit, such as team-a: host Services are named after it"
type VirtualCluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the virtual cluster the platform team asks for: its control
	// plane, datastore, share of host capacity and virtual nodes. It is
	// defaulted when left out, as Go clients always send one, so its
	// defaults and immutable fields hold for every VirtualCluster.
	// +optional
	// +kubebuilder:default={}
	Spec VirtualClusterSpec `json:"spec,omitempty"`
	// +optional
	Status VirtualClusterStatus `json:"status,omitempty"`
}

// VirtualClusterList is a list of VirtualClusters.
//
// +kubebuilder:object:root=true
type VirtualClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []VirtualCluster `json:"items"`
}

// MemberUsageStatus sums what a tenant's pods used in one member cluster,
// from the records nest-manager keeps in the host ConfigMap
// <vc>-member-usage.
type MemberUsageStatus struct {
	// Name of the MemberCluster.
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// GPUHours is the nvidia.com/gpu requested by the member pods times
	// the hours they ran, with three decimals, such as "2.000". A string,
	// so kubectl shows it as written.
	// +kubebuilder:validation:MaxLength=32
	GPUHours string `json:"gpuHours"`
	// CPUHours is the cpu requested by the member pods times the hours
	// they ran, with three decimals.
	// +kubebuilder:validation:MaxLength=32
	CPUHours string `json:"cpuHours"`
	// Pods is how many member pods were recorded.
	// +kubebuilder:validation:Minimum=0
	Pods int64 `json:"pods"`
	// Running is how many of them were running at the last pass.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Running int64 `json:"running,omitempty"`
	// Since is when the first recorded pod started.
	// +optional
	Since *metav1.Time `json:"since,omitempty"`
	// LastUpdated is when the member's pods were last listed.
	// +optional
	LastUpdated *metav1.Time `json:"lastUpdated,omitempty"`
	// Message says why the member's pods could not be listed at the last
	// pass; empty when they were.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
}
