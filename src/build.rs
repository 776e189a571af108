//! The commit a binary was built from, for `kubectl raft version`: KUBECTL_RAFT_GIT_COMMIT when
//! set (krew/release.sh sets it), else the HEAD of the git checkout this crate is the top of
//! (as with `cargo install --path .` from a clone), else nothing ("unknown"): a crate unpacked
//! inside some other repository does not take that repository's commit. Rebuilt when HEAD or a
//! branch moves, never on every `git add`.

use std::path::{Path, PathBuf};
use std::process::Command;

fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .current_dir(dir)
        .args(args)
        .output()
        .ok()?;
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
    let Some(crate_dir) = std::env::var_os("CARGO_MANIFEST_DIR").map(PathBuf::from) else {
        return;
    };
    // Only a checkout of this crate itself.
    let top = git(&crate_dir, &["rev-parse", "--show-toplevel"]).map(PathBuf::from);
    let same = |a: &Path, b: &Path| a.canonicalize().ok() == b.canonicalize().ok();
    if !top.is_some_and(|t| same(&t, &crate_dir)) {
        return;
    }
    // HEAD is the worktree's own; branches, packed refs and a reftable are the repository's
    // (a linked worktree shares them). A directory is watched whole, so a ref that did not
    // exist at this build (packed since, or a new branch) is seen when it appears.
    let path = |args: &[&str]| git(&crate_dir, args).map(|p| crate_dir.join(p));
    let mut watched = vec![];
    watched.extend(path(&["rev-parse", "--git-path", "HEAD"]));
    if let Some(common) = path(&["rev-parse", "--git-common-dir"]) {
        for p in ["refs/heads", "packed-refs", "reftable"] {
            watched.push(common.join(p));
        }
    }
    for p in watched.iter().filter(|p| p.exists()) {
        println!("cargo:rerun-if-changed={}", p.display());
    }
    if let Some(commit) = git(&crate_dir, &["rev-parse", "--short=12", "HEAD"]) {
        println!("cargo:rustc-env=KUBECTL_RAFT_GIT_COMMIT={commit}");
    }
}
