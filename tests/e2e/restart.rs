//! `kubectl raft restart` end to end in the test world, under a write load where it matters:
//! every member replaced once, followers first, the leader last after one verified transfer
//! to a member already restarted; an OnDelete update driven the same way; a rollout the
//! controller runs itself refused; a member that hangs mid-restart stops it; Ctrl-C and a
//! rerun resume it.

use std::time::Duration;

use crate::common::*;
use serde_json::Value;

/// `kubectl raft restart ARGS -o json`: (exit code, report, stderr).
fn restart(args: &[&str]) -> (Option<i32>, Value, String) {
    verb_json("restart", args)
}

/// The record of a restart that stopped, on the cluster's lock (its Lease keeps it for the next
/// run); null when there is none. It is never written on the StatefulSet (whose one change is
/// its update strategy, OnDelete while a restart runs).
fn annotation(ns: &str) -> Value {
    let sts = kubectl_json(&["get", "sts", "etcd", "-n", ns]);
    assert!(
        sts["metadata"]["annotations"]["raft.kubectl.io/restart-pending"].is_null(),
        "the StatefulSet was written: {sts:#}"
    );
    let lease = kubectl(&[
        "get",
        "lease",
        &format!("kubectl-raft.{ns}.etcd"),
        "-n",
        "kubectl-raft",
        "-o",
        "json",
    ]);
    if !lease.status.success() {
        return Value::Null;
    }
    serde_json::from_slice::<Value>(&lease.stdout).unwrap()["metadata"]["annotations"]
        ["raft.kubectl.io/restart-pending"]
        .clone()
}

/// A restart of an N-member etcd under a write load that follows the members: every member
/// replaced, one transfer, no election, no lost write, the mark removed.
fn restart_under_load(prefix: &str, members: u32, nodes: Nodes) {
    let ns = TestNamespace::new(prefix);
    deploy_etcd_on(&ns.name, members, nodes);
    let before = uids(&ns.name);
    let load = Load::start_following(&ns.name);
    let (code, report, err) = restart(&["etcd", "-n", &ns.name, "--timeout", "90s"]);
    let writes = load.finish();
    assert_eq!(code, Some(0), "{err}\n{report:#}");
    let c = &report["cluster"];
    assert_eq!(
        drain_counts(c),
        (Some(members as u64), Some(1), Some(0)),
        "{c:#}"
    );
    let after = uids(&ns.name);
    for (pod, uid) in &before {
        assert_ne!(after.get(pod), Some(uid), "{pod} was restarted");
    }
    assert_eq!(writes["lost"], 0, "{writes}");
    assert!(
        annotation(&ns.name).is_null(),
        "the mark is removed when done"
    );
    // The leader went last.
    let done: Vec<&str> = c["done"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|d| d.as_str())
        .collect();
    let transfer = done
        .iter()
        .position(|d| d.starts_with("leadership "))
        .unwrap();
    let evictions_after = done[transfer..]
        .iter()
        .filter(|d| d.starts_with("evicted "))
        .count();
    assert_eq!(
        evictions_after, 1,
        "only the old leader after the transfer: {done:?}"
    );
}

#[test]
fn a_restart_of_three_members_moves_leadership_once_and_loses_no_write() {
    let _nodes = shared_nodes();
    restart_under_load("rs-etcd3", 3, Nodes::Agent);
}

#[test]
fn a_restart_of_three_members_moves_leadership_once_and_loses_no_write_on_real_kubelets() {
    let _nodes = shared_nodes();
    restart_under_load("rs-etcd3", 3, Nodes::Kubelet);
}

#[test]
fn a_restart_of_five_members_moves_leadership_once_and_loses_no_write() {
    let _nodes = shared_nodes();
    restart_under_load("rs-etcd5", 5, Nodes::Agent);
}

