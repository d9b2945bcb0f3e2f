package dashboard

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"k8s.io/utils/ptr"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/controlplane"
	"github.com/nestdev/nest/internal/syncer/contract"
	"github.com/nestdev/nest/internal/vcops"
	"github.com/nestdev/nest/internal/version"
)

// apiTimeout bounds the API calls of one page.
const apiTimeout = 15 * time.Second

// page is what the layout renders around a page's Data.
type page struct {
	Title    string
	Identity string
	SignIn   bool
	// Error is shown instead of the page's data when set.
	Error string
	Data  any
}

// render writes a whole page with status code.
func (s *Server) render(w http.ResponseWriter, r *http.Request, status int, name, title string, data any, pageErr error) {
	p := page{Title: title, Identity: s.o.Clients.Identity(r), SignIn: s.o.Clients.SignIn(), Data: data}
	if pageErr != nil {
		p.Error = pageErr.Error()
	}
	var buf bytes.Buffer
	if err := s.pages[name].ExecuteTemplate(&buf, "layout.html", p); err != nil {
		klog.ErrorS(err, "Render page", "page", name)
		http.Error(w, "render "+name+": "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// fail renders err as the page: sign-in for ErrSignIn, else the error page
// with the API server's own status and message, never data.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, ErrSignIn) {
		http.Redirect(w, r, "/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
		return
	}
	s.render(w, r, statusOf(err), "error", "Error", nil, err)
}

// apiHandler serves a request with its user's client and a context bounded
// by apiTimeout.
type apiHandler func(w http.ResponseWriter, r *http.Request, ctx context.Context, c client.WithWatch)

// withClient gets the request user's client for h, or sends the user to
// sign in or to the error page.
func (s *Server) withClient(h apiHandler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		c, err := s.o.Clients.ClientFor(r)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), apiTimeout)
		defer cancel()
		h(w, r, ctx, c)
	}
}

// clustersView is the clusters page.
type clustersView struct {
	Namespace string
	Rows      []clusterRow
	// LiveError is why live updates stopped, if they did.
	LiveError string
	// LiveURL is the event stream that refreshes Rows.
	LiveURL string
}

func (s *Server) clusters(w http.ResponseWriter, r *http.Request, ctx context.Context, c client.WithWatch) {
	ns := strings.TrimSpace(r.URL.Query().Get("namespace"))
	rows, err := s.clusterRows(ctx, c, ns)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.render(w, r, http.StatusOK, "clusters", "Virtual clusters", clustersView{Namespace: ns, Rows: rows, LiveURL: "/live/clusters?namespace=" + url.QueryEscape(ns)}, nil)
}

// clusterRows lists the virtual clusters in ns ("" for all) with their
// usage. Usage needs the tenant quotas; a user who may not read them sees
// the clusters without it.
func (s *Server) clusterRows(ctx context.Context, c client.Client, ns string) ([]clusterRow, error) {
	var vcs nestv1.VirtualClusterList
	if err := c.List(ctx, &vcs, client.InNamespace(ns)); err != nil {
		return nil, fmt.Errorf("list virtual clusters%s: %w", inNamespace(ns), err)
	}
	var quotas corev1.ResourceQuotaList
	if err := c.List(ctx, &quotas, client.InNamespace(ns), client.MatchingLabels{controlplane.LabelManagedBy: controlplane.ManagedByValue}); err != nil {
		klog.V(2).InfoS("Usage unavailable", "namespace", ns, "err", err)
		quotas.Items = nil
	}
	return rowsOf(vcs.Items, quotas.Items, s.o.Now()), nil
}

func inNamespace(ns string) string {
	if ns == "" {
		return " in all namespaces"
	}
	return " in namespace " + ns
}

// clusterView is one cluster's page; Live is the part the stream refreshes.
type clusterView struct {
	Namespace, Name string
	Live            clusterLive
	Share           shareForm
	// ShareErrors are the share form's errors by field.
	ShareErrors map[string]string
	// DeleteError is the delete form's error.
	DeleteError string
	// Upgrade is the upgrade form.
	Upgrade upgradeForm
	// Snapshots is the snapshots card.
	Snapshots snapshotsCard
	// KubeconfigCommand is the CLI command that saves the kubeconfig.
	KubeconfigCommand string
	LiveURL           string
}

