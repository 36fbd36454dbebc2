// Command pause is the sandbox ("infra") container of every pod on a Plinth
// node: containerd runs no pod without it. It holds the pod's namespaces
// open by doing nothing, reaps orphaned children when it is PID 1 of a
// shared PID namespace, and exits cleanly on SIGTERM or SIGINT so pod
// teardown is quick.
//
// It exists because a node pulls nothing (and no registry is reachable
// from CI): the node image ships it (build/nodeimage), and the launcher
// of the host's test cluster (test/launch) loads it too, each built
// statically (CGO_ENABLED=0) and packed into an image archive
// (build/goimage).
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			return
		}
		reap()
	}
}

// reap collects every child that has exited, without blocking: one SIGCHLD
// may stand for several exits.
func reap() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