#[test]
fn the_dry_run_prints_the_order_and_changes_nothing() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("rs-dry");
    deploy_etcd(&ns.name, 3);
    let leader = etcd_leader(&ns.name).unwrap().0;
    let before = uids(&ns.name);
    let (code, report, err) = restart(&["etcd", "-n", &ns.name, "--dry-run"]);
    assert_eq!(code, Some(0), "{err}\n{report:#}");
    let steps = report["cluster"]["plan"]["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 3, "{report:#}");
    assert_eq!(steps[2]["pod"], leader.as_str(), "the leader last");
    assert_eq!(steps[2]["action"], "transferThenEvict");
    assert_eq!(uids(&ns.name), before);
    assert!(annotation(&ns.name).is_null(), "a dry run marks nothing");
}

#[test]
fn zookeepers_leader_is_restarted_last_in_a_counted_election() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("rs-zk");
    deploy_zookeeper(&ns.name);
    let leader = zk_leader(&ns.name);
    let (code, report, err) = verb_json("restart", &["zk", "-n", &ns.name, "--timeout", "90s"]);
    assert_eq!(code, Some(0), "{err}\n{report:#}");
    let c = &report["cluster"];
    assert_eq!(drain_counts(c), (Some(3), Some(0), Some(1)), "{c:#}");
    let last = c["done"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|d| d.as_str())
        .rfind(|d| d.starts_with("evicted"))
        .unwrap()
        .to_string();
    assert!(last.contains(&format!("the leader {leader}")), "{last}");
}

/// etcd-3.yaml as an OnDelete StatefulSet.
fn deploy_on_delete(ns: &str) {
    let text = std::fs::read_to_string(repo().join("tests/manifests/etcd-3.yaml")).unwrap();
    let edited = text.replace(
        "  podManagementPolicy: Parallel\n",
        "  podManagementPolicy: Parallel\n  updateStrategy: {type: OnDelete}\n",
    );
    assert_ne!(edited, text);
    let f = tempfile(&edited);
    kubectl_ok(&["apply", "-n", ns, "-f", f.path_str()]);
    wait_etcd_ready(ns, 3);
}

/// A change to the pod template (a new revision the controller does not roll out itself).
fn new_revision(ns: &str) -> String {
    template_change(ns, "2")
}

/// The pod template's annotation `test/revision` set to `value`: the new update revision.
fn template_change(ns: &str, value: &str) -> String {
    let before = kubectl_json(&["get", "sts", "etcd", "-n", ns])["status"]["updateRevision"]
        .as_str()
        .unwrap_or("")
        .to_string();
    kubectl_ok(&[
        "patch",
        "sts",
        "etcd",
        "-n",
        ns,
        "--type",
        "merge",
        "-p",
        &format!(
            r#"{{"spec":{{"template":{{"metadata":{{"annotations":{{"test/revision":"{value}"}}}}}}}}}}"#
        ),
    ]);
    let mut update = String::new();
    wait_until(Duration::from_secs(30), "a new update revision", || {
        let s = kubectl_json(&["get", "sts", "etcd", "-n", ns]);
        update = s["status"]["updateRevision"].as_str().unwrap_or("").into();
        !update.is_empty() && update != before && s["status"]["currentRevision"] != update.as_str()
    });
    update
}

fn revisions(ns: &str) -> Vec<String> {
    etcd_pods(ns)
        .iter()
        .map(|p| {
            p["metadata"]["labels"]["controller-revision-hash"]
                .as_str()
                .unwrap_or("")
                .to_string()
        })
        .collect()
}

#[test]
fn an_on_delete_update_is_driven_and_leadership_goes_to_an_updated_member() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("rs-ondelete");
    deploy_on_delete(&ns.name);
    let update = new_revision(&ns.name);
    let load = Load::start_following(&ns.name);
    let (code, report, err) = restart(&["etcd", "-n", &ns.name, "--timeout", "90s"]);
    let writes = load.finish();
    assert_eq!(code, Some(0), "{err}\n{report:#}");
    assert_eq!(report["restart"]["mode"], "update", "{report:#}");
    assert_eq!(revisions(&ns.name), vec![update.clone(); 3]);
    let c = &report["cluster"];
    assert_eq!(drain_counts(c), (Some(3), Some(1), Some(0)), "{c:#}");
    assert_eq!(writes["lost"], 0, "{writes}");
    let (now, saved) = strategy(&ns.name);
    assert_eq!(
        (now, saved),
        (serde_json::json!({"type": "OnDelete"}), Value::Null),
        "the user's own OnDelete is never written"
    );
}

