//! The HashiCorp family (Consul, Nomad, Vault read their Raft the same way) against a STAND-IN
//! on real Raft: tests/standin/hraft, hashicorp/raft v1.8.0 behind Consul's HTTP API (status,
//! agent/self with Raft's own Stats(), the Raft configuration, autopilot's health, leadership
//! transfer), built by the world's build. Real Consul cannot run here (its licence is not open
//! source). tests/manifests/hraft-5.yaml runs five servers: hraft-0..2 vote, hraft-3 and
//! hraft-4 are real Raft non-voters, which answer "Follower" like any voter.

use std::time::{Duration, Instant};

use crate::common::*;
use serde_json::Value;

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

/// A voter that follows (hraft-0..2 but the leader), other than `not`.
fn a_voter_follower(c: &Value, not: &str) -> String {
    let l = leader(c);
    (0..3)
        .map(|i| format!("hraft-{i}"))
        .find(|p| *p != l && p != not)
        .unwrap()
}

#[test]
fn status_tells_the_configured_voters_from_the_non_voters() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("hraft-status");
    let c = deploy_hraft(&ns.name);
    assert_eq!(c["summary"]["members"], 5, "{c:#}");
    assert_eq!(c["summary"]["voters"], 3, "{c:#}");
    assert_eq!(c["summary"]["votersFrom"], "configuration", "{c:#}");
    for i in 0..5 {
        let r = replica(&c, &format!("hraft-{i}"));
        let want = if i < 3 { "voter" } else { "nonVoter" };
        assert_eq!(r["raft"]["configured"], want, "{r:#}");
        assert_eq!(r["raft"]["current"], true, "{r:#}");
    }
}

/// One voter hangs. The two non-voters still say "Follower", but they do not vote: the two
/// voters left are exactly a quorum, and the drain of another voter's node evicts nothing.
#[test]
fn a_hung_voter_is_not_made_up_for_by_non_voters() {
    let _nodes = exclusive_nodes();
    let ns = TestNamespace::new("hraft-hung");
    let c = deploy_hraft(&ns.name);
    let hung = a_voter_follower(&c, "");
    let victim = a_voter_follower(&c, &hung);
    let node = node_of(&ns.name, &victim);
    wait_node_alone(&node, &ns.name);
    let _cordoned = Cordoned(vec![node.clone()]);
    // A PDB counts Ready pods, not voters: at maxUnavailable 2 it lets this eviction through.
    set_pdb(&ns.name, "hraft", 2, 2);
    let before = uids(&ns.name);
    let pid = container_pid(&ns.name, &hung);
    let (code, report, err) = while_frozen(pid, || {
        // Its own port stops answering (and autopilot's view of it turns unhealthy).
        wait_in(
            &ns.name,
            Duration::from_secs(30),
            "the hung voter unreachable",
            || {
                let c = status_json(&["hraft", "-n", &ns.name])["clusters"][0].clone();
                replica(&c, &hung)["raft"]["health"]["state"] == "unreachable"
            },
        );
        verb_json("drain", &[&node, "--ignore-daemonsets", "--timeout", "10s"])
    });
    let _ = (code, &err);
    let c = cluster(&report, &ns.name);
    assert_eq!(
        uids(&ns.name)[&victim],
        before[&victim],
        "{victim} was evicted: {c:#}"
    );
    assert!(
        c["message"]
            .as_str()
            .is_some_and(|m| m.contains("where 2 are needed")),
        "{c:#}\n{err}"
    );
}

#[test]
fn yield_never_hands_leadership_to_a_non_voter() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("hraft-yield");
    let c = deploy_hraft(&ns.name);
    let before = leader(&c);
    // The stand-in (as real Consul, on hashicorp/raft 1.8) accepts a transfer to a non-voter
    // and then starts an election; the plugin must never ask for one.
    let (code, _, err) = verb_json("yield", &["hraft", "-n", &ns.name, "--to", "hraft-3"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("non-voter"), "{err}");
    assert_eq!(
        leader(&status_json(&["hraft", "-n", &ns.name])["clusters"][0]),
        before
    );
    let (code, y, err) = verb_json("yield", &["hraft", "-n", &ns.name]);
    assert_eq!(code, Some(0), "{err}\n{y:#}");
    let new = y["newLeader"].as_str().unwrap();
    assert!(
        ["hraft-0", "hraft-1", "hraft-2"].contains(&new) && new != before,
        "{y:#}"
    );
}

