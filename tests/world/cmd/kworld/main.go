// kworld runs the test world of kubectl-raft: a real Kubernetes control plane
// (kube-apiserver, kube-controller-manager, kube-scheduler built from
// k8s.io/kubernetes, etcd embedded from go.etcd.io/etcd/server/v3) and a node
// agent that stands in for the kubelet, running pods as real processes in
// network namespaces of their own.
//
// It is test tooling only; the product (kubectl-raft) is Rust.
package main

import (
	"fmt"
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

const usage = `kworld: the kubectl-raft test world

  kworld up [--nodes N] [--kubelets M]
                             start (or reuse) the world, print the admin kubeconfig path; M nodes
                             (kreal-1..M) are run by real kubelets over containerd and runc
  kworld down                stop everything and remove every process, namespace, address and file it made
  kworld status              say whether the world runs
  kworld doctor              free disk and memory, load, daemons and the control plane's last log lines
  kworld kubeconfig-for NS SA   print a kubeconfig path for a ServiceAccount (token-based)
  kworld node-pause NODE     stop the heartbeats of NODE (it turns NotReady)
  kworld node-down NODE [--for DURATION]   the node and its pods are lost: heartbeats stop and
                             every pod process there is frozen; back at node-resume or after --for (5m)
  kworld node-resume NODE    start them again (and thaw a node that is down)
  kworld kubelet-import ARCHIVE...   import image archives into every real node's containerd
  kworld place --kind kubelet|agent MANIFEST   the manifest as a List, its pods placed on that kind of node
  kworld pid CONTAINER-ID    the host pid of a container (kworld://PID or containerd://ID)
  kworld agent ...           (internal) the node agent
  kworld kubelet-node ...    (internal) one real-kubelet node
  kworld etcd ...            (internal) the control plane's storage, etcd v3.6 embedded

Environment: KWORLD_DIR (default /var/tmp/kraft-world) holds state, logs and the built binaries.
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	cmd, args := os.Args[1], os.Args[2:]
	var err error
	switch cmd {
	case "up":
		err = cmdUp(args)
	case "down":
		err = cmdDown(args)
	case "status":
		err = cmdStatus(args)
	case "doctor":
		err = cmdDoctor(args)
	case "kubeconfig-for":
		err = cmdKubeconfigFor(args)
	case "node-pause":
		err = cmdNodePause(args, true)
	case "node-resume":
		err = cmdNodePause(args, false)
	case "node-down":
		err = cmdNodeDown(args)
	case "agent":
		err = cmdAgent(args)
	case "kubelet-node":
		err = cmdKubeletNode(args)
	case "kubelet-import":
		err = cmdKubeletImport(args)
	case "place":
		err = cmdPlace(args)
	case "pid":
		err = cmdPid(args)
	case "etcd":
		// etcdmain.Main reads os.Args itself.
		os.Args = append([]string{"etcd"}, args...)
		etcdmain.Main(os.Args)
		return
	case "-h", "--help", "help":
		fmt.Print(usage)
		return
	default:
		fmt.Fprintf(os.Stderr, "kworld: unknown command %q\n\n%s", cmd, usage)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "kworld %s: %v\n", cmd, err)
		os.Exit(1)
	}
}
