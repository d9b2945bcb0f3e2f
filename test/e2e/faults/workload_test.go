package faults

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nestdev/nest/internal/images"
	"github.com/nestdev/nest/internal/syncer/contract"
	"github.com/nestdev/nest/test/e2e/framework"
)

// The workload: podSlots pods and perKind Services, ConfigMaps and Secrets,
// 200 objects in all, in the tenant namespace default. Objects with an index
// below stable are only ever updated, so the survival check knows what each
// must hold; the others are also deleted and created again by the churn.
const (
	tenantNS = "default"
	podSlots = 20
	perKind  = 60
	stable   = 30
	// refsPerPod ConfigMaps and Secrets are referenced by each pod, so every
	// one of them is referenced and must have a host copy.
	refsPerPod = perKind / podSlots
)

// workload drives one tenant's objects and remembers what the tenant API
// acknowledged.
type workload struct {
	tn *framework.Tenant
	cs *kubernetes.Clientset
	// tc reads the tenant for the comparison, with the host's client's API.
	tc client.Client

	mu sync.Mutex
	// podGen is the generation in the current pod name of each slot.
	podGen [podSlots]int
	// acked and tried are the last value the tenant API acknowledged and the
	// last one sent, per stable ConfigMap and Secret ("configmap/cm-03").
	// A request cut by a fault may have been applied without an answer, so
	// either may be what the object holds.
	acked, tried map[string]string
	// before are the UIDs of the stable objects, read before the fault.
	before map[string]types.UID

	ops, failures atomic.Int64
	// errors counts the failed calls by error, numbers written N.
	errors map[string]int
}

// newWorkload returns the workload of tenant tn. Its client is allowed 50
// requests a second: client-go's default of 5 would pace the churn and the
// checks, not the system under test.
func newWorkload(t *testing.T, tn *framework.Tenant) *workload {
	cfg := rest.CopyConfig(tn.Config)
	cfg.QPS, cfg.Burst = 50, 100
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tc, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return &workload{tn: tn, cs: cs, tc: tc, acked: map[string]string{}, tried: map[string]string{}, before: map[string]types.UID{}}
}

func cmName(i int) string     { return fmt.Sprintf("cm-%02d", i) }
func secretName(i int) string { return fmt.Sprintf("secret-%02d", i) }
func svcName(i int) string    { return fmt.Sprintf("svc-%02d", i) }
func podName(slot, gen int) string {
	return fmt.Sprintf("pod-%02d-%d", slot, gen)
}

func configMap(i int, v string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: cmName(i), Namespace: tenantNS}, Data: map[string]string{"v": v}}
}

func secret(i int, v string) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: secretName(i), Namespace: tenantNS}, Data: map[string][]byte{"v": []byte(v)}}
}

func service(i int, port int32) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: svcName(i), Namespace: tenantNS},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"slot": strconv.Itoa(i % podSlots)},
			Ports:    []corev1.ServicePort{{Name: "http", Port: port, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}},
		},
	}
}

// pod is slot's pod of generation gen. It references refsPerPod ConfigMaps
// and Secrets, optionally, so it starts while the churn has one deleted.
func pod(slot, gen int) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: podName(slot, gen), Namespace: tenantNS, Labels: map[string]string{"slot": strconv.Itoa(slot)}},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: new(int64),
			Containers: []corev1.Container{{
				Name: "app", Image: images.TestApp, ImagePullPolicy: corev1.PullNever,
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")},
					// Without a CPU limit the namespace's LimitRange gives
					// 500m, and 20 pods would pass the host quota's limits.cpu.
					Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("48Mi")},
				},
			}},
		},
	}
	for r := range refsPerPod {
		i := slot*refsPerPod + r
		p.Spec.Containers[0].EnvFrom = append(p.Spec.Containers[0].EnvFrom,
			corev1.EnvFromSource{Prefix: fmt.Sprintf("CM%d_", r), ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: cmName(i)}, Optional: ptr.To(true)}},
			corev1.EnvFromSource{Prefix: fmt.Sprintf("S%d_", r), SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: secretName(i)}, Optional: ptr.To(true)}},
		)
	}
	return p
}

