package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

const (
	bridgeName   = "kraft0"
	bridgeCIDR   = "10.250.0.1/16"
	bridgeIP     = "10.250.0.1"
	apiPort      = 16443
	etcdClient   = "127.0.0.1:23790"
	etcdPeer     = "127.0.0.1:23800"
	netnsPrefix  = "kraft-"
	runNetns     = "/run/netns"
	storageClass = "kworld-local"
	// Like local volumes (local-path provisioners, local PVs): a PV with node affinity, so a
	// pod that uses it can only ever run on the node its volume was made on.
	pinnedStorageClass = "kworld-local-pinned"
)

// layout names every path the world uses, so `down` knows exactly what to remove.
type layout struct{ root string }

func worldLayout() layout {
	root := os.Getenv("KWORLD_DIR")
	if root == "" {
		root = "/var/tmp/kraft-world"
	}
	return layout{root: root}
}

func (l layout) bin(name string) string { return filepath.Join(l.root, "bin", name) }
func (l layout) run(p ...string) string {
	return filepath.Join(append([]string{l.root, "run"}, p...)...)
}
func (l layout) pki(name string) string    { return l.run("pki", name) }
func (l layout) adminKubeconfig() string   { return l.run("admin.kubeconfig") }
func (l layout) pidFile(c string) string   { return l.run("pids", c+".pid") }
func (l layout) logFile(c string) string   { return l.run("logs", c+".log") }
func (l layout) pauseFile(n string) string { return l.run("agent", "paused", n) }
func (l layout) downFile(n string) string  { return l.run("agent", "paused", n+".down") }
func apiServerURL() string                 { return fmt.Sprintf("https://127.0.0.1:%d", apiPort) }

