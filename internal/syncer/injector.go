package syncer

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"golang.org/x/net/netutil"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nestdev/nest/internal/syncer/contract"
)

// The network injector: a mutating admission webhook in each member
// cluster, for the tenant's namespace there. nest-manager registers it
// (a MutatingWebhookConfiguration per grant, calling the member Service
// nest-injector, whose EndpointSlice memberNetwork points at the host's
// node port for it); the member syncer serves it on the control-plane pod,
// on contract.FirstMemberInjectorPort+slot, with the certificate nest-manager put in
// the placement. Every pod created in the namespace, by nest-syncer or by
// anyone else, gets the tenant's API server and DNS; one without the
// tenant's labels is refused.

// maxAdmissionReview bounds the request body the injector reads, and
// maxInjectorConns the connections it serves at once.
const (
	maxAdmissionReview = 4 << 20
	maxInjectorConns   = 64
)

// InjectedPod returns pod as the injector admits it into the member
// namespace of the translator's tenant: every container and init container
// with the tenant's KUBERNETES_* variables, and, unless the pod asks for
// DNS policy Default or None, the tenant's DNS. A pod whose labels do not
// name the tenant (LabelTenantOf) and a tenant namespace
// (LabelTenantNamespace) is refused with the reason.
func (t Translator) InjectedPod(pod *corev1.Pod) (*corev1.Pod, error) {
	if got := pod.Labels[contract.LabelTenantOf]; got != t.VirtualCluster {
		return nil, fmt.Errorf("namespace %s holds the pods of virtual cluster %s only: label %s must be %q, not %q",
			pod.Namespace, t.VirtualCluster, contract.LabelTenantOf, t.VirtualCluster, got)
	}
	namespace := pod.Labels[contract.LabelTenantNamespace]
	if namespace == "" {
		return nil, fmt.Errorf("label %s must name the pod's namespace in virtual cluster %s", contract.LabelTenantNamespace, t.VirtualCluster)
	}
	out := pod.DeepCopy()
	env := linkVariables(t.kubernetesService())
	for i := range out.Spec.InitContainers {
		out.Spec.InitContainers[i].Env = withEnv(out.Spec.InitContainers[i].Env, env)
	}
	for i := range out.Spec.Containers {
		out.Spec.Containers[i].Env = withEnv(out.Spec.Containers[i].Env, env)
	}
	if out.Spec.DNSPolicy != corev1.DNSNone && out.Spec.DNSPolicy != corev1.DNSDefault {
		out.Spec.DNSPolicy = corev1.DNSNone
		// What is cut here was cut, and told, when the syncer translated
		// the tenant pod: the webhook sees that translation.
		out.Spec.DNSConfig, _ = t.dnsConfig(namespace, out.Spec.DNSConfig)
	}
	return out, nil
}

// withEnv sets vars in env: a variable of the same name takes the new
// value in place, the others are appended.
func withEnv(env, vars []corev1.EnvVar) []corev1.EnvVar {
	out := make([]corev1.EnvVar, 0, len(env)+len(vars))
	set := map[string]string{}
	for _, v := range vars {
		set[v.Name] = v.Value
	}
	for _, e := range env {
		if v, ok := set[e.Name]; ok {
			out = append(out, corev1.EnvVar{Name: e.Name, Value: v})
			delete(set, e.Name)
			continue
		}
		out = append(out, e)
	}
	for _, v := range vars {
		if _, ok := set[v.Name]; ok {
			out = append(out, v)
		}
	}
	return out
}

// patchOp is one JSON Patch operation.
type patchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// injectionPatch is the JSON Patch from pod to injected: the fields the
// injector sets, each replaced whole ("add" replaces a member that exists).
func injectionPatch(pod, injected *corev1.Pod) []patchOp {
	ops := []patchOp{{Op: "add", Path: "/spec/containers", Value: injected.Spec.Containers}}
	if len(injected.Spec.InitContainers) > 0 {
		ops = append(ops, patchOp{Op: "add", Path: "/spec/initContainers", Value: injected.Spec.InitContainers})
	}
	if injected.Spec.DNSPolicy != pod.Spec.DNSPolicy {
		ops = append(ops, patchOp{Op: "add", Path: "/spec/dnsPolicy", Value: injected.Spec.DNSPolicy})
	}
	if injected.Spec.DNSConfig != nil {
		ops = append(ops, patchOp{Op: "add", Path: "/spec/dnsConfig", Value: injected.Spec.DNSConfig})
	}
	return ops
}

