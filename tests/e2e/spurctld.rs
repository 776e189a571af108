//! Spur's spurctld (openraft), built from source by the world's build, three replicas in the
//! test world (tests/manifests/spurctld-3.yaml): the seed's failure (a replica that stays
//! Ready behind a TCP probe while it serves nothing) and drains of its nodes. The snapshot
//! reports neither term, leader id nor its Raft configuration, only whether a replica leads,
//! so drains pass `--assume-voters-are-pods` (the manifest runs exactly its peers list), and no
//! fact says whether a follower still hears from its leader, so they pass
//! `--assume-followers-current` too.

use std::time::Duration;

use crate::common::*;
use serde_json::Value;

/// Whether tests/world/spurctld.sh could build spurctld. It waits first for a build under way
/// (tests/run.sh runs one beside the tests, holding `spurctld.lock`), and runs the script itself
/// where none has run. Where no source is on this machine, the test says why and passes as
/// skipped; in CI (`CI` set), where the snapshot is always present, it fails instead.
fn spurctld_built() -> bool {
    world();
    static BUILT: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    let built = BUILT.get_or_init(|| {
        wait_for_lock("spurctld.lock", "tests/world/spurctld.sh")?;
        let status = std::process::Command::new("bash")
            .arg(repo().join("tests/world/spurctld.sh"))
            .status()
            .map_err(|e| format!("cannot run tests/world/spurctld.sh: {e}"))?;
        if status.success() {
            Ok(())
        } else {
            Err(format!(
                "tests/world/spurctld.sh failed ({status}): its output is above"
            ))
        }
    });
    if let Err(e) = built {
        panic!("spurctld cannot be had: {e}");
    }
    let missing = world_dir().join("bin/.spurctld.missing");
    match std::fs::read_to_string(&missing) {
        Err(_) => true,
        Ok(why) if std::env::var_os("CI").is_some() => {
            panic!("spurctld was not built in CI: {}", why.trim())
        }
        Ok(why) => {
            eprintln!("SKIPPED: spurctld was not built: {}", why.trim());
            false
        }
    }
}

/// The test's nodes, taken once spurctld's build has ended (built or not), so that a test
/// waiting for the build holds no node another test could use meanwhile.
fn once_built(nodes: fn() -> NodesGuard) -> NodesGuard {
    spurctld_built();
    nodes()
}

/// The manifest with the seed's TCP probe replaced by an HTTP one on the REST ping: the best
/// probe this version allows (tests/manifests/spurctld-3.yaml names it).
fn ping_probe(text: String) -> String {
    text.replace(
        "tcpSocket: {port: grpc}",
        "httpGet: {path: /api/v1/ping, port: api}\n          timeoutSeconds: 1",
    )
}

/// Applies the manifest (edited) and waits until one replica leads and all three are healthy.
fn deploy(ns: &str, edit: impl Fn(String) -> String) -> Value {
    let text = std::fs::read_to_string(repo().join("tests/manifests/spurctld-3.yaml")).unwrap();
    let file = tempfile(&edit(text));
    kubectl_ok(&["apply", "-n", ns, "-f", file.path_str()]);
    let mut report = Value::Null;
    wait_in(
        ns,
        Duration::from_secs(180),
        "3 healthy and Ready spurctld replicas, one leading",
        || {
            report = status_json(&["spurctld", "-n", ns]);
            let c = &report["clusters"][0];
            c["summary"]["leader"].is_string()
                && c["summary"]["healthyVoters"] == 3
                && c["summary"]["readyPods"] == 3
        },
    );
    cluster(&report, ns).clone()
}

/// A namespace with spurctld deployed (as `edit` makes it), and its status; None where
/// spurctld could not be built here (said by `spurctld_built`).
fn deployed(prefix: &str, edit: impl Fn(String) -> String) -> Option<(TestNamespace, Value)> {
    if !spurctld_built() {
        return None;
    }
    let ns = TestNamespace::new(prefix);
    let c = deploy(&ns.name, edit);
    Some((ns, c))
}