#[test]
fn a_rolling_update_the_controller_runs_is_refused() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("rs-rolling");
    deploy_etcd(&ns.name, 3);
    // Partition 0: the controller starts rolling at once (etcd-2 first; etcd-0 is behind for
    // as long as it takes to replace the two others).
    new_revision(&ns.name);
    let out = raft(&["restart", "etcd", "-n", &ns.name]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("being rolled by its controller") && err.contains("stage the update"),
        "{err}"
    );
    let s = kubectl_json(&["get", "sts", "etcd", "-n", &ns.name]);
    assert_eq!(
        s["spec"]["updateStrategy"]["type"], "RollingUpdate",
        "the strategy was not touched"
    );
}

/// The StatefulSet's updateStrategy and the record of a saved one.
fn strategy(ns: &str) -> (Value, Value) {
    let s = kubectl_json(&["get", "sts", "etcd", "-n", ns]);
    (
        s["spec"]["updateStrategy"].clone(),
        s["metadata"]["annotations"]["raft.kubectl.io/update-strategy"].clone(),
    )
}

/// etcd-3.yaml with its RollingUpdate held at partition 3, and a new revision pending.
fn deploy_staged(ns: &str) -> String {
    deploy_etcd(ns, 3);
    kubectl_ok(&[
        "patch",
        "sts",
        "etcd",
        "-n",
        ns,
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"updateStrategy":{"type":"RollingUpdate","rollingUpdate":{"partition":3}}}}"#,
    ]);
    new_revision(ns)
}

#[test]
fn a_staged_rolling_update_is_driven_leader_last_and_its_partition_put_back() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("rs-staged");
    let update = deploy_staged(&ns.name);
    let (code, report, err) = restart(&["etcd", "-n", &ns.name, "--timeout", "90s"]);
    assert_eq!(code, Some(0), "{err}\n{report:#}");
    assert_eq!(report["restart"]["mode"], "update", "{report:#}");
    assert_eq!(revisions(&ns.name), vec![update; 3]);
    let c = &report["cluster"];
    assert_eq!(drain_counts(c), (Some(3), Some(1), Some(0)), "{c:#}");
    let (now, saved) = strategy(&ns.name);
    assert_eq!(
        now,
        serde_json::json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 3}}),
        "the user's strategy is back"
    );
    assert!(saved.is_null(), "the record is removed: {saved}");
    assert!(err.contains("set to OnDelete"), "{err}");
}

#[test]
fn a_staged_update_stopped_midway_resumes_and_then_puts_the_strategy_back() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("rs-staged-resume");
    let update = deploy_staged(&ns.name);
    let leader = etcd_leader(&ns.name).unwrap().0;
    let first = others_than(&leader, "etcd", 3)[0].clone();
    let mut run = Running::start(&["restart", "etcd", "-n", &ns.name, "--timeout", "90s"]);
    run.wait_for(&format!("{first} rejoined"), Duration::from_secs(90));
    signal(run.pid(), "INT");
    let (code, _, err) = run.finish(Duration::from_secs(90));
    assert_ne!(code, Some(0), "{err}");
    let (during, saved) = strategy(&ns.name);
    assert_eq!(during["type"], "OnDelete", "{err}");
    assert!(saved.is_string(), "the user's strategy is kept: {saved}");
    assert!(
        err.contains("kubectl patch sts etcd"),
        "says how to put it back: {err}"
    );
    let (code, report, err) = restart(&["etcd", "-n", &ns.name, "--timeout", "90s"]);
    assert_eq!(code, Some(0), "{err}\n{report:#}");
    assert_eq!(revisions(&ns.name), vec![update; 3]);
    let (now, saved) = strategy(&ns.name);
    assert_eq!(
        now,
        serde_json::json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 3}})
    );
    assert!(saved.is_null(), "{saved}");
}

