package main

import (
	"bufio"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// podNetwork is a pod's network namespace: one veth into the world bridge and an address
// the API server can reach (pods/proxy refuses loopback and link-local addresses).
type podNetwork struct {
	ns   string
	ip   string
	veth string
}

// ipPool hands out pod addresses from 10.250.1.0 upwards; the bridge owns 10.250.0.1.
type ipPool struct {
	mu   sync.Mutex
	used map[string]bool
	next int
}

// realPoolStart: 10.250.200.0 and up belong to the real-kubelet nodes' CNI ranges
// (10.250.200+N.0/24 for kreal-N).
const realPoolStart = 200 * 256

func newIPPool() *ipPool { return &ipPool{used: map[string]bool{}, next: 256} }

func (p *ipPool) take() (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := 0; i < 65000; i++ {
		n := p.next
		p.next++
		if p.next >= realPoolStart {
			p.next = 256
		}
		if n%256 == 0 || n%256 == 255 {
			continue
		}
		ip := fmt.Sprintf("10.250.%d.%d", n/256, n%256)
		if !p.used[ip] {
			p.used[ip] = true
			return ip, nil
		}
	}
	return "", fmt.Errorf("no free pod address")
}

func (p *ipPool) give(ip string) {
	p.mu.Lock()
	delete(p.used, ip)
	p.mu.Unlock()
}

func shortID(s string) string {
	h := sha1.Sum([]byte(s))
	return hex.EncodeToString(h[:])[:10]
}

func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// createPodNetwork makes the namespace, wires it to the bridge, and writes the files
// `ip netns exec` binds over /etc/resolv.conf and /etc/hosts inside it.
func createPodNetwork(uid, ip, hostname, fqdn, namespace string) (*podNetwork, error) {
	id := shortID(uid)
	pn := &podNetwork{ns: netnsPrefix + id, ip: ip, veth: "kv" + id}
	peer := "kp" + id
	steps := [][]string{
		{"netns", "add", pn.ns},
		{"link", "add", pn.veth, "type", "veth", "peer", "name", peer},
		{"link", "set", pn.veth, "master", bridgeName},
		{"link", "set", pn.veth, "up"},
		{"link", "set", peer, "netns", pn.ns},
		{"-n", pn.ns, "link", "set", peer, "name", "eth0"},
		{"-n", pn.ns, "addr", "add", ip + "/16", "dev", "eth0"},
		{"-n", pn.ns, "link", "set", "eth0", "up"},
		{"-n", pn.ns, "link", "set", "lo", "up"},
		{"-n", pn.ns, "route", "add", "default", "via", bridgeIP},
	}
	for _, s := range steps {
		if err := ipCmd(s...); err != nil {
			pn.destroy()
			return nil, err
		}
	}
	etc := filepath.Join("/etc/netns", pn.ns)
	if err := os.MkdirAll(etc, 0o755); err != nil {
		pn.destroy()
		return nil, err
	}
	resolv := fmt.Sprintf("nameserver %s\nsearch %s.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5\n", bridgeIP, namespace)
	hosts := fmt.Sprintf("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost\n%s\t%s %s\n", ip, fqdn, hostname)
	if err := os.WriteFile(filepath.Join(etc, "resolv.conf"), []byte(resolv), 0o644); err != nil {
		pn.destroy()
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(etc, "hosts"), []byte(hosts), 0o644); err != nil {
		pn.destroy()
		return nil, err
	}
	return pn, nil
}

// destroy kills whatever still runs in the namespace and removes it with its veth.
func (pn *podNetwork) destroy() {
	killNetnsProcesses(pn.ns)
	_ = ipCmd("netns", "del", pn.ns)
	_ = exec.Command("ip", "link", "del", pn.veth).Run()
	_ = os.RemoveAll(filepath.Join("/etc/netns", pn.ns))
}

func killNetnsProcesses(ns string) {
	out, err := exec.Command("ip", "netns", "pids", ns).Output()
	if err != nil {
		return
	}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		if pid, err := strconv.Atoi(strings.TrimSpace(sc.Text())); err == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

func removeAllPodNetns() {
	out, _ := exec.Command("ip", "netns", "list").Output()
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && strings.HasPrefix(f[0], netnsPrefix) {
			(&podNetwork{ns: f[0], veth: "kv" + strings.TrimPrefix(f[0], netnsPrefix)}).destroy()
		}
	}
	entries, _ := os.ReadDir("/etc/netns")
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), netnsPrefix) {
			_ = os.RemoveAll(filepath.Join("/etc/netns", e.Name()))
		}
	}
	if entries, _ := os.ReadDir("/etc/netns"); len(entries) == 0 {
		_ = os.Remove("/etc/netns")
	}
	// veths left behind by a namespace that vanished on its own.
	ifaces, _ := net.Interfaces()
	for _, i := range ifaces {
		if strings.HasPrefix(i.Name, "kv") && len(i.Name) == 12 {
			_ = exec.Command("ip", "link", "del", i.Name).Run()
		}
	}
}

// mountpoint bookkeeping: containers bind their volumes onto host paths inside their own
// mount namespace; a path that did not exist is created first and listed here so `down`
// can remove it again.
var mountpointsMu sync.Mutex

func ensureMountpoint(l layout, path string) error {
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	// Record every ancestor we create, deepest last.
	var created []string
	for p := path; p != "/" && p != "."; p = filepath.Dir(p) {
		if _, err := os.Stat(p); err == nil {
			break
		}
		created = append([]string{p}, created...)
	}
	if err := os.MkdirAll(path, 0o755); err != nil {
		return err
	}
	mountpointsMu.Lock()
	defer mountpointsMu.Unlock()
	f, err := os.OpenFile(l.run("agent", "mountpoints"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, c := range created {
		fmt.Fprintln(f, c)
	}
	return nil
}

func removeCreatedMountpoints(l layout) {
	b, err := os.ReadFile(l.run("agent", "mountpoints"))
	if err != nil {
		return
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if lines[i] != "" {
			_ = os.Remove(lines[i]) // only if empty: never removes data
		}
	}
}
