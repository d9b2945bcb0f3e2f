package tenantmsg

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/virtual-kubelet/virtual-kubelet/errdefs"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/nestdev/nest/internal/syncer/contract"
)

// The tenant alpha's pod shop/web, and what stands for it on the host.
var (
	hostPod  = contract.HostName("alpha", "shop", "web")
	hostCopy = contract.HostName("alpha", "shop", "settings")
	scope    = Scope{VirtualCluster: "alpha", HostNamespace: "vc-alpha", Namespace: "shop",
		Names: map[string]string{"host-uid-1": "tenant-uid-1", "worker-2": "nest-virtual-node"}, Addresses: []string{"10.244.1.5"}}
	member = Scope{VirtualCluster: "alpha", HostNamespace: "nest-alpha-0123456789", Member: "gpu", Namespace: "shop"}
)

// hostLeaks are words of the host no message in these tests may keep.
var hostLeaks = []string{"vc-alpha", hostPod, hostCopy, "alpha-tenant-share", "alpha-object-budget", "nest-grant", "10.96.", "10.0.0.1", "used: ", "limited: ", "alpha-syncer", "worker-2", "host-uid-1"}

// quotaRefusal is the host API server's refusal of a create by a
// ResourceQuota.
func quotaRefusal(resource, quota, requested string) error {
	return apierrors.NewForbidden(corev1.Resource(resource), hostPod,
		fmt.Errorf("exceeded quota: %s, requested: %s, used: %s, limited: %s", quota, requested, requested, requested))
}

// createFailed is how the syncer wraps a host create that failed.
func createFailed(err error) error {
	return Wrap(fmt.Errorf("create host pod vc-alpha/%s: %w", hostPod, err), "the host did not create the pod")
}