/// Starts `restart etcd -o json` and holds it at its second step: the first follower
/// restarted, the next eviction refused by the PDB (set to allow none). Returns the run.
fn restart_held_at_the_second_step(ns: &str) -> Running {
    let leader = etcd_leader(ns).unwrap().0;
    let followers = others_than(&leader, "etcd", 3);
    let mut run = Running::start(&[
        "restart",
        "etcd",
        "-n",
        ns,
        "--timeout",
        "90s",
        "-o",
        "json",
    ]);
    run.wait_for(
        &format!("waiting for {}'s replacement", followers[0]),
        Duration::from_secs(60),
    );
    set_pdb(ns, "etcd", 0, 0);
    run.wait_for(
        &format!("cannot evict {} yet", followers[1]),
        Duration::from_secs(60),
    );
    run
}

/// A second operator changes the template again while an OnDelete update is driven: the
/// restart follows the newest revision, the member it had updated to the first one included,
/// and ends with every member there.
#[test]
fn a_template_changed_during_an_update_is_followed_to_the_newest_revision() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("rs-follow");
    deploy_on_delete(&ns.name);
    let first = new_revision(&ns.name);
    let run = restart_held_at_the_second_step(&ns.name);
    let newest = template_change(&ns.name, "3");
    assert_ne!(newest, first);
    set_pdb(&ns.name, "etcd", 1, 1);
    let (code, out, err) = run.finish(Duration::from_secs(180));
    assert_eq!(code, Some(0), "{out}\n{err}");
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(revisions(&ns.name), vec![newest.clone(); 3], "{err}");
    assert_eq!(report["restart"]["revision"], newest.as_str(), "{report:#}");
    assert!(
        report["followed"][0]
            .as_str()
            .is_some_and(|f| f.contains(&format!("revision {first} to {newest}"))),
        "{report:#}"
    );
    assert_eq!(
        report["cluster"]["evictions"], 4,
        "the member updated to {first} was updated again: {report:#}"
    );
}

/// Pods being deleted, and the UID of every pod: what the StatefulSet's controller did.
fn pods_as_they_are(ns: &str) -> (Vec<String>, std::collections::BTreeMap<String, String>) {
    let deleting = etcd_pods(ns)
        .iter()
        .filter(|p| !p["metadata"]["deletionTimestamp"].is_null())
        .map(|p| p["metadata"]["name"].as_str().unwrap_or("").to_string())
        .collect();
    (deleting, uids(ns))
}

/// A second operator (a GitOps sync or `helm upgrade` that leaves `updateStrategy` alone)
/// changes the template of a RollingUpdate StatefulSet (`podManagementPolicy: Parallel`,
/// etcd-3.yaml) while a restart runs. The restart runs under OnDelete: once the controller has
/// acted on the change it has deleted no member (read from the pods), the restart follows the
/// new template to the end (every member at it), never two members are down, and RollingUpdate
/// is put back with the record cleared. On the code before, the controller deleted the highest
/// member still behind at once, beside the restart, and the restart stopped.
#[test]
fn a_template_changed_during_a_restart_is_followed_and_its_controller_deletes_no_member() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("rs-conflict");
    deploy_etcd(&ns.name, 3);
    let run = restart_held_at_the_second_step(&ns.name);
    let down = MostDown::watch(&ns.name, 3);
    let held = uids(&ns.name);
    let newest = template_change(&ns.name, "2");
    wait_until(
        Duration::from_secs(30),
        "the controller to act on the change",
        || {
            let s = kubectl_json(&["get", "sts", "etcd", "-n", &ns.name]);
            s["status"]["observedGeneration"] == s["metadata"]["generation"]
        },
    );
    assert_eq!(
        pods_as_they_are(&ns.name),
        (vec![], held),
        "the controller deleted no member beside the restart"
    );
    set_pdb(&ns.name, "etcd", 1, 1);
    let (code, out, err) = run.finish(Duration::from_secs(240));
    let worst = down.most();
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert!(worst <= 1, "{worst} members were down at once:\n{err}");
    assert_eq!(revisions(&ns.name), vec![newest; 3], "{err}");
    let (now, saved) = strategy(&ns.name);
    assert_eq!(now["type"], "RollingUpdate", "the user's strategy is back");
    assert!(saved.is_null(), "{saved}");
    assert!(annotation(&ns.name).is_null(), "the record is cleared");
}

