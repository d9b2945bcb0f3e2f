package hostcopy

import (
	"fmt"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"

	"github.com/nestdev/nest/internal/syncer/contract"
	"github.com/nestdev/nest/internal/syncer/tenantmsg"
)

// Kinds of tenant objects whose copies the Budget counts, as it and the
// pod reference index name them.
const (
	KindConfigMap = "configmap"
	KindSecret    = "secret"
)

// Budget bounds the bytes of all host copies of one virtual cluster's
// ConfigMaps and Secrets (nest-syncer's DataBudgetBytes), so a tenant cannot fill
// the host's etcd through the syncer. Of the per-pod token Secrets Nest
// makes, the tenant pod's identity counts (its labels and annotations, for
// downward API files: IdentitySize); the tokens do not, their size is
// Nest's.
//
// Many workers copy objects at once and the host informer cache lags behind
// their writes, so the budget also remembers the size of every copy it
// admitted until the cache shows it.
type Budget struct {
	// limit is in bytes; 0 or less means no bound.
	limit      int64
	vc         string
	configMaps corelisters.ConfigMapNamespaceLister
	secrets    corelisters.SecretNamespaceLister

	mu sync.Mutex
	// admitted maps "kind/host name" to the size of the copy last admitted
	// and not yet seen in the cache at that size.
	admitted map[string]int64
}

// NewBudget is a Budget of limit bytes (0 or less: no bound) over the host
// copies of virtual cluster vc that the listers of its host namespace hold.
func NewBudget(limit int64, vc string, configMaps corelisters.ConfigMapNamespaceLister, secrets corelisters.SecretNamespaceLister) *Budget {
	return &Budget{limit: limit, vc: vc, configMaps: configMaps, secrets: secrets, admitted: map[string]int64{}}
}

// Reserve admits writing the host copy hostCopy of the given kind with size
// bytes of data, if that does not take all copies past the limit. A copy that
// stays the same size or shrinks is always admitted, so a tenant over budget
// (after the limit was lowered) can still shrink. The returned undo forgets
// the admission when the write then fails. The error says "object budget",
// gives the numbers, which are all the tenant's, and names the
// VirtualCluster field that sets the budget; its text is for the tenant.
func (b *Budget) Reserve(kind string, hostCopy metav1.Object, size int64) (undo func(), err error) {
	if b == nil || b.limit <= 0 {
		return func() {}, nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	key := kind + "/" + hostCopy.GetName()
	sizes := b.sizes()
	current := sizes[key]
	others := sum(sizes) - current
	if size > current && others+size > b.limit {
		return nil, tenantmsg.AsIs(fmt.Errorf("object budget exceeded: the copy needs %d bytes, and the other copies of this VirtualCluster's ConfigMaps and Secrets already hold %d of its %d-byte object budget (spec.virtualNode.objectBudget.dataBytes): delete ConfigMaps or Secrets that pods no longer use, or ask the platform team for a larger budget",
			size, others, b.limit))
	}
	previous, had := b.admitted[key]
	b.admitted[key] = size
	return func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		if had {
			b.admitted[key] = previous
		} else {
			delete(b.admitted, key)
		}
	}, nil
}

// Forget drops what the budget remembers of a deleted host copy.
func (b *Budget) Forget(kind, hostName string) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.admitted, kind+"/"+hostName)
}

// sizes returns the data size of every host copy by "kind/host name": the
// cache's, or what was admitted since when the cache does not show it yet.
// The caller holds mu.
func (b *Budget) sizes() map[string]int64 {
	out := map[string]int64{}
	ours := labels.SelectorFromSet(labels.Set{contract.LabelTenantOf: b.vc})
	configMaps, _ := b.configMaps.List(ours)
	for _, cm := range configMaps {
		out[KindConfigMap+"/"+cm.Name] = ConfigMapSize(cm)
	}
	secrets, _ := b.secrets.List(ours)
	for _, s := range secrets {
		if s.Labels[contract.LabelTokenSecret] == "true" {
			out[KindSecret+"/"+s.Name] = IdentitySize(s.Data)
		} else {
			out[KindSecret+"/"+s.Name] = SecretSize(s)
		}
	}
	for key, size := range b.admitted {
		if cached, ok := out[key]; ok && cached == size {
			delete(b.admitted, key) // the cache caught up
			continue
		}
		out[key] = size
	}
	return out
}

func sum(sizes map[string]int64) int64 {
	var total int64
	for _, s := range sizes {
		total += s
	}
	return total
}

// ConfigMapSize counts keys and values of Data and BinaryData, as the API
// server does for its 1 MiB ConfigMap limit.
func ConfigMapSize(cm *corev1.ConfigMap) int64 {
	return dataSize(cm.Data) + dataSize(cm.BinaryData)
}

// SecretSize counts keys and values of Data and StringData.
func SecretSize(s *corev1.Secret) int64 {
	return dataSize(s.Data) + dataSize(s.StringData)
}

// IdentitySize counts the keys and values of a token Secret's data that are
// the tenant pod's identity, not its tokens (contract.TokenKeyPrefix keys).
func IdentitySize[V string | []byte](data map[string]V) int64 {
	var n int64
	for k, v := range data {
		if !strings.HasPrefix(k, contract.TokenKeyPrefix) {
			n += int64(len(k) + len(v))
		}
	}
	return n
}

// dataSize counts the bytes of a ConfigMap's or Secret's keys and values.
func dataSize[V string | []byte](m map[string]V) int64 {
	var n int64
	for k, v := range m {
		n += int64(len(k) + len(v))
	}
	return n
}