func TestErrorTellsTheTenantTheReasonInItsOwnTerms(t *testing.T) {
	preStop := field.NewPath("spec", "containers").Index(0).Child("lifecycle", "preStop", "sleep", "seconds")
	helperImage := field.NewPath("spec", "initContainers").Index(0).Child("image")
	tenantInit := field.NewPath("spec", "initContainers").Index(2).Child("command")
	// The host pod starts with two helper init containers.
	fields := scope
	fields.Field = func(path string) (string, bool) {
		switch path {
		case helperImage.String():
			return "", false
		case tenantInit.String():
			return "spec.initContainers[0].command", true
		}
		return path, true
	}
	for _, tt := range []struct {
		name  string
		scope Scope
		err   error
		want  string
	}{
		{name: "the share's quota", scope: scope,
			err:  createFailed(quotaRefusal("pods", "alpha-tenant-share", "requests.cpu=2")),
			want: "the host did not create the pod: the VirtualCluster's spec.promoteResources.resources.cpu quota is full"},
		{name: "two resources of the share", scope: scope,
			err:  createFailed(quotaRefusal("pods", "alpha-tenant-share", "limits.memory=1Gi,requests.memory=512Mi,pods=1")),
			want: "the host did not create the pod: the VirtualCluster's spec.promoteResources.resources.memory quota and the VirtualCluster's spec.promoteResources.resources.pods quota are full"},
		{name: "the object budget", scope: scope,
			err:  quotaRefusal("configmaps", "alpha-object-budget", "count/configmaps=1"),
			want: "the VirtualCluster's spec.virtualNode.objectBudget.configMaps quota is full"},
		{name: "the storage requests", scope: scope,
			err:  quotaRefusal("persistentvolumeclaims", "alpha-object-budget", "requests.storage=100Ti"),
			want: "the VirtualCluster's spec.virtualNode.storage.requests quota is full"},
		{name: "a member grant", scope: member,
			err:  createFailed(quotaRefusal("pods", "nest-grant", "requests.cpu=100m")),
			want: "the host did not create the pod: the member cluster grant's requests.cpu quota is full"},
		{name: "an invalid field of the tenant's", scope: fields,
			err: createFailed(apierrors.NewInvalid(schema.GroupKind{Kind: "Pod"}, hostPod, field.ErrorList{
				field.Invalid(preStop, 3600, "must be greater than 0 and less than terminationGracePeriodSeconds (300)"),
			})),
			want: "the host did not create the pod: spec.containers[0].lifecycle.preStop.sleep.seconds: Invalid value: 3600: must be greater than 0 and less than terminationGracePeriodSeconds (300)"},
		{name: "invalid fields, one the virtual node's, one moved by it", scope: fields,
			err: apierrors.NewInvalid(schema.GroupKind{Kind: "Pod"}, hostPod, field.ErrorList{
				field.Required(helperImage, "image of "+hostPod),
				field.Invalid(tenantInit, "x", "bad"),
			}),
			want: "a field the virtual node sets: Required value: image of web; spec.initContainers[0].command: Invalid value: \"x\": bad"},
		{name: "Pod Security", scope: scope,
			err: apierrors.NewForbidden(corev1.Resource("pods"), hostPod,
				errors.New(`violates PodSecurity "baseline:latest": privileged (container "app" must not set securityContext.privileged=true)`)),
			want: `forbidden by the host: violates PodSecurity "baseline:latest": privileged (container "app" must not set securityContext.privileged=true)`},
		{name: "the syncer's own permissions", scope: scope,
			err: apierrors.NewForbidden(corev1.Resource("pods"), hostPod,
				errors.New(`User "system:serviceaccount:vc-alpha:alpha-syncer" cannot create resource "pods" in API group "" in the namespace "vc-alpha"`)),
			want: "the virtual node may not do this on the host"},
		{name: "a quota that wants limits", scope: scope,
			err:  apierrors.NewForbidden(corev1.Resource("pods"), hostPod, errors.New("failed quota: alpha-tenant-share: must specify limits.cpu for: app")),
			want: "forbidden by the host: a quota of the VirtualCluster: must specify limits.cpu for: app"},
		{name: "the name taken", scope: scope,
			err:  apierrors.NewAlreadyExists(corev1.Resource("configmaps"), hostCopy),
			want: "another object on the host holds its name"},
		{name: "a busy host", scope: scope,
			err:  createFailed(apierrors.NewServerTimeout(corev1.Resource("pods"), "create", 1)),
			want: "the host did not create the pod: " + hostUnavailable},
		{name: "a webhook", scope: member,
			err:  createFailed(apierrors.NewInternalError(errors.New(`failed calling webhook "inject.nest.dev": Post "https://nest-injector.nest-alpha-0123456789.svc:443/inject"`))),
			want: "the host did not create the pod: an admission webhook of the host did not answer; the virtual node tries again"},
		{name: "another object's name", scope: scope,
			err:  Wrap(contract.NotOurCopy("ConfigMap", &metav1.ObjectMeta{Namespace: "vc-alpha", Name: hostCopy}, "shop/settings"), "ConfigMap settings could not be copied to the virtual node"),
			want: "ConfigMap settings could not be copied to the virtual node: another object on the host holds the name of this ConfigMap's copy: rename the ConfigMap, or ask the platform team to remove the other object"},
		{name: "an unreachable host", scope: scope,
			err:  createFailed(&url.Error{Op: "Post", URL: "https://10.96.0.1:443/api/v1/namespaces/vc-alpha/pods", Err: errors.New("dial tcp 10.96.0.1:443: connect: connection refused")}),
			want: "the host did not create the pod: the host API server could not be reached"},
		{name: "a stop", scope: scope, err: createFailed(context.Canceled),
			want: "the host did not create the pod: the virtual node stopped waiting for the host API server"},
		{name: "the tenant's own words, addresses and all", scope: scope,
			err:  errdefs.AsInvalidInput(AsIs(errors.New("refused by the virtual node: spec.containers[0].image: images from 10.96.0.1:443 are not allowed"))),
			want: "refused by the virtual node: spec.containers[0].image: images from 10.96.0.1:443 are not allowed"},
		{name: "words for the tenant instead", scope: scope,
			err:  fmt.Errorf("pod shop/web: %w", WithText(fmt.Errorf("host pod %s is still terminating", hostPod), "an earlier pod named shop/web is still stopping")),
			want: "an earlier pod named shop/web is still stopping"},
		{name: "two failures", scope: scope,
			err:  errors.Join(apierrors.NewAlreadyExists(corev1.Resource("configmaps"), hostCopy), quotaRefusal("configmaps", "alpha-object-budget", "count/configmaps=1")),
			want: "another object on the host holds its name; the VirtualCluster's spec.virtualNode.objectBudget.configMaps quota is full"},
		{name: "anything else, scrubbed", scope: scope,
			err:  fmt.Errorf("write vc-alpha/%s for %s: dial 10.0.0.1:443: refused", hostPod, hostCopy),
			want: "write shop/web for settings: dial <host address>:443: refused"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.scope.Error(tt.err)
			if got != tt.want {
				t.Errorf("Error =\n  %q\nwant\n  %q", got, tt.want)
			}
			for _, leak := range hostLeaks {
				if strings.Contains(got, leak) && !strings.Contains(tt.want, leak) {
					t.Errorf("%q names the host's %q", got, leak)
				}
			}
		})
	}
}