func cmdUp(args []string) error {
	fs := flag.NewFlagSet("up", flag.ExitOnError)
	nodes := fs.Int("nodes", 4, "number of nodes the agent registers")
	kubelets := fs.Int("kubelets", 0, "number of nodes run by real kubelets (kreal-1..N) beside the agent's")
	timeout := fs.Duration("timeout", 3*time.Minute, "how long to wait for the world to be ready")
	_ = fs.Parse(args)
	if os.Geteuid() != 0 {
		return errors.New("the test world needs root (network namespaces, bind mounts); run it as root")
	}
	l := worldLayout()
	for _, b := range worldBinaries(*kubelets) {
		if _, err := os.Stat(l.bin(b)); err != nil {
			return fmt.Errorf("missing %s: build the world first (tests/world/build.sh)", l.bin(b))
		}
	}
	if *kubelets > 0 {
		if err := checkRealKubeletHost(l); err != nil {
			return err
		}
	}
	if err := checkDisk(l); err != nil {
		return err
	}
	// A running world is reused only if it is the one asked for: same node count, same
	// binaries (a rebuilt agent must replace the running one).
	want := worldID(l, *nodes, *kubelets)
	prev, _ := os.ReadFile(l.run("world-id"))
	if running(l, "kube-apiserver") && running(l, "agent") && allRunning(l, realNodes(l)) && string(prev) == want {
		if err := waitReady(l, *nodes+*kubelets, *timeout); err != nil {
			return fmt.Errorf("a world is running but not ready (%v); run `kworld down` and try again\n%s", err, diagnose(l))
		}
		fmt.Println(l.adminKubeconfig())
		return nil
	}
	// A half-started or crashed world is torn down first, so `up` always starts clean.
	if _, err := os.Stat(l.run()); err == nil {
		if err := cmdDown(nil); err != nil {
			return fmt.Errorf("cleaning up a previous world: %w", err)
		}
	}
	for _, d := range []string{"pids", "logs", "agent/paused", "etcd"} {
		if err := os.MkdirAll(l.run(d), 0o755); err != nil {
			return err
		}
	}
	if err := os.WriteFile(l.run("world-id"), []byte(want), 0o644); err != nil {
		return err
	}
	if err := writePKI(l, *kubelets); err != nil {
		return fmt.Errorf("generating certificates: %w", err)
	}
	// `ip netns add` (the agent's pods) makes /run/netns and mounts it on itself; down takes
	// it away again if the world made it.
	if _, err := os.Stat(runNetns); os.IsNotExist(err) {
		if err := os.WriteFile(l.run("made-run-netns"), nil, 0o644); err != nil {
			return err
		}
	}
	if err := setupBridge(); err != nil {
		return fmt.Errorf("creating bridge %s: %w", bridgeName, err)
	}
	steps := []struct {
		name string
		bin  string
		args []string
	}{
		{"etcd", "kworld", []string{"etcd", "--name=kworld", "--data-dir=" + l.run("etcd"),
			"--listen-client-urls=http://" + etcdClient, "--advertise-client-urls=http://" + etcdClient,
			"--listen-peer-urls=http://" + etcdPeer, "--initial-advertise-peer-urls=http://" + etcdPeer,
			"--initial-cluster=kworld=http://" + etcdPeer, "--listen-metrics-urls=", "--log-level=warn",
			"--quota-backend-bytes=4294967296", "--unsafe-no-fsync"}},
		{"kube-apiserver", "kube-apiserver", []string{
			"--etcd-servers=http://" + etcdClient,
			"--bind-address=127.0.0.1", "--advertise-address=" + bridgeIP, "--secure-port=" + strconv.Itoa(apiPort),
			"--tls-cert-file=" + l.pki("apiserver.crt"), "--tls-private-key-file=" + l.pki("apiserver.key"),
			"--client-ca-file=" + l.pki("ca.crt"),
			"--kubelet-client-certificate=" + l.pki("apiserver-kubelet-client.crt"),
			"--kubelet-client-key=" + l.pki("apiserver-kubelet-client.key"),
			"--kubelet-certificate-authority=" + l.pki("ca.crt"),
			"--kubelet-preferred-address-types=InternalIP",
			"--service-account-key-file=" + l.pki("sa.pub"), "--service-account-signing-key-file=" + l.pki("sa.key"),
			"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
			"--service-cluster-ip-range=10.96.0.0/16", "--authorization-mode=RBAC",
			"--allow-privileged=true", "--profiling=false", "--v=1",
			// Webhooks (and aggregated APIs) given as a Service are reached at an endpoint
			// of it: the world has no kube-proxy to make a ClusterIP work.
			"--enable-aggregator-routing=true",
			"--admission-control-config-file=" + l.run("admission.yaml"),
			// PodNodeSelector: a test's namespace places its pods in the lane of nodes the
			// test holds (tests/common/lanes.rs).
			"--enable-admission-plugins=NamespaceLifecycle,PodNodeSelector,ServiceAccount,DefaultStorageClass,StorageObjectInUseProtection,DefaultTolerationSeconds,PersistentVolumeClaimResize"}},
		{"kube-controller-manager", "kube-controller-manager", []string{
			"--kubeconfig=" + l.run("controller-manager.kubeconfig"),
			"--authentication-kubeconfig=" + l.run("controller-manager.kubeconfig"),
			"--authorization-kubeconfig=" + l.run("controller-manager.kubeconfig"),
			"--bind-address=127.0.0.1", "--secure-port=0",
			"--leader-elect=false", "--controllers=*,-cloud-node-lifecycle-controller,-service-lb-controller,-node-route-controller",
			"--service-account-private-key-file=" + l.pki("sa.key"), "--root-ca-file=" + l.pki("ca.crt"),
			"--use-service-account-credentials=true",
			"--node-monitor-period=2s", "--node-monitor-grace-period=16s",
			"--concurrent-statefulset-syncs=5", "--v=1"}},
		{"kube-scheduler", "kube-scheduler", []string{
			"--kubeconfig=" + l.run("scheduler.kubeconfig"),
			"--authentication-kubeconfig=" + l.run("scheduler.kubeconfig"),
			"--authorization-kubeconfig=" + l.run("scheduler.kubeconfig"),
			"--bind-address=127.0.0.1", "--secure-port=0", "--leader-elect=false", "--v=1"}},
		{"agent", "kworld", []string{"agent", "--nodes=" + strconv.Itoa(*nodes), "--kubeconfig=" + l.run("agent.kubeconfig")}},
	}
	for _, s := range steps {
		if err := startDaemon(l, s.name, l.bin(s.bin), s.args); err != nil {
			return err
		}
		if s.name == "etcd" {
			if err := waitTCP(etcdClient, 30*time.Second); err != nil {
				return fmt.Errorf("etcd did not start (see %s): %w\n%s", l.logFile("etcd"), err, diagnose(l))
			}
		}
		if s.name == "kube-apiserver" {
			if err := waitAPIServer(l, 90*time.Second); err != nil {
				return fmt.Errorf("kube-apiserver did not become ready (see %s): %w\n%s", l.logFile("kube-apiserver"), err, diagnose(l))
			}
		}
	}
	if err := startRealNodes(l, *kubelets); err != nil {
		return fmt.Errorf("starting the real-kubelet nodes: %w\n%s", err, diagnose(l))
	}
	if err := waitReady(l, *nodes+*kubelets, *timeout); err != nil {
		return fmt.Errorf("%w\n%s", err, diagnose(l))
	}
	fmt.Println(l.adminKubeconfig())
	return nil
}