/// `kubectl raft drain` of `pod`'s node, alone there, on the pod count: that node, and the
/// cluster's part of the report (the drain asserted to have succeeded). The node is
/// uncordoned when the guard goes.
fn drain_node_of(ns: &str, pod: &str) -> (String, Value, Cordoned) {
    let node = node_of(ns, pod);
    wait_node_alone(&node, ns);
    let cordoned = Cordoned(vec![node.clone()]);
    let (code, report, err) = verb_json(
        "drain",
        &[
            &node,
            "--timeout",
            "120s",
            "--assume-voters-are-pods",
            "--assume-followers-current",
        ],
    );
    assert_eq!(code, Some(0), "{err}\n{report:#}");
    (node, cluster(&report, ns).clone(), cordoned)
}

fn leader(c: &Value) -> String {
    c["summary"]["leader"].as_str().unwrap().to_string()
}

fn replica<'a>(c: &'a Value, pod: &str) -> &'a Value {
    c["replicas"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["pod"] == pod)
        .unwrap_or_else(|| panic!("{pod} in {c:#}"))
}

fn a_follower(c: &Value) -> String {
    let leader = leader(c);
    c["replicas"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["pod"].as_str().unwrap().to_string())
        .find(|p| *p != leader)
        .unwrap()
}

#[test]
fn status_finds_the_one_replica_that_leads_and_counts_voters_from_pods() {
    let _nodes = once_built(shared_nodes);
    let Some((_ns, c)) = deployed("spur-status", |t| t) else {
        return;
    };
    assert_eq!(c["system"], "spurctld", "{c:#}");
    let leaders: Vec<&Value> = c["replicas"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["raft"]["role"] == "leader")
        .collect();
    assert_eq!(leaders.len(), 1, "{c:#}");
    assert_eq!(leaders[0]["pod"], c["summary"]["leader"], "{c:#}");
    for r in c["replicas"].as_array().unwrap() {
        assert_eq!(r["raft"]["health"]["state"], "ok", "{r:#}");
    }
    assert_eq!(c["summary"]["votersFrom"], "pods", "{c:#}");
    assert_eq!(c["summary"]["faultTolerance"], 1, "{c:#}");
}

#[test]
fn status_warns_about_the_seeds_tcp_probe() {
    let _nodes = once_built(shared_nodes);
    let Some((_ns, c)) = deployed("spur-probe", |t| t) else {
        return;
    };
    let codes = warning_codes(&c);
    assert!(codes.contains(&"WeakReadinessProbe"), "{codes:?}");
}

/// The seed's failure: a replica that serves nothing (here frozen with SIGSTOP) stays
/// `1/1 Running` and Ready behind the TCP probe on 6817; status flags it.
#[test]
fn a_frozen_replica_stays_ready_by_its_tcp_probe_and_status_flags_it() {
    let _nodes = once_built(shared_nodes);
    let Some((ns, c)) = deployed("spur-frozen", |t| t) else {
        return;
    };
    let follower = a_follower(&c);
    let pid = container_pid(&ns.name, &follower);
    while_frozen(pid, || {
        std::thread::sleep(Duration::from_secs(5)); // several readiness periods
        let c = cluster(&status_json(&["spurctld", "-n", &ns.name]), &ns.name).clone();
        let r = replica(&c, &follower);
        assert_eq!(r["ready"], true, "the TCP probe keeps it Ready: {r:#}");
        assert_eq!(r["raft"]["health"]["state"], "unreachable", "{r:#}");
        assert_eq!(c["summary"]["faultTolerance"], 0, "{c:#}");
        let codes = warning_codes(&c);
        for want in ["ReadyButUnhealthy", "FaultToleranceZero"] {
            assert!(codes.contains(&want), "{want} in {codes:?}");
        }
    });
}

