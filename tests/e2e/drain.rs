//! `kubectl raft drain` end to end in the test world, under a write load where it matters.
//! Every test cordons nodes, so each holds the nodes exclusively and uncordons on the way out.

use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::*;
use serde_json::Value;

/// `kubectl raft drain ARGS -o json`: (exit code, report, stderr).
fn drain(args: &[&str]) -> (Option<i32>, Value, String) {
    verb_json("drain", args)
}

/// A drain of `nodes` under a write load that follows the members: the report's one cluster
/// (the drain asserted to have succeeded) and the writer's summary. The nodes stay cordoned
/// until the returned guard goes.
fn drain_under_load(ns: &str, nodes: &[String]) -> (Value, Value, Cordoned) {
    for n in nodes {
        wait_node_alone(n, ns);
    }
    let cordoned = Cordoned(nodes.to_vec());
    let load = Load::start_following(ns);
    let mut args: Vec<&str> = nodes.iter().map(String::as_str).collect();
    args.extend(["--timeout", "90s"]);
    let (code, report, err) = drain(&args);
    let writes = load.finish();
    assert_eq!(code, Some(0), "drain failed: {err}\n{report:#}");
    (cluster(&report, ns).clone(), writes, cordoned)
}

/// A namespace with an N-member etcd, Ready, and its leader.
fn etcd_with_leader(prefix: &str, members: u32) -> (TestNamespace, String) {
    etcd_with_leader_on(prefix, members, Nodes::Agent)
}

/// A namespace with an N-member etcd on the given kind of node, Ready, and its leader.
fn etcd_with_leader_on(prefix: &str, members: u32, nodes: Nodes) -> (TestNamespace, String) {
    let ns = TestNamespace::new(prefix);
    deploy_etcd_on(&ns.name, members, nodes);
    let (leader, _) = etcd_leader(&ns.name).expect("a leader");
    (ns, leader)
}

/// The etcd members other than `leader`, by name.
fn followers(ns: &str, leader: &str) -> Vec<String> {
    etcd_pods(ns)
        .iter()
        .filter_map(|p| p["metadata"]["name"].as_str().map(str::to_string))
        .filter(|n| n != leader)
        .collect()
}

fn follower_of(ns: &str, leader: &str) -> String {
    followers(ns, leader).remove(0)
}

/// A follower of the etcd in `ns`, and its node once nothing else runs there.
fn a_followers_node(ns: &str) -> (String, String) {
    let (leader, _) = etcd_leader(ns).expect("a leader");
    let follower = follower_of(ns, &leader);
    let node = node_of(ns, &follower);
    wait_node_alone(&node, ns);
    (follower, node)
}

/// etcd-3.yaml with `edit` applied, deployed and Ready.
fn deploy_etcd_variant(ns: &str, edit: impl Fn(String) -> String) {
    deploy_etcd_n_variant(ns, 3, edit)
}

/// etcd-N.yaml with `edit` applied, deployed and Ready.
fn deploy_etcd_n_variant(ns: &str, members: u32, edit: impl Fn(String) -> String) {
    let path = repo().join(format!("tests/manifests/etcd-{members}.yaml"));
    let text = std::fs::read_to_string(path).unwrap();
    let f = tempfile(&edit(text));
    kubectl_ok(&["apply", "-n", ns, "-f", f.path_str()]);
    wait_etcd_ready(ns, members);
}

/// A TCP readiness probe, as ZooKeeper charts ship: a frozen member's pod stays Ready.
fn tcp_probe(text: String) -> String {
    text.replace(
        "httpGet: {path: /health, port: client}",
        "tcpSocket: {port: client}",
    )
}

fn pinned(text: String) -> String {
    text.replace(
        "      accessModes: [ReadWriteOnce]",
        "      storageClassName: kworld-local-pinned\n      accessModes: [ReadWriteOnce]",
    )
}

#[test]
fn a_followers_node_is_drained_without_a_transfer_or_a_lost_write() {
    let _nodes = exclusive_nodes();
    let (ns, leader) = etcd_with_leader("dr-follower", 3);
    let follower = follower_of(&ns.name, &leader);
    let node = node_of(&ns.name, &follower);
    let (c, w, _cordoned) = drain_under_load(&ns.name, std::slice::from_ref(&node));
    assert_eq!(drain_counts(&c), (Some(1), Some(0), Some(0)), "{c:#}");
    assert_ne!(
        node_of(&ns.name, &follower),
        node,
        "{follower} is still on {node}"
    );
    assert_eq!(
        etcd_leader(&ns.name).map(|l| l.0),
        Some(leader),
        "the leader changed"
    );
    assert_eq!(w["lost"], 0, "writes were lost: {w}");
    let unschedulable = kubectl_json(&["get", "node", &node])["spec"]["unschedulable"].as_bool();
    assert_eq!(unschedulable, Some(true), "{node} is not cordoned");
}

#[test]
fn the_leaders_node_goes_after_one_verified_transfer() {
    the_leaders_node_after_one_verified_transfer(Nodes::Agent);
}