// worldBinaries are the binaries a world of this shape runs.
func worldBinaries(kubelets int) []string {
	bins := []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kworld"}
	if kubelets > 0 {
		bins = append(bins, "kubelet")
	}
	return bins
}

// worldID names a world by its node counts and the identity of every binary it runs.
func worldID(l layout, nodes, kubelets int) string {
	id := fmt.Sprintf("nodes=%d kubelets=%d", nodes, kubelets)
	for _, b := range worldBinaries(kubelets) {
		if st, err := os.Stat(l.bin(b)); err == nil {
			id += fmt.Sprintf(" %s=%d/%d", b, st.Size(), st.ModTime().UnixNano())
		}
	}
	if kubelets > 0 {
		// The images a node imports when it starts (tests/world/images.sh's stamp).
		stamp, _ := os.ReadFile(l.bin("images/.stamp"))
		id += " images=" + strings.TrimSpace(string(stamp))
	}
	return id
}

func writePKI(l layout, kubelets int) error {
	p, err := newPKI(l.run("pki"))
	if err != nil {
		return err
	}
	ips := []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP(bridgeIP), net.ParseIP(kubernetesServiceIP)}
	dns := []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}
	if err := p.issue("apiserver", "kube-apiserver", nil, ips, dns, true); err != nil {
		return err
	}
	// The agent's kubelet API (port-forward, exec, logs) and the API server's client for it.
	if err := p.issue("kubelet", "kworld-kubelet", nil, ips, []string{"localhost"}, true); err != nil {
		return err
	}
	// The real kubelets' client certificates: the identities a kubelet has on a cluster.
	for i := 1; i <= kubelets; i++ {
		n := realNodeName(i)
		if err := p.issue("node-"+n, "system:node:"+n, []string{"system:nodes"}, nil, nil, false); err != nil {
			return err
		}
	}
	if err := p.issue("apiserver-kubelet-client", "kube-apiserver-kubelet-client", []string{"system:masters"}, nil, nil, false); err != nil {
		return err
	}
	// The API server's client certificate for admission webhooks (presented to every webhook:
	// the gate's --client-ca/--client-name are proven with it), and the admission
	// configuration that gives it (docs/gate.md, "Only the API server").
	if err := p.issue("apiserver-webhook-client", "kube-apiserver-webhook-client", nil, nil, nil, false); err != nil {
		return err
	}
	if err := writeAdmissionConfig(l); err != nil {
		return err
	}
	users := []struct{ file, cn, org string }{
		{"admin", "kworld-admin", "system:masters"},
		{"controller-manager", "system:kube-controller-manager", ""},
		{"scheduler", "system:kube-scheduler", ""},
		// The agent stands in for the kubelets of several nodes at once, so it cannot be
		// one system:node identity; it gets full rights instead.
		{"agent", "kworld-agent", "system:masters"},
	}
	for _, u := range users {
		var orgs []string
		if u.org != "" {
			orgs = []string{u.org}
		}
		if err := p.issue(u.file, u.cn, orgs, nil, nil, false); err != nil {
			return err
		}
		if err := writeKubeconfig(l.run(u.file+".kubeconfig"), apiServerURL(), l.pki("ca.crt"), u.cn,
			l.pki(u.file+".crt"), l.pki(u.file+".key"), "", ""); err != nil {
			return err
		}
	}
	return p.serviceAccountKey()
}