/// A non-voter's node drained: it costs no quorum, goes first, and rejoins by a non-voter's
/// test (as a non-voter).
#[test]
fn a_non_voters_node_is_drained_without_touching_the_voters() {
    let _nodes = exclusive_nodes();
    let ns = TestNamespace::new("hraft-nonvoter");
    let c = deploy_hraft(&ns.name);
    let node = node_of(&ns.name, "hraft-4");
    wait_node_alone(&node, &ns.name);
    let _cordoned = Cordoned(vec![node.clone()]);
    let l = leader(&c);
    let (code, report, err) = verb_json("drain", &[&node, "--timeout", "120s"]);
    assert_eq!(code, Some(0), "{err}\n{report:#}");
    let c = cluster(&report, &ns.name);
    assert_eq!(drain_counts(c), (Some(1), Some(0), Some(0)), "{c:#}");
    let after = &status_json(&["hraft", "-n", &ns.name])["clusters"][0];
    assert_eq!(leader(after), l, "the leader was not touched");
    assert_eq!(replica(after, "hraft-4")["raft"]["configured"], "nonVoter");
}

/// tests/manifests/hraft-5.yaml with `yield --local` as each server's preStop hook, logging
/// to its volume (the binary is on the host, where the world's pods run).
fn deploy_hraft_with_local_yield(ns: &str) {
    let bin = env!("CARGO_BIN_EXE_kubectl-raft");
    let manifest = std::fs::read_to_string(repo().join("tests/manifests/hraft-5.yaml")).unwrap();
    let mounts = "        volumeMounts:\n        - {name: data, mountPath: /data}\n";
    let hooked = manifest.replace(
        mounts,
        &format!(
            r#"        lifecycle:
          preStop:
            exec:
              command: [/bin/sh, -c, "{bin} yield --local --system consul --pod-grace-period 30 >> /data/prestop.log 2>&1"]
{mounts}"#
        ),
    );
    // Kubernetes' default grace period, as docs/systems/consul.md's hook has it: two
    // thirds of it (20 s) for the hook. (With 10 s, 6.7 s for looks at five servers and the
    // handover, one run of fifteen beside other tests saw an election; its log was lost.)
    let hooked = hooked.replace(
        "terminationGracePeriodSeconds: 10",
        "terminationGracePeriodSeconds: 30",
    );
    assert_ne!(hooked, manifest, "the preStop hook was put in");
    deploy_hraft_manifest(ns, &hooked);
}

/// Consul's servers (and the hashicorp/raft stand-in) do not hand leadership over on SIGTERM:
/// deleting the leader's pod costs an election. `yield --local` as the preStop hook finds its
/// peers in autopilot's list (each server's `Address`, on the HTTP port), transfers to a
/// voter (never one of the two non-voters) and waits until it follows, before the kubelet
/// sends SIGTERM. Judged by the servers: a voter of a later term leads, and no voter held an
/// election for want of a leader. (Before, `--local` on Consul found no peer addresses and
/// stopped: the deletion cost an election.)
#[test]
fn yield_local_in_a_consul_servers_prestop_hook_transfers_to_a_voter_before_it_stops() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("hraft-local");
    deploy_hraft_with_local_yield(&ns.name);
    let (leader, term) = hraft_leader(&ns.name).expect("one leader, by the servers");
    let log = hook_log(&ns.name, &leader);
    let began = Instant::now();
    kubectl_ok(&["delete", "pod", &leader, "-n", &ns.name, "--wait=true"]);
    let mut new = None;
    wait_in(
        &ns.name,
        Duration::from_secs(60),
        "a voter of a later term leading, by the servers",
        || {
            new = hraft_leader(&ns.name).filter(|(_, t)| *t > term);
            new.is_some()
        },
    );
    let (new, _) = new.unwrap();
    assert_ne!(new, leader, "leadership moved off the deleted server");
    let others: Vec<&str> = ["hraft-0", "hraft-1", "hraft-2"]
        .into_iter()
        .filter(|p| *p != leader)
        .collect();
    let elections = elections_after(&ns.name, &others, began.elapsed(), term);
    let said = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        elections.is_empty(),
        "{elections:#?}\nthe hook said: {said}"
    );
    assert!(
        said.contains("handed leadership to"),
        "the hook said: {said}"
    );
}
