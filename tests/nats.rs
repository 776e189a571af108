//! NATS JetStream, live: nats-server 2.15.2 (built by tests/world/build.sh) as a 3- and a
//! 5-server StatefulSet in the Helm chart's shape (tests/manifests/nats-*.yaml). The Raft
//! group is JetStream's meta group; its leader moves only over the NATS client protocol, as
//! a system-account user (credentials in NATS_USER and NATS_PASSWORD). That request is not
//! HTTP: it goes through a port-forward (`--via port-forward`, or automatically when replicas
//! are reached by pods/proxy), or straight to the pod (`--via direct`).

mod common;

use std::time::Duration;

use common::*;
use serde_json::Value;

/// The system account's user, from the manifest's Secret nats-sys.
const SYS: [(&str, &str); 2] = [("NATS_USER", "sys"), ("NATS_PASSWORD", "sys-secret")];

fn deploy_nats(ns: &str, servers: u32) {
    let manifest = repo().join(format!("tests/manifests/nats-{servers}.yaml"));
    kubectl_ok(&["apply", "-n", ns, "-f", manifest.to_str().unwrap()]);
    wait_in(
        ns,
        Duration::from_secs(120),
        &format!("{servers} NATS servers Ready with a meta leader"),
        || {
            kubectl_json(&["get", "sts", "nats", "-n", ns])["status"]["readyReplicas"] == servers
                && meta_leader(ns, "nats-0").is_some()
        },
    );
}

/// The meta leader as `server` names it in its own /jsz (through the API server).
fn meta_leader(ns: &str, server: &str) -> Option<String> {
    let out = kubectl(&[
        "get",
        "--raw",
        &format!("/api/v1/namespaces/{ns}/pods/{server}:8222/proxy/jsz"),
    ]);
    let v: Value = serde_json::from_slice(&out.stdout).ok()?;
    v["meta_cluster"]["leader"]
        .as_str()
        .filter(|l| !l.is_empty())
        .map(str::to_string)
}

/// `kubectl raft VERB ARGS -o json` with `env`: (exit code, report, stderr).
fn verb(env: &[(&str, &str)], verb: &str, args: &[&str]) -> (Option<i32>, Value, String) {
    let mut a = vec![verb];
    a.extend_from_slice(args);
    a.extend(["-o", "json"]);
    let out = raft_env(env, &a);
    let report = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (out.status.code(), report, stderr(&out))
}

fn followers_of(leader: &str, servers: u32) -> Vec<String> {
    (0..servers)
        .map(|i| format!("nats-{i}"))
        .filter(|n| n != leader)
        .collect()
}

#[test]
fn status_names_the_meta_leader_that_every_server_names() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("nats-status");
    deploy_nats(&ns.name, 3);
    let leader = meta_leader(&ns.name, "nats-0").unwrap();
    let out = raft(&["status", "nats", "-n", &ns.name, "-o", "json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let c = &report["clusters"][0];
    assert_eq!(c["system"], "nats", "{c:#}");
    assert_eq!(c["summary"]["leader"], leader.as_str(), "{c:#}");
    assert_eq!(c["summary"]["healthyVoters"], 3, "{c:#}");
    for r in c["replicas"].as_array().unwrap() {
        assert_eq!(r["raft"]["leaderPod"], leader.as_str(), "{r:#}");
        assert_eq!(
            meta_leader(&ns.name, r["pod"].as_str().unwrap()),
            Some(leader.clone())
        );
    }
}

#[test]
fn yield_moves_the_meta_leader_to_a_named_server() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("nats-yield-to");
    deploy_nats(&ns.name, 3);
    let leader = meta_leader(&ns.name, "nats-0").unwrap();
    let target = followers_of(&leader, 3).pop().unwrap();
    let (code, y, err) = verb(
        &SYS,
        "yield",
        &[
            "nats",
            "-n",
            &ns.name,
            "--via",
            "port-forward",
            "--to",
            &target,
        ],
    );
    assert_eq!(code, Some(0), "{err}\n{y:#}");
    assert_eq!(y["outcome"], "Transferred", "{y:#}");
    assert_eq!(y["newLeader"], target.as_str());
    assert_eq!(
        meta_leader(&ns.name, &leader),
        Some(target),
        "the servers agree"
    );
}

