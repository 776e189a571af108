package main

// Real-kubelet nodes: Kubernetes' own kubelet (built from the same k8s.io/kubernetes module
// as the control plane) over Debian's containerd 1.6 and runc, beside the agent's nodes.
//
// Each node is one `kworld kubelet-node` process in a mount namespace of its own, where the
// paths a kubelet and a containerd take for themselves (/var/lib/kubelet, whose device-plugin
// socket path is hard-coded, /var/lib/containerd, /run/containerd, /var/lib/cni,
// /etc/cni/net.d, /var/log, /run/netns) are bind mounts of the node's own directories, and the
// sysctls a kubelet sets on its host (vm.overcommit_memory, kernel.panic, ...) are files of
// the node's: two nodes never share a containerd (CRI always uses the containerd namespace
// k8s.io, and a kubelet kills the pods it does not know as orphans), and the host is left as
// it was. The node's processes and its pods live in cgroups under /kreal-N in every v1
// hierarchy, so `down` finds and ends every one of them, whatever state they are in.
//
// Pods get a veth on the world's bridge from the CNI bridge plugin, with host-local
// addresses in a /24 of their node's (10.250.200+N.0/24, disjoint from the agent's pool), so
// pods of both kinds of node reach each other and the API server reaches them all. DNS is
// the agent's (clusterDNS 10.250.0.1); the `kubernetes` Service's ClusterIP (10.96.0.1:443),
// which a kubelet puts into every pod's environment, is answered on the host by a forwarder
// to the API server, in place of kube-proxy. Nothing is pulled: the images are built by
// tests/world/images.sh and imported into each node's containerd.

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

const (
	realPrefix = "kreal-"
	// realPortBase + N is node kreal-N's kubelet port (every node has the bridge's address).
	realPortBase = 10350
	// Every real-kubelet node is tainted so that the suites written for the agent's nodes
	// never land there; a workload meant for them tolerates it and selects the label.
	realTaintKey  = "kworld.local/kubelet"
	realKindLabel = "kworld.local/node-kind"
	// The `kubernetes` Service's ClusterIP (the first of --service-cluster-ip-range).
	kubernetesServiceIP = "10.96.0.1"
)

func realNodeName(i int) string { return fmt.Sprintf("%s%d", realPrefix, i) }

func isRealNode(name string) bool { return strings.HasPrefix(name, realPrefix) }

func realIndex(name string) int {
	n, _ := strconv.Atoi(strings.TrimPrefix(name, realPrefix))
	return n
}

// realDir is the node's directory; everything the node writes is under it.
func (l layout) realDir(node string, p ...string) string {
	return l.run(append([]string{"kubelets", node}, p...)...)
}

// realNodes lists the real-kubelet nodes this world was started with.
func realNodes(l layout) []string {
	entries, _ := os.ReadDir(l.run("kubelets"))
	var names []string
	for _, e := range entries {
		if e.IsDir() && isRealNode(e.Name()) {
			names = append(names, e.Name())
		}
	}
	sort.Slice(names, func(i, j int) bool { return realIndex(names[i]) < realIndex(names[j]) })
	return names
}

// privatePaths are the host paths each node sees as its own: host path -> the node's
// directory bound over it in the node's mount namespace.
var privatePaths = [][2]string{
	{"/var/lib/kubelet", "kubelet"},
	{"/var/lib/containerd", "containerd"},
	{"/run/containerd", "run-containerd"},
	{"/run/netns", "netns"},
	{"/var/lib/cni", "cni"},
	{"/etc/cni/net.d", "cni-conf"},
	{"/var/log", "log"},
}

// kubeletSysctls are the host settings a kubelet writes at start
// (pkg/kubelet/cm.setupKernelTunables); each node gets files of its own over them.
var kubeletSysctls = []string{
	"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
}

