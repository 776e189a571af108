//! The command line, without a cluster: `systems`, `--profiles`, and flag conflicts that
//! clap refuses before anything connects.

use std::process::{Command, Output};

fn raft(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kubectl-raft"))
        .args(args)
        .env("KUBECONFIG", "/nonexistent/kubeconfig")
        .output()
        .expect("run kubectl-raft")
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn systems_lists_the_builtin_profiles() {
    let out = raft(&["systems"]);
    assert!(out.status.success());
    let (stdout, _) = text(&out);
    let first_column: Vec<&str> = stdout
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(
        first_column,
        [
            "etcd",
            "clickhouse-keeper",
            "rqlite",
            "consul",
            "nomad",
            "vault",
            "nats",
            "zookeeper",
            "spurctld"
        ]
    );
    assert!(stdout
        .lines()
        .next()
        .unwrap()
        .trim_start()
        .starts_with("SYSTEM"));
}

#[test]
fn a_profiles_file_adds_systems_and_replaces_builtins() {
    let dir = std::env::temp_dir().join(format!("kraft-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("profiles.yaml");
    std::fs::write(
        &file,
        "- name: etcd\n  description: our patched etcd\n  port: {numbers: [12379]}\n  health: {request: {path: /healthz}}\n\
         - name: kvd\n  description: our own kv store\n  detect: {images: [kvd]}\n  port: {names: [http]}\n  health: {request: {path: /health}}\n",
    )
    .unwrap();
    let out = raft(&[
        "systems",
        "--profiles",
        file.to_str().unwrap(),
        "-o",
        "yaml",
    ]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    let etcd_entries = stdout.matches("name: etcd").count();
    assert_eq!(
        etcd_entries, 1,
        "the user's etcd replaces the built-in one:\n{stdout}"
    );
    assert!(
        stdout.contains("our patched etcd") && stdout.contains("name: kvd"),
        "{stdout}"
    );
    assert!(stdout.contains("12379"));

    std::fs::write(
        &file,
        "- name: broken\n  port: {}\n  health: {request: {path: /h}}\n",
    )
    .unwrap();
    let out = raft(&["systems", "--profiles", file.to_str().unwrap()]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr.starts_with("error: ")
            && stderr.contains("profiles.yaml")
            && stderr.contains("port"),
        "{stderr}"
    );
    let out = raft(&["systems", "--profiles", "/nonexistent/p.yaml"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out)
        .1
        .contains("reading profiles file /nonexistent/p.yaml"));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_name_conflicts_with_a_selector_and_with_all_namespaces() {
    for args in [
        &["status", "etcd", "-l", "app=etcd"][..],
        &["status", "etcd", "-A"],
        &["yield", "etcd", "-A"],
        &["yield", "etcd", "-l", "app=etcd"],
    ] {
        let out = raft(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(
            text(&out).1.contains("cannot be used with"),
            "{args:?}: {}",
            text(&out).1
        );
    }
}

#[test]
fn yield_needs_a_cluster_and_local_needs_a_system() {
    let out = raft(&["yield"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out).1.contains("<NAME>"), "{}", text(&out).1);
    let out = raft(&["yield", "--local"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out).1.contains("--system"), "{}", text(&out).1);
}

#[test]
fn the_bash_completion_loads_and_completes_subcommands() {
    let bin = env!("CARGO_BIN_EXE_kubectl-raft");
    let script = format!(
        r#"source <("{bin}" completion bash) || exit 3
COMP_WORDS=(kubectl-raft dr); COMP_CWORD=1; COMP_LINE="kubectl-raft dr"; COMP_POINT=${{#COMP_LINE}}
complete -p kubectl-raft >/dev/null || exit 4
fn=$(complete -p kubectl-raft | sed -E 's/.*-F ([^ ]+).*/\1/')
"$fn" kubectl-raft dr kubectl-raft
echo "${{COMPREPLY[@]}}""#
    );
    let out = std::process::Command::new("bash")
        .args(["-c", &script])
        .output()
        .expect("bash");
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stdout.trim(), "drain", "{stderr}");
}

#[test]
fn version_names_the_kubernetes_api() {
    let out = raft(&["version", "-o", "json"]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(v["kubernetesApi"], "v1.34");
}

#[test]
fn every_verbs_help_groups_its_flags_under_headings() {
    for verb in ["status", "yield", "drain"] {
        let (out, _) = text(&raft(&[verb, "--help"]));
        for heading in [
            "What to act on:",
            "How replicas are reached:",
            "Output:",
            "Connection:",
            "Examples:",
        ] {
            assert!(
                out.contains(heading),
                "{verb} --help has no {heading:?}:\n{out}"
            );
        }
    }
}

/// Without a reachable cluster, completion still answers (verbs, flags) in cobra's protocol,
/// offers no names, and prints no error.
#[test]
fn completion_answers_in_cobras_protocol_without_a_cluster() {
    let out = raft(&["__complete", "dr"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(
        stdout.lines().collect::<Vec<_>>().last(),
        Some(&":4"),
        "{stdout}"
    );
    assert!(stdout.starts_with("drain\t"), "{stdout}");
    let out = raft(&["__complete", "drain", "--ignore-d"]);
    assert!(
        text(&out).0.starts_with("--ignore-daemonsets\t"),
        "{:?}",
        text(&out)
    );
    let out = raft(&["__complete", "status", ""]);
    assert_eq!(text(&out), (":4\n".to_string(), String::new()));
}
