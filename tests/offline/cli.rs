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
fn a_group_to_impersonate_without_a_user_is_refused_before_connecting() {
    // A kubeconfig whose user impersonates nobody, for a server nobody listens on.
    let dir = std::env::temp_dir().join(format!("kraft-cli-as-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("config");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n\
         clusters: [{name: k, cluster: {server: 'https://127.0.0.1:1'}}]\n\
         users: [{name: u, user: {token: t}}]\n\
         contexts: [{name: c, context: {cluster: k, user: u}}]\n",
    )
    .unwrap();
    let out = raft(&[
        "status",
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "--as-group",
        "system:masters",
    ]);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(out.status.code(), Some(1));
    let (_, err) = text(&out);
    assert!(err.contains("need --as USER"), "{err}");
}

#[test]
fn version_names_the_commit_of_a_build_from_a_git_checkout() {
    // As `cargo install --path .` from a clone builds it: the checkout's HEAD (a release
    // build sets KUBECTL_RAFT_GIT_COMMIT instead).
    let head = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("git");
    if !head.status.success() {
        // A source tarball (a distribution's build): no commit to name, "unknown" is right.
        eprintln!("not a git checkout: the commit is not checked");
        return;
    }
    let head = String::from_utf8_lossy(&head.stdout).trim().to_string();
    let v: serde_json::Value =
        serde_json::from_slice(&raft(&["version", "-o", "json"]).stdout).unwrap();
    // Read from git now, not from the build's own variable (which the test shares).
    let expected = std::env::var("KUBECTL_RAFT_GIT_COMMIT").unwrap_or(head);
    assert_eq!(v["gitCommit"], expected.as_str());
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

#[test]
fn a_huge_duration_is_a_clear_error_not_a_panic() {
    for flag in ["--probe-timeout", "--request-timeout"] {
        let out = raft(&["status", flag, "100000000000000000000"]);
        let (_, err) = text(&out);
        assert_eq!(out.status.code(), Some(2), "{flag}: {err}");
        assert!(err.contains("out of range"), "{flag}: {err}");
        assert!(!err.contains("panicked"), "{flag}: {err}");
    }
    let out = raft(&["drain", "n1", "--timeout", "1e300s"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out).1);
}

#[test]
fn kubectl_style_durations_are_accepted() {
    // Parsed, then it fails for the missing kubeconfig, not for the duration.
    let out = raft(&[
        "yield",
        "etcd",
        "--timeout",
        "1m30s",
        "--probe-timeout",
        "1.5s",
    ]);
    let (_, err) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(!err.contains("invalid duration"), "{err}");
}

/// A kubeconfig (in `dir`) whose user's credentials come from an exec plugin running
/// `script`, with the kubeconfig's `interactiveMode`; its server is unreachable.
fn exec_plugin_kubeconfig(dir: &std::path::Path, script: &str, mode: &str) -> std::path::PathBuf {
    let plugin = dir.join("login");
    std::fs::write(&plugin, format!("#!/bin/sh\n{script}\n")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&plugin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let kc = dir.join("kubeconfig");
    std::fs::write(
        &kc,
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: c\n\
             clusters: [{{name: k, cluster: {{server: 'https://127.0.0.1:1'}}}}]\n\
             contexts: [{{name: c, context: {{cluster: k, user: u}}}}]\n\
             users: [{{name: u, user: {{exec: {{apiVersion: client.authentication.k8s.io/v1, command: {}, interactiveMode: {mode}}}}}}}]\n",
            plugin.display()
        ),
    )
    .unwrap();
    kc
}

/// A kubeconfig whose user is an exec credential plugin that takes 60 s to answer (an SSO
/// or MFA login waiting for a person).
fn slow_login_kubeconfig(dir: &std::path::Path) -> std::path::PathBuf {
    exec_plugin_kubeconfig(dir, "sleep 60", "Never")
}

#[test]
fn completion_never_waits_for_a_slow_credential_plugin() {
    let dir = std::env::temp_dir().join(format!("kraft-cli-slow-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kc = slow_login_kubeconfig(&dir);
    let mut child = Command::new(env!("CARGO_BIN_EXE_kubectl-raft"))
        .args(["__complete", "status", "-n", "x", ""])
        .env("KUBECONFIG", &kc)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The plugin sleeps 60 s; completion must have answered long before (its cap is 5 s).
    let mut answered = None;
    for _ in 0..300 {
        if let Some(status) = child.try_wait().unwrap() {
            answered = Some(status);
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    if answered.is_none() {
        let _ = child.kill();
    }
    let out = child.wait_with_output().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(answered.is_some(), "still blocked after 30 s");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines().any(|l| l.starts_with(':')),
        "a cobra directive: {text}"
    );
}

/// TAB completion must never let a credential plugin prompt: whatever the kubeconfig's
/// interactiveMode, the plugin is started without the terminal (KUBERNETES_EXEC_INFO says
/// `interactive: false`, stdin is a pipe).
#[test]
fn completion_gives_a_credential_plugin_no_terminal() {
    let dir = std::env::temp_dir().join(format!("kraft-cli-prompt-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let seen = dir.join("exec-info");
    let script = format!(
        "printf '%s' \"$KUBERNETES_EXEC_INFO\" > {}\nexit 1",
        seen.display()
    );
    let kc = exec_plugin_kubeconfig(&dir, &script, "IfAvailable");
    let out = Command::new(env!("CARGO_BIN_EXE_kubectl-raft"))
        .args(["__complete", "status", "-n", "x", ""])
        .env("KUBECONFIG", &kc)
        .output()
        .unwrap();
    let info = std::fs::read_to_string(&seen).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let info: serde_json::Value = serde_json::from_str(&info)
        .unwrap_or_else(|e| panic!("the plugin was not run, or got no exec info ({e}): {info:?}"));
    assert_eq!(info["spec"]["interactive"], false, "{info}");
}

#[test]
fn copy_to_a_directory_puts_a_runnable_copy_there() {
    let dir = std::env::temp_dir().join(format!("kraft-cli-copy-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let out = raft(&["copy-to", dir.to_str().unwrap()]);
    assert!(out.status.success(), "{:?}", text(&out));
    let copy = dir.join("kubectl-raft");
    let v = Command::new(&copy).arg("version").output().unwrap();
    assert!(
        String::from_utf8_lossy(&v.stdout).starts_with("kubectl-raft "),
        "{:?}",
        text(&v)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn copy_to_a_missing_directory_names_the_volume_to_mount() {
    let out = raft(&["copy-to", "/nonexistent-kraft/raft/kubectl-raft"]);
    assert!(!out.status.success());
    let (_, stderr) = text(&out);
    assert!(stderr.contains("mount the shared volume there"), "{stderr}");
}

/// docs/gate.yaml is what `gate manifests` prints for the release image: the file users apply
/// and the command they run for their own image cannot drift apart.
#[test]
fn docs_gate_yaml_is_what_gate_manifests_prints_for_the_release_image() {
    let out = raft(&[
        "gate",
        "manifests",
        "--image",
        "ghcr.io/kubectl-raft/kubectl-raft:v0.1.0",
    ]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    let file = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/gate.yaml"))
        .expect("docs/gate.yaml");
    assert!(
        stdout == file,
        "docs/gate.yaml differs from `kubectl raft gate manifests --image ghcr.io/kubectl-raft/kubectl-raft:v0.1.0`; regenerate it with that command"
    );
}

#[test]
fn gate_manifests_without_allow_from_warn_that_the_port_is_open_to_every_pod() {
    let out = raft(&["gate", "manifests", "--image", "r.example/kubectl-raft:v1"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("warning: no --allow-from"), "{stderr}");
    assert!(!stdout.contains("\nkind: NetworkPolicy"), "{stdout}");
}

#[test]
fn gate_manifests_with_allow_from_print_an_enforced_network_policy_and_no_warning() {
    let out = raft(&[
        "gate",
        "manifests",
        "--image",
        "r.example/kubectl-raft:v1",
        "--allow-from",
        "10.0.0.0/24",
    ]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.is_empty(), "{stderr}");
    assert!(stdout.contains("\nkind: NetworkPolicy\n"), "{stdout}");
    assert!(
        stdout.contains("ipBlock: {cidr: \"10.0.0.0/24\"}"),
        "{stdout}"
    );
}

#[test]
fn gate_manifests_refuse_an_image_that_is_not_a_reference_and_print_nothing() {
    let out = raft(&["gate", "manifests", "--image", "r/k:v1\n  command: [sh]"]);
    let (stdout, stderr) = text(&out);
    assert!(!out.status.success());
    assert!(stdout.is_empty(), "{stdout}");
    assert!(
        stderr.contains("is not an image reference") && stderr.contains("nothing was printed"),
        "{stderr}"
    );
}

#[test]
fn gate_manifests_refuse_an_allow_from_that_is_not_a_cidr() {
    let out = raft(&[
        "gate",
        "manifests",
        "--image",
        "r/k:v1",
        "--allow-from",
        "10.0.0.0/33",
    ]);
    let (stdout, stderr) = text(&out);
    assert!(!out.status.success());
    assert!(stdout.is_empty(), "{stdout}");
    assert!(
        stderr.contains("the prefix length must be 0 to 32"),
        "{stderr}"
    );
}
