//! `kubectl raft drain` when the cluster does not cooperate: a member that hangs while the
//! drain waits, a configuration that disagrees with the pod count, a member whose data
//! would not survive its eviction. Each scenario broke the promise before the executor acted
//! only on fresh plans; each test holds the nodes exclusively and uncordons on the way out.

use std::time::Duration;

use crate::common::*;
use serde_json::Value;

fn set_zk_pdb(ns: &str, max_unavailable: u32, allowed: u32) {
    set_pdb(ns, "zk", max_unavailable, allowed);
}

#[test]
fn a_member_that_hangs_while_a_pdb_holds_the_drain_stops_the_eviction() {
    let _nodes = exclusive_nodes();
    let ns = TestNamespace::new("adv-pdb");
    deploy_zookeeper(&ns.name);
    set_zk_pdb(&ns.name, 0, 0);
    let leader = zk_leader(&ns.name);
    let followers = others_than(&leader, "zk", 3);
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
    let victim = others_than(&leader, "zk", 3).remove(0);
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
        !kubectl(&["get", "lease", "-n", LOCK_NS, &lock_lease(&ns.name, "zk")])
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
    let follower = others_than(&leader, "etcd", 3).remove(0);
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

#[test]
fn a_paused_drain_overtaken_by_a_second_one_stops_before_it_acts() {
    let _nodes = exclusive_nodes();
    let ns = TestNamespace::new("adv-lock");
    deploy_etcd(&ns.name, 3);
    let (leader, _) = etcd_leader(&ns.name).expect("a leader");
    let followers = others_than(&leader, "etcd", 3);
    let (hung, victim) = (&followers[0], &followers[1]);
    let node = node_of(&ns.name, victim);
    wait_node_alone(&node, &ns.name);
    let _c = Cordoned(vec![node.clone()]);
    let member = container_pid(&ns.name, hung);
    signal(member, "STOP");
    // The first drain waits: evicting the victim would leave one healthy voter of three.
    let mut first = Running::start(&["drain", &node, "--timeout", "4m", "-o", "json"]);
    first.wait_for("would leave 1 healthy voter(s)", Duration::from_secs(60));
    // Paused, as by Ctrl-Z or a closed laptop: it stops renewing its lock. A second operator
    // comes once the Lease has looked dead for longer than its duration: made 5 s here (a
    // Lease's own shorter duration is honoured) so that the test does not wait out the 30 s
    // kubectl raft writes; the stale-lock test in tests/e2e/drain.rs waits that one.
    signal(first.pid(), "STOP");
    let lease = lock_lease(&ns.name, "etcd");
    kubectl_ok(&[
        "patch",
        "lease",
        &lease,
        "-n",
        LOCK_NS,
        "--type=merge",
        "-p",
        r#"{"spec":{"leaseDurationSeconds":5}}"#,
    ]);
    lease_unchanged_for(&lease, Duration::from_secs(7));
    let mut second = Running::start(&["drain", &node, "--timeout", "4m", "-o", "json"]);
    second.wait_for("took over", Duration::from_secs(90));
    second.wait_for("would leave 1 healthy voter(s)", Duration::from_secs(60));
    // Both come back to a cluster where the eviction is allowed again.
    signal(first.pid(), "CONT");
    signal(member, "CONT");
    let (first_code, first_out, first_err) = first.finish(Duration::from_secs(120));
    let (second_code, second_out, second_err) = second.finish(Duration::from_secs(180));
    assert_eq!(second_code, Some(0), "the second drain: {second_err}");
    assert_eq!(first_code, Some(1), "the first drain: {first_err}");
    let first_report: Value = serde_json::from_str(&first_out).expect("a report");
    let c = cluster(&first_report, &ns.name);
    assert_eq!(c["evictions"], 0, "the overtaken drain evicted: {c:#}");
    let message = c["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("drain lock") && message.contains("stopped before its next action"),
        "{message}"
    );
    let second_report: Value = serde_json::from_str(&second_out).expect("a report");
    assert_eq!(cluster(&second_report, &ns.name)["evictions"], 1);
}

/// Waits until the Lease's renewTime has not changed for `quiet`, as this test observes it.
fn lease_unchanged_for(lease: &str, quiet: Duration) {
    let renewed = || {
        kubectl_json(&["get", "lease", lease, "-n", LOCK_NS])["spec"]["renewTime"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    let mut last = renewed();
    let mut since = std::time::Instant::now();
    wait_in(
        LOCK_NS,
        quiet * 3,
        "the drain lock to stop being renewed",
        || {
            let now = renewed();
            if now != last {
                last = now;
                since = std::time::Instant::now();
            }
            since.elapsed() >= quiet
        },
    );
}

#[test]
fn five_configured_servers_on_three_pods_stop_the_eviction_of_a_follower() {
    let _nodes = exclusive_nodes();
    let ns = TestNamespace::new("adv-conf");
    deploy_zookeeper_five_on_three(&ns.name);
    let status = status_json(&["zk", "-n", &ns.name]);
    let summary = &status["clusters"][0]["summary"];
    assert_eq!(
        (summary["voters"].as_u64(), summary["quorum"].as_u64()),
        (Some(5), Some(3)),
        "voters from the configuration, not the pods: {summary}"
    );
    assert_eq!(summary["votersFrom"], "configuration");
    assert_eq!(summary["faultTolerance"], 0, "{summary}");
    let leader = summary["leader"].as_str().unwrap().to_string();
    let follower = others_than(&leader, "zk", 3).remove(0);
    let node = node_of(&ns.name, &follower);
    wait_node_alone(&node, &ns.name);
    let _c = Cordoned(vec![node.clone()]);
    let before = uids(&ns.name);
    let (code, report, err) = verb_json("drain", &[&node, "--timeout", "10s"]);
    assert_eq!(code, Some(1), "{err}\n{report:#}");
    let message = cluster(&report, &ns.name)["message"]
        .as_str()
        .unwrap_or_default();
    assert!(
        message.contains(&format!(
            "evicting {follower} would leave 2 healthy voter(s) where 3 are needed"
        )),
        "{message}"
    );
    assert!(
        message.contains("2 of the 5 voter(s) zookeeper configures run in no pod"),
        "the wait is explained by the voters without a pod: {message}"
    );
    assert_eq!(uids(&ns.name), before, "nothing was evicted");
}

/// etcd-3.yaml cut down to `n` members (replicas and the initial cluster both).
fn deploy_small_etcd(ns: &str, n: u32) {
    let text = std::fs::read_to_string(repo().join("tests/manifests/etcd-3.yaml")).unwrap();
    let peer =
        |i: u32| format!("etcd-{i}=http://etcd-{i}.etcd.$(POD_NAMESPACE).svc.cluster.local:2380");
    let all: Vec<String> = (0..3).map(peer).collect();
    let some: Vec<String> = (0..n).map(peer).collect();
    let small = text
        .replace("  replicas: 3\n", &format!("  replicas: {n}\n"))
        .replace(&all.join(","), &some.join(","));
    assert!(
        !small.contains("replicas: 3") && !small.contains(&all[2]),
        "{small}"
    );
    let f = tempfile(&small);
    kubectl_ok(&["apply", "-n", ns, "-f", f.path_str()]);
    wait_etcd_ready(ns, n);
}

/// A cluster with no fault tolerance (one or two members): no member may go, whatever its
/// PodDisruptionBudget allows, and no wait would change that: the drain refuses at once
/// (`TooFewVoters`, not a wait that runs out), says why and evicts nothing.
fn a_cluster_of(n: u32) {
    let _nodes = exclusive_nodes();
    let ns = TestNamespace::new(&format!("adv-small{n}"));
    deploy_small_etcd(&ns.name, n);
    let node = node_of(&ns.name, "etcd-0");
    wait_node_alone(&node, &ns.name);
    let _c = Cordoned(vec![node.clone()]);
    let before = uids(&ns.name);
    let (code, report, err) = verb_json("drain", &[&node, "--timeout", "20s"]);
    assert_eq!(code, Some(1), "{err}\n{report:#}");
    assert!(
        err.contains(&format!("has {n} voter(s) and needs {}", n / 2 + 1))
            && err.contains("however long this waits"),
        "the quorum it would break is named: {err}"
    );
    assert!(!err.contains("still blocked after"), "it waited: {err}");
    assert_eq!(uids(&ns.name), before, "a member was evicted");
}

#[test]
fn a_one_member_cluster_is_never_drained() {
    a_cluster_of(1);
}

#[test]
fn a_two_member_cluster_is_never_drained() {
    a_cluster_of(2);
}

/// etcd-3.yaml with a hostPath volume besides its claims (data that stays on the node).
fn with_host_path(text: String) -> String {
    let i = text
        .find("  volumeClaimTemplates:")
        .expect("a claim template");
    format!(
        "{}      volumes: [{{name: cache, hostPath: {{path: /tmp}}}}]\n{}",
        &text[..i],
        &text[i..]
    )
}

#[test]
fn a_member_on_a_host_path_is_refused_without_allow_hostpath_data() {
    let _nodes = exclusive_nodes();
    let ns = TestNamespace::new("adv-hostpath");
    let path = repo().join("tests/manifests/etcd-3.yaml");
    let f = tempfile(&with_host_path(std::fs::read_to_string(path).unwrap()));
    kubectl_ok(&["apply", "-n", &ns.name, "-f", f.path_str()]);
    wait_etcd_ready(&ns.name, 3);
    let (leader, _) = etcd_leader(&ns.name).expect("a leader");
    let follower = others_than(&leader, "etcd", 3).remove(0);
    let node = node_of(&ns.name, &follower);
    wait_node_alone(&node, &ns.name);
    let _c = Cordoned(vec![node.clone()]);
    let before = uids(&ns.name);
    let (code, report, err) = verb_json("drain", &[&node, "--timeout", "20s"]);
    assert_eq!(code, Some(1), "{err}\n{report:#}");
    let c = cluster(&report, &ns.name);
    assert_eq!(c["plan"]["blocker"]["reason"], "LocalData", "{c:#}");
    let message = c["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("cache (hostPath /tmp)") && message.contains("--allow-hostpath-data"),
        "{message}"
    );
    assert_eq!(uids(&ns.name), before, "nothing was evicted");
}

/// A member that tolerates the cordon and must run on its node: its replacement comes back
/// onto the drained node. It is evicted once, never again in the same run.
#[test]
fn a_member_that_comes_back_onto_the_drained_node_is_evicted_once() {
    let _nodes = exclusive_nodes();
    let ns = TestNamespace::new("adv-loop");
    // OnDelete: the template changed below reaches only the member the drain replaces.
    let path = repo().join("tests/manifests/etcd-3.yaml");
    let text = std::fs::read_to_string(path).unwrap().replace(
        "  podManagementPolicy: Parallel\n",
        "  podManagementPolicy: Parallel\n  updateStrategy: {type: OnDelete}\n",
    );
    let f = tempfile(&text);
    kubectl_ok(&["apply", "-n", &ns.name, "-f", f.path_str()]);
    wait_etcd_ready(&ns.name, 3);
    let (leader, _) = etcd_leader(&ns.name).expect("a leader");
    let follower = others_than(&leader, "etcd", 3).remove(0);
    let node = node_of(&ns.name, &follower);
    wait_node_alone(&node, &ns.name);
    let patch = format!(
        r#"{{"spec":{{"template":{{"spec":{{"tolerations":[{{"key":"node.kubernetes.io/unschedulable","operator":"Exists","effect":"NoSchedule"}}],"nodeSelector":{{"kubernetes.io/hostname":"{node}"}}}}}}}}}}"#
    );
    kubectl_ok(&[
        "patch",
        "sts",
        "etcd",
        "-n",
        &ns.name,
        "--type=merge",
        "-p",
        &patch,
    ]);
    let _c = Cordoned(vec![node.clone()]);
    let (code, report, err) = verb_json("drain", &[&node, "--timeout", "60s"]);
    assert_eq!(code, Some(1), "{err}\n{report:#}");
    let c = cluster(&report, &ns.name);
    assert_eq!(c["evictions"], 1, "{c:#}");
    assert!(
        c["message"]
            .as_str()
            .is_some_and(|m| m.contains("not evicted twice")),
        "{c:#}"
    );
    assert_eq!(node_of(&ns.name, &follower), node, "it came back there");
}

/// The StatefulSet's controller starts a rollout (`kubectl rollout restart`) while a drain waits
/// on a PDB: the drain waits for the controller's rollout to finish before its own eviction,
/// so that never two members are down at once.
#[test]
fn a_controller_rollout_started_during_a_drain_is_waited_for() {
    let _nodes = exclusive_nodes();
    let ns = TestNamespace::new("adv-rollout");
    deploy_etcd(&ns.name, 3);
    set_pdb(&ns.name, "etcd", 0, 0);
    let (leader, _) = etcd_leader(&ns.name).expect("a leader");
    let follower = others_than(&leader, "etcd", 3).remove(0);
    let node = node_of(&ns.name, &follower);
    wait_node_alone(&node, &ns.name);
    let _c = Cordoned(vec![node.clone()]);
    let mut drain = Running::start(&["drain", &node, "--timeout", "180s", "-o", "json"]);
    drain.wait_for(
        &format!("cannot evict {follower} yet"),
        Duration::from_secs(60),
    );
    // Watch how many members are down at once from here on.
    let down = MostDown::watch(&ns.name, 3);
    kubectl_ok(&["rollout", "restart", "sts/etcd", "-n", &ns.name]);
    // The PDB lets two disruptions through (not waited for: the rollout takes one): the PDB
    // cannot stop an eviction beside the controller's, only the drain's own look can.
    kubectl_ok(&[
        "patch",
        "pdb",
        "etcd",
        "-n",
        &ns.name,
        "--type=merge",
        "-p",
        r#"{"spec":{"maxUnavailable":2}}"#,
    ]);
    let (code, out, err) = drain.finish(Duration::from_secs(240));
    let worst = down.most();
    assert_eq!(code, Some(0), "{err}\n{out}");
    assert!(
        worst <= 1,
        "{worst} members were down at once:\n{err}\n{out}"
    );
    // Either a look fell inside the rollout and the drain waited for it, or the controller
    // had already replaced the member on the node (elsewhere: the node is cordoned) between
    // two looks, and the drain had nothing left to evict. Never an eviction beside it.
    let report: serde_json::Value = serde_json::from_str(&out).expect("the drain's JSON");
    let evictions = report["clusters"][0]["evictions"]
        .as_u64()
        .unwrap_or(u64::MAX);
    assert!(
        err.contains("controller is rolling it")
            || err.contains("has not yet acted on its latest change")
            || evictions == 0,
        "the drain evicted {evictions} member(s) without saying it waited for the rollout: {err}\n{out}"
    );
}