// writeAdmissionConfig writes the API server's AdmissionConfiguration: both webhook plugins
// present the webhook client certificate to every webhook ("*" matches any).
func writeAdmissionConfig(l layout) error {
	kubeconfig := fmt.Sprintf(`apiVersion: v1
kind: Config
users:
- name: "*"
  user:
    client-certificate: %s
    client-key: %s
`, l.pki("apiserver-webhook-client.crt"), l.pki("apiserver-webhook-client.key"))
	if err := os.WriteFile(l.run("webhook-client.kubeconfig"), []byte(kubeconfig), 0o600); err != nil {
		return err
	}
	config := "apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n"
	for _, plugin := range []string{"ValidatingAdmissionWebhook", "MutatingAdmissionWebhook"} {
		config += fmt.Sprintf(`- name: %s
  configuration:
    apiVersion: apiserver.config.k8s.io/v1
    kind: WebhookAdmissionConfiguration
    kubeConfigFile: %s
`, plugin, l.run("webhook-client.kubeconfig"))
	}
	return os.WriteFile(l.run("admission.yaml"), []byte(config), 0o600)
}

func setupBridge() error {
	if _, err := net.InterfaceByName(bridgeName); err == nil {
		return nil
	}
	for _, args := range [][]string{
		{"link", "add", bridgeName, "type", "bridge"},
		{"addr", "add", bridgeCIDR, "dev", bridgeName},
		{"link", "set", bridgeName, "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	return nil
}

func startDaemon(l layout, name, bin string, args []string) error {
	return startDaemonIn(l, name, bin, args, 0)
}

// startDaemonIn starts a daemon in new namespaces of the kinds unshare names (CLONE_NEWNS:
// a mount namespace of its own, every mount in it private).
func startDaemonIn(l layout, name, bin string, args []string, unshare uintptr) error {
	logf, err := os.OpenFile(l.logFile(name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), "KWORLD_DIR="+l.root)
	// A session of its own: the daemon outlives `up` and `down` can kill its whole group.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Unshareflags: unshare}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", name, err)
	}
	if err := os.WriteFile(l.pidFile(name), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
		return err
	}
	go func() { _ = cmd.Wait() }()
	return nil
}

func readPid(l layout, name string) int {
	b, err := os.ReadFile(l.pidFile(name))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

func running(l layout, name string) bool {
	pid := readPid(l, name)
	return pid > 0 && syscall.Kill(pid, 0) == nil && !isZombie(pid)
}

func isZombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndex(s, ")")
	return i > 0 && len(s) > i+2 && s[i+2] == 'Z'
}

func waitTCP(addr string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func adminHTTPClient(l layout) (*http.Client, error) {
	ca, err := os.ReadFile(l.pki("ca.crt"))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	cert, err := tls.LoadX509KeyPair(l.pki("admin.crt"), l.pki("admin.key"))
	if err != nil {
		return nil, err
	}
	return &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}}}, nil
}

