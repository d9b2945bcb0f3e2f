package syncer

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// addHandlers connects informer events to the translators.
func (s *syncer) addHandlers(ctx context.Context, objects *objectSyncer) {
	p := s.provider
	_, _ = s.hostF.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { p.hostPodChanged(obj.(*corev1.Pod)) },
		UpdateFunc: func(_, obj any) { p.hostPodChanged(obj.(*corev1.Pod)) },
		DeleteFunc: func(obj any) {
			if pod, ok := unwrap(obj).(*corev1.Pod); ok {
				p.hostPodDeleted(ctx, pod)
			}
		},
	})
	_, _ = s.tenantF.Core().V1().ConfigMaps().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj any) { objects.tenantConfigMapChanged(ctx, obj.(*corev1.ConfigMap)) },
		DeleteFunc: func(obj any) {
			if cm, ok := unwrap(obj).(*corev1.ConfigMap); ok {
				objects.tenantObjectDeleted(ctx, configMapKind, cm.Namespace, cm.Name)
			}
		},
	})
	_, _ = s.tenantF.Core().V1().Secrets().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj any) { objects.tenantSecretChanged(ctx, obj.(*corev1.Secret)) },
		DeleteFunc: func(obj any) {
			if sec, ok := unwrap(obj).(*corev1.Secret); ok {
				objects.tenantObjectDeleted(ctx, secretKind, sec.Namespace, sec.Name)
			}
		},
	})
	svc := s.services
	_, _ = s.tenantF.Core().V1().Services().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { svc.tenantServiceChanged(ctx, obj.(*corev1.Service)) },
		UpdateFunc: func(_, obj any) { svc.tenantServiceChanged(ctx, obj.(*corev1.Service)) },
		DeleteFunc: func(obj any) {
			if sv, ok := unwrap(obj).(*corev1.Service); ok {
				svc.tenantServiceDeleted(ctx, sv)
			}
		},
	})
	rewriteDNS := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { svc.trigger() },
		UpdateFunc: func(any, any) { svc.trigger() },
		DeleteFunc: func(any) { svc.trigger() },
	}
	_, _ = s.hostF.Core().V1().Services().Informer().AddEventHandler(rewriteDNS)
	_, _ = s.tenantF.Discovery().V1().EndpointSlices().Informer().AddEventHandler(rewriteDNS)
	_, _ = s.events.Core().V1().Events().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { s.forwardEvent(obj.(*corev1.Event)) },
		UpdateFunc: func(old, obj any) {
			if obj.(*corev1.Event).Count != old.(*corev1.Event).Count {
				s.forwardEvent(obj.(*corev1.Event))
			}
		},
	})
}

func unwrap(obj any) any {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return d.Obj
	}
	return obj
}

// forwardEvent repeats a host event about a host pod (image pulled, container
// started, probe failed) on the tenant pod. Events older than this syncer
// are not repeated, so a restart does not replay history.
func (s *syncer) forwardEvent(ev *corev1.Event) {
	if ev.InvolvedObject.Kind != "Pod" || eventTime(ev).Before(s.started) {
		return
	}
	host, err := s.provider.hostPods.Get(ev.InvolvedObject.Name)
	if err != nil {
		return
	}
	if tenant, ok := s.provider.tenantPodOf(host); ok {
		s.recorder.Event(tenant, ev.Type, ev.Reason, ev.Message)
	}
}

func eventTime(ev *corev1.Event) time.Time {
	for _, t := range []metav1.Time{ev.LastTimestamp, ev.FirstTimestamp} {
		if !t.IsZero() {
			return t.Time
		}
	}
	return ev.EventTime.Time
}

// tokenRefreshPeriod is how often token Secrets are checked; refreshes land
// within this of their due time.
const tokenRefreshPeriod = 5 * time.Second

// refreshTokens renews the tokens of every token Secret that is due, in
// place: the host kubelet updates the mounted file, and the pod keeps running.
func (s *syncer) refreshTokens(ctx context.Context) {
	secrets := s.hostF.Core().V1().Secrets().Lister().Secrets(s.o.HostNamespace)
	selector := labels.SelectorFromSet(labels.Set{LabelTokenSecret: "true"})
	ticker := time.NewTicker(tokenRefreshPeriod)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		list, _ := secrets.List(selector)
		for _, sec := range list {
			if !s.provider.tokens.due(sec) {
				continue
			}
			upd := sec.DeepCopy()
			if err := s.provider.tokens.fill(ctx, upd); err != nil {
				klog.FromContext(ctx).Error(err, "Refresh tokens", "secret", klog.KObj(sec))
				continue
			}
			if _, err := s.provider.host.CoreV1().Secrets(upd.Namespace).Update(ctx, upd, metav1.UpdateOptions{}); err != nil {
				klog.FromContext(ctx).Error(err, "Store refreshed tokens", "secret", klog.KObj(sec))
				continue
			}
			klog.FromContext(ctx).V(2).Info("Refreshed tokens", "secret", klog.KObj(sec))
		}
	}
}