// cgroupHierarchies are the v1 hierarchies mounted under /sys/fs/cgroup.
func cgroupHierarchies() []string {
	entries, _ := os.ReadDir("/sys/fs/cgroup")
	var hs []string
	for _, e := range entries {
		p := filepath.Join("/sys/fs/cgroup", e.Name())
		if _, err := os.Stat(filepath.Join(p, "cgroup.procs")); err == nil {
			hs = append(hs, p)
		}
	}
	return hs
}

// prepareRealNode writes a node's configuration (containerd, CNI, kubelet) and its cgroups.
func prepareRealNode(l layout, i int) error {
	node := realNodeName(i)
	dir := l.realDir(node)
	for _, p := range privatePaths {
		if err := os.MkdirAll(filepath.Join(dir, p[1]), 0o755); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "sysctl"), 0o755); err != nil {
		return err
	}
	containerd := `version = 2
root = "/var/lib/containerd"
state = "/run/containerd"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "/run/containerd/containerd.sock"
[plugins."io.containerd.internal.v1.opt"]
  path = "/var/lib/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.10"
  # runc cannot set a container's oom_score_adj below its parent's here: this machine's
  # bounding set lacks CAP_SYS_RESOURCE ("can't get final child's PID from pipe: EOF").
  restrict_oom_score_adj = true
  disable_apparmor = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "/etc/cni/net.d"
`
	if err := os.WriteFile(filepath.Join(dir, "containerd.toml"), []byte(containerd), 0o644); err != nil {
		return err
	}
	cni := fmt.Sprintf(`{
  "cniVersion": "0.4.0",
  "name": "kworld",
  "plugins": [{
    "type": "bridge", "bridge": %q, "isGateway": false, "ipMasq": false, "hairpinMode": true,
    "ipam": {"type": "host-local",
      "ranges": [[{"subnet": "10.250.0.0/16", "rangeStart": "10.250.%d.2", "rangeEnd": "10.250.%d.254", "gateway": %q}]],
      "routes": [{"dst": "0.0.0.0/0"}]}
  }]
}
`, bridgeName, 200+i, 200+i, bridgeIP)
	if err := os.WriteFile(filepath.Join(dir, "cni-conf", "10-kworld.conflist"), []byte(cni), 0o644); err != nil {
		return err
	}
	kubelet := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %s