/// With the REST ping as its readiness probe, the frozen replica leaves the Service.
#[test]
fn with_the_ping_probe_a_frozen_replica_is_taken_out_of_ready() {
    let _nodes = once_built(shared_nodes);
    let Some((ns, c)) = deployed("spur-ping", ping_probe) else {
        return;
    };
    assert!(
        !warning_codes(&c).contains(&"WeakReadinessProbe"),
        "{:?}",
        warning_codes(&c)
    );
    let follower = a_follower(&c);
    let pid = container_pid(&ns.name, &follower);
    while_frozen(pid, || {
        wait_in(
            &ns.name,
            Duration::from_secs(30),
            "the frozen replica to be not Ready",
            || !pod_ready(&pod_json(&ns.name, &follower)),
        );
        let c = cluster(&status_json(&["spurctld", "-n", &ns.name]), &ns.name).clone();
        let codes = warning_codes(&c);
        assert!(!codes.contains(&"ReadyButUnhealthy"), "{codes:?}");
    });
}

#[test]
fn drain_refuses_without_assume_voters_are_pods() {
    let _nodes = once_built(shared_nodes);
    let Some((ns, c)) = deployed("spur-unknown", |t| t) else {
        return;
    };
    let node = node_of(&ns.name, &a_follower(&c));
    let (code, report, err) = verb_json("drain", &[&node, "--dry-run"]);
    assert_eq!(code, Some(1), "{err}\n{report:#}");
    let c = cluster(&report, &ns.name);
    assert_eq!(c["plan"]["blocker"]["reason"], "MembershipUnknown", "{c:#}");
}

/// spurctld says nothing that tells a follower still hears from its leader: the drain says so
/// and asks for the assumption, as for its membership.
#[test]
fn drain_refuses_without_assume_followers_current() {
    let _nodes = once_built(shared_nodes);
    let Some((ns, c)) = deployed("spur-live", |t| t) else {
        return;
    };
    let node = node_of(&ns.name, &a_follower(&c));
    let (code, report, err) = verb_json("drain", &[&node, "--dry-run", "--assume-voters-are-pods"]);
    assert_eq!(code, Some(1), "{err}\n{report:#}");
    let c = cluster(&report, &ns.name);
    assert_eq!(c["plan"]["blocker"]["reason"], "LivenessUnknown", "{c:#}");
    assert!(
        c["plan"]["blocker"]["message"].as_str().is_some_and(
            |m| m.contains(&format!("--assume-followers-current={}/spurctld", ns.name))
        ),
        "names the flag for this cluster: {c:#}"
    );
}

#[test]
fn drain_of_a_followers_node_evicts_it_and_leaves_the_leader() {
    let _nodes = once_built(exclusive_nodes);
    let Some((ns, c)) = deployed("spur-drain-f", |t| t) else {
        return;
    };
    let before = leader(&c);
    let follower = a_follower(&c);
    let (node, c, _cordoned) = drain_node_of(&ns.name, &follower);
    assert_eq!(drain_counts(&c), (Some(1), Some(0), Some(0)), "{c:#}");
    assert_ne!(node_of(&ns.name, &follower), node);
    let after = cluster(&status_json(&["spurctld", "-n", &ns.name]), &ns.name).clone();
    assert_eq!(leader(&after), before, "the leader was not touched");
}

/// spurctld cannot hand leadership over: its leader goes last, as an election the report
/// counts, with its leaderless window.
#[test]
fn drain_of_the_leaders_node_evicts_it_last_as_a_counted_election() {
    let _nodes = once_built(exclusive_nodes);
    let Some((ns, c)) = deployed("spur-drain-l", |t| t) else {
        return;
    };
    let before = leader(&c);
    let (node, c, _cordoned) = drain_node_of(&ns.name, &before);
    assert_eq!(c["plan"]["steps"][0]["action"], "evictLeader", "{c:#}");
    assert_eq!(drain_counts(&c), (Some(1), Some(0), Some(1)), "{c:#}");
    assert!(c["longestLeaderlessMs"].as_f64().is_some(), "{c:#}");
    assert_ne!(node_of(&ns.name, &before), node);
    let after = cluster(&status_json(&["spurctld", "-n", &ns.name]), &ns.name).clone();
    assert!(after["summary"]["leader"].is_string(), "{after:#}");
}

