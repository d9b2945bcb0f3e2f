package devcluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/nestdev/nest/internal/agent"
)

// The Nest agent CA, which signs each worker's agent serving certificate.
// nest-manager issues its own client certificate from it.
const (
	AgentCACert = "nest-agent-ca.crt"
	AgentCAKey  = "nest-agent-ca.key"
)

// agentProcess is the name suffix of a node's nest-agent process.
const agentProcess = "nest-agent"

// AgentServingCert names node n's agent serving certificate and key files.
func AgentServingCert(n Node) (cert, key string) {
	return "nest-agent-" + n.Name + ".crt", "nest-agent-" + n.Name + ".key"
}

// AgentConfig is the configuration of node n's agent. Its kubelet and
// kube-proxy paths are those of their command lines, so the agent writes
// exactly the files the processes read.
func AgentConfig(l Layout, n Node) agent.Config {
	kubelet := KubeletArgs(n)
	cert, key := AgentServingCert(n)
	dir := filepath.Join(n.Dir, "agent")
	return agent.Config{
		NodeName: n.Name,
		Listen:   net.JoinHostPort(n.IP.String(), strconv.Itoa(agent.DefaultPort)),
		TLS: agent.TLSFiles{
			CertFile:     filepath.Join(l.PKIDir(), cert),
			KeyFile:      filepath.Join(l.PKIDir(), key),
			ClientCAFile: filepath.Join(l.PKIDir(), AgentCACert),
		},
		AllowedClients: []string{agent.ManagerIdentity},
		Kubelet: agent.KubeletFiles{
			Config:              kubelet["config"],
			Kubeconfig:          kubelet["kubeconfig"],
			BootstrapKubeconfig: kubelet["bootstrap-kubeconfig"],
			CertDir:             kubelet["cert-dir"],
			RootDir:             kubelet["root-dir"],
			ClientCAFile:        filepath.Join(n.Dir, "kubelet", "client-ca.crt"),
		},
		KubeProxy: agent.KubeProxyFiles{
			Config:     KubeProxyArgs(n)["config"],
			Kubeconfig: filepath.Join(n.Dir, "kube-proxy.conf"),
		},
		CNIConfigFile:          cniConfigFile(n),
		ContainerRuntimeSocket: n.ContainerdSocket(),
		SavedDir:               filepath.Join(dir, "saved"),
	}
}

func cniConfigFile(n Node) string { return filepath.Join(n.Dir, "cni", "net.d", "10-nest.conflist") }

// resetAgentFiles removes what an agent wrote on node n in an earlier run:
// Up writes the node's host configuration afresh, which the agent must save
// again, and a bootstrap kubeconfig of another cluster must not outlive it.
func resetAgentFiles(l Layout, n Node) error {
	cfg := AgentConfig(l, n)
	for _, path := range []string{cfg.SavedDir, cfg.Kubelet.BootstrapKubeconfig, cfg.Kubelet.ClientCAFile, cfg.KubeProxy.Kubeconfig} {
		if err := os.RemoveAll(path); err != nil {
			return err
		}
	}
	return nil
}

// agentServices starts and stops node n's kubelet and kube-proxy as
// processes of the local host cluster, with the command lines Up uses.
type agentServices struct {
	l      Layout
	n      Node
	binDir string
}

func (s agentServices) processName(svc agent.Service) string { return s.n.Name + "." + string(svc) }

func (s agentServices) Running(_ context.Context, svc agent.Service) (bool, error) {
	p, err := readProcess(s.l, s.processName(svc))
	if os.IsNotExist(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return p.Alive(), nil
}

func (s agentServices) Stop(_ context.Context, svc agent.Service) error {
	p, err := readProcess(s.l, s.processName(svc))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	return p.stop(30 * time.Second)
}

func (s agentServices) Start(ctx context.Context, svc agent.Service) error {
	if running, err := s.Running(ctx, svc); err != nil || running {
		return err
	}
	spec, err := nodeServiceSpec(s.n, svc, s.binDir)
	if err != nil {
		return err
	}
	_, err = startProcess(s.l, spec)
	return err
}

// nodeServiceSpec is how node n's kubelet or kube-proxy is started.
func nodeServiceSpec(n Node, svc agent.Service, binDir string) (processSpec, error) {
	kube := filepath.Join(binDir, "kube")
	switch svc {
	case agent.ServiceKubelet:
		return processSpec{name: n.Name + ".kubelet", node: n, path: kube, args: append([]string{"kubelet"}, KubeletArgs(n).Render()...)}, nil
	case agent.ServiceKubeProxy:
		return processSpec{name: n.Name + ".kube-proxy", node: n, path: kube, args: append([]string{"kube-proxy"}, KubeProxyArgs(n).Render()...)}, nil
	}
	return processSpec{}, fmt.Errorf("no service %q", svc)
}

// RunAgent serves the agent of the node named nodeName of the local cluster
// with addressing a in stateDir until ctx ends (`nest dev agent`, which Up
// starts before the cluster is up). binDir holds the kubelet's binary.
func RunAgent(ctx context.Context, stateDir, binDir, nodeName string, a Addressing) error {
	l := Layout{Root: stateDir}
	nodes, err := a.Topology(stateDir, MaxNodes)
	if err != nil {
		return err
	}
	for _, n := range nodes {
		if n.Name != nodeName {
			continue
		}
		if n.ControlPlane() {
			return fmt.Errorf("--node: %s is the control-plane node, which is never promoted and has no agent", nodeName)
		}
		return agent.Run(ctx, AgentConfig(l, n), agentServices{l: l, n: n, binDir: binDir})
	}
	return fmt.Errorf("--node: a local host cluster has no node %q", nodeName)
}

// agentSpec is how Up starts node n's agent.
func agentSpec(l Layout, n Node, binDir string) processSpec {
	args := []string{"dev", "agent", "--state-dir", l.Root, "--bin-dir", binDir, "--node", n.Name}
	if n.Net.Cluster != "" {
		args = append(args, "--cluster", n.Net.Cluster, "--slot", strconv.Itoa(n.Net.Slot))
	}
	return processSpec{name: n.Name + "." + agentProcess, node: n, path: filepath.Join(binDir, "nest"), args: args}
}

// AgentAddress is the host and port at which node n's agent listens.
func AgentAddress(n Node) (string, int) { return n.IP.String(), agent.DefaultPort }