#[test]
fn the_leaders_node_goes_after_one_verified_transfer_on_real_kubelets() {
    the_leaders_node_after_one_verified_transfer(Nodes::Kubelet);
}

fn the_leaders_node_after_one_verified_transfer(nodes: Nodes) {
    let _nodes = exclusive_on(nodes);
    let (ns, leader) = etcd_with_leader_on("dr-leader", 3, nodes);
    let node = node_of(&ns.name, &leader);
    let (c, w, _cordoned) = drain_under_load(&ns.name, std::slice::from_ref(&node));
    assert_eq!(
        (c["transfers"].as_u64(), c["elections"].as_u64()),
        (Some(1), Some(0)),
        "{c:#}"
    );
    let done: Vec<&str> = c["done"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        done[0].starts_with(&format!("leadership {leader} → ")),
        "the transfer is not first: {done:?}"
    );
    let (new_leader, _) = etcd_leader(&ns.name).expect("a leader after the drain");
    assert_ne!(new_leader, leader);
    assert_ne!(node_of(&ns.name, &new_leader), node);
    assert!(
        node_of(&ns.name, &leader).starts_with(nodes.prefix()),
        "the replacement ran on the same kind of node"
    );
    assert_eq!(w["lost"], 0, "writes were lost: {w}");
}

#[test]
fn two_nodes_of_a_five_member_cluster_need_one_transfer() {
    let _nodes = exclusive_nodes();
    let (ns, leader) = etcd_with_leader("dr-five", 5);
    let follower = follower_of(&ns.name, &leader);
    let nodes = vec![node_of(&ns.name, &leader), node_of(&ns.name, &follower)];
    let (c, w, _cordoned) = drain_under_load(&ns.name, &nodes);
    assert_eq!(drain_counts(&c), (Some(2), Some(1), Some(0)), "{c:#}");
    let done: Vec<&str> = c["done"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let evicted_follower = done
        .iter()
        .position(|d| d.starts_with(&format!("evicted {follower} ")));
    let transfer = done.iter().position(|d| d.starts_with("leadership "));
    assert!(
        evicted_follower < transfer,
        "the follower must go before the transfer: {done:?}"
    );
    assert_eq!(w["lost"], 0, "writes were lost: {w}");
}

#[test]
fn a_silently_broken_follower_stops_the_eviction_of_another() {
    a_silently_broken_follower_stops_another(Nodes::Agent);
}

#[test]
fn a_silently_broken_follower_stops_the_eviction_of_another_on_real_kubelets() {
    a_silently_broken_follower_stops_another(Nodes::Kubelet);
}

fn a_silently_broken_follower_stops_another(nodes: Nodes) {
    let _nodes = exclusive_on(nodes);
    let (ns, leader) = etcd_with_leader_on("dr-frozen", 3, nodes);
    let pods = followers(&ns.name, &leader);
    let (frozen, victim) = (&pods[0], &pods[1]);
    let node = node_of(&ns.name, victim);
    let _c = Cordoned(vec![node.clone()]);
    let before = uids(&ns.name);
    let pid = container_pid(&ns.name, frozen);
    let (code, report, err) = while_frozen(pid, || drain(&[&node, "--timeout", "6s"]));
    assert_eq!(code, Some(1), "the drain went ahead: {report:#}");
    let message = cluster(&report, &ns.name)["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        message.contains(&format!(
            "evicting {victim} would leave 1 healthy voter(s) where 2 are needed"
        )),
        "{message}"
    );
    assert!(
        message.contains(frozen.as_str()),
        "the broken member is not named: {message}"
    );
    assert!(
        err.contains("run the same command again to resume"),
        "{err}"
    );
    assert_eq!(
        uids(&ns.name).get(victim),
        before.get(victim),
        "{victim} was evicted"
    );
}

/// A 3-member etcd on node-pinned volumes: (namespace, a follower, its node).
fn pinned_cluster(prefix: &str) -> (TestNamespace, String, String) {
    let ns = TestNamespace::new(prefix);
    deploy_etcd_variant(&ns.name, pinned);
    let (leader, _) = etcd_leader(&ns.name).expect("a leader");
    let follower = follower_of(&ns.name, &leader);
    let node = node_of(&ns.name, &follower);
    (ns, follower, node)
}

#[test]
fn with_one_member_of_five_silently_down_a_node_is_still_drained() {
    let _nodes = exclusive_nodes();
    let ns = TestNamespace::new("dr-one-down");
    deploy_etcd_n_variant(&ns.name, 5, tcp_probe);
    let (leader, _) = await_etcd_leader(&ns.name);
    let pods = followers(&ns.name, &leader);
    let (frozen, victim) = (&pods[0], &pods[1]);
    let node = node_of(&ns.name, victim);
    wait_node_alone(&node, &ns.name);
    let _c = Cordoned(vec![node.clone()]);
    let pid = container_pid(&ns.name, frozen);
    let (code, report, err) = while_frozen(pid, || drain(&[&node, "--timeout", "60s"]));
    assert_eq!(code, Some(0), "{err}\n{report:#}");
    let step = &cluster(&report, &ns.name)["plan"]["steps"][0];
    assert_eq!(step["pod"], victim.as_str(), "{report:#}");
    assert_eq!(
        (
            step["healthyVotersDuring"].as_u64(),
            step["faultToleranceDuring"].as_u64()
        ),
        (Some(3), Some(0)),
        "{step:#}"
    );
    assert_ne!(node_of(&ns.name, victim), node);
}

