// pause is the pod sandbox's process on the world's real-kubelet nodes, as
// registry.k8s.io/pause is on a cluster: it holds the pod's namespaces, reaps the
// zombies a shared process namespace leaves it, and exits on SIGINT or SIGTERM.
// Built static (CGO_ENABLED=0) into the world's pause image; there is no registry here.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
