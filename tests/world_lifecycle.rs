//! `up` and `down` leave nothing behind: five rounds, each with a workload running, then
//! no process, network namespace, address, resolver file or state directory may remain.
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
    found
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
    for round in 1..=5 {
        let out = Command::new("bash")
            .arg(&up)
            .args(["--nodes", "4"])
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
            if phases
                .split_whitespace()
                .filter(|p| *p == "Running")
                .count()
                == 3
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
    }
}