#[test]
fn the_dry_run_names_a_member_pinned_to_its_node() {
    let _nodes = exclusive_nodes();
    let (ns, follower, node) = pinned_cluster("dr-pinned-plan");
    let (code, plan, _) = drain(&[&node, "--dry-run"]);
    assert_eq!(code, Some(1), "a blocked plan exits 1: {plan:#}");
    let blocker = &cluster(&plan, &ns.name)["plan"]["blocker"];
    assert_eq!(blocker["reason"], "Pinned", "{plan:#}");
    assert_eq!(blocker["pod"], follower.as_str());
    let m = blocker["message"].as_str().unwrap();
    assert!(m.contains("pinned by node affinity"), "{m}");
    let node_spec = kubectl_json(&["get", "node", &node])["spec"].clone();
    assert!(
        node_spec["unschedulable"].is_null(),
        "a dry run cordoned {node}"
    );
    drop(ns);
}

#[test]
fn a_member_pinned_to_its_node_is_refused_without_allow_degraded() {
    let _nodes = exclusive_nodes();
    let (ns, follower, node) = pinned_cluster("dr-pinned");
    let _c = Cordoned(vec![node.clone()]);
    let before = uids(&ns.name);
    let (code, _, err) = drain(&[&node, "--timeout", "10s"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("--allow-degraded"), "{err}");
    let after = uids(&ns.name);
    assert_eq!(
        after.get(&follower),
        before.get(&follower),
        "{follower} was evicted"
    );
}

#[test]
fn with_allow_degraded_a_pinned_member_goes_and_no_second_follows() {
    let _nodes = exclusive_nodes();
    let ns = TestNamespace::new("dr-degraded");
    deploy_etcd_variant(&ns.name, pinned);
    let (leader, _) = etcd_leader(&ns.name).expect("a leader");
    let followers = followers(&ns.name, &leader);
    let first = node_of(&ns.name, &followers[0]);
    let second = node_of(&ns.name, &followers[1]);
    wait_node_alone(&first, &ns.name);
    wait_node_alone(&second, &ns.name);
    let _c = Cordoned(vec![first.clone(), second.clone()]);
    let (code, report, err) = drain(&[&first, "--allow-degraded", "--timeout", "60s"]);
    assert_eq!(code, Some(0), "{err}\n{report:#}");
    let done = cluster(&report, &ns.name)["done"].to_string();
    assert!(done.contains("runs a member short until node"), "{done}");
    wait_in(
        &ns.name,
        Duration::from_secs(30),
        "the replacement to wait Pending for its node",
        // Between the eviction and the StatefulSet's re-creation there is no pod at all.
        || pod_json_opt(&ns.name, &followers[0]).is_some_and(|p| p["status"]["phase"] == "Pending"),
    );

    let before = uids(&ns.name);
    let (code, report, _) = drain(&[&second, "--allow-degraded", "--timeout", "5s"]);
    assert_eq!(code, Some(1), "a second member went: {report:#}");
    assert!(
        cluster(&report, &ns.name)["message"]
            .as_str()
            .unwrap()
            .contains(&format!("already runs without {}", followers[0])),
        "{report:#}"
    );
    assert_eq!(uids(&ns.name).get(&followers[1]), before.get(&followers[1]));
}

#[test]
fn three_members_on_three_nodes_are_refused_in_the_dry_run() {
    let _nodes = exclusive_nodes();
    let ns = TestNamespace::new("dr-three");
    let allowed = lane().nodes()[..3].to_vec();
    deploy_etcd_variant(&ns.name, |t| {
        t.replace(
            "      affinity:\n",
            &format!(
                "      affinity:\n        nodeAffinity:\n          requiredDuringSchedulingIgnoredDuringExecution:\n            nodeSelectorTerms:\n            - matchExpressions:\n              - {{key: kubernetes.io/hostname, operator: In, values: [{}]}}\n",
                allowed.join(", ")
            ),
        )
    });
    let (leader, _) = etcd_leader(&ns.name).expect("a leader");
    let follower = follower_of(&ns.name, &leader);
    let node = node_of(&ns.name, &follower);
    let (code, plan, _) = drain(&[&node, "--dry-run"]);
    assert_eq!(code, Some(1), "{plan:#}");
    let blocker = &cluster(&plan, &ns.name)["plan"]["blocker"];
    assert_eq!(blocker["reason"], "Pinned", "{plan:#}");
    let m = blocker["message"].as_str().unwrap();
    assert!(
        m.contains("required anti-affinity")
            && m.contains("does not match the pod's required node affinity"),
        "{m}"
    );
}

#[test]
fn a_second_drain_of_the_same_cluster_is_refused_by_the_lock() {
    let _nodes = exclusive_nodes();
    let (ns, leader) = etcd_with_leader("dr-lock", 3);
    let pods = followers(&ns.name, &leader);
    let node = node_of(&ns.name, &pods[1]);
    let _c = Cordoned(vec![node.clone()]);
    let pid = container_pid(&ns.name, &pods[0]);
    while_frozen(pid, || {
        // The first drain waits for the frozen member (up to 60 s), holding the lock.
        let first = Command::new(env!("CARGO_BIN_EXE_kubectl-raft"))
            .args(["drain", &node, "--timeout", "60s"])
            .env("KUBECONFIG", &world().kubeconfig)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("first drain");
        wait_until(Duration::from_secs(20), "the first drain's lock", || {
            kubectl(&["get", "lease", "-n", LOCK_NS, &lock_lease(&ns.name, "etcd")])
                .status
                .success()
        });
        let (code, _, err) = drain(&[&node, "--timeout", "5s"]);
        // Ctrl-C stops the first between steps: it reports and releases the lock.
        signal(first.id() as i32, "INT");
        let out = first.wait_with_output().expect("first drain ends");
        assert_eq!(code, Some(1));
        assert!(
            err.contains(&format!(
                "{}/etcd is being drained or restarted by",
                ns.name
            )) && err.contains("kubectl raft drain"),
            "{err}"
        );
        assert!(
            err.contains(&format!(
                "kubectl delete lease -n {LOCK_NS} {}",
                lock_lease(&ns.name, "etcd")
            )),
            "{err}"
        );
        assert_eq!(out.status.code(), Some(1));
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("interrupted"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    });
    assert!(
        !kubectl(&["get", "lease", "-n", LOCK_NS, &lock_lease(&ns.name, "etcd")])
            .status
            .success(),
        "the lock was left behind"
    );
}

#[test]
fn a_stale_lock_is_taken_over() {
    let _nodes = exclusive_nodes();
    let (ns, leader) = etcd_with_leader("dr-stale", 3);
    let node = node_of(&ns.name, &follower_of(&ns.name, &leader));
    wait_node_alone(&node, &ns.name);
    let lease = tempfile(&format!(
        "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata: {{name: {}}}\nspec:\n  holderIdentity: alice@laptop pid 1\n  leaseDurationSeconds: 30\n  renewTime: \"2020-01-01T00:00:00.000000Z\"\n",
        lock_lease(&ns.name, "etcd")
    ));
    kubectl_ok(&["apply", "-n", LOCK_NS, "-f", lease.path_str()]);
    let _c = Cordoned(vec![node.clone()]);
    let (code, report, err) = drain(&[&node, "--timeout", "60s"]);
    assert_eq!(code, Some(0), "{err}\n{report:#}");
    assert!(
        err.contains("took over") && err.contains("alice@laptop"),
        "{err}"
    );
}

#[test]
fn a_missing_lock_namespace_stops_the_drain_before_the_cordon() {
    let _nodes = exclusive_nodes();
    let (ns, leader) = etcd_with_leader("dr-lockns", 3);
    let node = node_of(&ns.name, &follower_of(&ns.name, &leader));
    let _c = Cordoned(vec![node.clone()]);
    let (code, _, err) = drain(&[&node, "--lock-namespace", "no-such-lock-ns"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("the lock namespace \"no-such-lock-ns\" does not exist")
            && err.contains("kubectl create namespace no-such-lock-ns"),
        "{err}"
    );
    let node_json = kubectl_json(&["get", "node", &node]);
    assert_ne!(
        node_json["spec"]["unschedulable"], true,
        "the node was cordoned"
    );
}

const ORDINARY: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web, drain-test: "ID"}}
    spec:
      nodeSelector: {kubernetes.io/hostname: NODE}
      terminationGracePeriodSeconds: 1
      containers: [{name: web, image: busybox, command: [/bin/sleep, "3600"]}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: cache}
spec:
  replicas: 1
  selector: {matchLabels: {app: cache}}
  template:
    metadata: {labels: {app: cache, drain-test: "ID"}}
    spec:
      nodeSelector: {kubernetes.io/hostname: NODE}
      terminationGracePeriodSeconds: 1
      containers: [{name: cache, image: busybox, command: [/bin/sleep, "3600"], volumeMounts: [{name: scratch, mountPath: /scratch}]}]
      volumes: [{name: scratch, emptyDir: {}}]
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent, drain-test: "ID"}}
    spec:
      nodeSelector: {kubernetes.io/hostname: NODE}
      terminationGracePeriodSeconds: 1
      containers: [{name: agent, image: busybox, command: [/bin/sleep, "3600"]}]
