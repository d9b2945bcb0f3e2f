package service

import (
	"bufio"
	"context"
	"net"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corelisters "k8s.io/client-go/listers/core/v1"

	"github.com/nestdev/nest/internal/testutil"
)

// freePort is a loopback TCP port nothing listens on.
func freePort(t *testing.T) int32 {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return int32(l.Addr().(*net.TCPAddr).Port)
}

// echoServer answers each line it reads with the same line, on loopback.
func echoServer(t *testing.T) int32 {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				line, _ := bufio.NewReader(c).ReadString('\n')
				_, _ = c.Write([]byte(line))
			}()
		}
	}()
	return int32(l.Addr().(*net.TCPAddr).Port)
}

// A tenant NodePort on the virtual node's address reaches the Service's host
// copy, and closes with the Service.
func TestNodePortProxyForwardsToTheHostCopy(t *testing.T) {
	servicePort, nodePort := echoServer(t), freePort(t)
	tenantSvc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"}, Spec: corev1.ServiceSpec{
		Type: corev1.ServiceTypeNodePort, Ports: []corev1.ServicePort{{Port: servicePort, NodePort: nodePort, Protocol: corev1.ProtocolTCP}}}}
	hostSvc := &corev1.Service{ObjectMeta: testutil.CopyMeta(tr.HostNamespace, "alpha", "web"), Spec: corev1.ServiceSpec{ClusterIP: "127.0.0.1"}}
	tenantIdx := testutil.Indexer(t, tenantSvc)
	p := &nodePortProxy{ip: "127.0.0.1", tr: tr, tenantServices: corelisters.NewServiceLister(tenantIdx),
		hostServices: corelisters.NewServiceLister(testutil.Indexer(t, hostSvc)).Services(tr.HostNamespace), listeners: map[int32]*nodePortListener{}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	defer p.close()
	if _, err := p.sync(ctx, nodePortsKey); err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(int(nodePort)))
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("node port %d is not open: %v", nodePort, err)
	}
	if _, err := c.Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	got, err := bufio.NewReader(c).ReadString('\n')
	c.Close()
	if err != nil || got != "hello\n" {
		t.Fatalf("through node port %d: %q, %v; want the Service's answer", nodePort, got, err)
	}

	if err := tenantIdx.Delete(tenantSvc); err != nil {
		t.Fatal(err)
	}
	if _, err := p.sync(ctx, nodePortsKey); err != nil {
		t.Fatal(err)
	}
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Errorf("node port %d still open after its Service was deleted", nodePort)
	}
}

// Only TCP node ports of NodePort and LoadBalancer Services with a host copy
// are served.
func TestNodePortsSelectsServedPorts(t *testing.T) {
	svc := func(name string, typ corev1.ServiceType, ports ...corev1.ServicePort) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name}, Spec: corev1.ServiceSpec{Type: typ, Ports: ports}}
	}
	got := NodePorts([]*corev1.Service{
		svc("web", corev1.ServiceTypeNodePort, corev1.ServicePort{Port: 80, NodePort: 30080}, corev1.ServicePort{Port: 53, NodePort: 30053, Protocol: corev1.ProtocolUDP}),
		svc("lb", corev1.ServiceTypeLoadBalancer, corev1.ServicePort{Port: 443, NodePort: 30443, Protocol: corev1.ProtocolTCP}),
		svc("internal", corev1.ServiceTypeClusterIP, corev1.ServicePort{Port: 8080}),
		svc("uncopied", corev1.ServiceTypeNodePort, corev1.ServicePort{Port: 81, NodePort: 30081}),
	}, func(s *corev1.Service) string {
		if s.Name == "uncopied" {
			return ""
		}
		return "10.96.5.5"
	})
	want := map[int32]string{30080: "10.96.5.5:80", 30443: "10.96.5.5:443"}
	if len(got) != len(want) {
		t.Fatalf("node ports %v, want %v", got, want)
	}
	for port, addr := range want {
		if got[port].Addr != addr {
			t.Errorf("node port %d -> %q, want %q", port, got[port].Addr, addr)
		}
	}
}
