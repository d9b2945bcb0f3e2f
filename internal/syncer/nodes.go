package syncer

import (
	"context"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/watch"
	corev1informers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// NodeNames returns the names of count virtual nodes: name, then name-1,
// name-2 and so on, so the first keeps its name as the count grows.
func NodeNames(name string, count int) []string {
	out := []string{name}
	for i := 1; i < count; i++ {
		out = append(out, name+"-"+strconv.Itoa(i))
	}
	return out
}

// SplitCapacity divides capacity across count virtual nodes: each gets the
// count-th part of every resource, rounded down in the resource's smallest
// unit (millicores for cpu, whole units for the rest), and the first node
// also gets what rounding left, so the nodes add up to the capacity and a
// single GPU is still offered. A count below 1 is 1.
func SplitCapacity(capacity corev1.ResourceList, count int) []corev1.ResourceList {
	count = max(count, 1)
	out := make([]corev1.ResourceList, count)
	for i := range out {
		out[i] = corev1.ResourceList{}
	}
	for name, q := range capacity {
		milli := name == corev1.ResourceCPU
		total := q.Value()
		if milli {
			total = q.MilliValue()
		}
		part := total / int64(count)
		for i := range out {
			v := part
			if i == 0 {
				v = total - part*int64(count-1)
			}
			if milli {
				out[i][name] = *resource.NewMilliQuantity(v, q.Format)
			} else {
				out[i][name] = *resource.NewQuantity(v, q.Format)
			}
		}
	}
	return out
}

// podsOnNodes is a pod informer over the tenant pods bound to the named
// nodes, for virtual-kubelet's pod controller and the syncer's caches. A
// field selector names one node; for several, the list and watch select
// bound pods and drop those of other nodes (a pod's node never changes).
type podsOnNodes struct {
	informer cache.SharedIndexInformer
}

func newPodsOnNodes(client kubernetes.Interface, names []string) *podsOnNodes {
	selector := fields.OneTermNotEqualSelector("spec.nodeName", "").String()
	if len(names) == 1 {
		selector = fields.OneTermEqualSelector("spec.nodeName", names[0]).String()
	}
	ours := sets.New(names...)
	keep := func(obj runtime.Object) bool {
		pod, ok := obj.(*corev1.Pod)
		return !ok || ours.Has(pod.Spec.NodeName)
	}
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = selector
			list, err := client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, o)
			if err != nil {
				return nil, err
			}
			items := list.Items[:0]
			for i := range list.Items {
				if keep(&list.Items[i]) {
					items = append(items, list.Items[i])
				}
			}
			list.Items = items
			return list, nil
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = selector
			w, err := client.CoreV1().Pods(metav1.NamespaceAll).Watch(ctx, o)
			if err != nil {
				return nil, err
			}
			// Bookmarks carry no pod, and end a streamed initial list.
			return watch.Filter(w, func(e watch.Event) (watch.Event, bool) {
				return e, e.Type == watch.Bookmark || e.Type == watch.Error || keep(e.Object)
			}), nil
		},
	}
	// As client-go's own pod informer does: a client that cannot stream
	// the initial list (a fake) is listed instead.
	return &podsOnNodes{informer: cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(lw, client), &corev1.Pod{}, 0,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})}
}

var _ corev1informers.PodInformer = (*podsOnNodes)(nil)

// Informer returns the shared informer.
func (p *podsOnNodes) Informer() cache.SharedIndexInformer { return p.informer }

// Lister returns a lister over the informer's cache.
func (p *podsOnNodes) Lister() corelisters.PodLister {
	return corelisters.NewPodLister(p.informer.GetIndexer())
}
