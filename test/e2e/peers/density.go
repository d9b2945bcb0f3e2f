package peers

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// DensityLimits say when Density stops adding tenants.
type DensityLimits struct {
	// Max is the most tenants it makes.
	Max int
	// MemoryUsed is the share of the host's memory in use, 0 to 1; Density
	// stops once it is MemoryShare or more.
	MemoryUsed  func() (float64, error)
	MemoryShare float64
	// Wait bounds each tenant's create → Ready and its pods' → Running:
	// the first tenant past it is the one that did not fit.
	Wait Options
}

// Density creates tenants of s one after another (d0, d1, ...), each with
// pods pods of tpl Running in its default namespace, until one is not
// Ready with its pods within limits.Wait, the host's memory in use
// reaches limits.MemoryShare, or limits.Max are made. It returns how many
// fitted and why it stopped, then deletes them all. Only a failure to
// read the host or to delete is an error: a tenant that does not come up
// is what it measures.
func Density(ctx context.Context, s System, pods int, tpl PodTemplate, limits DensityLimits) (fitted int, stop string, err error) {
	made := 0
	defer func() {
		if derr := deleteAll(ctx, s, made); derr != nil && err == nil {
			err = derr
		}
	}()
	for fitted < limits.Max {
		used, err := limits.MemoryUsed()
		if err != nil {
			return fitted, "", fmt.Errorf("the host's memory: %w", err)
		}
		if used >= limits.MemoryShare {
			return fitted, fmt.Sprintf("the host's memory %.0f%% used", 100*used), nil
		}
		name := fmt.Sprintf("d%d", fitted)
		made++
		if why := fitTenant(ctx, s, name, pods, tpl, limits.Wait); why != "" {
			return fitted, fmt.Sprintf("tenant %d: %s", fitted+1, why), nil
		}
		fitted++
	}
	return fitted, fmt.Sprintf("the limit of %d tenants", limits.Max), nil
}

// fitTenant makes tenant name with pods pods Running, and says why not
// ("" when it did).
func fitTenant(ctx context.Context, s System, name string, pods int, tpl PodTemplate, o Options) string {
	if _, err := CreateToReady(ctx, s, name, o); err != nil {
		return err.Error()
	}
	cfg, err := s.Config(ctx, name)
	if err != nil {
		return err.Error()
	}
	cs, err := clientOf(cfg)
	if err != nil {
		return err.Error()
	}
	if err := WaitServiceAccount(ctx, cs, metav1.NamespaceDefault, o); err != nil {
		return err.Error()
	}
	if _, err := runPods(ctx, cs, metav1.NamespaceDefault, "density", pods, tpl, o); err != nil {
		return err.Error()
	}
	return ""
}

// WaitServiceAccount waits, within o's timeout, for the default
// ServiceAccount of namespace ns, without which no pod is admitted there.
func WaitServiceAccount(ctx context.Context, cs kubernetes.Interface, ns string, o Options) error {
	ctx, cancel := context.WithTimeout(ctx, o.timeout())
	defer cancel()
	for {
		_, err := cs.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no default ServiceAccount in %s: %w", ns, err)
		case <-time.After(o.poll()):
		}
	}
}

// deleteAll deletes tenants d0 to d(n-1) of s at once, and waits (5
// minutes at most) until the host holds nothing of them.
func deleteAll(ctx context.Context, s System, n int) error {
	o := Options{Timeout: 5 * time.Minute}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := DeleteToGone(ctx, s, fmt.Sprintf("d%d", i), o); err != nil {
				errs[i] = err
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