func TestScrubTurnsHostWordsIntoTheTenants(t *testing.T) {
	for _, tt := range []struct {
		text, want string
	}{
		{text: "Back-off restarting failed container app in pod " + hostPod + "_vc-alpha(host-uid-1)",
			want: "Back-off restarting failed container app in pod web_shop(tenant-uid-1)"},
		{text: "namespace vc-alpha is being terminated", want: "namespace <host namespace> is being terminated"},
		{text: `MountVolume.SetUp failed for volume "settings" : configmap "` + hostCopy + `" not found`,
			want: `MountVolume.SetUp failed for volume "settings" : configmap "settings" not found`},
		{text: "pods vc-alpha/" + hostPod + " on worker-2", want: "pods shop/web on nest-virtual-node"},
		{text: "secret " + contract.HostName("alpha", "other", "db") + " of another namespace", want: "secret <host object> of another namespace"},
		{text: "a copy of a dotted name " + contract.HostName("alpha", "shop", "web.v1"), want: "a copy of a dotted name <host object>"},
		{text: "dial tcp 10.96.0.1:443, pod 10.244.1.5:8080, range 10.244.0.0/16", want: "dial tcp <host address>:443, pod 10.244.1.5:8080, range <host address>"},
		{text: "address fd00:10:244::5 and range 2001:db8::/64", want: "address <host address> and range <host address>"},
		{text: "at 12:34:56 on a node with MAC aa:bb:cc:dd:ee:ff", want: "at 12:34:56 on a node with MAC aa:bb:cc:dd:ee:ff"},
		{text: "the tenant's own web-7d9f8b6c5d-x2x4z and vc-alphabet", want: "the tenant's own web-7d9f8b6c5d-x2x4z and vc-alphabet"},
	} {
		if got := scope.Scrub(tt.text); got != tt.want {
			t.Errorf("Scrub(%q) =\n  %q\nwant\n  %q", tt.text, got, tt.want)
		}
	}
	if got := scope.ScrubNames("exit: 10.96.0.1 unreachable from " + hostPod); got != "exit: 10.96.0.1 unreachable from web" {
		t.Errorf("ScrubNames rewrote an address of the tenant's termination message, or kept the host name: %q", got)
	}
	var zero Scope
	if got := zero.Scrub("pod " + hostPod + " at 10.96.0.1"); got != "pod <host object> at <host address>" {
		t.Errorf("the zero Scope shows %q", got)
	}
}

// Tell keeps what the error is for the code that hands it on: errors.Is
// and virtual-kubelet's errdefs, which follow Cause.
func TestTellKeepsTheErrorsKind(t *testing.T) {
	inner := apierrors.NewServerTimeout(corev1.Resource("pods"), "create", 1)
	told := scope.Tell(createFailed(inner))
	if told.Error() != "the host did not create the pod: "+hostUnavailable {
		t.Errorf("Tell = %q", told)
	}
	if !errors.Is(told, inner) || !apierrors.IsServerTimeout(told) {
		t.Error("the told error no longer wraps the host's")
	}
	refused := scope.Tell(errdefs.AsInvalidInput(AsIs(errors.New("refused by the virtual node: x"))))
	if !errdefs.IsInvalidInput(refused) || refused.Error() != "refused by the virtual node: x" {
		t.Errorf("Tell of a refusal = %q, invalid input %v", refused, errdefs.IsInvalidInput(refused))
	}
	if scope.Tell(nil) != nil || Wrap(nil, "x") != nil || AsIs(nil) != nil || WithText(nil, "x") != nil {
		t.Error("nil is not kept nil")
	}
}

func TestVirtualClusterField(t *testing.T) {
	for resource, want := range map[string]string{
		"pods":                    "spec.promoteResources.resources.pods",
		"count/pods":              "spec.promoteResources.resources.pods",
		"requests.cpu":            "spec.promoteResources.resources.cpu",
		"limits.memory":           "spec.promoteResources.resources.memory",
		"requests.nvidia.com/gpu": "spec.promoteResources.resources.nvidia.com/gpu",
		"count/configmaps":        "spec.virtualNode.objectBudget.configMaps",
		"count/secrets":           "spec.virtualNode.objectBudget.secrets",
		"services":                "spec.virtualNode.objectBudget.services",
		"services.nodeports":      "spec.virtualNode.objectBudget.services",
		"persistentvolumeclaims":  "spec.virtualNode.storage.claims",
		"requests.storage":        "spec.virtualNode.storage.requests",
		"standard.storageclass.storage.k8s.io/requests.storage": "spec.virtualNode.storage.requests",
	} {
		if got := VirtualClusterField(resource); got != want {
			t.Errorf("VirtualClusterField(%q) = %q, want %q", resource, got, want)
		}
	}
}
