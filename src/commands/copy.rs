//! `kubectl-raft copy-to PATH`: the binary copies itself, for an init container that puts it
//! on a volume the Raft container shares (the image holds nothing else, not even `cp`).

use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use crate::cli::CopyArgs;

/// Where the copy goes: PATH itself, or PATH/kubectl-raft when PATH is a directory.
pub fn destination(path: &Path) -> PathBuf {
    if path.is_dir() {
        path.join("kubectl-raft")
    } else {
        path.to_path_buf()
    }
}

/// Copies `source` to `dest` through a temporary file in the same directory, made executable
/// (0755) and renamed into place, so a container starting beside it never runs half a file.
pub fn copy_executable(source: &Path, dest: &Path) -> Result<()> {
    let dir = match dest.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if !dir.is_dir() {
        bail!(
            "{} is not a directory: mount the shared volume there (an emptyDir in the pod's \
             volumes, in the init container's and the Raft container's volumeMounts)",
            dir.display()
        );
    }
    let name = dest
        .file_name()
        .with_context(|| format!("{} names no file", dest.display()))?;
    let (tmp, mut file) = new_file_beside(&dir, &name.to_string_lossy())?;
    let result = (|| -> Result<()> {
        let mut from =
            fs::File::open(source).with_context(|| format!("cannot read {}", source.display()))?;
        std::io::copy(&mut from, &mut file)
            .with_context(|| format!("cannot copy {} to {}", source.display(), tmp.display()))?;
        file.sync_all()
            .with_context(|| format!("cannot write {}", tmp.display()))?;
        fs::rename(&tmp, dest)
            .with_context(|| format!("cannot move {} to {}", tmp.display(), dest.display()))
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// A new file (0755) in `dir` under a name nobody can guess, created only if nothing is there:
/// never through a link another user of the volume planted where the copy would go.
fn new_file_beside(dir: &Path, name: &str) -> Result<(PathBuf, fs::File)> {
    use std::hash::{BuildHasher, Hasher};
    use std::os::unix::fs::OpenOptionsExt;
    for _ in 0..16 {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        let tmp = dir.join(format!(".{name}.{:016x}.tmp", h.finish()));
        match fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o755)
            .open(&tmp)
        {
            Ok(f) => {
                // The mode the umask left is made 0755 on the file itself.
                f.set_permissions(fs::Permissions::from_mode(0o755))
                    .with_context(|| format!("cannot make {} executable", tmp.display()))?;
                return Ok((tmp, f));
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e).with_context(|| format!("cannot create {}", tmp.display())),
        }
    }
    bail!("cannot create a temporary file in {}", dir.display())
}

pub fn run(args: &CopyArgs, err: &mut dyn Write) -> Result<()> {
    let me = std::env::current_exe()
        .context("cannot find this program's own file (/proc/self/exe) to copy")?;
    let dest = destination(&args.path);
    copy_executable(&me, &dest)?;
    writeln!(err, "kubectl-raft: copied to {}", dest.display())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch() -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "kraft-copy-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_directory_receives_a_file_named_kubectl_raft() {
        let d = scratch();
        assert_eq!(destination(&d), d.join("kubectl-raft"));
        assert_eq!(destination(&d.join("tool")), d.join("tool"));
    }

    #[test]
    fn the_copy_is_executable_and_identical() {
        let d = scratch();
        let src = d.join("src");
        fs::write(&src, b"#!/bin/sh\necho hi\n").unwrap();
        let dest = d.join("out");
        copy_executable(&src, &dest).unwrap();
        assert_eq!(fs::read(&dest).unwrap(), fs::read(&src).unwrap());
        assert_eq!(
            fs::metadata(&dest).unwrap().permissions().mode() & 0o777,
            0o755
        );
        let left: Vec<_> = fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left.len(), 2, "no temporary file is left: {left:?}");
    }

    #[test]
    fn a_link_planted_where_the_copy_used_to_go_redirects_nothing() {
        let d = scratch();
        let src = d.join("src");
        fs::write(&src, b"the binary").unwrap();
        let victim = d.join("victim");
        fs::write(&victim, b"kept").unwrap();
        // The name the copy once used (predictable: the process id).
        let planted = d.join(format!(".kubectl-raft.{}.tmp", std::process::id()));
        std::os::unix::fs::symlink(&victim, &planted).unwrap();
        copy_executable(&src, &d.join("kubectl-raft")).unwrap();
        assert_eq!(
            fs::read(&victim).unwrap(),
            b"kept",
            "written through the link"
        );
        assert_eq!(fs::read(d.join("kubectl-raft")).unwrap(), b"the binary");
    }

    #[test]
    fn a_missing_directory_says_to_mount_the_volume() {
        let d = scratch();
        let e = copy_executable(&d.join("src"), &d.join("nope/kubectl-raft")).unwrap_err();
        assert!(e.to_string().contains("mount the shared volume"), "{e}");
    }
}