/// The first follower restarted; while a PDB holds the next step, the restarted follower
/// hangs: the next eviction would leave one healthy voter of three, so the restart stops
/// before it, the leader untouched.
#[test]
fn a_member_that_hangs_mid_restart_stops_it_before_the_next_step() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("rs-hang");
    deploy_etcd(&ns.name, 3);
    let leader = etcd_leader(&ns.name).unwrap().0;
    let followers = others_than(&leader, "etcd", 3);
    let (first, second) = (&followers[0], &followers[1]);
    let mut run = Running::start(&["restart", "etcd", "-n", &ns.name, "--timeout", "20s"]);
    run.wait_for(
        &format!("waiting for {first}'s replacement"),
        Duration::from_secs(60),
    );
    set_pdb(&ns.name, "etcd", 0, 0);
    run.wait_for(
        &format!("cannot evict {second} yet"),
        Duration::from_secs(60),
    );
    let before = uids(&ns.name);
    let pid = container_pid(&ns.name, first);
    let (code, out, err) = while_frozen(
        pid,
        std::panic::AssertUnwindSafe(|| {
            kubectl_ok(&[
                "patch",
                "pdb",
                "etcd",
                "-n",
                &ns.name,
                "--type=merge",
                "-p",
                r#"{"spec":{"maxUnavailable":1}}"#,
            ]);
            run.finish(Duration::from_secs(90))
        }),
    );
    assert_eq!(code, Some(1), "{out}\n{err}");
    assert!(
        err.contains(&format!("evicting {second} would leave 1 healthy voter(s)")),
        "{err}"
    );
    assert_eq!(
        uids(&ns.name),
        before,
        "nothing after the hang was restarted"
    );
    assert_eq!(etcd_leader(&ns.name).unwrap().0, leader);
    assert!(
        annotation(&ns.name).is_string(),
        "the mark stays, to resume"
    );
}

#[test]
fn after_ctrl_c_the_same_command_resumes_where_it_stopped() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("rs-resume");
    deploy_etcd(&ns.name, 3);
    let leader = etcd_leader(&ns.name).unwrap().0;
    let first = others_than(&leader, "etcd", 3)[0].clone();
    let mut run = Running::start(&["restart", "etcd", "-n", &ns.name, "--timeout", "60s"]);
    run.wait_for(&format!("{first} rejoined"), Duration::from_secs(60));
    signal(run.pid(), "INT");
    let (code, _, err) = run.finish(Duration::from_secs(60));
    assert_ne!(code, Some(0), "{err}");
    let restarted_once = uids(&ns.name)[&first].clone();
    let (code, report, err) = restart(&["etcd", "-n", &ns.name, "--timeout", "90s"]);
    assert_eq!(code, Some(0), "{err}\n{report:#}");
    assert!(err.contains("resuming the restart"), "{err}");
    assert_eq!(
        uids(&ns.name)[&first],
        restarted_once,
        "{first} was not restarted twice"
    );
    assert!(annotation(&ns.name).is_null());
    let (now, saved) = strategy(&ns.name);
    assert_eq!(
        (now["type"].as_str(), saved),
        (Some("RollingUpdate"), Value::Null),
        "the rerun put RollingUpdate back"
    );
}