func waitAPIServer(l layout, d time.Duration) error {
	c, err := adminHTTPClient(l)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(d)
	last := ""
	for time.Now().Before(deadline) {
		if !running(l, "kube-apiserver") {
			return errors.New("the process exited")
		}
		resp, err := c.Get(apiServerURL() + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		time.Sleep(300 * time.Millisecond)
	}
	return fmt.Errorf("timed out; last answer: %s", last)
}

func adminClientset(l layout) (*kubernetes.Clientset, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", l.adminKubeconfig())
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}

// waitReady waits until every node is Ready, the default ServiceAccount exists and the
// world's StorageClass is there: what a workload needs to start.
func waitReady(l layout, nodes int, d time.Duration) error {
	cs, err := adminClientset(l)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if err := ensureStorageClass(ctx, cs); err != nil {
		return err
	}
	last := "nothing checked yet"
	for {
		ok, why := worldReady(ctx, cs, nodes)
		if ok {
			return nil
		}
		last = why
		for _, c := range append([]string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "agent", "etcd"}, realNodes(l)...) {
			if !running(l, c) {
				return fmt.Errorf("%s exited (see %s)", c, l.logFile(c))
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("world not ready after %v: %s", d, last)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func worldReady(ctx context.Context, cs *kubernetes.Clientset, nodes int) (bool, string) {
	list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return false, err.Error()
	}
	ready := 0
	for _, n := range list.Items {
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				ready++
			}
		}
	}
	if ready < nodes {
		return false, fmt.Sprintf("%d of %d nodes Ready", ready, nodes)
	}
	if _, err := cs.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{}); err != nil {
		return false, "no default ServiceAccount yet: " + err.Error()
	}
	return true, ""
}

func ensureStorageClass(ctx context.Context, cs *kubernetes.Clientset) error {
	// WaitForFirstConsumer: the scheduler places the pod and waits for the claim to bind,
	// instead of rejecting pods whose claims are not bound yet and relying on a requeue.
	mode := storagev1.VolumeBindingWaitForFirstConsumer
	reclaim := corev1.PersistentVolumeReclaimDelete
	classes := []*storagev1.StorageClass{{
		ObjectMeta: metav1.ObjectMeta{Name: storageClass, Annotations: map[string]string{
			"storageclass.kubernetes.io/is-default-class": "true"}},
		Provisioner:       provisionerName,
		VolumeBindingMode: &mode,
		ReclaimPolicy:     &reclaim,
	}, {
		ObjectMeta:        metav1.ObjectMeta{Name: pinnedStorageClass},
		Provisioner:       provisionerName,
		VolumeBindingMode: &mode,
		ReclaimPolicy:     &reclaim,
	}}
	for _, sc := range classes {
		for {
			_, err := cs.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{})
			if err == nil || apierrors.IsAlreadyExists(err) {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("creating StorageClass %s: %w", sc.Name, err)
			case <-time.After(500 * time.Millisecond):
			}
		}
	}
	return nil
}

func cmdStatus([]string) error {
	l := worldLayout()
	for _, c := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "agent"} {
		state := "stopped"
		if running(l, c) {
			state = fmt.Sprintf("running (pid %d)", readPid(l, c))
		}
		fmt.Printf("%-24s %s\n", c, state)
	}
	for _, n := range realNodes(l) {
		state := "stopped"
		if running(l, n) {
			state = fmt.Sprintf("running (pid %d, kubelet pid %d)", readPid(l, n), readPidFile(l.realDir(n, "kubelet.pid")))
		}
		fmt.Printf("%-24s %s\n", n, state)
	}
	fmt.Printf("kubeconfig: %s\n", l.adminKubeconfig())
	return nil
}

func cmdNodePause(args []string, pause bool) error {
	if len(args) != 1 {
		return errors.New("usage: kworld node-pause|node-resume NODE")
	}
	l := worldLayout()
	if isRealNode(args[0]) {
		return pauseRealNode(l, args[0], pause, false)
	}
	if pause {
		return os.WriteFile(l.pauseFile(args[0]), nil, 0o644)
	}
	for _, f := range []string{l.downFile(args[0]), l.pauseFile(args[0])} {
		if err := os.Remove(f); err != nil && !os.IsNotExist(err) {
			return err
		}
	}
	return nil
}

