package syncer

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"path"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/nestdev/nest/internal/atomicfile"
	"github.com/nestdev/nest/internal/syncer/contract"
)

// A tenant pod with a subdomain has, in the kubelet's /etc/hosts, the line
// "<pod IP> <hostname>.<subdomain>.<namespace>.svc.<cluster domain>
// <hostname>". The host kubelet would write the host namespace and the host
// cluster's domain there, which are wrong for the tenant and tell it about
// the host. So such a host pod starts with an init container, the helper,
// that writes the file as the tenant's kubelet would, from the pod IPs the
// host kubelet gives it, into a volume each container mounts at /etc/hosts;
// the kubelet leaves /etc/hosts alone in a container that mounts it.

const (
	// etcHostsName names the helper init container and its volume; tenant
	// pods may not use it.
	etcHostsName = "nest-etc-hosts"
	// etcHostsDir is where the helper writes; etcHostsFile is the file.
	etcHostsDir  = "/nest-etc-hosts"
	etcHostsFile = "hosts"
	// etcHostsCommand is the helper's subcommand of nest-syncer.
	etcHostsCommand = "etc-hosts"
	// etcHostsPath is where containers read the file, as on any Linux node.
	etcHostsPath = "/etc/hosts"
	// envPodIPs and envHostAliases carry the pod IPs (the downward API's
	// status.podIPs, comma-separated) and spec.hostAliases (JSON) to the
	// helper.
	envPodIPs      = "POD_IPS"
	envHostAliases = "NEST_HOST_ALIASES"
)

// EtcHosts is the /etc/hosts the kubelet writes for a pod on the pod
// network (managedHostsFileContent in pkg/kubelet): the localhost lines, a
// line per pod IP naming the hostname (its FQDN first when domain, the
// pod's "<subdomain>.<namespace>.svc.<cluster domain>", is set), then the
// host aliases.
func EtcHosts(podIPs []string, hostname, domain string, aliases []corev1.HostAlias) []byte {
	var b bytes.Buffer
	b.WriteString("# Kubernetes-managed hosts file.\n")
	writeLocalhost(&b)
	b.WriteString("fe00::0\tip6-localnet\n")
	b.WriteString("fe00::0\tip6-mcastprefix\n")
	b.WriteString("fe00::1\tip6-allnodes\n")
	b.WriteString("fe00::2\tip6-allrouters\n")
	for _, ip := range podIPs {
		if domain != "" {
			fmt.Fprintf(&b, "%s\t%s.%s\t%s\n", ip, hostname, domain, hostname)
		} else {
			fmt.Fprintf(&b, "%s\t%s\n", ip, hostname)
		}
	}
	writeHostAliases(&b, aliases)
	return b.Bytes()
}

// NodeEtcHosts is the /etc/hosts the kubelet writes for a pod on the node's
// network (nodeHostsFileContent in pkg/kubelet): its own header, the node's
// /etc/hosts, then the host aliases. A virtual node has no file of its own,
// so its /etc/hosts is the localhost lines and the node name at the pod's
// IPs, which stand for the node's address in the network namespace the
// pod has on the host (see scheduleOnHost).
func NodeEtcHosts(podIPs []string, nodeName string, aliases []corev1.HostAlias) []byte {
	var b bytes.Buffer
	b.WriteString("# Kubernetes-managed hosts file (host network).\n")
	writeLocalhost(&b)
	for _, ip := range podIPs {
		fmt.Fprintf(&b, "%s\t%s\n", ip, nodeName)
	}
	writeHostAliases(&b, aliases)
	return b.Bytes()
}

func writeLocalhost(b *bytes.Buffer) {
	b.WriteString("127.0.0.1\tlocalhost\n")
	b.WriteString("::1\tlocalhost ip6-localhost ip6-loopback\n")
}

