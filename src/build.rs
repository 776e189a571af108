//! The commit a binary was built from, for `kubectl raft version`: KUBECTL_RAFT_GIT_COMMIT when
//! set (krew/release.sh sets it), else the checkout's HEAD when it is a git checkout (as with
//! `cargo install --path .` from a clone), else nothing ("unknown"). Rebuilt only when HEAD
//! moves, never on every `git add`.

use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
}

fn main() {
    println!("cargo:rerun-if-env-changed=KUBECTL_RAFT_GIT_COMMIT");
    if std::env::var_os("KUBECTL_RAFT_GIT_COMMIT").is_some() {
        return;
    }
    let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]) else {
        return;
    };
    let dir = Path::new(&dir);
    let mut watched = vec![dir.join("HEAD"), dir.join("packed-refs")];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watched.push(dir.join(branch));
    }
    for p in watched.iter().filter(|p| p.exists()) {
        println!("cargo:rerun-if-changed={}", p.display());
    }
    if let Some(commit) = git(&["rev-parse", "--short=12", "HEAD"]) {
        println!("cargo:rustc-env=KUBECTL_RAFT_GIT_COMMIT={commit}");
    }
}
