package devcluster

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	corev1 "k8s.io/api/core/v1"

	"github.com/nestdev/nest/internal/kube"
)

// ProcessStatus is one recorded process and whether it runs.
type ProcessStatus struct {
	Name    string
	PID     int
	Running bool
}

// NodeStatus is one node as the API server reports it.
type NodeStatus struct {
	Name  string
	Ready bool
	IP    string
	Roles string
}

// ClusterStatus is what `nest dev status` reports.
type ClusterStatus struct {
	StateDir string
	// Recorded is true once Up has brought the cluster all the way up.
	Recorded bool
	// Cluster, Slot and GPUs are the recorded --cluster, --slot and --gpus.
	Cluster        string
	Slot           int
	GPUs           int
	Processes      []ProcessStatus
	APIServerReady bool
	Nodes          []NodeStatus
	// LoadBalancer says what gives LoadBalancer Services their addresses,
	// and LoadBalancerServices lists those Services, as
	// "namespace/name address[,address]" ("<pending>" before one is given).
	LoadBalancer         string
	LoadBalancerServices []string
	// Registry is the address (host:port) of the cluster's OCI registry,
	// "" until its Service has one (RegistryAddress).
	Registry   string
	Kubeconfig string
}

// Running reports whether the cluster is up: recorded, every process alive and
// the API server ready.
func (s ClusterStatus) Running() bool {
	if !s.Recorded || !s.APIServerReady || len(s.Processes) == 0 {
		return false
	}
	for _, p := range s.Processes {
		if !p.Running {
			return false
		}
	}
	return true
}

// Status reads the cluster in stateDir: its processes from their PID files and,
// when the API server answers, its nodes.
func Status(ctx context.Context, stateDir string) (ClusterStatus, error) {
	l := Layout{Root: stateDir}
	st := ClusterStatus{StateDir: stateDir, Kubeconfig: l.AdminKubeconfig()}
	rec, err := readRecord(l)
	st.Recorded = err == nil && rec.complete()
	st.Cluster, st.Slot, st.GPUs = rec.Cluster, rec.Slot, rec.GPUs
	if a, err := AddressingFor(rec.Cluster, rec.Slot); err == nil && st.Recorded {
		st.LoadBalancer = a.describeLoadBalancer()
	}
	procs, err := RecordedProcesses(l)
	if err != nil {
		return st, err
	}
	for _, p := range procs {
		st.Processes = append(st.Processes, ProcessStatus{Name: p.Name, PID: p.PID, Running: p.Alive()})
	}
	sort.Slice(st.Processes, func(i, j int) bool { return st.Processes[i].Name < st.Processes[j].Name })
	if len(procs) == 0 {
		return st, nil
	}
	st.APIServerReady = apiServerReady(ctx, l)
	if !st.APIServerReady {
		return st, nil
	}
	c, err := adminClient(l)
	if err != nil {
		return st, err
	}
	var nodes corev1.NodeList
	if err := c.List(ctx, &nodes); err != nil {
		return st, err
	}
	for _, n := range nodes.Items {
		ns := NodeStatus{Name: n.Name, Ready: kube.NodeReady(&n), Roles: "<none>"}
		if _, ok := n.Labels[controlPlaneNodeLabel]; ok {
			ns.Roles = "control-plane"
		}
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				ns.IP = a.Address
			}
		}
		st.Nodes = append(st.Nodes, ns)
	}
	var services corev1.ServiceList
	if err := c.List(ctx, &services); err != nil {
		return st, err
	}
	for _, svc := range services.Items {
		if svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
			continue
		}
		var addrs []string
		for _, in := range svc.Status.LoadBalancer.Ingress {
			addrs = append(addrs, in.IP)
		}
		if len(addrs) == 0 {
			addrs = []string{"<pending>"}
		}
		st.LoadBalancerServices = append(st.LoadBalancerServices, svc.Namespace+"/"+svc.Name+" "+strings.Join(addrs, ","))
	}
	st.Registry, _ = RegistryAddressIn(ctx, c)
	return st, nil
}

// Print writes s as two tables, processes then nodes.
func (s ClusterStatus) Print(w io.Writer) {
	if len(s.Processes) == 0 {
		fmt.Fprintf(w, "no cluster in %s\n", s.StateDir)
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PROCESS\tPID\tSTATE")
	for _, p := range s.Processes {
		state := "running"
		if !p.Running {
			state = "stopped"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\n", p.Name, p.PID, state)
	}
	tw.Flush()
	if s.Cluster != "" {
		fmt.Fprintf(w, "\ncluster: %s (slot %d)\n", s.Cluster, s.Slot)
	}
	if s.GPUs > 0 {
		fmt.Fprintf(w, "\nGPUs per worker: %d %s\n", s.GPUs, GPUResource)
	}
	fmt.Fprintf(w, "\nkube-apiserver ready: %v\n", s.APIServerReady)
	if len(s.Nodes) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NODE\tREADY\tROLES\tINTERNAL-IP")
		for _, n := range s.Nodes {
			fmt.Fprintf(tw, "%s\t%v\t%s\t%s\n", n.Name, n.Ready, n.Roles, n.IP)
		}
		tw.Flush()
	}
	if s.LoadBalancer != "" {
		fmt.Fprintf(w, "\nload balancer: %s\n", s.LoadBalancer)
		for _, svc := range s.LoadBalancerServices {
			fmt.Fprintf(w, "  %s\n", svc)
		}
	}
	if s.Registry != "" {
		fmt.Fprintf(w, "\nregistry: %s (plain HTTP; snapshots: oci://%s/REPOSITORY:TAG)\n", s.Registry, s.Registry)
	}
	fmt.Fprintf(w, "\nkubeconfig: %s\n", s.Kubeconfig)
}