// writeHostAliases writes spec.hostAliases as the kubelet does
// (hostsEntriesFromHostAliases).
func writeHostAliases(b *bytes.Buffer, aliases []corev1.HostAlias) {
	if len(aliases) == 0 {
		return
	}
	b.WriteString("\n# Entries added by HostAliases.\n")
	for _, a := range aliases {
		fmt.Fprintf(b, "%s\t%s\n", a.IP, strings.Join(a.Hostnames, "\t"))
	}
}

// RunEtcHostsHelper is `nest-syncer etc-hosts`, the helper init container:
// it writes EtcHosts to --out from the flags --hostname and --domain and
// the environment variables POD_IPS and NEST_HOST_ALIASES; NodeEtcHosts,
// with --hostname as the node name, when --host-network is set.
func RunEtcHostsHelper(args []string, getenv func(string) string) error {
	fs := flag.NewFlagSet(etcHostsCommand, flag.ContinueOnError)
	out := fs.String("out", path.Join(etcHostsDir, etcHostsFile), "file to write")
	hostname := fs.String("hostname", "", "the pod's hostname, or the node's name with --host-network (required)")
	domain := fs.String("domain", "", "the pod's domain: <subdomain>.<namespace>.svc.<cluster domain>")
	hostNetwork := fs.Bool("host-network", false, "write the file of a pod on the node's network")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *hostname == "" {
		return fmt.Errorf("--hostname is required")
	}
	ips := strings.Split(getenv(envPodIPs), ",")
	if ips[0] == "" {
		return fmt.Errorf("%s is empty: the pod has no IP yet", envPodIPs)
	}
	var aliases []corev1.HostAlias
	if s := getenv(envHostAliases); s != "" {
		if err := json.Unmarshal([]byte(s), &aliases); err != nil {
			return fmt.Errorf("%s: %w", envHostAliases, err)
		}
	}
	content := EtcHosts(ips, *hostname, *domain, aliases)
	if *hostNetwork {
		content = NodeEtcHosts(ips, *hostname, aliases)
	}
	return atomicfile.Write(*out, content, 0o644)
}

// tenantEtcHosts gives a host pod whose tenant pod has a subdomain the
// tenant's /etc/hosts (see above), and one on the node's network (node is
// the virtual node's name, "" for a pod on the pod network) the node's.
// Nothing is done without a helper image, or for a pod on the pod network
// without a subdomain, whose host kubelet's file is already the tenant's.
// The helper's names are reserved (checkReservedNames).
func (t Translator) tenantEtcHosts(spec *corev1.PodSpec, namespace, node string) error {
	if t.HelperImage == "" || (node == "" && (spec.Subdomain == "" || spec.Hostname == "")) {
		return nil
	}
	for _, list := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for i := range list {
			if !isHelper(list[i].Name) {
				mountEtcHosts(&list[i])
			}
		}
	}
	helper, err := t.etcHostsHelper(spec, namespace, node)
	if err != nil {
		return err
	}
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: etcHostsName, VolumeSource: corev1.VolumeSource{
		EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: ptr.To(resource.MustParse("1Mi"))},
	}})
	spec.InitContainers = append([]corev1.Container{helper}, spec.InitContainers...)
	return nil
}

// mountEtcHosts mounts the helper's file at /etc/hosts in c, unless c mounts
// something there itself (then the kubelet would not have managed it
// either).
func mountEtcHosts(c *corev1.Container) {
	for _, m := range c.VolumeMounts {
		if m.MountPath == etcHostsPath {
			return
		}
	}
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: etcHostsName, MountPath: etcHostsPath, SubPath: etcHostsFile})
}