// clusterLive is everything on a cluster's page that changes on its own.
type clusterLive struct {
	Namespace, Name string
	// Gone is true once the VirtualCluster no longer exists.
	Gone       bool
	Row        clusterRow
	Progress   []progressStep
	Conditions []conditionRow
	Events     []eventRow
	Components []componentRow
	HostPods   []hostPodRow
	Capacity   string
	// HasKubeconfig is true once the kubeconfig can be downloaded.
	HasKubeconfig bool
	// Warnings name what could not be read (for lack of rights, say).
	Warnings []string
}

func keyOf(r *http.Request) types.NamespacedName {
	return types.NamespacedName{Namespace: r.PathValue("namespace"), Name: r.PathValue("name")}
}

func (s *Server) cluster(w http.ResponseWriter, r *http.Request, ctx context.Context, c client.WithWatch) {
	key := keyOf(r)
	view, err := s.clusterView(ctx, c, key)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.render(w, r, http.StatusOK, "cluster", key.Name, view, nil)
}

func (s *Server) clusterView(ctx context.Context, c client.Client, key types.NamespacedName) (clusterView, error) {
	vc := &nestv1.VirtualCluster{}
	if err := c.Get(ctx, key, vc); err != nil {
		return clusterView{}, fmt.Errorf("virtual cluster %s: %w", key, err)
	}
	return clusterView{
		Namespace: key.Namespace, Name: key.Name,
		Live:              s.liveOf(ctx, c, vc),
		Share:             shareFormOf(vc),
		Upgrade:           upgradeFormOf(vc),
		Snapshots:         s.snapshotsOf(ctx, vc),
		KubeconfigCommand: fmt.Sprintf("nest kubeconfig %s -n %s -o %s.kubeconfig", key.Name, key.Namespace, key.Name),
		LiveURL:           "/live/clusters/" + url.PathEscape(key.Namespace) + "/" + url.PathEscape(key.Name),
	}, nil
}

// clusterLiveFor reads the cluster again; a cluster that is gone is not an
// error here: the page says so.
func (s *Server) clusterLiveFor(ctx context.Context, c client.Client, key types.NamespacedName) (clusterLive, error) {
	vc := &nestv1.VirtualCluster{}
	if err := c.Get(ctx, key, vc); apierrors.IsNotFound(err) {
		return clusterLive{Namespace: key.Namespace, Name: key.Name, Gone: true}, nil
	} else if err != nil {
		return clusterLive{}, fmt.Errorf("virtual cluster %s: %w", key, err)
	}
	return s.liveOf(ctx, c, vc), nil
}

// liveOf reads what belongs to vc in its host namespace. What the user may
// not read becomes a warning, not a failed page.
func (s *Server) liveOf(ctx context.Context, c client.Client, vc *nestv1.VirtualCluster) clusterLive {
	now := s.o.Now()
	n := controlplane.NamesOf(vc)
	live := clusterLive{Namespace: vc.Namespace, Name: vc.Name, Progress: progressOf(vc), Conditions: conditionsOf(vc, now),
		Capacity: capacityOf(vc), HasKubeconfig: vc.Spec.Kubeconfig != ""}
	warn := func(what string, err error) {
		live.Warnings = append(live.Warnings, fmt.Sprintf("%s: %v", what, err))
	}
	quota := &corev1.ResourceQuota{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: vc.Namespace, Name: n.TenantQuota()}, quota); err != nil {
		quota = nil
		if !apierrors.IsNotFound(err) {
			warn("usage", err)
		}
	}
	live.Row = rowOf(vc, quota, now)
	pod := &corev1.Pod{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: vc.Namespace, Name: n.ControlPlanePod()}, pod); err != nil {
		pod = nil
		if !apierrors.IsNotFound(err) {
			warn("control plane", err)
		}
	}
	live.Components = componentsOf(pod)
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(vc.Namespace), client.MatchingLabels{contract.LabelTenantOf: vc.Name}); err != nil {
		warn("host pods", err)
	}
	live.HostPods = hostPodsOf(pods.Items)
	var events corev1.EventList
	if err := c.List(ctx, &events, client.InNamespace(vc.Namespace), client.MatchingFields{"involvedObject.name": vc.Name}); err != nil {
		warn("events", err)
	}
	live.Events = eventsOf(events.Items, vc, now, 20)
	return live
}

