package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/klog/v2"

	"github.com/nestdev/nest/internal/syncer/contract"
)

// NodePortTarget is where one tenant NodePort forwards: the host copy of
// its Service, at the Service port.
type NodePortTarget struct {
	// Service is "namespace/name" in the tenant, for logs.
	Service string
	// Addr is the host ClusterIP and port.
	Addr string
}

// NodePorts maps each TCP node port of the tenant's NodePort and
// LoadBalancer Services to its target. A Service without a host copy (no
// selector, or not yet copied) has none. hostIP returns the ClusterIP of a
// tenant Service's host copy, "" when there is none.
func NodePorts(services []*corev1.Service, hostIP func(*corev1.Service) string) map[int32]NodePortTarget {
	out := map[int32]NodePortTarget{}
	for _, svc := range services {
		if svc.Spec.Type != corev1.ServiceTypeNodePort && svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
			continue
		}
		ip := hostIP(svc)
		if ip == "" || ip == corev1.ClusterIPNone {
			continue
		}
		for _, p := range svc.Spec.Ports {
			if p.NodePort == 0 || (p.Protocol != "" && p.Protocol != corev1.ProtocolTCP) {
				continue
			}
			out[p.NodePort] = NodePortTarget{Service: svc.Namespace + "/" + svc.Name, Addr: net.JoinHostPort(ip, strconv.Itoa(int(p.Port)))}
		}
	}
	return out
}

// nodePortProxy gives tenant NodePorts their meaning without host access:
// the virtual node's address is the control-plane pod's IP, and the syncer
// listens there on each tenant node port and forwards every TCP connection
// to the host copy of the Service. Nothing is opened on a host node, and
// the host's NetworkPolicies admit only the tenant's own pods to these
// ports. UDP node ports are not served.
type nodePortProxy struct {
	ip             string
	tenantServices corelisters.ServiceLister
	hostServices   corelisters.ServiceNamespaceLister
	tr             Translator

	mu        sync.Mutex
	listeners map[int32]*nodePortListener
}

// nodePortListener is one open node port; target may change under it when
// the Service's ClusterIP or port does.
type nodePortListener struct {
	l      net.Listener
	mu     sync.Mutex
	target NodePortTarget
}

func (n *nodePortListener) current() NodePortTarget {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.target
}

// nodePortsKey is the proxy's one key: the set of ports is synced whole.
const nodePortsKey = "nodeports"

// sync opens the node ports the tenant's Services have, repoints those
// whose target moved and closes the rest. A port it cannot open is an
// error, retried with backoff; the others still open.
func (p *nodePortProxy) sync(ctx context.Context, _ string) (time.Duration, error) {
	services, err := p.tenantServices.List(labels.Everything())
	if err != nil {
		return 0, err
	}
	want := NodePorts(services, func(svc *corev1.Service) string {
		host, err := p.hostServices.Get(contract.HostName(p.tr.VirtualCluster, svc.Namespace, svc.Name))
		if err != nil {
			return ""
		}
		return host.Spec.ClusterIP
	})
	p.mu.Lock()
	defer p.mu.Unlock()
	for port, l := range p.listeners {
		if _, ok := want[port]; !ok {
			l.l.Close()
			delete(p.listeners, port)
		}
	}
	var errs []error
	for port, target := range want {
		if l, ok := p.listeners[port]; ok {
			l.mu.Lock()
			l.target = target
			l.mu.Unlock()
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort(p.ip, strconv.Itoa(int(port))))
		if err != nil {
			errs = append(errs, fmt.Errorf("node port %d of %s: %w", port, target.Service, err))
			continue
		}
		npl := &nodePortListener{l: l, target: target}
		p.listeners[port] = npl
		go p.serve(ctx, npl)
	}
	return 0, errors.Join(errs...)
}

// serve forwards the connections of one node port until it is closed.
func (p *nodePortProxy) serve(ctx context.Context, l *nodePortListener) {
	for {
		conn, err := l.l.Accept()
		if err != nil {
			return
		}
		go forward(ctx, conn, l.current())
	}
}

// forward copies one connection both ways to target, closing each write side
// as its reader ends so half-closes pass through.
func forward(ctx context.Context, in net.Conn, target NodePortTarget) {
	defer in.Close()
	d := net.Dialer{Timeout: 10 * time.Second}
	out, err := d.DialContext(ctx, "tcp", target.Addr)
	if err != nil {
		klog.FromContext(ctx).V(2).Info("Node port: dial failed", "service", target.Service, "target", target.Addr, "err", err)
		return
	}
	defer out.Close()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if c, ok := dst.(*net.TCPConn); ok {
			_ = c.CloseWrite()
		}
		done <- struct{}{}
	}
	go pipe(out, in)
	go pipe(in, out)
	<-done
	<-done
}

// close shuts every node port, when the syncer stops.
func (p *nodePortProxy) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for port, l := range p.listeners {
		l.l.Close()
		delete(p.listeners, port)
	}
}