// etcHostsHelper is the /etc/hosts helper init container, restricted by
// Pod Security's strictest level. node is the virtual node's name for a
// pod on the node's network, "" for one on the pod network.
func (t Translator) etcHostsHelper(spec *corev1.PodSpec, namespace, node string) (corev1.Container, error) {
	env := []corev1.EnvVar{{Name: envPodIPs, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIPs"}}}}
	if len(spec.HostAliases) > 0 {
		aliases, err := json.Marshal(spec.HostAliases)
		if err != nil {
			return corev1.Container{}, err
		}
		env = append(env, corev1.EnvVar{Name: envHostAliases, Value: string(aliases)})
	}
	command := []string{contract.SyncerBinary, etcHostsCommand, "--out=" + path.Join(etcHostsDir, etcHostsFile)}
	if node != "" {
		command = append(command, "--hostname="+node, "--host-network")
	} else {
		command = append(command, "--hostname="+spec.Hostname, "--domain="+spec.Subdomain+"."+namespace+".svc."+t.ClusterDomain)
	}
	c := t.helperContainer(etcHostsName, command, false, corev1.VolumeMount{Name: etcHostsName, MountPath: etcHostsDir})
	c.Env = env
	return c, nil
}

// helperContainer is a helper init container of nest-syncer's image that
// runs command with mounts, a small fixed request and limit,
// and no capabilities: as user 65534, which Pod Security's restricted
// level allows, or, asRoot, as root, which baseline allows.
//
// A helper that fails is run again, whatever the pod's restart policy: it
// stands for the kubelet's setting up of a volume, which the kubelet
// retries until it works, leaving the pod Pending. Under the pod's policy,
// a pod with restartPolicy Never would end Failed at the helper's first
// failure. The container-level policy needs the ContainerRestartRules
// feature (beta and on since Kubernetes 1.35).
func (t Translator) helperContainer(name string, command []string, asRoot bool, mounts ...corev1.VolumeMount) corev1.Container {
	resources := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("64Mi")}
	user := int64(65534)
	if asRoot {
		user = 0
	}
	return corev1.Container{
		Name: name, Image: t.HelperImage, ImagePullPolicy: t.HelperImagePullPolicy,
		RestartPolicy:            ptr.To(corev1.ContainerRestartPolicyOnFailure),
		Command:                  command,
		VolumeMounts:             mounts,
		Resources:                corev1.ResourceRequirements{Requests: resources, Limits: resources},
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		SecurityContext: &corev1.SecurityContext{
			RunAsNonRoot: ptr.To(!asRoot), RunAsUser: ptr.To(user), RunAsGroup: ptr.To(user),
			AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
			Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
	}
}

// helperNames are the names of the helper init containers and their
// volumes: tenant pods may use none of them.
var helperNames = []string{etcHostsName, nodeDiskName, nodeNetworkName, networkFenceName}

func isHelper(name string) bool { return slices.Contains(helperNames, name) }

// checkReservedNames refuses a tenant pod that names a volume or a
// container (of any kind) as one of the helpers.
func checkReservedNames(s *corev1.PodSpec) error {
	for i, v := range s.Volumes {
		if isHelper(v.Name) {
			return fmt.Errorf("spec.volumes[%d].name: %s is reserved for Nest: rename the volume", i, v.Name)
		}
	}
	for _, list := range []struct {
		field string
		names []string
	}{
		{"spec.initContainers", containerNames(s.InitContainers)},
		{"spec.containers", containerNames(s.Containers)},
		{"spec.ephemeralContainers", ephemeralNames(s.EphemeralContainers)},
	} {
		for i, n := range list.names {
			if isHelper(n) {
				return fmt.Errorf("%s[%d].name: %s is reserved for Nest: rename the container", list.field, i, n)
			}
		}
	}
	return nil
}

func containerNames(cs []corev1.Container) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.Name
	}
	return out
}

func ephemeralNames(cs []corev1.EphemeralContainer) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.Name
	}
	return out
}

// withoutHelpers drops the helpers' statuses from a host pod's init
// container statuses: the tenant pod has no such containers.
func withoutHelpers(statuses []corev1.ContainerStatus) []corev1.ContainerStatus {
	out := statuses[:0:0]
	for _, s := range statuses {
		if !isHelper(s.Name) {
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}
