package syncer

import (
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nestdev/nest/internal/syncer/kinds/service"
)

// serviceEnv is the environment the kubelet gives a container for services
// (k8s.io/kubernetes/pkg/kubelet: getServiceEnvVarMap and envvars.FromServices):
// the tenant's "kubernetes" Service always, and every Service of the pod's
// namespace, services, unless the pod disables service links. A Service of
// the namespace named "kubernetes" wins over the API server's, as in the
// kubelet. The host kubelet cannot give these: it sees host Services, so the
// host pod has service links off and these as explicit variables.
func (t Translator) serviceEnv(pod *corev1.Pod, services []service.Address) []corev1.EnvVar {
	byName := map[string]service.Address{"kubernetes": t.kubernetesService()}
	if ptr.Deref(pod.Spec.EnableServiceLinks, true) {
		for _, s := range services {
			if pod.Namespace == metav1.NamespaceDefault && s.Name == "kubernetes" {
				continue
			}
			byName[s.Name] = s
		}
	}
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	sort.Strings(names)
	var env []corev1.EnvVar
	for _, n := range names {
		env = append(env, linkVariables(byName[n])...)
	}
	return env
}

// kubernetesService is the tenant's "kubernetes" Service as host pods reach
// it: the API server's address and port the syncer was given.
func (t Translator) kubernetesService() service.Address {
	return service.Address{Name: "kubernetes", IP: t.APIServerHost,
		Ports: []corev1.ServicePort{{Name: "https", Port: t.APIServerPort, Protocol: corev1.ProtocolTCP}}}
}

// linkVariables are one Service's variables: <NAME>_SERVICE_HOST,
// <NAME>_SERVICE_PORT (the first port), <NAME>_SERVICE_PORT_<PORT NAME> for
// each named port, and the Docker-links <NAME>_PORT (the first port) and
// <NAME>_PORT_<port>_<PROTO>{,_PROTO,_PORT,_ADDR} for each port.
func linkVariables(s service.Address) []corev1.EnvVar {
	if s.IP == "" || s.IP == corev1.ClusterIPNone || len(s.Ports) == 0 {
		return nil
	}
	prefix := envName(s.Name)
	env := []corev1.EnvVar{
		{Name: prefix + "_SERVICE_HOST", Value: s.IP},
		{Name: prefix + "_SERVICE_PORT", Value: strconv.Itoa(int(s.Ports[0].Port))},
	}
	for _, p := range s.Ports {
		if p.Name != "" {
			env = append(env, corev1.EnvVar{Name: prefix + "_SERVICE_PORT_" + envName(p.Name), Value: strconv.Itoa(int(p.Port))})
		}
	}
	for i, p := range s.Ports {
		protocol := string(corev1.ProtocolTCP)
		if p.Protocol != "" {
			protocol = string(p.Protocol)
		}
		url := fmt.Sprintf("%s://%s", strings.ToLower(protocol), net.JoinHostPort(s.IP, strconv.Itoa(int(p.Port))))
		if i == 0 {
			env = append(env, corev1.EnvVar{Name: prefix + "_PORT", Value: url})
		}
		portPrefix := fmt.Sprintf("%s_PORT_%d_%s", prefix, p.Port, strings.ToUpper(protocol))
		env = append(env,
			corev1.EnvVar{Name: portPrefix, Value: url},
			corev1.EnvVar{Name: portPrefix + "_PROTO", Value: strings.ToLower(protocol)},
			corev1.EnvVar{Name: portPrefix + "_PORT", Value: strconv.Itoa(int(p.Port))},
			corev1.EnvVar{Name: portPrefix + "_ADDR", Value: s.IP},
		)
	}
	return env
}

// envName turns a Service or port name into a variable name as the kubelet
// does: upper case, dashes as underscores.
func envName(name string) string {
	return strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}