// createView is the create form with what the user typed and its errors.
type createView struct {
	Form   createForm
	Errors map[string]string
	// Levels and ServiceTypes are the choices of the two selects.
	Levels       []string
	ServiceTypes []string
	Replicas     []string
}

// createForm is the create form's fields.
type createForm struct {
	Name, Namespace, CPU, Memory, GPU, Pods, Storage, Replicas, PodSecurity, ServiceType, ExternalIPs string
}

func newCreateView(f createForm, errs map[string]string) createView {
	return createView{Form: f, Errors: errs,
		Levels:       []string{string(nestv1.PodSecurityBaseline), string(nestv1.PodSecurityRestricted)},
		ServiceTypes: []string{hostDefaultServiceType, "NodePort", "LoadBalancer", "ClusterIP"},
		Replicas:     []string{"1", "3"}}
}

// hostDefaultServiceType is the form's choice that leaves
// spec.controlPlane.service.type unset, for nest-manager's
// --default-service-type.
const hostDefaultServiceType = "host default"

func (s *Server) createForm(w http.ResponseWriter, r *http.Request) {
	if _, err := s.o.Clients.ClientFor(r); err != nil {
		s.fail(w, r, err)
		return
	}
	f := createForm{Replicas: "1", PodSecurity: string(nestv1.PodSecurityBaseline), ServiceType: hostDefaultServiceType, Namespace: r.URL.Query().Get("namespace")}
	s.render(w, r, http.StatusOK, "create", "Create a virtual cluster", newCreateView(f, nil), nil)
}

func formOf(r *http.Request) createForm {
	v := func(k string) string { return strings.TrimSpace(r.PostFormValue(k)) }
	return createForm{Name: v(vcops.FieldName), Namespace: v(vcops.FieldNamespace), CPU: v(vcops.FieldCPU), Memory: v(vcops.FieldMemory),
		GPU: v(vcops.FieldGPU), Pods: v(vcops.FieldPods), Storage: v(vcops.FieldStorage), Replicas: v(vcops.FieldReplicas), PodSecurity: v(vcops.FieldPodSecurity), ServiceType: v(vcops.FieldServiceType),
		ExternalIPs: v(vcops.FieldExternalIPs)}
}

// virtualClusterOf builds the VirtualCluster the form asks for; the API
// server validates the rest and its causes come back to the fields.
func virtualClusterOf(f createForm) (*nestv1.VirtualCluster, error) {
	if err := vcops.ValidateName(f.Name); err != nil {
		return nil, err
	}
	res, err := vcops.Share{CPU: f.CPU, Memory: f.Memory, GPU: f.GPU, Pods: f.Pods}.Resources()
	if err != nil {
		return nil, err
	}
	ns := f.Namespace
	if ns == "" {
		ns = vcops.DefaultNamespace(f.Name)
	}
	vc := &nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: f.Name, Namespace: ns}}
	if len(res) > 0 {
		vc.Spec.PromoteResources.Resources = res
	}
	if f.Storage != "" {
		q, err := resource.ParseQuantity(f.Storage)
		if err != nil || q.Sign() < 0 {
			return nil, &vcops.FieldError{Field: vcops.FieldStorage, Value: f.Storage, Reason: "want the storage all the tenant's claims may request together, such as 10Gi"}
		}
		vc.Spec.VirtualNode.Storage.Requests = &q
	}
	if f.Replicas != "" {
		n, err := strconv.ParseInt(f.Replicas, 10, 32)
		if err != nil || (n != 1 && n != 3) {
			return nil, &vcops.FieldError{Field: vcops.FieldReplicas, Value: f.Replicas, Reason: "want 1, or 3 for a highly available control plane"}
		}
		vc.Spec.ControlPlane.Replicas = ptr.To(int32(n))
	}
	vc.Spec.VirtualNode.PodSecurityLevel = nestv1.PodSecurityLevel(f.PodSecurity)
	if f.ServiceType != hostDefaultServiceType {
		vc.Spec.ControlPlane.Service.Type = nestv1.ServiceType(f.ServiceType)
	}
	vc.Spec.ExternalIPs = strings.FieldsFunc(f.ExternalIPs, func(r rune) bool { return r == ',' || r == ' ' || r == '\n' || r == '\t' })
	return vc, nil
}