#[test]
fn restart_runs_with_exactly_its_role() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("rs-rbac");
    deploy_etcd(&ns.name, 3);
    // A RollingUpdate StatefulSet: the restart sets OnDelete while it runs.
    let who = RbacSubject::bound_to("kubectl-raft-restart", &ns.name)
        .with_lock()
        .and("kubectl-raft-restart-staged");
    let (code, out, err) = who.raft(&[
        "restart",
        "etcd",
        "-n",
        &ns.name,
        "--timeout",
        "90s",
        "-o",
        "json",
    ]);
    assert_eq!(code, Some(0), "{err}\n{out}");
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["cluster"]["evictions"], 3, "{report:#}");
}

/// A second operator: while a restart holds the cluster's lock (waiting on a PDB), a drain of
/// one of its members' nodes is refused and names the restart.
#[test]
fn a_drain_is_refused_while_a_restart_holds_the_cluster() {
    let _nodes = exclusive_nodes();
    let ns = TestNamespace::new("rs-lock");
    deploy_etcd(&ns.name, 3);
    set_pdb(&ns.name, "etcd", 0, 0);
    let mut run = Running::start(&["restart", "etcd", "-n", &ns.name, "--timeout", "60s"]);
    run.wait_for("cannot evict", Duration::from_secs(60));
    let node = node_of(&ns.name, "etcd-0");
    let _c = Cordoned(vec![node.clone()]);
    let (code, _, err) = verb_json("drain", &[&node, "--timeout", "5s"]);
    signal(run.pid(), "INT");
    let (rcode, _, rerr) = run.finish(Duration::from_secs(60));
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "{}/etcd is being drained or restarted by",
            ns.name
        )) && err.contains(&format!("(kubectl raft restart {}/etcd)", ns.name)),
        "{err}"
    );
    assert_eq!(rcode, Some(1), "{rerr}");
    assert!(rerr.contains("interrupted"), "{rerr}");
}

/// With each right the restart cannot do without taken away in turn, it stops before it
/// changes anything (no pod replaced, no record written) and names the missing right.
#[test]
fn restart_without_a_required_permission_names_it() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("rs-rbac-minus");
    deploy_etcd(&ns.name, 3);
    let who = RbacSubject::bound_to("kubectl-raft-restart", &ns.name)
        .with_lock()
        .and("kubectl-raft-restart-staged");
    let optional = [];
    let state = || format!("pods {:?}, record {}", uids(&ns.name), annotation(&ns.name));
    who.each_required_right_is_named(
        &optional,
        &["restart", "etcd", "-n", &ns.name, "--timeout", "30s"],
        &state,
    );
}

/// Labels `sts/etcd` in `ns` with `kraft-test/restart-l=<value>`.
fn label_etcd(ns: &str, value: &str) {
    kubectl_ok(&[
        "label",
        "sts",
        "etcd",
        "-n",
        ns,
        &format!("kraft-test/restart-l={value}"),
    ]);
}

