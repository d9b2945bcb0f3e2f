// Command nest-syncer runs beside a tenant API server in the tenant
// control-plane pod: it registers the virtual node and runs the tenant's pods
// on the host. Flags and wiring only; the syncer lives in internal/syncer.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/klog/v2"

	"github.com/nestdev/nest/internal/etcdmember"
	"github.com/nestdev/nest/internal/syncer"
	"github.com/nestdev/nest/internal/version"
	"github.com/nestdev/nest/internal/volumearchive"
)

func main() {
	if version.HandleFlag(os.Args[1:], "nest-syncer", os.Stdout) {
		return
	}
	// The helper init containers of host pods (internal/syncer), which
	// print their own error.
	if ran, err := syncer.HelperMain(os.Args[1:], os.Stderr); ran {
		if err != nil {
			os.Exit(1)
		}
		return
	}
	// The etcd member helper of every control-plane pod.
	if len(os.Args) > 1 && os.Args[1] == etcdmember.Command {
		if err := etcdmember.Main(os.Args[2:], os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "nest-syncer etcd-member:", err)
			os.Exit(1)
		}
		return
	}
	// The volume copier of a snapshot's copy pods.
	if len(os.Args) > 1 && os.Args[1] == volumearchive.Command {
		if err := volumearchive.Main(os.Args[2:], os.Stdin, os.Stdout, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, "nest-syncer volume-copy:", err)
			os.Exit(1)
		}
		return
	}
	klog.InitFlags(nil)
	var o syncer.Options
	o.BindFlags(flag.CommandLine)
	flag.Parse()
	if err := o.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, "nest-syncer:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	ctx = klog.NewContext(ctx, klog.Background())
	if err := syncer.Run(ctx, o); err != nil && ctx.Err() == nil {
		klog.ErrorS(err, "nest-syncer stopped")
		os.Exit(1)
	}
}
