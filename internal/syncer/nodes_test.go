package syncer

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/nestdev/nest/internal/syncer/contract"
)

// The pod informer of several virtual nodes holds their pods only, listed
// and watched; client-go's fake ignores the field selector, so this is the
// informer's own filter at work.
func TestPodsOnNodesKeepsOnlyTheVirtualNodesPods(t *testing.T) {
	on := func(name, node string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: corev1.PodSpec{NodeName: node}}
	}
	client := fake.NewClientset(on("a", "vn"), on("b", "vn-1"), on("elsewhere", "real-node"), on("unbound", ""))
	pods := newPodsOnNodes(client, NodeNames("vn", 2))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go pods.Informer().RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), pods.Informer().HasSynced) {
		t.Fatal("the informer did not sync")
	}
	for _, p := range []*corev1.Pod{on("c", "vn-1"), on("late-elsewhere", "real-node")} {
		if _, err := client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "pods a, b and c, and no other node's", func() (bool, error) {
		list, err := pods.Lister().List(labels.Everything())
		if err != nil {
			return false, err
		}
		names := map[string]bool{}
		for _, p := range list {
			names[p.Name] = true
		}
		if names["elsewhere"] || names["unbound"] || names["late-elsewhere"] {
			t.Fatalf("the informer holds pods of other nodes: %v", names)
		}
		return len(names) == 3 && names["a"] && names["b"] && names["c"], nil
	})
}

// Lowering the count deletes the virtual nodes beyond it and their disks,
// and nothing else under their names.
func TestRemoveExtraNodes(t *testing.T) {
	virtual := func(name string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"type": "virtual-kubelet"}}}
	}
	names := NodeNames(tr.NodeName, 3)
	notOurs := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: names[2]}}
	client := fake.NewClientset(virtual(names[0]), virtual(names[1]), notOurs)
	withDisk := tr
	withDisk.NodeDisk = &contract.NodeDisk{Size: resource.MustParse("1Gi")}
	disk := func(node string) *corev1.PersistentVolumeClaim {
		return withDisk.NodeDiskClaimFor(contract.NodeDiskClaim(tr.VirtualCluster, node))
	}
	foreignDisk := disk(names[2])
	foreignDisk.Labels = map[string]string{"app": "host-thing"}
	host := fake.NewClientset(disk(names[0]), disk(names[1]), foreignDisk)
	s := &syncer{o: withTranslator(tr), tenant: client, nodes: NodeNames(tr.NodeName, 1), provider: &podProvider{tr: tr, host: host}}
	ctx := context.Background()
	if err := s.removeExtraNodes(ctx); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{names[0]: true, names[1]: false, names[2]: true} {
		_, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if got := err == nil; got != want {
			t.Errorf("node %s exists: %v, want %v (%v)", name, got, want, err)
		}
		_, err = host.CoreV1().PersistentVolumeClaims(tr.HostNamespace).Get(ctx, contract.NodeDiskClaim(tr.VirtualCluster, name), metav1.GetOptions{})
		if got := err == nil; got != want {
			t.Errorf("disk of node %s exists: %v, want %v (%v)", name, got, want, err)
		}
	}
}
