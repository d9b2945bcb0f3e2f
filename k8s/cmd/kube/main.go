// Command kube is a multi-call binary holding the Kubernetes components (of
// the version in internal/version) and etcd that Nest runs: kube-apiserver,
// kube-controller-manager, kube-scheduler, kubelet, kube-proxy, kubectl and
// etcd.
//
// The component is chosen by the name the binary is called under (a symlink named
// "kubelet" runs the kubelet), or, when called as "kube", by the first argument:
// "kube kubelet --config ...". One binary keeps the image small and the build
// incremental: the heavy shared packages are compiled and linked once.
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"go.etcd.io/etcd/server/v3/etcdmain"
	"k8s.io/component-base/cli"
	kubectlcmd "k8s.io/kubectl/pkg/cmd"
	kubectlutil "k8s.io/kubectl/pkg/cmd/util"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	proxy "k8s.io/kubernetes/cmd/kube-proxy/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

// components maps each component name to a function that runs it and returns
// the process exit code.
var components = map[string]func(args []string) int{
	"kube-apiserver":          runCobra(func() *cobra.Command { return apiserver.NewAPIServerCommand() }),
	"kube-controller-manager": runCobra(func() *cobra.Command { return controllermanager.NewControllerManagerCommand() }),
	"kube-scheduler":          runCobra(func() *cobra.Command { return scheduler.NewSchedulerCommand() }),
	"kubelet":                 runCobra(func() *cobra.Command { return kubelet.NewKubeletCommand(context.Background()) }),
	"kube-proxy":              runCobra(func() *cobra.Command { return proxy.NewProxyCommand() }),
	"kubectl":                 runKubectl,
	"etcd":                    runEtcd,
}

func main() {
	name := filepath.Base(os.Args[0])
	args := os.Args[1:]
	if _, ok := components[name]; !ok {
		if len(args) == 0 {
			usage()
			os.Exit(2)
		}
		name, args = args[0], args[1:]
	}
	run, ok := components[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "kube: unknown component %q\n", name)
		usage()
		os.Exit(2)
	}
	// Components read os.Args[0] for their name in help and logs.
	os.Args = append([]string{name}, args...)
	os.Exit(run(args))
}

// runCobra adapts a component's cobra command to the multi-call entry point,
// using component-base's Run so logging and flag handling match upstream binaries.
func runCobra(newCommand func() *cobra.Command) func([]string) int {
	return func(args []string) int {
		cmd := newCommand()
		cmd.SetArgs(args)
		return cli.Run(cmd)
	}
}

func runKubectl(args []string) int {
	cmd := kubectlcmd.NewDefaultKubectlCommand()
	cmd.SetArgs(args)
	if err := cli.RunNoErrOutput(cmd); err != nil {
		kubectlutil.CheckErr(err)
	}
	return 0
}

func runEtcd(_ []string) int {
	if err := loadInitialCluster(os.Getenv(initialClusterFileEnv)); err != nil {
		fmt.Fprintln(os.Stderr, "etcd:", err)
		return 1
	}
	etcdmain.Main(os.Args)
	return 0
}

// initialClusterFileEnv names a file of KEY=VALUE lines that a member of a
// Nest tenant's etcd cluster starts with (internal/components' constant of
// the same name): the initial cluster and state depend on the members there
// are when it joins, which its etcd-member helper learns at run time.
const initialClusterFileEnv = "NEST_ETCD_INITIAL_CLUSTER_FILE"

// initialClusterKeys are the only variables the file may set.
var initialClusterKeys = map[string]bool{"ETCD_INITIAL_CLUSTER": true, "ETCD_INITIAL_CLUSTER_STATE": true, "ETCD_INITIAL_CLUSTER_TOKEN": true}

// loadInitialCluster sets the variables of the file at path ("" for none)
// in the environment, where etcd reads them.
func loadInitialCluster(path string) error {
	if path == "" {
		return nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read the initial cluster (%s=%s): %w", initialClusterFileEnv, path, err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		key, value, ok := strings.Cut(line, "=")
		if !ok || !initialClusterKeys[key] {
			return fmt.Errorf("%s: line %q is not ETCD_INITIAL_CLUSTER, ETCD_INITIAL_CLUSTER_STATE or ETCD_INITIAL_CLUSTER_TOKEN=...", path, line)
		}
		if err := os.Setenv(key, value); err != nil {
			return err
		}
	}
	return nil
}

func usage() {
	names := make([]string, 0, len(components))
	for n := range components {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprintf(os.Stderr, "usage: kube COMPONENT [flags]\ncomponents: %v\n", names)
}