---
apiVersion: v1
kind: Pod
metadata: {name: bare, labels: {drain-test: "ID"}}
spec:
  nodeName: NODE
  terminationGracePeriodSeconds: 1
  containers: [{name: bare, image: busybox, command: [/bin/sleep, "3600"]}]
"#;

/// The four kinds of ordinary pod on one node, labelled drain-test=ID; returns the node.
fn deploy_ordinary(ns: &str, id: &str) -> String {
    let node = lane().last_node();
    let text = ORDINARY.replace("NODE", &node).replace("ID", id);
    let f = tempfile(&text);
    kubectl_ok(&["apply", "-n", ns, "-f", f.path_str()]);
    wait_in(
        ns,
        Duration::from_secs(60),
        "4 ordinary pods running",
        || {
            kubectl_json(&["get", "pods", "-n", ns])["items"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|p| p["status"]["phase"] == "Running")
                .count()
                == 4
        },
    );
    node
}

#[test]
fn ordinary_pods_that_kubectl_drain_refuses_stop_the_drain_before_any_eviction() {
    let _nodes = exclusive_nodes();
    let ns = TestNamespace::new("dr-pods");
    let id = ns.name.clone();
    let node = deploy_ordinary(&ns.name, &id);
    let _c = Cordoned(vec![node.clone()]);
    let before = uids(&ns.name);
    let (code, _, err) = drain(&[&node, "--pod-selector", &format!("drain-test={id}")]);
    assert_eq!(code, Some(1), "{err}");
    for (pod, flag) in [
        ("agent-", "--ignore-daemonsets"),
        ("cache-", "--delete-emptydir-data"),
        ("bare", "--force"),
    ] {
        assert!(
            err.lines()
                .any(|l| l.contains(&format!("{}/{pod}", ns.name)) && l.contains(flag)),
            "{pod} is not refused with {flag}: {err}"
        );
    }
    assert!(err.contains("Nothing was evicted"), "{err}");
    assert_eq!(uids(&ns.name), before, "something was evicted");
}