// create makes all 200 objects and records the stable ones' UIDs.
func (w *workload) create(t *testing.T, ctx context.Context) {
	t.Helper()
	core := w.cs.CoreV1()
	// Eight calls at once: 200 creations one after another were seconds
	// of each case on a loaded machine, and their order means nothing.
	var g errgroup.Group
	g.SetLimit(8)
	for i := range perKind {
		g.Go(func() error {
			cm, err := core.ConfigMaps(tenantNS).Create(ctx, configMap(i, "0"), metav1.CreateOptions{})
			if err != nil {
				return fmt.Errorf("create configmap %d: %w", i, err)
			}
			s, err := core.Secrets(tenantNS).Create(ctx, secret(i, "0"), metav1.CreateOptions{})
			if err != nil {
				return fmt.Errorf("create secret %d: %w", i, err)
			}
			svc, err := core.Services(tenantNS).Create(ctx, service(i, 80), metav1.CreateOptions{})
			if err != nil {
				return fmt.Errorf("create service %d: %w", i, err)
			}
			if i < stable {
				w.mu.Lock()
				w.before["configmap/"+cm.Name], w.before["secret/"+s.Name], w.before["service/"+svc.Name] = cm.UID, s.UID, svc.UID
				w.acked["configmap/"+cm.Name], w.acked["secret/"+s.Name] = "0", "0"
				w.tried["configmap/"+cm.Name], w.tried["secret/"+s.Name] = "0", "0"
				w.mu.Unlock()
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	for slot := range podSlots {
		g.Go(func() error {
			if _, err := core.Pods(tenantNS).Create(ctx, pod(slot, 0), metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("create pod %d: %w", slot, err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
}

// complete makes again what the churn or the fault left missing: a
// deleted object whose create failed, a pod slot whose pod the fault took.
// Afterwards the tenant holds the whole workload again, so the comparison
// covers all 200 objects and the system's handling of their return.
func (w *workload) complete(t *testing.T, ctx context.Context) {
	t.Helper()
	core := w.cs.CoreV1()
	for i := range perKind {
		createMissing(t, ctx, "configmap", cmName(i), func() error {
			_, err := core.ConfigMaps(tenantNS).Create(ctx, configMap(i, "0"), metav1.CreateOptions{})
			return err
		})
		createMissing(t, ctx, "secret", secretName(i), func() error {
			_, err := core.Secrets(tenantNS).Create(ctx, secret(i, "0"), metav1.CreateOptions{})
			return err
		})
		createMissing(t, ctx, "service", svcName(i), func() error {
			_, err := core.Services(tenantNS).Create(ctx, service(i, 80), metav1.CreateOptions{})
			return err
		})
	}
	pods, err := core.Pods(tenantNS).List(ctx, metav1.ListOptions{LabelSelector: "slot"})
	if err != nil {
		t.Fatal(err)
	}
	for slot := range podSlots {
		if slices.ContainsFunc(pods.Items, func(p corev1.Pod) bool {
			return p.Labels["slot"] == strconv.Itoa(slot) && p.DeletionTimestamp == nil
		}) {
			continue
		}
		w.podGen[slot]++
		if _, err := core.Pods(tenantNS).Create(ctx, pod(slot, w.podGen[slot]), metav1.CreateOptions{}); err != nil {
			t.Fatalf("recreate pod slot %d: %v", slot, err)
		}
	}
}

// createMissing creates an object when it does not exist; an existing one
// is left as the churn left it.
func createMissing(t *testing.T, ctx context.Context, kind, name string, create func() error) {
	t.Helper()
	if err := create(); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create missing %s %s: %v", kind, name, err)
	}
}

// churn changes objects until ctx ends, one step every 100 ms. Every step
// updates one ConfigMap, Secret and Service; every other step of an
// unstable index also deletes and creates them again; every podEvery-th
// step replaces one pod with its next generation. Failed calls are counted, not
// fatal: the fault makes some fail, and the tenant API's final state is
// what the host must match.
func (w *workload) churn(ctx context.Context) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for step := 1; ; step++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			w.step(ctx, step)
		}
	}()
	return done
}

func (w *workload) step(ctx context.Context, step int) {
	i := step % perKind
	v := strconv.Itoa(step)
	w.count(w.update(ctx, "configmap", cmName(i), v))
	w.count(w.update(ctx, "secret", secretName(i), v))
	port := fmt.Sprintf(`{"spec":{"ports":[{"name":"http","port":%d,"targetPort":8080,"protocol":"TCP"}]}}`, 80+step%2)
	_, err := w.cs.CoreV1().Services(tenantNS).Patch(ctx, svcName(i), types.MergePatchType, []byte(port), metav1.PatchOptions{})
	w.count(ignoreNotFound(err))
	if i >= stable && step%2 == 0 {
		w.recreate(ctx, i, v)
	}
	if step%podEvery == 0 {
		w.replacePod(ctx, (step/podEvery)%podSlots)
	}
}

// podEvery is how many churn steps go by per pod replaced: about one a
// second. Every third step (three a second) cost the suite more CPU in pod
// starts than everything else it did, on the two cores all suites share,
// and a fault of a few seconds still sees several pods replaced.
const podEvery = 10

// update patches the "v" key of a ConfigMap or Secret and records the value.
func (w *workload) update(ctx context.Context, kind, name, v string) error {
	key := kind + "/" + name
	w.mu.Lock()
	if _, ok := w.tried[key]; ok {
		w.tried[key] = v
	}
	w.mu.Unlock()
	var err error
	switch kind {
	case "configmap":
		_, err = w.cs.CoreV1().ConfigMaps(tenantNS).Patch(ctx, name, types.MergePatchType, []byte(`{"data":{"v":"`+v+`"}}`), metav1.PatchOptions{})
	case "secret":
		_, err = w.cs.CoreV1().Secrets(tenantNS).Patch(ctx, name, types.MergePatchType, []byte(`{"stringData":{"v":"`+v+`"}}`), metav1.PatchOptions{})
	}
	if err == nil {
		w.mu.Lock()
		if _, ok := w.acked[key]; ok {
			w.acked[key] = v
		}
		w.mu.Unlock()
	}
	return ignoreNotFound(err)
}

// recreate deletes and creates again the unstable objects of index i.
func (w *workload) recreate(ctx context.Context, i int, v string) {
	core := w.cs.CoreV1()
	w.count(ignoreNotFound(core.ConfigMaps(tenantNS).Delete(ctx, cmName(i), metav1.DeleteOptions{})))
	w.count(ignoreNotFound(core.Secrets(tenantNS).Delete(ctx, secretName(i), metav1.DeleteOptions{})))
	w.count(ignoreNotFound(core.Services(tenantNS).Delete(ctx, svcName(i), metav1.DeleteOptions{})))
	_, err := core.ConfigMaps(tenantNS).Create(ctx, configMap(i, v), metav1.CreateOptions{})
	w.count(err)
	_, err = core.Secrets(tenantNS).Create(ctx, secret(i, v), metav1.CreateOptions{})
	w.count(err)
	_, err = core.Services(tenantNS).Create(ctx, service(i, 80), metav1.CreateOptions{})
	w.count(err)
}

// replacePod deletes slot's pod and creates the next generation. When the
// create fails the slot tries again on its next turn, from the generation
// after, so no two generations of a slot are created by one turn.
func (w *workload) replacePod(ctx context.Context, slot int) {
	w.mu.Lock()
	gen := w.podGen[slot]
	w.mu.Unlock()
	pods := w.cs.CoreV1().Pods(tenantNS)
	err := pods.Delete(ctx, podName(slot, gen), metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	if w.count(ignoreNotFound(err)) != nil {
		return
	}
	w.mu.Lock()
	w.podGen[slot] = gen + 1
	w.mu.Unlock()
	_, err = pods.Create(ctx, pod(slot, gen+1), metav1.CreateOptions{})
	w.count(err)
}

func (w *workload) count(err error) error {
	// Calls cut by the churn's own end are not calls the tenant failed.
	if errors.Is(err, context.Canceled) {
		return err
	}
	w.ops.Add(1)
	if err != nil {
		w.failures.Add(1)
		w.mu.Lock()
		if w.errors == nil {
			w.errors = map[string]int{}
		}
		w.errors[digits.ReplaceAllString(err.Error(), "N")]++
		w.mu.Unlock()
	}
	return err
}

// digits are the numbers in an error's text (object names, addresses,
// durations), which differ between errors of one kind.
var digits = regexp.MustCompile(`[0-9]+`)

// failedCalls lists the commonest errors of the failed calls.
func (w *workload) failedCalls() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return framework.TopErrors(w.errors, 3)
}

func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// agreement compares the tenant with the host and returns what differs, or
// nil when they agree exactly:
//   - every tenant pod runs, and has exactly one host pod, which runs and
//     carries its UID; no host pod lacks a tenant pod;
//   - every tenant ConfigMap and Secret of the workload (each is referenced
//     by a pod) has a host copy with the same data, and every tenant Service
//     one with the same ports; no host copy lacks its tenant object.
//
// It also returns how many objects it compared on each side.
func (w *workload) agreement(ctx context.Context, host client.Client) (tenantCount, hostCount int, err error) {
	vc := w.tn.Name
	var errs []error
	var tPods, hPods corev1.PodList
	var tCMs, hCMs corev1.ConfigMapList
	var tSecrets, hSecrets corev1.SecretList
	var tSvcs, hSvcs corev1.ServiceList
	for _, l := range [][2]client.ObjectList{{&tPods, &hPods}, {&tCMs, &hCMs}, {&tSecrets, &hSecrets}, {&tSvcs, &hSvcs}} {
		if err := w.listBoth(ctx, host, l[0], l[1]); err != nil {
			return 0, 0, err
		}
	}
	// The tenant also has kube-root-ca.crt and the kubernetes Service,
	// which the syncer treats on their own terms.
	tCMs.Items, tSecrets.Items, tSvcs.Items = workloadOnly(tCMs.Items, "cm-"), workloadOnly(tSecrets.Items, "secret-"), workloadOnly(tSvcs.Items, "svc-")
	errs = append(errs, comparePods(tPods.Items, hPods.Items)...)
	cmRefs, secretRefs := references(tPods.Items)
	errs = append(errs, compare("configmap", vc, tCMs.Items, hCMs.Items, cmRefs, func(tc, hc *corev1.ConfigMap) bool {
		return maps.Equal(tc.Data, hc.Data)
	})...)
	hSecrets.Items = slices.DeleteFunc(hSecrets.Items, func(s corev1.Secret) bool { return s.Labels[contract.LabelTokenSecret] != "" })
	errs = append(errs, compare("secret", vc, tSecrets.Items, hSecrets.Items, secretRefs, func(ts, hs *corev1.Secret) bool {
		return maps.EqualFunc(ts.Data, hs.Data, slices.Equal)
	})...)
	errs = append(errs, compare("service", vc, tSvcs.Items, hSvcs.Items, nil, func(ts, hs *corev1.Service) bool {
		return slices.EqualFunc(ts.Spec.Ports, hs.Spec.Ports, func(a, b corev1.ServicePort) bool { return a.Port == b.Port && a.Protocol == b.Protocol })
	})...)

	tenantCount = len(tPods.Items) + len(tCMs.Items) + len(tSecrets.Items) + len(tSvcs.Items)
	hostCount = len(hPods.Items) + len(hCMs.Items) + len(hSecrets.Items) + len(hSvcs.Items)
	return tenantCount, hostCount, errors.Join(errs...)
}

// listBoth lists the tenant namespace's objects into tenant, and the
// syncer's host objects of that namespace into host.
func (w *workload) listBoth(ctx context.Context, host client.Client, tenant, hostList client.ObjectList) error {
	if err := w.tc.List(ctx, tenant, client.InNamespace(tenantNS)); err != nil {
		return err
	}
	return host.List(ctx, hostList, client.InNamespace(w.tn.Namespace), client.MatchingLabels{contract.LabelTenantOf: w.tn.Name, contract.LabelTenantNamespace: tenantNS})
}

// workloadOnly keeps the tenant objects the workload made, named with prefix.
func workloadOnly[T any, PT interface {
	*T
	metav1.Object
}](items []T, prefix string) []T {
	return slices.DeleteFunc(items, func(o T) bool {
		name := PT(&o).GetName()
		return len(name) < len(prefix) || name[:len(prefix)] != prefix
	})
}

// references are the ConfigMaps and Secrets the tenant pods reference: the
// syncer copies those, and may leave a copy no pod needs any more.
func references(pods []corev1.Pod) (configMaps, secrets map[string]bool) {
	configMaps, secrets = map[string]bool{}, map[string]bool{}
	for _, p := range pods {
		for _, c := range p.Spec.Containers {
			for _, from := range c.EnvFrom {
				if from.ConfigMapRef != nil {
					configMaps[from.ConfigMapRef.Name] = true
				}
				if from.SecretRef != nil {
					secrets[from.SecretRef.Name] = true
				}
			}
		}
	}
	return configMaps, secrets
}

// compare checks that each tenant object in required (every one, when
// required is nil) has one host copy under its host name for which same
// holds, that any other copy also matches, and that every host copy has a
// tenant object. Host copies of tenant objects outside the workload
// (kube-root-ca.crt) are only checked for having a tenant object.
func compare[T any, PT interface {
	*T
	client.Object
}](kind, vc string, tenant, host []T, required map[string]bool, same func(t, h PT) bool) []error {
	var errs []error
	hostByName := map[string]PT{}
	for i := range host {
		hostByName[PT(&host[i]).GetName()] = PT(&host[i])
	}
	tenantByHostName := map[string]bool{}
	for i := range tenant {
		to := PT(&tenant[i])
		name := contract.HostName(vc, tenantNS, to.GetName())
		tenantByHostName[name] = true
		ho, ok := hostByName[name]
		switch {
		case !ok && required != nil && !required[to.GetName()]:
		case !ok:
			errs = append(errs, fmt.Errorf("%s %s has no host copy %s", kind, to.GetName(), name))
		case !same(to, ho):
			errs = append(errs, fmt.Errorf("%s %s differs from its host copy %s", kind, to.GetName(), name))
		}
	}
	for name, ho := range hostByName {
		tenantName := ho.GetAnnotations()[contract.AnnotationTenantName]
		if !tenantByHostName[name] && !slices.ContainsFunc(tenant, func(o T) bool { return PT(&o).GetName() == tenantName }) && !isOutsideWorkload(kind, tenantName) {
			errs = append(errs, fmt.Errorf("host %s %s is an orphan: tenant %s is gone", kind, name, tenantName))
		}
	}
	return errs
}

// isOutsideWorkload reports whether a host copy's tenant object is one the
// tenant cluster makes by itself.
func isOutsideWorkload(kind, tenantName string) bool {
	return (kind == "configmap" && tenantName == "kube-root-ca.crt") || (kind == "service" && tenantName == "kubernetes")
}

// comparePods checks one running host pod per running tenant pod, with the
// tenant pod's UID, and no other host pod.
func comparePods(tenant, host []corev1.Pod) []error {
	var errs []error
	byUID := map[string][]corev1.Pod{}
	for _, h := range host {
		uid := h.Annotations[contract.AnnotationTenantUID]
		byUID[uid] = append(byUID[uid], h)
	}
	for _, p := range tenant {
		hs := byUID[string(p.UID)]
		delete(byUID, string(p.UID))
		switch {
		case len(hs) == 0:
			errs = append(errs, fmt.Errorf("pod %s has no host pod", p.Name))
		case len(hs) > 1:
			errs = append(errs, fmt.Errorf("pod %s has %d host pods", p.Name, len(hs)))
		case p.DeletionTimestamp != nil:
			errs = append(errs, fmt.Errorf("pod %s is still being deleted", p.Name))
		case p.Status.Phase != corev1.PodRunning || hs[0].Status.Phase != corev1.PodRunning:
			errs = append(errs, fmt.Errorf("pod %s is %s, its host pod %s%s", p.Name, p.Status.Phase, hs[0].Status.Phase, waitingFor(&hs[0])))
		}
	}
	for uid, hs := range byUID {
		for _, h := range hs {
			errs = append(errs, fmt.Errorf("host pod %s is an orphan: no tenant pod has UID %q", h.Name, uid))
		}
	}
	return errs
}

// waitingFor says why a pod is not running yet: a container's waiting
// reason, or why it is not scheduled; "" when neither says.
func waitingFor(pod *corev1.Pod) string {
	for _, c := range slices.Concat(pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses) {
		if w := c.State.Waiting; w != nil {
			return fmt.Sprintf(" (%s: %s %s)", c.Name, w.Reason, w.Message)
		}
	}
	for _, c := range pod.Status.Conditions {
		if c.Status != corev1.ConditionTrue && c.Message != "" {
			return fmt.Sprintf(" (%s: %s)", c.Type, c.Message)
		}
	}
	return ""
}

// survived checks that every stable object is still the one made before the
// fault, holding a value the tenant API was sent last or acknowledged last.
func (w *workload) survived(t *testing.T, ctx context.Context) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	core := w.cs.CoreV1()
	for i := range stable {
		cm, err := core.ConfigMaps(tenantNS).Get(ctx, cmName(i), metav1.GetOptions{})
		w.checkSurvivor(t, "configmap/"+cmName(i), cm, err, func() string { return cm.Data["v"] })
		s, err := core.Secrets(tenantNS).Get(ctx, secretName(i), metav1.GetOptions{})
		w.checkSurvivor(t, "secret/"+secretName(i), s, err, func() string { return string(s.Data["v"]) })
		svc, err := core.Services(tenantNS).Get(ctx, svcName(i), metav1.GetOptions{})
		w.checkSurvivor(t, "service/"+svcName(i), svc, err, nil)
	}
}

func (w *workload) checkSurvivor(t *testing.T, key string, o metav1.Object, err error, value func() string) {
	t.Helper()
	if err != nil {
		t.Errorf("%s made before the fault: %v", key, err)
		return
	}
	if o.GetUID() != w.before[key] {
		t.Errorf("%s has UID %s, want %s: it was lost and made again", key, o.GetUID(), w.before[key])
	}
	if value == nil {
		return
	}
	if got := value(); got != w.acked[key] && got != w.tried[key] {
		t.Errorf("%s holds %q, want the last acknowledged %q or the last sent %q", key, got, w.acked[key], w.tried[key])
	}
}