func (s *Server) create(w http.ResponseWriter, r *http.Request, ctx context.Context, c client.WithWatch) {
	f := formOf(r)
	vc, err := virtualClusterOf(f)
	if err == nil {
		var created bool
		created, err = vcops.Create(ctx, c, vc, vcops.CreatedByDashboard)
		if err == nil && !created {
			err = &vcops.FieldError{Field: vcops.FieldName, Value: f.Name, Reason: "a virtual cluster of this name already exists in namespace " + vc.Namespace + ": choose another name"}
		}
	}
	if err != nil {
		klog.V(2).InfoS("Create refused", "name", f.Name, "err", err)
		s.render(w, r, statusOf(err), "create", "Create a virtual cluster", newCreateView(f, formErrors(err)), nil)
		return
	}
	klog.InfoS("Virtual cluster created", "virtualCluster", klog.KObj(vc), "user", s.o.Clients.Identity(r))
	http.Redirect(w, r, clusterURL(client.ObjectKeyFromObject(vc)), http.StatusSeeOther)
}

func clusterURL(key types.NamespacedName) string {
	return "/clusters/" + url.PathEscape(key.Namespace) + "/" + url.PathEscape(key.Name)
}

func (s *Server) kubeconfig(w http.ResponseWriter, r *http.Request, ctx context.Context, c client.WithWatch) {
	key := keyOf(r)
	data, err := vcops.ReadKubeconfig(ctx, c, key, false)
	if errors.Is(err, vcops.ErrNoKubeconfig) {
		s.render(w, r, http.StatusConflict, "error", "No kubeconfig yet", nil, err)
		return
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/yaml")
	w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", key.Name+".kubeconfig"))
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(data)
}

func (s *Server) share(w http.ResponseWriter, r *http.Request, ctx context.Context, c client.WithWatch) {
	key := keyOf(r)
	f := shareForm{CPU: r.PostFormValue(vcops.FieldCPU), Memory: r.PostFormValue(vcops.FieldMemory), GPU: r.PostFormValue(vcops.FieldGPU), Pods: r.PostFormValue(vcops.FieldPods)}
	res, err := vcops.Share{CPU: f.CPU, Memory: f.Memory, GPU: f.GPU, Pods: f.Pods}.Resources()
	if err == nil {
		err = vcops.SetShare(ctx, c, key, res)
	}
	if err != nil {
		s.clusterWithFormError(w, r, c, key, err, func(v *clusterView) { v.Share, v.ShareErrors = f, formErrors(err) })
		return
	}
	klog.InfoS("Share changed", "virtualCluster", key, "resources", res, "user", s.o.Clients.Identity(r))
	http.Redirect(w, r, clusterURL(key), http.StatusSeeOther)
}

// upgradeForm is the upgrade card: the version the control plane runs,
// the one asked for, and the versions it may move to.
type upgradeForm struct {
	Running, Wanted string
	// Offered are the supported versions version.CheckUpgrade allows from
	// Running, Running excluded.
	Offered []string
	// Error is the form's error.
	Error string
}

func upgradeFormOf(vc *nestv1.VirtualCluster) upgradeForm {
	f := upgradeForm{Running: controlplane.RunningVersion(vc), Wanted: controlplane.KubernetesVersion(vc)}
	for _, v := range version.Supported {
		if v != f.Running && version.CheckUpgrade(f.Running, v) == nil {
			f.Offered = append(f.Offered, v)
		}
	}
	return f
}

// upgrade moves the cluster to the posted version through vcops.Upgrade,
// which refuses what nest upgrade and the CRD refuse.
func (s *Server) upgrade(w http.ResponseWriter, r *http.Request, ctx context.Context, c client.WithWatch) {
	key := keyOf(r)
	to := r.PostFormValue(vcops.FieldKubernetesVersion)
	from, err := vcops.Upgrade(ctx, c, key, to)
	if err != nil {
		s.clusterWithFormError(w, r, c, key, err, func(v *clusterView) { v.Upgrade.Error = err.Error() })
		return
	}
	klog.InfoS("Virtual cluster upgrading", "virtualCluster", key, "from", from, "to", to, "user", s.o.Clients.Identity(r))
	http.Redirect(w, r, clusterURL(key), http.StatusSeeOther)
}

// snapshotNow asks nest-manager for a snapshot now (vcops.RequestSnapshot),
// as the user: their right to patch the VirtualCluster is the check.
func (s *Server) snapshotNow(w http.ResponseWriter, r *http.Request, ctx context.Context, c client.WithWatch) {
	key := keyOf(r)
	req, err := vcops.RequestSnapshot(ctx, c, key, s.o.Now())
	if err != nil {
		s.clusterWithFormError(w, r, c, key, err, func(v *clusterView) { v.Snapshots.Error = err.Error() })
		return
	}
	klog.InfoS("Snapshot requested", "virtualCluster", key, "request", req, "user", s.o.Clients.Identity(r))
	http.Redirect(w, r, clusterURL(key), http.StatusSeeOther)
}

func (s *Server) delete(w http.ResponseWriter, r *http.Request, ctx context.Context, c client.WithWatch) {
	key := keyOf(r)
	if confirm := strings.TrimSpace(r.PostFormValue("confirm")); confirm != key.Name {
		err := fmt.Errorf("type the cluster's name, %s, to confirm: you typed %q", key.Name, confirm)
		s.clusterWithFormError(w, r, c, key, &vcops.FieldError{Field: "confirm", Value: confirm, Reason: err.Error()}, func(v *clusterView) { v.DeleteError = err.Error() })
		return
	}
	current := &nestv1.VirtualCluster{}
	alreadyDeleting := c.Get(ctx, key, current) == nil && current.DeletionTimestamp != nil
	if err := vcops.Delete(ctx, c, key); err != nil {
		s.clusterWithFormError(w, r, c, key, err, func(v *clusterView) { v.DeleteError = err.Error() })
		return
	}
	klog.InfoS("Virtual cluster deleting", "virtualCluster", key, "user", s.o.Clients.Identity(r))
	if !alreadyDeleting {
		s.removeNamespaceWhenGone(c, key)
	}
	http.Redirect(w, r, "/?namespace="+url.QueryEscape(key.Namespace), http.StatusSeeOther)
}

// namespaceCleanupTimeout bounds how long the dashboard waits for a deleted
// cluster's host objects before it stops trying to remove its namespace.
const namespaceCleanupTimeout = 10 * time.Minute

// removeNamespaceWhenGone starts, in the background, the removal of the
// host namespace a Nest tool made for the cluster once nest-manager has
// removed the cluster, as `nest delete --wait` does. It acts with the same
// user's client, runs at most once per cluster, and is best effort: it stops
// with the server or after namespaceCleanupTimeout.
func (s *Server) removeNamespaceWhenGone(c client.Client, key types.NamespacedName) {
	if _, running := s.cleanups.LoadOrStore(key, true); running {
		return
	}
	go func() {
		defer s.cleanups.Delete(key)
		waitAndRemoveNamespace(s.o.Context, c, key)
	}()
}

func waitAndRemoveNamespace(parent context.Context, c client.Client, key types.NamespacedName) {
	ctx, cancel := context.WithTimeout(parent, namespaceCleanupTimeout)
	defer cancel()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		err := c.Get(ctx, key, &nestv1.VirtualCluster{})
		if apierrors.IsNotFound(err) {
			if err := vcops.DeleteOwnNamespace(ctx, c, key.Namespace); err != nil {
				klog.ErrorS(err, "Remove namespace", "namespace", key.Namespace)
			}
			return
		}
		select {
		case <-ctx.Done():
			klog.InfoS("Namespace left: the cluster is still being deleted", "virtualCluster", key)
			return
		case <-tick.C:
		}
	}
}

// clusterWithFormError renders the cluster's page with a form's error, or
// the error page if the cluster cannot be read.
func (s *Server) clusterWithFormError(w http.ResponseWriter, r *http.Request, c client.Client, key types.NamespacedName, formErr error, set func(*clusterView)) {
	ctx, cancel := context.WithTimeout(r.Context(), apiTimeout)
	defer cancel()
	view, err := s.clusterView(ctx, c, key)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	set(&view)
	s.render(w, r, statusOf(formErr), "cluster", key.Name, view, nil)
}
