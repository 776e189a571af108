//! Completion through kubectl (1.26+): `kubectl raft <TAB>` runs `kubectl_complete-raft`,
//! which is kubectl-raft under another name, answering in cobra's `__complete` protocol with
//! names from the cluster.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::*;

/// A directory for PATH with `kubectl-raft` and its completer link, as a user installs them.
struct PluginDir(PathBuf);

impl PluginDir {
    fn new() -> Self {
        // One directory per test: the two completion tests start together (#41).
        let dir = std::env::temp_dir().join(format!(
            "raft-completion-{}-{}",
            std::process::id(),
            unique()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let bin = Path::new(env!("CARGO_BIN_EXE_kubectl-raft"));
        std::os::unix::fs::symlink(bin, dir.join("kubectl-raft")).unwrap();
        std::os::unix::fs::symlink(bin, dir.join("kubectl_complete-raft")).unwrap();
        PluginDir(dir)
    }

    fn path(&self) -> String {
        format!(
            "{}:{}",
            self.0.display(),
            std::env::var("PATH").unwrap_or_default()
        )
    }

    /// Runs `program args` with this directory first on PATH, against the world.
    fn run(&self, program: &Path, args: &[&str]) -> (Vec<String>, String) {
        let out = Command::new(program)
            .args(args)
            .env("PATH", self.path())
            .env("KUBECONFIG", &world().kubeconfig)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        let lines = stdout(&out).lines().map(str::to_string).collect();
        (lines, stderr(&out))
    }
}

impl Drop for PluginDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The candidates' values (before any TAB and help), without the directive line.
fn values(lines: &[String]) -> Vec<String> {
    lines
        .iter()
        .filter(|l| !l.starts_with(':'))
        .map(|l| l.split('\t').next().unwrap().to_string())
        .collect()
}

#[test]
fn the_completer_lists_the_statefulsets_of_the_namespace() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("complete-sts");
    deploy_etcd(&ns.name, 3);
    let dir = PluginDir::new();
    let completer = dir.0.join("kubectl_complete-raft");
    let (lines, _) = dir.run(&completer, &["status", "-n", &ns.name, ""]);
    assert_eq!(values(&lines), ["etcd"], "{lines:?}");
    assert_eq!(lines.last().map(String::as_str), Some(":4"), "{lines:?}");
}

#[test]
fn kubectl_completes_the_plugins_subcommands_and_node_names() {
    let _nodes = shared_nodes();
    world();
    let dir = PluginDir::new();
    let kubectl = kubectl_bin();
    let (lines, _) = dir.run(&kubectl, &["__complete", "raft", "dr"]);
    assert_eq!(values(&lines), ["drain"], "{lines:?}");
    let (lines, _) = dir.run(&kubectl, &["__complete", "raft", "drain", ""]);
    let mut world_nodes: Vec<String> = kubectl_json(&["get", "nodes"])["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    world_nodes.sort();
    let mut completed = values(&lines);
    completed.sort();
    assert_eq!(completed, world_nodes, "{lines:?}");
}
