package main

// What the world's machine looks like when something fails: free disk and memory, which
// daemons run, and the last lines of the control plane's logs. `kworld up` refuses to start
// on a nearly full disk (an API server whose etcd cannot write times out every request,
// which looks like a product failure), and every failure of `up` carries this diagnosis.

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
)

// minFreeBytes is what a full test run needs on the world's filesystem: the control
// plane's etcd, the pods' volumes (etcd, ZooKeeper and NATS data) and every log: 1.8 GiB at
// its peak in a full run (each etcd member preallocates 64 MiB WAL segments), and headroom.
const minFreeBytes = 3 << 30

func freeBytes(path string) (free, total uint64, err error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return 0, 0, err
	}
	return st.Bavail * uint64(st.Bsize), st.Blocks * uint64(st.Bsize), nil
}

func gib(b uint64) string { return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30)) }

// checkDisk refuses a filesystem with less than minFreeBytes available.
func checkDisk(l layout) error {
	free, total, err := freeBytes(l.root)
	if err != nil {
		return nil // cannot tell; the world's own errors will say more
	}
	if free < minFreeBytes {
		return fmt.Errorf("only %s of %s free on the filesystem of %s; the world (its etcd, the pods' volumes and logs) needs at least %s: free some space (old clones, cargo target directories) and run again",
			gib(free), gib(total), l.root, gib(minFreeBytes))
	}
	return nil
}

func memAvailable() string {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if strings.HasPrefix(s.Text(), "MemAvailable:") {
			return strings.TrimSpace(strings.TrimPrefix(s.Text(), "MemAvailable:"))
		}
	}
	return "unknown"
}

func tail(path string, n int) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		return []string{"(" + err.Error() + ")"}
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return lines
}

// diagnose is the machine's and the control plane's state, for an error message.
func diagnose(l layout) string {
	var b strings.Builder
	b.WriteString("world diagnosis:\n")
	if free, total, err := freeBytes(l.root); err == nil {
		fmt.Fprintf(&b, "  disk: %s of %s free on the filesystem of %s\n", gib(free), gib(total), l.root)
	}
	fmt.Fprintf(&b, "  memory available: %s\n", memAvailable())
	if load, err := os.ReadFile("/proc/loadavg"); err == nil {
		fmt.Fprintf(&b, "  load average: %s\n", strings.TrimSpace(string(load)))
	}
	nodes := realNodes(l)
	for _, c := range append([]string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "agent"}, nodes...) {
		state := "not running"
		if running(l, c) {
			state = "running"
		}
		fmt.Fprintf(&b, "  %s: %s\n", c, state)
	}
	logs := []string{l.logFile("etcd"), l.logFile("kube-apiserver")}
	for _, n := range nodes {
		if !running(l, n) {
			// A real-kubelet node that stopped: its own log, then its kubelet's.
			logs = append(logs, l.logFile(n), l.realDir(n, "kubelet.log"))
		}
	}
	for _, f := range logs {
		fmt.Fprintf(&b, "  last lines of %s:\n", f)
		for _, line := range tail(f, 8) {
			if len(line) > 400 {
				line = line[:400] + "…"
			}
			fmt.Fprintf(&b, "    %s\n", line)
		}
	}
	return b.String()
}

func cmdDoctor([]string) error {
	l := worldLayout()
	if _, err := os.Stat(l.root); err != nil {
		return errors.New("no world directory at " + l.root)
	}
	fmt.Print(diagnose(l))
	return nil
}
