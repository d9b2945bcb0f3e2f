// Command pause is the pod sandbox process: it holds a pod's namespaces open,
// reaps the zombies of a pod that shares its PID namespace, and exits on
// SIGINT or SIGTERM. It is Nest's own, built into the nest.local/pause image.
//
// It ignores its arguments and, alone of Nest's binaries, answers no
// --version: every pod runs one, and reading the version (internal/version,
// or only runtime/debug's build info) would grow each by 160 KB, or 70 KB,
// of memory of its own.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range sigs {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		reapChildren()
	}
}

// reapChildren waits for every exited child without blocking. As PID 1 of a
// shared PID namespace, pause inherits orphans and must collect them.
func reapChildren() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