// review answers one AdmissionReview request for a pod.
func (t Translator) review(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	resp := &admissionv1.AdmissionResponse{UID: req.UID}
	deny := func(code int32, msg string) *admissionv1.AdmissionResponse {
		resp.Result = &metav1.Status{Status: metav1.StatusFailure, Code: code, Message: msg, Reason: metav1.StatusReasonForbidden}
		return resp
	}
	if req.Kind.Kind != "Pod" || req.Kind.Group != "" {
		return deny(http.StatusBadRequest, fmt.Sprintf("the nest injector admits pods, not %s", req.Kind.String()))
	}
	pod := &corev1.Pod{}
	if err := json.Unmarshal(req.Object.Raw, pod); err != nil {
		return deny(http.StatusBadRequest, "the nest injector could not read the pod: "+err.Error())
	}
	if pod.Namespace == "" {
		pod.Namespace = req.Namespace
	}
	injected, err := t.InjectedPod(pod)
	if err != nil {
		return deny(http.StatusForbidden, err.Error())
	}
	patch, err := json.Marshal(injectionPatch(pod, injected))
	if err != nil {
		return deny(http.StatusInternalServerError, err.Error())
	}
	pt := admissionv1.PatchTypeJSONPatch
	resp.Allowed, resp.Patch, resp.PatchType = true, patch, &pt
	return resp
}

// serveInjection answers AdmissionReviews (admission.k8s.io/v1) at
// contract.InjectorPath: a response for every review it can read, an HTTP error
// for anything else.
func (t Translator) serveInjection(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST an AdmissionReview", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxAdmissionReview+1))
	if err != nil || len(body) > maxAdmissionReview {
		http.Error(w, "the AdmissionReview is unreadable or larger than 4 MiB", http.StatusBadRequest)
		return
	}
	var ar admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &ar); err != nil || ar.Request == nil {
		http.Error(w, "not an AdmissionReview with a request", http.StatusBadRequest)
		return
	}
	out := admissionv1.AdmissionReview{TypeMeta: ar.TypeMeta, Response: t.review(ar.Request)}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

// injectorCert serves the certificate of the placement the member syncer
// was last handed, parsed once per certificate.
type injectorCert struct {
	placement func() *contract.MemberPlacement
	mu        sync.Mutex
	pem       []byte
	cert      *tls.Certificate
}

func (c *injectorCert) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	p := c.placement()
	if p == nil || len(p.InjectorCert) == 0 || len(p.InjectorKey) == 0 {
		return nil, errors.New("nest-manager has not issued the injector's certificate yet")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cert != nil && bytes.Equal(c.pem, p.InjectorCert) {
		return c.cert, nil
	}
	cert, err := tls.X509KeyPair(p.InjectorCert, p.InjectorKey)
	if err != nil {
		return nil, fmt.Errorf("the injector's certificate: %w", err)
	}
	c.pem, c.cert = p.InjectorCert, &cert
	return c.cert, nil
}

// serveInjector serves the member's injector on ip:port until ctx ends or
// the returned server is closed. Bodies are bounded, and so are the time
// and connections each client takes: anything that reaches the host's
// node ports reaches it.
func (s *syncer) serveInjector(ctx context.Context, ip string, port int32) (*http.Server, error) {
	certs := &injectorCert{placement: func() *contract.MemberPlacement { return s.placement.Load() }}
	l, err := tls.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(int(port))),
		&tls.Config{GetCertificate: certs.get, MinVersion: tls.VersionTLS12})
	if err != nil {
		return nil, fmt.Errorf("injector listener: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc(contract.InjectorPath, s.o.translator().serveInjection)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second,
		IdleTimeout: time.Minute, MaxHeaderBytes: 64 << 10}
	serveUntilDone(ctx, srv, netutil.LimitListener(l, maxInjectorConns), "Member injector")
	return srv, nil
}