// cmdNodeDown takes a node down with its pods: its kubelet goes silent (as node-pause) and
// every process of its pods is frozen, so members there neither answer nor vote. It ends
// at node-resume, or by itself after --for.
func cmdNodeDown(args []string) error {
	fs := flag.NewFlagSet("node-down", flag.ExitOnError)
	dur := fs.Duration("for", 5*time.Minute, "bring the node back by itself after this long")
	if len(args) < 1 {
		return errors.New("usage: kworld node-down NODE [--for DURATION]")
	}
	_ = fs.Parse(args[1:])
	l := worldLayout()
	if isRealNode(args[0]) {
		// A real node is lost until node-resume: --for is the agent's.
		return pauseRealNode(l, args[0], true, true)
	}
	until := time.Now().Add(*dur).Unix()
	if err := os.WriteFile(l.downFile(args[0]), []byte(fmt.Sprint(until)), 0o644); err != nil {
		return err
	}
	return os.WriteFile(l.pauseFile(args[0]), nil, 0o644)
}

// cmdKubeconfigFor mints a kubeconfig for a ServiceAccount with a bound token, so tests
// can run the plugin with exactly the rights a Role grants.
func cmdKubeconfigFor(args []string) error {
	if len(args) != 2 {
		return errors.New("usage: kworld kubeconfig-for NAMESPACE SERVICEACCOUNT")
	}
	ns, sa := args[0], args[1]
	l := worldLayout()
	cs, err := adminClientset(l)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	secs := int64(24 * 3600)
	tok, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authv1.TokenRequest{Spec: authv1.TokenRequestSpec{ExpirationSeconds: &secs}}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	path := l.run(fmt.Sprintf("sa-%s-%s.kubeconfig", ns, sa))
	if err := writeKubeconfig(path, apiServerURL(), l.pki("ca.crt"), "system:serviceaccount:"+ns+":"+sa, "", "", tok.Status.Token, ns); err != nil {
		return err
	}
	fmt.Println(path)
	return nil
}

func cmdDown([]string) error {
	l := worldLayout()
	// The real-kubelet nodes first (their pods, containerd, cgroups), then the agent, which
	// stops its pods and removes their namespaces itself.
	// A node that could not be ended fully is said at the end; the rest still goes.
	nodesErr := downRealNodes(l)
	if pid := readPid(l, "agent"); pid > 0 {
		_ = syscall.Kill(pid, syscall.SIGTERM)
		waitGone(pid, 15*time.Second)
	}
	for _, c := range []string{"kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd", "agent"} {
		if pid := readPid(l, c); pid > 0 {
			_ = syscall.Kill(-pid, syscall.SIGTERM)
			_ = syscall.Kill(pid, syscall.SIGTERM)
			if !waitGone(pid, 10*time.Second) {
				_ = syscall.Kill(-pid, syscall.SIGKILL)
				_ = syscall.Kill(pid, syscall.SIGKILL)
				waitGone(pid, 5*time.Second)
			}
		}
	}
	// Whatever the agent could not clean (it crashed, or was killed): every pod namespace,
	// every process in it, the bridge, the per-namespace resolver files.
	removeAllPodNetns()
	if _, err := os.Stat(l.run("made-run-netns")); err == nil {
		if entries, err := os.ReadDir(runNetns); err == nil && len(entries) == 0 {
			_ = syscall.Unmount(runNetns, syscall.MNT_DETACH)
			_ = os.Remove(runNetns)
		}
	}
	if _, err := net.InterfaceByName(bridgeName); err == nil {
		if out, err := exec.Command("ip", "link", "del", bridgeName).CombinedOutput(); err != nil {
			return fmt.Errorf("removing bridge: %v: %s", err, out)
		}
	}
	removeCreatedMountpoints(l)
	if nodesErr != nil {
		return fmt.Errorf("stopping the real-kubelet nodes: %w", nodesErr)
	}
	if err := os.RemoveAll(l.run()); err != nil {
		return fmt.Errorf("removing %s: %w", l.run(), err)
	}
	return nil
}

func allRunning(l layout, daemons []string) bool {
	for _, d := range daemons {
		if !running(l, d) {
			return false
		}
	}
	return true
}

func waitGone(pid int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if syscall.Kill(pid, 0) != nil || isZombie(pid) {
			return true
		}
		time.Sleep(100 * time.Millisecond)
	}
	return false
}