#[test]
fn ordinary_pods_go_as_kubectl_drain_sends_them() {
    let _nodes = exclusive_nodes();
    let ns = TestNamespace::new("dr-pods-ok");
    let id = ns.name.clone();
    let node = deploy_ordinary(&ns.name, &id);
    let _c = Cordoned(vec![node.clone()]);
    let before = uids(&ns.name);
    let (code, report, err) = drain(&[
        &node,
        "--pod-selector",
        &format!("drain-test={id}"),
        "--ignore-daemonsets",
        "--delete-emptydir-data",
        "--force",
        "--timeout",
        "60s",
    ]);
    assert_eq!(code, Some(0), "{err}\n{report:#}");
    let after = uids(&ns.name);
    let agent = before.keys().find(|k| k.starts_with("agent-")).unwrap();
    assert_eq!(
        after.get(agent),
        before.get(agent),
        "the DaemonSet pod was evicted"
    );
    assert!(
        !after.contains_key("bare"),
        "the unmanaged pod is still there"
    );
    for prefix in ["web-", "cache-"] {
        let old = before.keys().find(|k| k.starts_with(prefix)).unwrap();
        assert!(!after.contains_key(old), "{old} was not evicted");
    }
    assert!(
        err.contains("ignoring pod") && err.contains("DaemonSet"),
        "{err}"
    );
}

#[test]
fn a_pdb_that_blocks_is_named_and_the_drain_goes_on_when_it_frees() {
    let _nodes = exclusive_nodes();
    let ns = TestNamespace::new("dr-pdb");
    let id = ns.name.clone();
    let node = deploy_ordinary(&ns.name, &id);
    let pdb = tempfile("apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: web}\nspec:\n  minAvailable: 1\n  selector: {matchLabels: {app: web}}\n");
    kubectl_ok(&["apply", "-n", &ns.name, "-f", pdb.path_str()]);
    wait_in(
        &ns.name,
        Duration::from_secs(30),
        "the PDB to count the pod",
        || kubectl_json(&["get", "pdb", "web", "-n", &ns.name])["status"]["currentHealthy"] == 1,
    );
    let _c = Cordoned(vec![node.clone()]);
    let selector = format!("app=web,drain-test={id}");
    let mut child = Running::start(&[
        "drain",
        &node,
        "--pod-selector",
        &selector,
        "--timeout",
        "60s",
    ]);
    // Once the drain says the PDB refuses (not after a fixed sleep), the PDB is relaxed.
    child.wait_for("cannot evict", Duration::from_secs(30));
    kubectl_ok(&[
        "patch",
        "pdb",
        "web",
        "-n",
        &ns.name,
        "--type=merge",
        "-p",
        r#"{"spec":{"minAvailable":0}}"#,
    ]);
    let (code, _, err) = child.finish(Duration::from_secs(90));
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains("PodDisruptionBudget web allows 0 disruption(s) (1 healthy, 1 required)"),
        "{err}"
    );
}

