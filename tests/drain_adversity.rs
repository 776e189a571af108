//! `kubectl raft drain` when the cluster does not cooperate: a member that hangs while the
//! drain waits, a configuration that disagrees with the pod count, a member whose data
//! would not survive its eviction. Each scenario broke the promise before the executor acted
//! only on fresh plans; each test holds the nodes exclusively and uncordons on the way out.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;
use serde_json::Value;

/// Pod name -> UID, for the pods of a namespace.
fn uids(ns: &str) -> BTreeMap<String, String> {
    kubectl_json(&["get", "pods", "-n", ns])["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["metadata"]["name"].as_str().unwrap().to_string(),
                p["metadata"]["uid"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn zk_leader(ns: &str) -> String {
    status_json(&["zk", "-n", ns])["clusters"][0]["summary"]["leader"]
        .as_str()
        .expect("a ZooKeeper leader")
        .to_string()
}

fn set_zk_pdb(ns: &str, max_unavailable: u32, allowed: u32) {
    kubectl_ok(&[
        "patch",
        "pdb",
        "zk",
        "-n",
        ns,
        "--type=merge",
        "-p",
        &format!(r#"{{"spec":{{"maxUnavailable":{max_unavailable}}}}}"#),
    ]);
    wait_in(
        ns,
        Duration::from_secs(30),
        &format!("the PDB to allow {allowed} disruption(s)"),
        || kubectl_json(&["get", "pdb", "zk", "-n", ns])["status"]["disruptionsAllowed"] == allowed,
    );
}

#[test]
fn a_member_that_hangs_while_a_pdb_holds_the_drain_stops_the_eviction() {
    let _nodes = exclusive_nodes();
    let ns = TestNamespace::new("adv-pdb");
    deploy_zookeeper(&ns.name);
    set_zk_pdb(&ns.name, 0, 0);
    let leader = zk_leader(&ns.name);
    let followers: Vec<String> = (0..3)
        .map(|i| format!("zk-{i}"))
        .filter(|p| *p != leader)
        .collect();
    let (victim, hangs) = (&followers[0], &followers[1]);
    let node = node_of(&ns.name, victim);
    wait_node_alone(&node, &ns.name);
    let _c = Cordoned(vec![node.clone()]);
    let before = uids(&ns.name);

    let mut drain = Running::start(&["drain", &node, "--timeout", "30s", "-o", "json"]);
    drain.wait_for(
        &format!("cannot evict {victim} yet"),
        Duration::from_secs(60),
    );
    // While the drain waits on the PDB, the other follower hangs (its pod stays Ready behind
    // its TCP probe), and then the PDB lets one disruption through.
    let pid = container_pid(&ns.name, hangs);
    let (code, out, err) = while_frozen(
        pid,
        std::panic::AssertUnwindSafe(|| {
            set_zk_pdb(&ns.name, 1, 1);
            drain.finish(Duration::from_secs(120))
        }),
    );
    assert_eq!(
        uids(&ns.name).get(victim),
        before.get(victim),
        "{victim} was evicted with {hangs} hung: {err}"
    );
    assert_eq!(code, Some(1), "{err}");
    let report: Value = serde_json::from_str(&out).expect("a report");
    let message = cluster(&report, &ns.name)["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        message.contains(&format!(
            "evicting {victim} would leave 1 healthy voter(s) where 2 are needed"
        )) && message.contains(hangs.as_str()),
        "{message}"
    );
}

#[test]
fn ctrl_c_during_a_pdb_wait_stops_the_drain_at_once() {
    let _nodes = exclusive_nodes();
    let ns = TestNamespace::new("adv-int");
    deploy_zookeeper(&ns.name);
    set_zk_pdb(&ns.name, 0, 0);
    let leader = zk_leader(&ns.name);
    let victim = (0..3)
        .map(|i| format!("zk-{i}"))
        .find(|p| *p != leader)
        .unwrap();
    let node = node_of(&ns.name, &victim);
    wait_node_alone(&node, &ns.name);
    let _c = Cordoned(vec![node.clone()]);
    let mut drain = Running::start(&["drain", &node, "--timeout", "5m"]);
    drain.wait_for(
        &format!("cannot evict {victim} yet"),
        Duration::from_secs(60),
    );
    signal(drain.pid(), "INT");
    // Well within the 5-minute timeout: the wait itself is interrupted.
    let (code, _, err) = drain.finish(Duration::from_secs(30));
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("interrupted"), "{err}");
    assert!(
        err.contains(&format!("left: {victim} on {node}")),
        "says what is left: {err}"
    );
    assert!(
        !kubectl(&["get", "lease", "-n", &ns.name, "kubectl-raft-drain.zk"])
            .status
            .success(),
        "the lock was left behind"
    );
}

/// etcd-3.yaml with its data on an emptyDir instead of a volume claim.
fn on_emptydir(text: String) -> String {
    let i = text
        .find("  volumeClaimTemplates:")
        .expect("a claim template");
    format!(
        "{}      volumes: [{{name: data, emptyDir: {{}}}}]\n",
        &text[..i]
    )
}

#[test]
fn a_member_on_an_emptydir_is_refused_without_delete_emptydir_data() {
    let _nodes = exclusive_nodes();
    let ns = TestNamespace::new("adv-empty");
    let path = repo().join("tests/manifests/etcd-3.yaml");
    let f = tempfile(&on_emptydir(std::fs::read_to_string(path).unwrap()));
    kubectl_ok(&["apply", "-n", &ns.name, "-f", f.path_str()]);
    wait_etcd_ready(&ns.name, 3);
    let (leader, _) = etcd_leader(&ns.name).expect("a leader");
    let follower = (0..3)
        .map(|i| format!("etcd-{i}"))
        .find(|p| *p != leader)
        .unwrap();
    let node = node_of(&ns.name, &follower);
    wait_node_alone(&node, &ns.name);
    let _c = Cordoned(vec![node.clone()]);
    let before = uids(&ns.name);

    let (code, report, err) = verb_json("drain", &[&node, "--dry-run"]);
    assert_eq!(code, Some(1), "{err}\n{report:#}");
    let blocker = &cluster(&report, &ns.name)["plan"]["blocker"];
    assert_eq!(blocker["reason"], "LocalData", "{blocker}");

    let (code, report, err) = verb_json("drain", &[&node, "--timeout", "20s"]);
    assert_eq!(code, Some(1), "{err}\n{report:#}");
    let message = cluster(&report, &ns.name)["message"]
        .as_str()
        .unwrap_or_default();
    assert!(
        message.contains("emptyDir (data)") && message.contains("--delete-emptydir-data"),
        "{message}"
    );
    assert_eq!(uids(&ns.name), before, "nothing was evicted");
}
