//! `up` and `down` leave nothing behind: five rounds, each with a workload running on the
//! agent's nodes and on a real kubelet, then no process, network namespace, address, resolver
//! file, state directory, mount, cgroup or node directory (/var/lib/kubelet, /run/containerd,
//! ...) may remain, and the host's sysctls are as they were.
//! This takes the shared world down; other test binaries bring it back when they need it.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::*;

fn sh(cmd: &str) -> String {
    let out = Command::new("sh").arg("-c").arg(cmd).output().expect("sh");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Everything a world leaves on the machine while it runs.
fn leftovers(dir: &Path) -> Vec<String> {
    let mut found = vec![];
    let bin = dir.join("bin");
    let procs = sh(&format!(
        "ps -eo pid,args | grep -F '{}' | grep -v grep || true",
        bin.display()
    ));
    if !procs.is_empty() {
        found.push(format!("processes: {procs}"));
    }
    let etcd = sh("ps -eo pid,args | grep '[/]usr/bin/etcd --name=etcd-' || true");
    if !etcd.is_empty() {
        found.push(format!("workload processes: {etcd}"));
    }
    let netns = sh("ip netns list | grep '^kraft-' || true");
    if !netns.is_empty() {
        found.push(format!("network namespaces: {netns}"));
    }
    let links = sh("ip -o link show | grep -E ' (kraft0|kv[0-9a-f]{10})[@:]' || true");
    if !links.is_empty() {
        found.push(format!("links: {links}"));
    }
    let addrs = sh("ip -o addr show | grep ' 10\\.250\\.' || true");
    if !addrs.is_empty() {
        found.push(format!("addresses: {addrs}"));
    }
    if !sh("ls -d /etc/netns/kraft-* 2>/dev/null || true").is_empty() {
        found.push("resolver files under /etc/netns".into());
    }
    if dir.join("run").exists() {
        found.push(format!("state directory {}", dir.join("run").display()));
    }
    // The real-kubelet nodes: containerd, its shims and runc's processes, the sandboxes'
    // pause, the paths a node binds over, its cgroups, the kubernetes Service's address.
    let node_procs = sh("ps -eo pid,args | grep -E '[c]ontainerd --config|[c]ontainerd-shim|^ *[0-9]+ /pause$' || true");
    if !node_procs.is_empty() {
        found.push(format!("node processes: {node_procs}"));
    }
    let cgroups = sh("ls -d /sys/fs/cgroup/*/kreal-* 2>/dev/null || true");
    if !cgroups.is_empty() {
        found.push(format!("cgroups: {cgroups}"));
    }
    let mounts = sh(&format!(
        "grep -F '{}' /proc/self/mountinfo || true",
        dir.display()
    ));
    if !mounts.is_empty() {
        found.push(format!("mounts: {mounts}"));
    }
    if !sh("ip -o addr show | grep ' 10\\.96\\.0\\.1/' || true").is_empty() {
        found.push("the kubernetes Service's address".into());
    }
    found
}

/// The host paths a kubelet, a containerd, CNI or `ip netns` take for themselves, those that
/// exist (the machine may have some of its own: buildah, run by tests/image.sh, makes
/// /etc/cni/net.d; a world must leave the set as it found it).
fn host_paths() -> Vec<String> {
    [
        "/var/lib/kubelet",
        "/var/lib/containerd",
        "/run/containerd",
        "/var/lib/cni",
        "/etc/cni",
        "/etc/cni/net.d",
        "/run/netns",
        "/opt/cni",
        "/opt/containerd",
        "/usr/libexec/kubernetes",
    ]
    .iter()
    .filter(|p| Path::new(p).exists())
    .map(|p| p.to_string())
    .collect()
}

/// The host settings a kubelet writes at start (each real node has files of its own).
fn host_sysctls() -> Vec<(String, String)> {
    [
        "vm/overcommit_memory",
        "vm/panic_on_oom",
        "kernel/panic",
        "kernel/panic_on_oops",
        "kernel/keys/root_maxkeys",
        "kernel/keys/root_maxbytes",
    ]
    .iter()
    .map(|s| {
        let v = std::fs::read_to_string(Path::new("/proc/sys").join(s)).unwrap_or_default();
        (s.to_string(), v.trim().to_string())
    })
    .collect()
}

#[test]
fn up_and_down_five_times_leak_nothing() {
    let dir = world_dir();
    let up = repo().join("tests/world/up.sh");
    let down = repo().join("tests/world/down.sh");
    assert!(
        Command::new("bash").arg(&down).status().unwrap().success(),
        "initial down"
    );
    assert_eq!(
        leftovers(&dir),
        Vec::<String>::new(),
        "clean before the first round"
    );
    let sysctls = host_sysctls();
    let paths = host_paths();
    for round in 1..=5 {
        let out = Command::new("bash")
            .arg(&up)
            .args(["--nodes", "4", "--kubelets", "1"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "round {round}: up failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let kubeconfig = String::from_utf8_lossy(&out.stdout).trim().to_string();
        // A pod with a network namespace, a volume and a process, so down has work to do.
        let kubectl = |args: &[&str]| {
            Command::new(kubectl_bin())
                .args(args)
                .env("KUBECONFIG", &kubeconfig)
                .output()
                .unwrap()
        };
        let manifest = repo().join("tests/manifests/etcd-3.yaml");
        assert!(
            kubectl(&["apply", "-n", "default", "-f", manifest.to_str().unwrap()])
                .status
                .success()
        );
        // And one on the real kubelet, with a volume its kubelet mounts (a token) and a
        // sandbox in a network namespace of containerd's.
        let real = tempfile(&placed(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: real, namespace: default}\nspec:\n  containers:\n  - {name: c, image: example/shell, command: [/bin/sh, -c, 'while true; do sleep 1; done']}\n",
            Nodes::Kubelet,
        ));
        assert!(kubectl(&["apply", "-f", real.path_str()]).status.success());
        let start = std::time::Instant::now();
        loop {
            // Running is enough here: the subject is what down must remove (processes,
            // namespaces, volumes), not etcd's election.
            let o = kubectl(&[
                "get",
                "pods",
                "-n",
                "default",
                "-l",
                "app=etcd",
                "-o",
                "jsonpath={.items[*].status.phase}",
            ]);
            let phases = String::from_utf8_lossy(&o.stdout).to_string();
            let real = kubectl(&[
                "get",
                "pod",
                "real",
                "-n",
                "default",
                "-o",
                "jsonpath={.status.phase}",
            ]);
            if phases
                .split_whitespace()
                .filter(|p| *p == "Running")
                .count()
                == 3
                && String::from_utf8_lossy(&real.stdout) == "Running"
            {
                break;
            }
            if start.elapsed() > Duration::from_secs(180) {
                let why = diagnose(std::path::Path::new(&kubeconfig), "default");
                panic!("round {round}: the etcd pods did not start\n{why}");
            }
            std::thread::sleep(Duration::from_millis(300));
        }
        assert!(
            !leftovers(&dir).is_empty(),
            "round {round}: the world shows up in the leak check while it runs"
        );
        let out = Command::new("bash").arg(&down).output().unwrap();
        assert!(
            out.status.success(),
            "round {round}: down failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            leftovers(&dir),
            Vec::<String>::new(),
            "round {round}: down left things behind"
        );
        assert_eq!(
            host_sysctls(),
            sysctls,
            "round {round}: the host's sysctls changed"
        );
        assert_eq!(
            host_paths(),
            paths,
            "round {round}: down left (or took) host paths"
        );
    }
}