#[test]
fn drain_refuses_while_another_replica_is_frozen() {
    let _nodes = once_built(exclusive_nodes);
    let Some((ns, c)) = deployed("spur-drain-frozen", |t| t) else {
        return;
    };
    let leader = leader(&c);
    let followers: Vec<String> = c["replicas"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["pod"].as_str().unwrap().to_string())
        .filter(|p| *p != leader)
        .collect();
    let node = node_of(&ns.name, &followers[0]);
    let uids_before = uids(&ns.name);
    let pid = container_pid(&ns.name, &followers[1]);
    let (code, report, err) = while_frozen(pid, || {
        std::thread::sleep(Duration::from_secs(3));
        verb_json(
            "drain",
            &[
                &node,
                "--timeout",
                "8s",
                "--assume-voters-are-pods",
                "--assume-followers-current",
            ],
        )
    });
    kubectl(&["uncordon", &node]);
    assert_ne!(code, Some(0), "{err}\n{report:#}");
    let c = cluster(&report, &ns.name);
    assert_eq!(c["evictions"], 0, "{c:#}");
    assert_eq!(uids(&ns.name), uids_before, "no replica was replaced");
    assert!(
        err.contains(&followers[1]) || c.to_string().contains(&followers[1]),
        "the frozen replica is named: {err}\n{c:#}"
    );
}

/// `restart` on a system without a transfer: every replica once, the leader last, its
/// eviction counted as the election it is.
#[test]
fn restart_goes_through_every_replica_the_leader_last() {
    let _nodes = once_built(shared_nodes);
    let Some((ns, c)) = deployed("spur-restart", |t| t) else {
        return;
    };
    let before = leader(&c);
    let uids_before = uids(&ns.name);
    let (code, report, err) = verb_json(
        "restart",
        &[
            "spurctld",
            "-n",
            &ns.name,
            "--timeout",
            "120s",
            "--assume-voters-are-pods",
            "--assume-followers-current",
        ],
    );
    assert_eq!(code, Some(0), "{err}\n{report:#}");
    let c = &report["cluster"];
    assert_eq!(drain_counts(c), (Some(3), Some(0), Some(1)), "{c:#}");
    let last = c["plan"]["steps"][2]["pod"].as_str().unwrap_or_default();
    assert_eq!(last, before, "the leader last: {c:#}");
    let after = uids(&ns.name);
    for (pod, uid) in &uids_before {
        assert_ne!(after.get(pod), Some(uid), "{pod} was restarted");
    }
}

/// The eviction gate on spurctld, whose snapshot gives neither its configuration nor a
/// follower's contact with its leader: without its owner's word the gate refuses every
/// member's eviction and says which annotation gives it; with
/// `kubectl-raft.io/gate-assume=voters-are-pods,followers-current` on the StatefulSet, plain
/// `kubectl drain` of a follower's node evicts it.
#[test]
fn the_gate_refuses_spurctld_until_its_owner_annotates_what_to_assume() {
    let _nodes = once_built(exclusive_nodes);
    let Some((ns, c)) = deployed("spur-gate", ping_probe) else {
        return;
    };
    let _g = Gated::start(&ns.name);
    let follower = a_follower(&c);
    let cordoned = cordon(&node_of(&ns.name, &follower));
    let (admitted, said) = evict(&ns.name, &follower);
    drop(cordoned);
    assert!(!admitted, "refused without the annotation: {said}");
    assert!(
        said.contains("kubectl-raft.io/gate-assume=voters-are-pods"),
        "the refusal names the annotation: {said}"
    );

    kubectl_ok(&[
        "annotate",
        "sts",
        "spurctld",
        "-n",
        &ns.name,
        "kubectl-raft.io/gate-assume=voters-are-pods,followers-current",
    ]);
    wait_node_alone(&node_of(&ns.name, &follower), &ns.name);
    let _cordoned = plain_drain_evicts(
        &ns.name,
        &follower,
        &[
            "--ignore-daemonsets",
            "--delete-emptydir-data",
            "--timeout=120s",
        ],
    );
}