/// `-l` with `-A`: every matching StatefulSet, one after another in namespace order, each
/// the Raft way; a matching StatefulSet that is no Raft cluster is skipped, said.
#[test]
fn a_label_selection_restarts_each_matching_statefulset_in_turn() {
    let _nodes = shared_nodes();
    let a = TestNamespace::new("rs-l-a");
    let b = TestNamespace::new("rs-l-b");
    let value = a.name.clone();
    for ns in [&a.name, &b.name] {
        deploy_etcd(ns, 3);
        label_etcd(ns, &value);
    }
    let plain = format!(
        "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {{name: plain, labels: {{kraft-test/restart-l: {value}}}}}\nspec:\n  serviceName: plain\n  replicas: 1\n  selector: {{matchLabels: {{app: plain}}}}\n  template:\n    metadata: {{labels: {{app: plain}}}}\n    spec:\n      containers: [{{name: c, image: example/shell, command: [/bin/sleep, \"3600\"]}}]\n"
    );
    let f = tempfile(&plain);
    kubectl_ok(&["apply", "-n", &b.name, "-f", f.path_str()]);
    // Its pod exists only once the controller has created it.
    wait_in(&b.name, Duration::from_secs(60), "plain-0 running", || {
        pod_json_opt(&b.name, "plain-0").is_some_and(|p| p["status"]["phase"] == "Running")
    });
    let (before_a, before_b) = (uids(&a.name), uids(&b.name));
    let selector = format!("kraft-test/restart-l={value}");
    let (code, list, err) = restart(&["-l", &selector, "-A", "--timeout", "90s"]);
    assert_eq!(code, Some(0), "{err}\n{list:#}");
    assert_eq!(list["kind"], "List", "{list:#}");
    let items = list["items"].as_array().unwrap();
    let names: Vec<&str> = items
        .iter()
        .map(|r| r["cluster"]["namespace"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [a.name.as_str(), b.name.as_str()],
        "in namespace order"
    );
    for r in items {
        assert_eq!(r["succeeded"], true, "{r:#}");
        assert_eq!(
            drain_counts(&r["cluster"]),
            (Some(3), Some(1), Some(0)),
            "{r:#}"
        );
    }
    assert!(
        err.contains("skipped:") && err.contains("/plain is not a Raft system"),
        "{err}"
    );
    let (after_a, after_b) = (uids(&a.name), uids(&b.name));
    for m in ["etcd-0", "etcd-1", "etcd-2"] {
        assert_ne!(before_a[m], after_a[m], "{m} in {} restarted", a.name);
        assert_ne!(before_b[m], after_b[m], "{m} in {} restarted", b.name);
    }
    assert_eq!(
        before_b["plain-0"], after_b["plain-0"],
        "the plain StatefulSet untouched"
    );
}

/// The first StatefulSet of a `-l` selection cannot be restarted (its PDB allows nothing):
/// the run stops there, the next is not started, and the message says how to go on.
#[test]
fn a_label_selection_stops_at_the_first_that_stops_and_says_how_to_go_on() {
    let _nodes = shared_nodes();
    let a = TestNamespace::new("rs-ls-a");
    let b = TestNamespace::new("rs-ls-b");
    let value = a.name.clone();
    for ns in [&a.name, &b.name] {
        deploy_etcd(ns, 3);
        label_etcd(ns, &value);
    }
    set_pdb(&a.name, "etcd", 0, 0);
    let before_b = uids(&b.name);
    let selector = format!("kraft-test/restart-l={value}");
    let (code, list, err) = restart(&["-l", &selector, "-A", "--timeout", "10s"]);
    assert_eq!(code, Some(1), "{err}\n{list:#}");
    assert_eq!(list["items"].as_array().map(Vec::len), Some(1), "{list:#}");
    assert_eq!(uids(&b.name), before_b, "the second was not started");
    assert!(
        err.contains(&format!("stopped at {}/etcd", a.name))
            && err.contains(&format!("then kubectl raft restart etcd -n {}", b.name)),
        "{err}"
    );
}

/// Driving a staged update changes the StatefulSet (OnDelete meanwhile, the strategy put back):
/// that needs kubectl-raft-restart-staged beside the restart role, and without its `patch` the
/// restart stops before anything changes, naming it.
#[test]
fn a_staged_update_needs_the_staged_role_and_names_it() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("rs-rbac-staged");
    deploy_staged(&ns.name);
    let who = RbacSubject::bound_to("kubectl-raft-restart", &ns.name)
        .with_lock()
        .and("kubectl-raft-restart-staged");
    let state = || {
        format!(
            "pods {:?}, strategy {:?}",
            uids(&ns.name),
            strategy(&ns.name)
        )
    };
    who.each_required_right_is_named(
        &[],
        &["restart", "etcd", "-n", &ns.name, "--timeout", "30s"],
        &state,
    );
    let (code, out, err) = who.raft(&["restart", "etcd", "-n", &ns.name, "--timeout", "90s"]);
    assert_eq!(code, Some(0), "{err}\n{out}");
}
