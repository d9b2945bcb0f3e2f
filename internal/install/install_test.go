package install

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func TestManifestsInApplyOrder(t *testing.T) {
	objs, err := Manifests()
	if err != nil {
		t.Fatal(err)
	}
	index := map[string]int{}
	for i, u := range objs {
		index[u.GetKind()+"/"+u.GetName()] = i
	}
	for _, want := range []string{
		"Namespace/nest-system", "CustomResourceDefinition/virtualclusters.nest.dev", "CustomResourceDefinition/globalnodes.nest.dev", "ClusterRole/nest-manager",
		"ClusterRoleBinding/nest-manager", "ServiceAccount/nest-manager", "Deployment/nest-manager",
		"Namespace/nest-node-network", "DaemonSet/nest-node-network",
	} {
		if _, ok := index[want]; !ok {
			t.Errorf("manifests lack %s", want)
		}
	}
	if index["Namespace/nest-system"] > index["ServiceAccount/nest-manager"] || index["CustomResourceDefinition/virtualclusters.nest.dev"] > index["Deployment/nest-manager"] ||
		index["CustomResourceDefinition/globalnodes.nest.dev"] > index["Deployment/nest-manager"] ||
		index["Namespace/nest-node-network"] > index["DaemonSet/nest-node-network"] {
		t.Errorf("apply order is wrong: %v", index)
	}
}

func TestSetImage(t *testing.T) {
	objs, err := Manifests()
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range objs {
		if u.GetKind() != "Deployment" {
			continue
		}
		if err := setImage(u, "example/nest-manager:v1"); err != nil {
			t.Fatal(err)
		}
		containers, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
		if got := containers[0].(map[string]any)["image"]; got != "example/nest-manager:v1" {
			t.Errorf("image = %v", got)
		}
	}
}

func TestManagerArgsAreAppended(t *testing.T) {
	objs, err := Manifests()
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range objs {
		if u.GetKind() != "Deployment" || u.GetName() != "nest-manager" {
			continue
		}
		containers, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
		before := len(containers[0].(map[string]any)["args"].([]any))
		if err := customizeManager(u, Options{ManagerArgs: []string{"--host-pod-cidrs=10.244.0.0/16", "--host-node-cidrs=198.51.100.0/24"}}); err != nil {
			t.Fatal(err)
		}
		containers, _, _ = unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
		args := containers[0].(map[string]any)["args"].([]any)
		if len(args) != before+2 || args[before] != "--host-pod-cidrs=10.244.0.0/16" || args[before+1] != "--host-node-cidrs=198.51.100.0/24" {
			t.Errorf("args = %v: want the manifest's %d then the two given", args, before)
		}
		return
	}
	t.Fatal("no nest-manager Deployment")
}

func TestNodeNetworkArgsAreAppendedToTheAgentOnly(t *testing.T) {
	objs, err := Manifests()
	if err != nil {
		t.Fatal(err)
	}
	argsOf := func(kind, name string) []any {
		for _, u := range objs {
			if u.GetKind() == kind && u.GetName() == name {
				containers, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
				return containers[0].(map[string]any)["args"].([]any)
			}
		}
		t.Fatalf("no %s %s in the manifests", kind, name)
		return nil
	}
	agentBefore, managerBefore := len(argsOf("DaemonSet", NodeNetworkAgent)), len(argsOf("Deployment", "nest-manager"))
	if err := customize(objs, Options{NodeNetworkArgs: []string{"--pull-proxy-deny=198.51.100.0/24"}}); err != nil {
		t.Fatal(err)
	}
	agent := argsOf("DaemonSet", NodeNetworkAgent)
	if len(agent) != agentBefore+1 || agent[agentBefore] != "--pull-proxy-deny=198.51.100.0/24" {
		t.Errorf("agent args = %v: want the manifest's %d then the one given", agent, agentBefore)
	}
	if n := len(argsOf("Deployment", "nest-manager")); n != managerBefore {
		t.Errorf("the manager's args changed from %d to %d entries: NodeNetworkArgs are the agent's", managerBefore, n)
	}
}