#[test]
fn yield_moves_the_meta_leader_of_five_to_the_best_server() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("nats-yield-5");
    deploy_nats(&ns.name, 5);
    let leader = meta_leader(&ns.name, "nats-0").unwrap();
    // The default: HTTP through pods/proxy, the NATS request through a port-forward.
    let (code, y, err) = verb(&SYS, "yield", &["nats", "-n", &ns.name]);
    assert_eq!(code, Some(0), "{err}\n{y:#}");
    let new = y["newLeader"].as_str().unwrap().to_string();
    assert_ne!(new, leader, "{y:#}");
    assert_eq!(
        y["target"],
        new.as_str(),
        "the planner's choice took over: {y:#}"
    );
    assert_eq!(meta_leader(&ns.name, &new), Some(new.clone()));
}

#[test]
fn yield_straight_to_the_pods_moves_the_meta_leader() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("nats-direct");
    deploy_nats(&ns.name, 3);
    let leader = meta_leader(&ns.name, "nats-0").unwrap();
    let (code, y, err) = verb(&SYS, "yield", &["nats", "-n", &ns.name, "--via", "direct"]);
    assert_eq!(code, Some(0), "{err}\n{y:#}");
    let new = y["newLeader"].as_str().unwrap().to_string();
    assert_ne!(new, leader);
    assert_eq!(meta_leader(&ns.name, &leader), Some(new));
}

#[test]
fn yield_as_a_user_outside_the_system_account_is_told_so() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("nats-app-user");
    deploy_nats(&ns.name, 3);
    let leader = meta_leader(&ns.name, "nats-0").unwrap();
    let app = [("NATS_USER", "app"), ("NATS_PASSWORD", "app")];
    let (code, _, err) = verb(&app, "yield", &["nats", "-n", &ns.name, "--via", "direct"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("system account"), "{err}");
    assert_eq!(
        meta_leader(&ns.name, "nats-0"),
        Some(leader),
        "nothing moved"
    );
}

#[test]
fn drain_of_the_meta_leaders_node_moves_it_first() {
    let _nodes = exclusive_nodes();
    let ns = TestNamespace::new("nats-drain");
    deploy_nats(&ns.name, 3);
    let leader = meta_leader(&ns.name, "nats-0").unwrap();
    let node = node_of(&ns.name, &leader);
    wait_node_alone(&node, &ns.name);
    let _cordoned = Cordoned(vec![node.clone()]);
    let (code, report, err) = verb(
        &SYS,
        "drain",
        &[&node, "--via", "direct", "--timeout", "90s"],
    );
    assert_eq!(code, Some(0), "{err}\n{report:#}");
    let c = cluster(&report, &ns.name);
    assert_eq!(drain_counts(c), (Some(1), Some(1), Some(0)), "{c:#}");
    let new = meta_leader(&ns.name, "nats-0").unwrap_or_default();
    assert_ne!(node_of(&ns.name, &new), node, "the meta leader left {node}");
}

/// No NATS credentials in the environment (empty is unset), so only a Secret or file can
/// supply them.
const NO_ENV: [(&str, &str); 2] = [("NATS_USER", ""), ("NATS_PASSWORD", "")];

/// A Secret whose keys are the nats CLI's variables, as an operator makes one.
fn ops_secret(ns: &str, name: &str) {
    kubectl_ok(&[
        "create",
        "secret",
        "generic",
        name,
        "-n",
        ns,
        "--from-literal=NATS_USER=sys",
        "--from-literal=NATS_PASSWORD=sys-secret",
    ]);
}