#[test]
fn a_replacement_that_never_becomes_ready_stops_the_drain_and_a_rerun_resumes() {
    let _nodes = exclusive_nodes();
    let (ns, leader) = etcd_with_leader("dr-resume", 3);
    let follower = follower_of(&ns.name, &leader);
    let nodes = vec![node_of(&ns.name, &follower), node_of(&ns.name, &leader)];
    for n in &nodes {
        wait_node_alone(n, &ns.name);
    }
    let _c = Cordoned(nodes.clone());
    // Pods replaced from now on start from a broken template; the running ones stay.
    let sts = |patch: &str| {
        kubectl_ok(&[
            "patch",
            "sts",
            "etcd",
            "-n",
            &ns.name,
            "--type=json",
            "-p",
            patch,
        ])
    };
    sts(r#"[{"op":"replace","path":"/spec/updateStrategy","value":{"type":"OnDelete"}}]"#);
    sts(
        r#"[{"op":"replace","path":"/spec/template/spec/containers/0/command","value":["/bin/false"]}]"#,
    );
    let (code, report, err) = drain(&[&nodes[0], &nodes[1], "--timeout", "15s"]);
    assert_eq!(code, Some(1), "{err}\n{report:#}");
    let c = cluster(&report, &ns.name);
    assert!(
        c["message"].as_str().unwrap().contains(&format!(
            "{follower}'s replacement was not Ready within 15s"
        )),
        "{c:#}"
    );
    assert_eq!(
        (c["evictions"].as_u64(), c["transfers"].as_u64()),
        (Some(1), Some(0)),
        "it went on: {c:#}"
    );
    assert_eq!(
        etcd_leader(&ns.name).map(|l| l.0),
        Some(leader.clone()),
        "the leader was touched"
    );

    // The fix: a good template, and the broken pod replaced.
    sts(
        r#"[{"op":"replace","path":"/spec/template/spec/containers/0/command","value":["/usr/bin/etcd"]}]"#,
    );
    kubectl_ok(&["delete", "pod", &follower, "-n", &ns.name, "--wait=false"]);
    wait_etcd_ready(&ns.name, 3);
    let (code, report, err) = drain(&[&nodes[0], &nodes[1], "--timeout", "60s"]);
    assert_eq!(code, Some(0), "the rerun did not finish: {err}\n{report:#}");
    let c = cluster(&report, &ns.name);
    assert_eq!(
        (c["evictions"].as_u64(), c["transfers"].as_u64()),
        (Some(1), Some(1)),
        "{c:#}"
    );
    for n in &nodes {
        assert!(
            etcd_pods(&ns.name)
                .iter()
                .all(|p| p["spec"]["nodeName"] != n.as_str()),
            "a member is still on {n}"
        );
    }
}

/// An OnDelete StatefulSet with a pending template change: the evicted member's replacement
/// starts from the new template, which the drain says (dry run and report) rather than doing
/// it silently.
#[test]
fn a_drain_says_when_a_members_replacement_takes_a_pending_update() {
    let _nodes = exclusive_nodes();
    let ns = TestNamespace::new("dr-ondelete");
    deploy_etcd_variant(&ns.name, |t| {
        t.replace(
            "  podManagementPolicy: Parallel\n",
            "  podManagementPolicy: Parallel\n  updateStrategy: {type: OnDelete}\n",
        )
    });
    let (follower, node) = a_followers_node(&ns.name);
    kubectl_ok(&[
        "patch",
        "sts",
        "etcd",
        "-n",
        &ns.name,
        "--type=merge",
        "-p",
        r#"{"spec":{"template":{"metadata":{"annotations":{"test/revision":"2"}}}}}"#,
    ]);
    let mut update = String::new();
    wait_in(
        &ns.name,
        Duration::from_secs(30),
        "a pending update",
        || {
            let s = kubectl_json(&["get", "sts", "etcd", "-n", &ns.name]);
            update = s["status"]["updateRevision"].as_str().unwrap_or("").into();
            !update.is_empty() && s["status"]["currentRevision"] != update.as_str()
        },
    );
    let _c = Cordoned(vec![node.clone()]);
    let (code, report, err) = drain(&[&node, "--timeout", "90s"]);
    assert_eq!(code, Some(0), "{err}\n{report:#}");
    let c = cluster(&report, &ns.name);
    assert_eq!(
        c["plan"]["steps"][0]["newRevision"],
        update.as_str(),
        "{c:#}"
    );
    let said = c["done"].to_string();
    assert!(
        said.contains(&format!("update revision {update}")),
        "not said: {c:#}"
    );
    let now = pod_json(&ns.name, &follower);
    assert_eq!(
        now["metadata"]["labels"]["controller-revision-hash"],
        update.as_str(),
        "the replacement runs another revision than said"
    );
}

#[test]
fn zookeepers_leader_goes_last_in_an_election_that_is_counted() {
    let _nodes = exclusive_nodes();
    let ns = TestNamespace::new("dr-zk");
    deploy_zookeeper(&ns.name);
    let leader = zk_leader(&ns.name);
    let node = node_of(&ns.name, &leader);
    wait_node_alone(&node, &ns.name);
    let _c = Cordoned(vec![node.clone()]);
    let (code, report, err) = drain(&[&node, "--timeout", "90s"]);
    assert_eq!(code, Some(0), "{err}\n{report:#}");
    let c = cluster(&report, &ns.name);
    assert_eq!(c["plan"]["steps"][0]["action"], "evictLeader", "{c:#}");
    assert_eq!(
        (c["transfers"].as_u64(), c["elections"].as_u64()),
        (Some(0), Some(1)),
        "{c:#}"
    );
    assert_ne!(node_of(&ns.name, &leader), node);
}

#[test]
fn disable_eviction_deletes_past_a_pdb_with_the_grace_period_given() {
    let _nodes = exclusive_nodes();
    let ns = TestNamespace::new("dr-delete");
    let id = ns.name.clone();
    let node = deploy_ordinary(&ns.name, &id);
    let pdb = tempfile("apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: web}\nspec:\n  minAvailable: 1\n  selector: {matchLabels: {app: web}}\n");
    kubectl_ok(&["apply", "-n", &ns.name, "-f", pdb.path_str()]);
    let _c = Cordoned(vec![node.clone()]);
    let before = uids(&ns.name);
    let web = before
        .keys()
        .find(|k| k.starts_with("web-"))
        .unwrap()
        .clone();
    let selector = format!("app=web,drain-test={id}");
    let (code, report, err) = drain(&[
        &node,
        "--pod-selector",
        &selector,
        "--disable-eviction",
        "--grace-period",
        "0",
        "--timeout",
        "30s",
    ]);
    assert_eq!(code, Some(0), "{err}\n{report:#}");
    assert_eq!(report["pods"][0]["result"], "evicted", "{report:#}");
    assert!(!uids(&ns.name).contains_key(&web), "{web} is still there");
}

/// A Deployment's pod on NODE whose preStop hook takes 3 s, then marks MARK/done.
const SLOW_TO_STOP: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: slow}
spec:
  replicas: 1
  selector: {matchLabels: {app: slow}}
  template:
    metadata: {labels: {app: slow, drain-test: "ID"}}
    spec:
      nodeSelector: {kubernetes.io/hostname: NODE}
      terminationGracePeriodSeconds: 10
      volumes: [{name: mark, hostPath: {path: MARK}}]
      containers:
      - name: slow
        image: busybox
        command: [/bin/sleep, "3600"]
        volumeMounts: [{name: mark, mountPath: /mark}]
        lifecycle: {preStop: {exec: {command: [/bin/sh, -c, "sleep 3; date > /mark/done"]}}}