port: %d
readOnlyPort: 0
healthzPort: 0
tlsCertFile: %s
tlsPrivateKeyFile: %s
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: %s}
authorization: {mode: AlwaysAllow}
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
# containerd 1.6 has no RuntimeConfig call to say its cgroup driver.
cgroupDriver: cgroupfs
cgroupRoot: /%s
cgroupsPerQOS: true
failCgroupV1: false
failSwapOn: false
protectKernelDefaults: false
makeIPTablesUtilChains: false
clusterDNS: [%s]
clusterDomain: cluster.local
registerWithTaints:
- {key: %s, value: real, effect: NoSchedule}
# The world's node-monitor-grace-period is 16 s: a Lease of 8 s is renewed every 2 s.
nodeLeaseDurationSeconds: 8
nodeStatusUpdateFrequency: 4s
nodeStatusReportFrequency: 10s
syncFrequency: 10s
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: 100Mi, nodefs.available: 1%%, imagefs.available: 1%%}
# Flexvolume drivers: the node's own directory, not /usr/libexec/kubernetes on the host.
volumePluginDir: %s
shutdownGracePeriod: 0s
rotateCertificates: false
serverTLSBootstrap: false
kubeAPIQPS: 50
kubeAPIBurst: 100
`, bridgeIP, realPortBase+i, l.pki("kubelet.crt"), l.pki("kubelet.key"), l.pki("ca.crt"),
		node, bridgeIP, realTaintKey, filepath.Join(dir, "volume-plugins"))
	if err := os.WriteFile(filepath.Join(dir, "kubelet.yaml"), []byte(kubelet), 0o644); err != nil {
		return err
	}
	if err := writeKubeconfig(filepath.Join(dir, "kubelet.kubeconfig"), apiServerURL(), l.pki("ca.crt"),
		"system:node:"+node, l.pki("node-"+node+".crt"), l.pki("node-"+node+".key"), "", ""); err != nil {
		return err
	}
	return makeNodeCgroups(node)
}

// makeNodeCgroups creates /NODE in every hierarchy (a kubelet's cgroupRoot must exist in
// each) with cpuset's CPUs and memory nodes copied from the root, and NODE/system, where
// the node's own processes (containerd, its shims, the kubelet) live.
func makeNodeCgroups(node string) error {
	for _, h := range cgroupHierarchies() {
		for _, d := range []string{filepath.Join(h, node), filepath.Join(h, node, "system")} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return err
			}
			if filepath.Base(h) == "cpuset" {
				for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
					v, err := os.ReadFile(filepath.Join(h, f))
					if err != nil {
						return err
					}
					if err := os.WriteFile(filepath.Join(d, f), v, 0o644); err != nil {
						return fmt.Errorf("%s: %w", filepath.Join(d, f), err)
					}
				}
			}
		}
	}
	return nil
}

// startRealNodes starts n real-kubelet nodes once the control plane answers.
func startRealNodes(l layout, n int) error {
	if n == 0 {
		return nil
	}
	if err := bindNodesGroup(l); err != nil {
		return fmt.Errorf("binding system:nodes to system:node: %w", err)
	}
	for i := 1; i <= n; i++ {
		if err := prepareRealNode(l, i); err != nil {
			return fmt.Errorf("preparing %s: %w", realNodeName(i), err)
		}
		name := realNodeName(i)
		if err := startDaemonIn(l, name, l.bin("kworld"), []string{"kubelet-node", "--name=" + name},
			syscall.CLONE_NEWNS); err != nil {
			return err
		}
	}
	return nil
}

// bindNodesGroup gives the group system:nodes the ClusterRole system:node: the world
// authorises with RBAC only (a kubeadm cluster also runs the Node authorizer).
func bindNodesGroup(l layout) error {
	cs, err := adminClientset(l)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "kworld:nodes"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "system:node"},
		Subjects:   []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "Group", Name: "system:nodes"}},
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// cmdKubeletNode is one real-kubelet node (internal): it runs in a mount namespace of its
// own (its parent started it with CLONE_NEWNS; Go made every mount private), takes the
// node's paths and sysctl files, starts containerd, imports the world's images and starts
// the kubelet. On SIGTERM it stops them and every pod's process.
func cmdKubeletNode(args []string) error {
	fs := flag.NewFlagSet("kubelet-node", flag.ExitOnError)
	name := fs.String("name", "", "the node's name (kreal-N)")
	_ = fs.Parse(args)
	if !isRealNode(*name) {
		return fmt.Errorf("--name must be %sN", realPrefix)
	}
	l := worldLayout()
	dir := l.realDir(*name)
	// PR_SET_CHILD_SUBREAPER: the shims containerd double-forks come back to this process.
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, 36, 1, 0); e != 0 {
		return fmt.Errorf("prctl(PR_SET_CHILD_SUBREAPER): %v", e)
	}
	if err := joinCgroup(*name + "/system"); err != nil {
		return err
	}
	for _, p := range privatePaths {
		if err := ensureMountpoint(l, p[0]); err != nil {
			return err
		}
		if err := syscall.Mount(filepath.Join(dir, p[1]), p[0], "", syscall.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind %s over %s: %w", filepath.Join(dir, p[1]), p[0], err)
		}
	}
	for _, s := range kubeletSysctls {
		host := filepath.Join("/proc/sys", s)
		v, err := os.ReadFile(host)
		if err != nil {
			return err
		}
		own := filepath.Join(dir, "sysctl", strings.ReplaceAll(s, "/", "."))
		// The host's value beside it, for a test that the host kept its own.
		if err := os.WriteFile(own+".host", v, 0o644); err != nil {
			return err
		}
		if err := os.WriteFile(own, v, 0o644); err != nil {
			return err
		}
		if err := syscall.Mount(own, host, "", syscall.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind %s over %s: %w", own, host, err)
		}
	}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)

	ctrd, err := startChild(filepath.Join(dir, "containerd.log"), "containerd", "--config", filepath.Join(dir, "containerd.toml"))
	if err != nil {
		return err
	}
	if err := waitSocket("/run/containerd/containerd.sock", 30*time.Second); err != nil {
		stopNode(*name, nil, ctrd)
		return fmt.Errorf("containerd did not start (see %s): %w", filepath.Join(dir, "containerd.log"), err)
	}
	images, _ := filepath.Glob(l.bin("images/*.tar"))
	for _, img := range images {
		if out, err := ctrImport("/run/containerd/containerd.sock", img); err != nil {
			stopNode(*name, nil, ctrd)
			return fmt.Errorf("importing %s: %v: %s", img, err, out)
		}
	}
	kubelet, err := startChild(filepath.Join(dir, "kubelet.log"), l.bin("kubelet"),
		"--config="+filepath.Join(dir, "kubelet.yaml"),
		"--kubeconfig="+filepath.Join(dir, "kubelet.kubeconfig"),
		"--hostname-override="+*name, "--node-ip="+bridgeIP,
		"--node-labels="+realKindLabel+"=kubelet,kworld.local/node=true",
		"--cert-dir="+filepath.Join(dir, "pki"), "--v=1")
	if err != nil {
		stopNode(*name, nil, ctrd)
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "kubelet.pid"), []byte(strconv.Itoa(kubelet.Process.Pid)), 0o644); err != nil {
		return err
	}
	log.Printf("kubelet-node %s: containerd %d, kubelet %d, %d images", *name, ctrd.Process.Pid, kubelet.Process.Pid, len(images))
	exited := make(chan string, 2)
	go func() { _ = kubelet.Wait(); exited <- "kubelet" }()
	go func() { _ = ctrd.Wait(); exited <- "containerd" }()
	select {
	case s := <-sigs:
		log.Printf("kubelet-node %s: %v: stopping", *name, s)
		stopNode(*name, kubelet, ctrd)
		return nil
	case what := <-exited:
		stopNode(*name, kubelet, ctrd)
		return fmt.Errorf("%s exited (see %s)", what, filepath.Join(dir, what+".log"))
	}
}

func startChild(logPath, bin string, args ...string) (*exec.Cmd, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	return cmd, nil
}

func ctrImport(socket, archive string) ([]byte, error) {
	return exec.Command("ctr", "--address", socket, "--namespace", "k8s.io", "images", "import", archive).CombinedOutput()
}

func waitSocket(path string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		c, err := net.DialTimeout("unix", path, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// stopNode ends a node: the kubelet first (so it restarts nothing), then every pod's
// processes, then containerd, then whatever of the node is left (its shims).
func stopNode(node string, kubelet, ctrd *exec.Cmd) {
	for _, c := range []*exec.Cmd{kubelet} {
		if c != nil && c.Process != nil {
			_ = c.Process.Signal(syscall.SIGTERM)
			waitGone(c.Process.Pid, 5*time.Second)
			_ = c.Process.Kill()
		}
	}
	killCgroupTree(node+"/kubepods", 5*time.Second)
	if ctrd != nil && ctrd.Process != nil {
		_ = ctrd.Process.Signal(syscall.SIGTERM)
		waitGone(ctrd.Process.Pid, 5*time.Second)
		_ = ctrd.Process.Kill()
	}
	me := strconv.Itoa(os.Getpid())
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		left := 0
		for _, pid := range cgroupPids(node + "/system") {
			if pid != me {
				left++
				if n, err := strconv.Atoi(pid); err == nil {
					_ = syscall.Kill(n, syscall.SIGKILL)
				}
			}
		}
		reap()
		if left == 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// reap collects the exit statuses of the orphans this subreaper inherited.
func reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}

// joinCgroup moves this process into group (relative to each hierarchy's root) in every
// hierarchy; its children start there.
func joinCgroup(group string) error {
	for _, h := range cgroupHierarchies() {
		if err := os.WriteFile(filepath.Join(h, group, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
			return fmt.Errorf("joining %s: %w", filepath.Join(h, group), err)
		}
	}
	return nil
}

// cgroupPids lists every process in group and its descendants, in any hierarchy.
func cgroupPids(group string) []string {
	seen := map[string]bool{}
	var pids []string
	for _, h := range cgroupHierarchies() {
		_ = filepath.Walk(filepath.Join(h, group), func(p string, info os.FileInfo, err error) error {
			if err != nil || !info.IsDir() {
				return nil
			}
			b, _ := os.ReadFile(filepath.Join(p, "cgroup.procs"))
			for _, pid := range strings.Fields(string(b)) {
				if !seen[pid] {
					seen[pid] = true
					pids = append(pids, pid)
				}
			}
			return nil
		})
	}
	return pids
}

// setFrozen freezes or thaws a group and its descendants (v1 freezer).
func setFrozen(group string, frozen bool) error {
	state := "THAWED"
	if frozen {
		state = "FROZEN"
	}
	return os.WriteFile(filepath.Join("/sys/fs/cgroup/freezer", group, "freezer.state"), []byte(state), 0o644)
}

// thawTree thaws group and every group below it: a v1 freezer group frozen by itself (a
// node-down's kubepods) stays frozen when only its parent is thawed.
func thawTree(group string) {
	_ = filepath.Walk(filepath.Join("/sys/fs/cgroup/freezer", group), func(p string, info os.FileInfo, err error) error {
		if err == nil && info.IsDir() {
			_ = os.WriteFile(filepath.Join(p, "freezer.state"), []byte("THAWED"), 0o644)
		}
		return nil
	})
}

// killCgroupTree sends SIGKILL to every process of group (every group of it thawed first: a
// frozen process takes no signal) until none is left or d has passed.
func killCgroupTree(group string, d time.Duration) bool {
	thawTree(group)
	deadline := time.Now().Add(d)
	for {
		pids := cgroupPids(group)
		if len(pids) == 0 {
			return true
		}
		for _, pid := range pids {
			if n, err := strconv.Atoi(pid); err == nil && n != os.Getpid() {
				_ = syscall.Kill(n, syscall.SIGKILL)
			}
		}
		reap()
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// removeCgroupTree removes group and its descendants, deepest first, in every hierarchy.
func removeCgroupTree(group string) error {
	var errs []string
	for _, h := range cgroupHierarchies() {
		var dirs []string
		_ = filepath.Walk(filepath.Join(h, group), func(p string, info os.FileInfo, err error) error {
			if err == nil && info.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := os.Remove(dirs[i]); err != nil && !os.IsNotExist(err) {
				errs = append(errs, err.Error())
			}
		}
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}

// downRealNodes ends every real-kubelet node: the node process (which stops its kubelet,
// pods and containerd), then whatever is left in the node's cgroups, then the cgroups.
func downRealNodes(l layout) error {
	nodes := realNodes(l)
	for _, n := range nodes {
		if pid := readPid(l, n); pid > 0 {
			_ = syscall.Kill(pid, syscall.SIGCONT)
			if kp := readPidFile(l.realDir(n, "kubelet.pid")); kp > 0 {
				_ = syscall.Kill(kp, syscall.SIGCONT) // a paused node's kubelet
			}
			_ = syscall.Kill(pid, syscall.SIGTERM)
		}
	}
	var errs []string
	for _, n := range nodes {
		if pid := readPid(l, n); pid > 0 && !waitGone(pid, 25*time.Second) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		if !killCgroupTree(n, 10*time.Second) {
			errs = append(errs, fmt.Sprintf("%s: processes left in its cgroups: %v", n, cgroupPids(n)))
			continue
		}
		if err := removeCgroupTree(n); err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", n, err))
		}
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "\n"))
	}
	return nil
}

func readPidFile(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

// pauseRealNode silences a real node's kubelet (SIGSTOP: no heartbeat, no status, no
// deletion acted on, as a hung kubelet), and with down also freezes every pod of it.
func pauseRealNode(l layout, node string, pause, down bool) error {
	kp := readPidFile(l.realDir(node, "kubelet.pid"))
	// The pid must still be this node's kubelet, not a process that reused it.
	cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", kp))
	if kp <= 0 || !strings.Contains(string(cmdline), "--hostname-override="+node) {
		return fmt.Errorf("node %s has no kubelet running", node)
	}
	if !pause {
		if err := setFrozen(node+"/kubepods", false); err != nil {
			return err
		}
		return syscall.Kill(kp, syscall.SIGCONT)
	}
	if err := syscall.Kill(kp, syscall.SIGSTOP); err != nil {
		return err
	}
	if down {
		return setFrozen(node+"/kubepods", true)
	}
	return nil
}

// cmdKubeletImport imports image archives into every real node's containerd (a test's
// own image, built after the world started).
func cmdKubeletImport(args []string) error {
	if len(args) == 0 {
		return errors.New("usage: kworld kubelet-import ARCHIVE...")
	}
	l := worldLayout()
	nodes := realNodes(l)
	if len(nodes) == 0 {
		return errors.New("this world has no real-kubelet nodes (kworld up --kubelets N)")
	}
	for _, n := range nodes {
		for _, a := range args {
			if out, err := ctrImport(l.realDir(n, "run-containerd", "containerd.sock"), a); err != nil {
				return fmt.Errorf("%s: importing %s: %v: %s", n, a, err, out)
			}
		}
	}
	return nil
}

// serveKubernetesService answers the `kubernetes` Service's ClusterIP on the host (the
// address is put on the bridge) by forwarding to the API server, as kube-proxy would.
func serveKubernetesService() error {
	if out, err := exec.Command("ip", "addr", "replace", kubernetesServiceIP+"/32", "dev", bridgeName).CombinedOutput(); err != nil {
		return fmt.Errorf("ip addr replace %s/32 dev %s: %v: %s", kubernetesServiceIP, bridgeName, err, out)
	}
	return forwardTCP(net.JoinHostPort(kubernetesServiceIP, "443"), net.JoinHostPort("127.0.0.1", strconv.Itoa(apiPort)))
}

// checkRealKubeletHost says what a real-kubelet node lacks on this machine, before anything
// starts (tests/world/build.sh installs and builds all of it).
func checkRealKubeletHost(l layout) error {
	var missing []string
	for _, c := range []string{"containerd", "containerd-shim-runc-v2", "runc", "ctr"} {
		if _, err := exec.LookPath(c); err != nil {
			missing = append(missing, c)
		}
	}
	for _, p := range []string{"/usr/lib/cni/bridge", "/usr/lib/cni/host-local", "/usr/lib/cni/loopback", l.bin("images/pause.tar")} {
		if _, err := os.Stat(p); err != nil {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("real-kubelet nodes need %s: run tests/world/build.sh (it installs containerd, runc and containernetworking-plugins and builds the images)", strings.Join(missing, ", "))
	}
	if _, err := os.Stat("/sys/fs/cgroup/freezer/cgroup.procs"); err != nil {
		return errors.New("real-kubelet nodes need cgroup v1 hierarchies under /sys/fs/cgroup (freezer among them); this machine has none")
	}
	return nil
}

// shellImage is the image a real-kubelet node runs for the world's manifests' plain shell
// (`image: example/shell`, which the agent runs from the host's /bin/sh): busybox, named
// where tests/world/images.sh builds it (its busybox.ref).
func shellImage(l layout) (string, error) {
	b, err := os.ReadFile(l.bin("images/busybox.ref"))
	if err != nil {
		return "", fmt.Errorf("the world's busybox image: %w (run tests/world/build.sh)", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// cmdPlace prints a manifest's objects (YAML or JSON, several documents) as one v1 List with
// every pod (and pod template) placed on the given kind of node: `kubelet` selects the real
// nodes' label, tolerates their taint and runs `example/shell` from the busybox image;
// `agent` selects the agent's nodes. The one definition of placement, for the tests and the
// benchmarks alike.
func cmdPlace(args []string) error {
	fs := flag.NewFlagSet("place", flag.ExitOnError)
	kind := fs.String("kind", "kubelet", "the kind of node: kubelet or agent")
	_ = fs.Parse(args)
	if (*kind != "kubelet" && *kind != "agent") || fs.NArg() != 1 {
		return errors.New("usage: kworld place --kind kubelet|agent MANIFEST (- for standard input)")
	}
	in := os.Stdin
	if fs.Arg(0) != "-" {
		f, err := os.Open(fs.Arg(0))
		if err != nil {
			return err
		}
		defer f.Close()
		in = f
	}
	shell := ""
	if *kind == "kubelet" {
		var err error
		if shell, err = shellImage(worldLayout()); err != nil {
			return err
		}
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(in, 4096)
	var items []map[string]interface{}
	for {
		var obj map[string]interface{}
		if err := dec.Decode(&obj); err == io.EOF {
			break
		} else if err != nil {
			return fmt.Errorf("reading the manifest: %w", err)
		}
		if obj == nil {
			continue
		}
		if spec := podSpecOf(obj); spec != nil {
			placeSpec(spec, *kind, shell)
		}
		items = append(items, obj)
	}
	out, err := json.Marshal(map[string]interface{}{"apiVersion": "v1", "kind": "List", "items": items})
	if err != nil {
		return err
	}
	fmt.Println(string(out))
	return nil
}

// podSpecOf finds the pod spec of a Pod or of any object with a pod template.
func podSpecOf(obj map[string]interface{}) map[string]interface{} {
	spec, _ := obj["spec"].(map[string]interface{})
	if obj["kind"] == "Pod" {
		return spec
	}
	tmpl, _ := spec["template"].(map[string]interface{})
	inner, _ := tmpl["spec"].(map[string]interface{})
	return inner
}

func placeSpec(spec map[string]interface{}, kind, shell string) {
	sel, _ := spec["nodeSelector"].(map[string]interface{})
	if sel == nil {
		sel = map[string]interface{}{}
	}
	sel[realKindLabel] = kind
	spec["nodeSelector"] = sel
	if kind != "kubelet" {
		return
	}
	tols, _ := spec["tolerations"].([]interface{})
	spec["tolerations"] = append(tols, map[string]interface{}{"key": realTaintKey, "operator": "Exists", "effect": "NoSchedule"})
	for _, key := range []string{"initContainers", "containers"} {
		cs, _ := spec[key].([]interface{})
		for _, c := range cs {
			if m, ok := c.(map[string]interface{}); ok && m["image"] == "example/shell" {
				m["image"] = shell
			}
		}
	}
}

// cmdPid prints the host process id of a container's first process, from its containerID in
// a pod's status, on either kind of node: kworld://PID (the agent's), or containerd://ID, whose
// shim wrote it into the container's bundle on its node's /run/containerd.
func cmdPid(args []string) error {
	if len(args) != 1 {
		return errors.New("usage: kworld pid CONTAINER-ID")
	}
	pid, err := hostPid(worldLayout(), args[0])
	if err != nil {
		return err
	}
	fmt.Println(pid)
	return nil
}

func hostPid(l layout, containerID string) (int, error) {
	if p, ok := strings.CutPrefix(containerID, "kworld://"); ok {
		return strconv.Atoi(p)
	}
	id, ok := strings.CutPrefix(containerID, "containerd://")
	if !ok {
		return 0, fmt.Errorf("a container id of neither kind: %q", containerID)
	}
	for _, n := range realNodes(l) {
		b, err := os.ReadFile(l.realDir(n, "run-containerd", "io.containerd.runtime.v2.task", "k8s.io", id, "init.pid"))
		if err == nil {
			return strconv.Atoi(strings.TrimSpace(string(b)))
		}
	}
	return 0, fmt.Errorf("no real-kubelet node runs container %s", id)
}