#[test]
fn yield_reads_the_system_user_from_the_secret_the_flag_names() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("nats-cred-flag");
    deploy_nats(&ns.name, 3);
    ops_secret(&ns.name, "nats-ops");
    let leader = meta_leader(&ns.name, "nats-0").unwrap();
    let (code, y, err) = verb(
        &NO_ENV,
        "yield",
        &["nats", "-n", &ns.name, "--credentials-secret", "nats-ops"],
    );
    assert_eq!(code, Some(0), "{err}\n{y:#}");
    let new = y["newLeader"].as_str().unwrap().to_string();
    assert_ne!(new, leader);
    assert_eq!(meta_leader(&ns.name, &leader), Some(new));
    assert!(
        !err.contains("sys-secret") && !y.to_string().contains("sys-secret"),
        "the password is never printed: {err}\n{y:#}"
    );
}

#[test]
fn yield_reads_the_secret_the_statefulsets_annotation_names() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("nats-cred-ann");
    deploy_nats(&ns.name, 3);
    ops_secret(&ns.name, "nats-ops");
    kubectl_ok(&[
        "annotate",
        "sts",
        "nats",
        "-n",
        &ns.name,
        "kubectl-raft.io/credentials-secret=nats-ops",
    ]);
    let leader = meta_leader(&ns.name, "nats-0").unwrap();
    let (code, y, err) = verb(&NO_ENV, "yield", &["nats", "-n", &ns.name]);
    assert_eq!(code, Some(0), "{err}\n{y:#}");
    assert_ne!(y["newLeader"], leader.as_str(), "{y:#}");
}

#[test]
fn yield_reads_the_system_user_from_a_credentials_file() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("nats-cred-file");
    deploy_nats(&ns.name, 3);
    let file = tempfile("# the system account\nNATS_USER=sys\nNATS_PASSWORD=sys-secret\n");
    let leader = meta_leader(&ns.name, "nats-0").unwrap();
    let (code, y, err) = verb(
        &NO_ENV,
        "yield",
        &[
            "nats",
            "-n",
            &ns.name,
            "--via",
            "direct",
            "--credentials-file",
            file.path_str(),
        ],
    );
    assert_eq!(code, Some(0), "{err}\n{y:#}");
    assert_ne!(y["newLeader"], leader.as_str(), "{y:#}");
}

#[test]
fn a_credentials_secret_that_does_not_exist_is_named_and_nothing_moves() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("nats-cred-missing");
    deploy_nats(&ns.name, 3);
    let leader = meta_leader(&ns.name, "nats-0").unwrap();
    let (code, _, err) = verb(
        &SYS,
        "yield",
        &["nats", "-n", &ns.name, "--credentials-secret", "nats-nope"],
    );
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("nothing was sent")
            && err.contains("\"nats-nope\"")
            && err.contains("not found"),
        "{err}"
    );
    assert_eq!(meta_leader(&ns.name, "nats-0"), Some(leader));
}

#[test]
fn status_warns_when_the_annotated_credentials_secret_cannot_be_read() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("nats-cred-warn");
    deploy_nats(&ns.name, 3);
    kubectl_ok(&[
        "annotate",
        "sts",
        "nats",
        "-n",
        &ns.name,
        "kubectl-raft.io/credentials-secret=nats-nope",
    ]);
    let (code, report, err) = verb(&NO_ENV, "status", &["nats", "-n", &ns.name]);
    assert_eq!(code, Some(0), "the report is still made: {err}");
    let c = &report["clusters"][0];
    assert_eq!(c["summary"]["healthyVoters"], 3, "{c:#}");
    let warning = c["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["code"] == "CredentialsUnreadable")
        .unwrap_or_else(|| panic!("a CredentialsUnreadable warning: {c:#}"));
    assert!(
        warning["message"].as_str().unwrap().contains("nats-nope"),
        "{warning:#}"
    );
}