"#;

/// `--grace-period` reaches the API server with the eviction: an ordinary pod given 1 s has
/// its 3 s preStop hook cut (kube's own eviction request spelled the options so that the API
/// server ignored them, and the pod got its full 10 s).
#[test]
fn an_ordinary_pod_is_evicted_with_the_grace_period_given() {
    let _nodes = exclusive_nodes();
    let ns = TestNamespace::new("dr-grace-pod");
    let node = lane().last_node();
    let mark = scratch_dir(&ns.name);
    let text = SLOW_TO_STOP
        .replace("NODE", &node)
        .replace("ID", &ns.name)
        .replace("MARK", mark.to_str().unwrap());
    let f = tempfile(&text);
    kubectl_ok(&["apply", "-n", &ns.name, "-f", f.path_str()]);
    wait_in(&ns.name, Duration::from_secs(60), "the pod running", || {
        kubectl_json(&["get", "pods", "-n", &ns.name, "-l", "app=slow"])["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["status"]["phase"] == "Running")
    });
    let _c = Cordoned(vec![node.clone()]);
    let selector = format!("app=slow,drain-test={}", ns.name);
    let (code, report, err) = drain(&[
        &node,
        "--pod-selector",
        &selector,
        "--grace-period",
        "1",
        "--timeout",
        "60s",
    ]);
    assert_eq!(code, Some(0), "{err}\n{report:#}");
    assert_eq!(report["pods"][0]["result"], "evicted", "{report:#}");
    assert!(
        !mark.join("done").exists(),
        "the preStop hook ran its 3 s: the pod was not given 1 s"
    );
}

/// `--grace-period` is for ordinary pods: a member keeps its own, so its preStop hook (here 3 s
/// of work, then a mark on its volume) is not cut by a grace period of 1 s.
#[test]
fn a_members_own_grace_period_is_kept_when_grace_period_is_given() {
    let _nodes = exclusive_nodes();
    let ns = TestNamespace::new("dr-grace");
    deploy_etcd_variant(&ns.name, |t| {
        let hooked = t.replace(
            r#"command: [/bin/sh, -c, "date +%s > /var/lib/etcd/prestop-ran"]"#,
            r#"command: [/bin/sh, -c, "sleep 3; date +%s > /var/lib/etcd/prestop-done"]"#,
        );
        assert_ne!(hooked, t, "the preStop hook was replaced");
        hooked
    });
    let (follower, node) = a_followers_node(&ns.name);
    let _c = Cordoned(vec![node.clone()]);
    let (code, report, err) = drain(&[&node, "--grace-period", "1", "--timeout", "90s"]);
    assert_eq!(code, Some(0), "{err}\n{report:#}");
    let pvc = kubectl_json(&["get", "pvc", &format!("data-{follower}"), "-n", &ns.name]);
    let pv = kubectl_json(&["get", "pv", pvc["spec"]["volumeName"].as_str().unwrap()]);
    let mark =
        std::path::Path::new(pv["spec"]["hostPath"]["path"].as_str().unwrap()).join("prestop-done");
    assert!(
        mark.exists(),
        "{follower}'s preStop hook was cut short: no {}",
        mark.display()
    );
}

#[test]
fn two_clusters_drain_side_by_side_with_parallel_clusters() {
    let _nodes = exclusive_nodes();
    let a = TestNamespace::new("dr-par-a");
    let b = TestNamespace::new("dr-par-b");
    deploy_etcd(&a.name, 3);
    deploy_etcd(&b.name, 3);
    let mut nodes = vec![];
    for ns in [&a.name, &b.name] {
        let (leader, _) = etcd_leader(ns).expect("a leader");
        nodes.push(node_of(ns, &follower_of(ns, &leader)));
    }
    nodes.sort();
    nodes.dedup();
    for n in &nodes {
        wait_node_holds_only(n, &[&a.name, &b.name]);
    }
    let _c = Cordoned(nodes.clone());
    let mut args: Vec<&str> = nodes.iter().map(String::as_str).collect();
    args.extend(["--parallel-clusters", "2", "--timeout", "90s"]);
    let (code, report, err) = drain(&args);
    assert_eq!(code, Some(0), "{err}\n{report:#}");
    let results: Vec<(&str, &str)> = report["clusters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["namespace"].as_str().unwrap(),
                c["result"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(results.len(), 2, "{report:#}");
    assert!(results.iter().all(|(_, r)| *r == "drained"), "{results:?}");
    // Side by side, not one after the other: each cluster's eviction came before the other's
    // replacement rejoined (stderr has one line per event, in the order they happened).
    let lines: Vec<&str> = err.lines().collect();
    let at = |ns: &str, what: &str| {
        lines
            .iter()
            .position(|l| l.contains(&format!("{ns}/etcd: ")) && l.contains(what))
            .unwrap_or_else(|| panic!("no {what:?} line for {ns}: {err}"))
    };
    for (x, y) in [(&a.name, &b.name), (&b.name, &a.name)] {
        assert!(
            at(x, "evicting") < at(y, " rejoined on "),
            "{x} was evicted only after {y} was done: the clusters went one after the other\n{err}"
        );
    }
}

/// Least privilege: a ServiceAccount bound to exactly docs/rbac.yaml's drain role drains a
/// follower's node.
#[test]
fn drain_runs_with_exactly_its_role() {
    let _nodes = exclusive_nodes();
    let (ns, leader) = etcd_with_leader("dr-rbac", 3);
    let node = node_of(&ns.name, &follower_of(&ns.name, &leader));
    wait_node_alone(&node, &ns.name);
    let _cordoned = Cordoned(vec![node.clone()]);
    let who = RbacSubject::bound_to("kubectl-raft-drain", &ns.name).with_lock();
    let (code, out, err) = who.raft(&["drain", &node, "--timeout", "90s", "-o", "json"]);
    assert_eq!(code, Some(0), "{err}\n{out}");
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(cluster(&report, &ns.name)["evictions"], 1, "{report:#}");
}

/// What drain's roles grant that a drain of a follower's node can do without, and why.
const DRAIN_OPTIONAL: &[(&str, &str, &str)] =
    &[("delete", "pods", "only --disable-eviction deletes pods")];

/// With each right drain cannot do without taken away in turn, it stops before it changes
/// anything (no cordon, no pod gone) and the message names the missing right.
#[test]
fn drain_without_a_required_permission_names_it() {
    let _nodes = exclusive_nodes();
    let (ns, leader) = etcd_with_leader("dr-rbac-minus", 3);
    let node = node_of(&ns.name, &follower_of(&ns.name, &leader));
    wait_node_alone(&node, &ns.name);
    let _cordoned = Cordoned(vec![node.clone()]);
    let who = RbacSubject::bound_to("kubectl-raft-drain", &ns.name).with_lock();
    let state = || {
        format!(
            "pods {:?}, unschedulable {}",
            uids(&ns.name),
            kubectl_json(&["get", "node", &node])["spec"]["unschedulable"]
        )
    };
    who.each_required_right_is_named(
        DRAIN_OPTIONAL,
        &["drain", &node, "--timeout", "30s"],
        &state,
    );
}
