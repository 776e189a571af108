//! NATS JetStream, live: nats-server 2.15.2 (built by tests/world/build.sh) as a 3- and a
//! 5-server StatefulSet in the Helm chart's shape (tests/manifests/nats-*.yaml). The Raft
//! group is JetStream's meta group; its leader moves only over the NATS client protocol, as
//! a system-account user (credentials in NATS_USER and NATS_PASSWORD). That request is not
//! HTTP: it goes through a port-forward (`--via port-forward`, or automatically when replicas
//! are reached by pods/proxy), or straight to the pod (`--via direct`).

use std::time::Duration;

use crate::common::*;
use serde_json::Value;

/// The system account's user, from the manifest's Secret nats-sys.
const SYS: [(&str, &str); 2] = [("NATS_USER", "sys"), ("NATS_PASSWORD", "sys-secret")];

/// A namespace of its own with `servers` NATS servers Ready, and the meta leader's name.
fn nats_cluster(prefix: &str, servers: u32) -> (TestNamespace, String) {
    nats_cluster_on(prefix, servers, Nodes::Agent)
}

/// The same, with its pods on the given kind of node.
fn nats_cluster_on(prefix: &str, servers: u32, nodes: Nodes) -> (TestNamespace, String) {
    let ns = TestNamespace::new(prefix);
    deploy_nats_on(&ns.name, servers, nodes);
    let leader = meta_leader(&ns.name, "nats-0").expect("a meta leader");
    (ns, leader)
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
    let (ns, leader) = nats_cluster("nats-status", 3);
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
    yield_moves_the_meta_leader_to(Nodes::Agent);
}

/// On real kubelets the NATS request goes through a real kubelet's port-forward (CRI
/// streaming through containerd into the pod's network namespace).
#[test]
fn yield_moves_the_meta_leader_to_a_named_server_on_real_kubelets() {
    yield_moves_the_meta_leader_to(Nodes::Kubelet);
}

fn yield_moves_the_meta_leader_to(nodes: Nodes) {
    let _nodes = shared_nodes();
    let (ns, leader) = nats_cluster_on("nats-yield-to", 3, nodes);
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
    let (ns, leader) = nats_cluster("nats-yield-5", 5);
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
    let (ns, leader) = nats_cluster("nats-direct", 3);
    let (code, y, err) = verb(&SYS, "yield", &["nats", "-n", &ns.name, "--via", "direct"]);
    assert_eq!(code, Some(0), "{err}\n{y:#}");
    let new = y["newLeader"].as_str().unwrap().to_string();
    assert_ne!(new, leader);
    assert_eq!(meta_leader(&ns.name, &leader), Some(new));
}

#[test]
fn yield_as_a_user_outside_the_system_account_is_told_so() {
    let _nodes = shared_nodes();
    let (ns, leader) = nats_cluster("nats-app-user", 3);
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

/// `kubectl raft drain` of the node `server` runs on, once it holds nothing else (uncordoned
/// afterwards), with `env`: the node, and the cluster's summary from the report.
fn drain_node_of(ns: &str, server: &str, env: &[(&str, &str)]) -> (String, Value) {
    let node = node_of(ns, server);
    wait_node_alone(&node, ns);
    let _cordoned = Cordoned(vec![node.clone()]);
    let (code, report, err) = verb(
        env,
        "drain",
        // drain names no cluster: the environment's credentials need the flag.
        &[
            &node,
            "--via",
            "direct",
            "--timeout",
            "90s",
            "--credentials-from-env",
        ],
    );
    assert_eq!(code, Some(0), "{err}\n{report:#}");
    (node, cluster(&report, ns).clone())
}

#[test]
fn drain_of_the_meta_leaders_node_moves_it_first() {
    drain_of_the_meta_leaders_node(Nodes::Agent);
}

#[test]
fn drain_of_the_meta_leaders_node_moves_it_first_on_real_kubelets() {
    drain_of_the_meta_leaders_node(Nodes::Kubelet);
}

fn drain_of_the_meta_leaders_node(nodes: Nodes) {
    let _nodes = exclusive_on(nodes);
    let (ns, leader) = nats_cluster_on("nats-drain", 3, nodes);
    let (node, c) = drain_node_of(&ns.name, &leader, &SYS);
    assert_eq!(drain_counts(&c), (Some(1), Some(1), Some(0)), "{c:#}");
    let new = meta_leader(&ns.name, "nats-0").unwrap_or_default();
    assert_ne!(node_of(&ns.name, &new), node, "the meta leader left {node}");
}

/// No NATS credentials in the environment (empty is unset), so only a Secret or file can
/// supply them.
const NO_ENV: [(&str, &str); 3] = [("NATS_USER", ""), ("NATS_PASSWORD", ""), ("NATS_CREDS", "")];

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

/// The Secret's writer agrees to its use by the StatefulSets that name it.
fn label_credentials(ns: &str, secret: &str) {
    kubectl_ok(&[
        "label",
        "secret",
        secret,
        "-n",
        ns,
        "kubectl-raft.io/credentials=true",
    ]);
}

#[test]
fn yield_reads_the_system_user_from_the_secret_the_flag_names() {
    let _nodes = shared_nodes();
    let (ns, leader) = nats_cluster("nats-cred-flag", 3);
    ops_secret(&ns.name, "nats-ops");
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
    let (ns, leader) = nats_cluster("nats-cred-ann", 3);
    ops_secret(&ns.name, "nats-ops");
    label_credentials(&ns.name, "nats-ops");
    annotate_credentials(&ns.name, "nats-ops");
    let (code, y, err) = verb(&NO_ENV, "yield", &["nats", "-n", &ns.name]);
    assert_eq!(code, Some(0), "{err}\n{y:#}");
    assert_ne!(y["newLeader"], leader.as_str(), "{y:#}");
}

#[test]
fn a_secret_the_annotation_names_is_not_used_unless_its_writer_labelled_it() {
    let _nodes = shared_nodes();
    let (ns, leader) = nats_cluster("nats-cred-unlabelled", 3);
    ops_secret(&ns.name, "nats-ops");
    annotate_credentials(&ns.name, "nats-ops");
    let (code, _, err) = verb(&NO_ENV, "yield", &["nats", "-n", &ns.name]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("not labelled kubectl-raft.io/credentials=true")
            && err.contains("--credentials-secret"),
        "says why and what to do: {err}"
    );
    assert_eq!(
        meta_leader(&ns.name, "nats-0"),
        Some(leader),
        "nothing moved"
    );
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
    let (ns, leader) = nats_cluster("nats-cred-missing", 3);
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
    annotate_credentials(&ns.name, "nats-nope");
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

/// Every stream and consumer `server` lists, as (kind, name, leader), from its /jsz.
fn groups_of(ns: &str, server: &str) -> Vec<(String, String, String)> {
    let out = kubectl(&[
        "get",
        "--raw",
        &format!(
            "/api/v1/namespaces/{ns}/pods/{server}:8222/proxy/jsz?accounts=true&streams=true&consumers=true"
        ),
    ]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    let mut groups = vec![];
    for a in v["account_details"].as_array().into_iter().flatten() {
        for s in a["stream_detail"].as_array().into_iter().flatten() {
            let leader = |x: &Value| x["cluster"]["leader"].as_str().unwrap_or("").to_string();
            groups.push((
                "streams".into(),
                s["name"].as_str().unwrap().into(),
                leader(s),
            ));
            for c in s["consumer_detail"].as_array().into_iter().flatten() {
                groups.push((
                    "consumers".into(),
                    c["name"].as_str().unwrap().into(),
                    leader(c),
                ));
            }
        }
    }
    groups
}

/// How many groups of `kind` `server` leads, as its own /jsz says.
fn leads(ns: &str, server: &str, kind: &str) -> usize {
    groups_of(ns, server)
        .iter()
        .filter(|(k, _, l)| k == kind && l == server)
        .count()
}

/// R3 streams (and a consumer on the first) in account APP, their leaders then asked onto
/// `onto`, until it leads at least one stream and one consumer.
fn streams_led_by(ns: &str, onto: &str, names: &[&str]) {
    for name in names {
        let created = js_app(
            ns,
            onto,
            &format!("$JS.API.STREAM.CREATE.{name}"),
            &format!(r#"{{"name":"{name}","subjects":["{name}.>"],"num_replicas":3}}"#),
        );
        assert!(
            created.as_ref().is_some_and(|c| c.get("error").is_none()),
            "stream {name}: {created:?}"
        );
    }
    let consumer = js_app(
        ns,
        onto,
        &format!("$JS.API.CONSUMER.DURABLE.CREATE.{}.work", names[0]),
        &format!(
            r#"{{"stream_name":"{}","config":{{"durable_name":"work","ack_policy":"explicit"}}}}"#,
            names[0]
        ),
    );
    assert!(consumer.is_some_and(|c| c.get("error").is_none()));
    let preferred = format!(r#"{{"placement":{{"preferred":"{onto}"}}}}"#);
    wait_in(
        ns,
        Duration::from_secs(60),
        &format!("{onto} to lead a stream and a consumer"),
        || {
            if leads(ns, onto, "streams") > 0 && leads(ns, onto, "consumers") > 0 {
                return true;
            }
            js_app(
                ns,
                onto,
                &format!("$JS.API.STREAM.LEADER.STEPDOWN.{}", names[0]),
                &preferred,
            );
            js_app(
                ns,
                onto,
                &format!("$JS.API.CONSUMER.LEADER.STEPDOWN.{}.work", names[0]),
                &preferred,
            );
            std::thread::sleep(Duration::from_millis(500));
            false
        },
    );
}

/// The system user and the account APP's user.
const SYS_AND_APP: [(&str, &str); 6] = [
    ("NATS_USER", "sys"),
    ("NATS_PASSWORD", "sys-secret"),
    ("NATS_APP_USER", "app"),
    ("NATS_APP_PASSWORD", "app"),
    // Not the runner's own .creds: they would be preferred to the users above.
    ("NATS_CREDS", ""),
    ("NATS_APP_CREDS", ""),
];

#[test]
fn status_counts_the_stream_and_consumer_leaders_each_server_holds() {
    let _nodes = shared_nodes();
    let (ns, leader) = nats_cluster("nats-leads", 3);
    streams_led_by(&ns.name, &leader, &["ORDERS", "EVENTS"]);
    let (code, report, err) = verb(&NO_ENV, "status", &["nats", "-n", &ns.name]);
    assert_eq!(code, Some(0), "{err}");
    for r in report["clusters"][0]["replicas"].as_array().unwrap() {
        let pod = r["pod"].as_str().unwrap();
        let l = &r["raft"]["leads"];
        assert_eq!(
            l["streams"],
            leads(&ns.name, pod, "streams"),
            "{pod}: {r:#}"
        );
        assert_eq!(
            l["consumers"],
            leads(&ns.name, pod, "consumers"),
            "{pod}: {r:#}"
        );
    }
    let table = stdout(&raft(&["status", "nats", "-n", &ns.name]));
    assert!(table.contains("LEADS"), "{table}");
}

#[test]
fn yield_with_streams_moves_the_old_leaders_streams_and_consumers_off_it() {
    let _nodes = shared_nodes();
    let (ns, leader) = nats_cluster("nats-streams", 3);
    streams_led_by(&ns.name, &leader, &["ORDERS", "EVENTS"]);
    let (code, y, err) = verb(
        &SYS_AND_APP,
        "yield",
        &["nats", "-n", &ns.name, "--streams"],
    );
    assert_eq!(code, Some(0), "{err}\n{y:#}");
    assert_eq!(y["outcome"], "Transferred", "{y:#}");
    let g = &y["groups"];
    assert_eq!(g["server"], leader.as_str(), "{y:#}");
    assert!(g["moved"].as_array().unwrap().len() >= 2, "{y:#}");
    assert_eq!(g["stillLed"], serde_json::json!([]), "{y:#}");
    assert_eq!(
        leads(&ns.name, &leader, "streams"),
        0,
        "{:?}",
        groups_of(&ns.name, &leader)
    );
    assert_eq!(leads(&ns.name, &leader, "consumers"), 0);
}

#[test]
fn yield_with_streams_without_the_accounts_user_names_the_variables() {
    let _nodes = shared_nodes();
    let (ns, leader) = nats_cluster("nats-streams-nocred", 3);
    streams_led_by(&ns.name, &leader, &["ORDERS"]);
    let (code, y, err) = verb(&SYS, "yield", &["nats", "-n", &ns.name, "--streams"]);
    assert_eq!(code, Some(1), "{err}\n{y:#}");
    assert_eq!(
        y["outcome"], "Transferred",
        "the meta leader still moved: {y:#}"
    );
    assert!(err.contains("NATS_APP_USER"), "{err}");
    assert!(
        leads(&ns.name, &leader, "streams") > 0,
        "the streams stayed"
    );
}

#[test]
fn drain_moves_a_servers_stream_leaders_off_before_evicting_it() {
    let _nodes = exclusive_nodes();
    let (ns, leader) = nats_cluster("nats-drain-streams", 3);
    let server = followers_of(&leader, 3).pop().unwrap();
    streams_led_by(&ns.name, &server, &["ORDERS"]);
    let (_, c) = drain_node_of(&ns.name, &server, &SYS_AND_APP);
    assert!(c["groupLeadersMoved"].as_u64().unwrap() >= 2, "{c:#}");
    assert_eq!(drain_counts(&c), (Some(1), Some(0), Some(0)), "{c:#}");
    let done = c["done"].to_string();
    assert!(done.contains(&format!("moved off {server}")), "{done}");
}

#[test]
fn a_drain_dry_run_names_the_stream_leaders_it_would_move_first() {
    let _nodes = exclusive_nodes();
    let (ns, leader) = nats_cluster("nats-drain-plan", 3);
    let server = followers_of(&leader, 3).pop().unwrap();
    streams_led_by(&ns.name, &server, &["ORDERS"]);
    let node = node_of(&ns.name, &server);
    // Alone on its node, so no other test's pods change the plan.
    wait_node_alone(&node, &ns.name);
    // The users its stepdowns need (a dry run without them says the drain would stop).
    let (code, report, err) = verb(
        &SYS_AND_APP,
        "drain",
        &[&node, "--dry-run", "--credentials-from-env"],
    );
    assert_eq!(code, Some(0), "{err}\n{report:#}");
    let c = cluster(&report, &ns.name);
    let planned = c["groupsToMove"][&server].to_string();
    assert!(
        planned.contains("streams APP/ORDERS") && planned.contains("consumers APP/ORDERS/work"),
        "{c:#}"
    );
    let table = stdout(&raft_env(
        &SYS_AND_APP,
        &["drain", &node, "--dry-run", "--credentials-from-env"],
    ));
    assert!(
        table.contains("first, the leaders it holds move off it: consumers APP/ORDERS/work"),
        "{table}"
    );
    assert!(
        !kubectl_json(&["get", "node", &node])["spec"]["unschedulable"]
            .as_bool()
            .unwrap_or(false),
        "a dry run cordons nothing"
    );
}

/// `restart` of a NATS cluster whose meta leader also leads a stream: every server restarted
/// once, the leader last after one verified transfer, each server's stream and consumer
/// leaders moved off it before it goes, no election.
#[test]
fn restart_goes_server_by_server_and_moves_the_meta_leader_once() {
    let _nodes = shared_nodes();
    let (ns, leader) = nats_cluster("nats-restart", 3);
    streams_led_by(&ns.name, &leader, &["ORDERS"]);
    let before = uids(&ns.name);
    let (code, report, err) = verb(
        &SYS_AND_APP,
        "restart",
        &["nats", "-n", &ns.name, "--timeout", "120s"],
    );
    assert_eq!(code, Some(0), "{err}\n{report:#}");
    let c = &report["cluster"];
    assert_eq!(drain_counts(c), (Some(3), Some(1), Some(0)), "{c:#}");
    let after = uids(&ns.name);
    assert!(
        before
            .iter()
            .filter(|(pod, _)| pod.starts_with("nats-"))
            .all(|(pod, uid)| after.get(pod) != Some(uid)),
        "every server restarted once: {before:?} -> {after:?}"
    );
    assert!(
        meta_leader(&ns.name, "nats-0").is_some(),
        "a meta leader after it"
    );
}

/// The NATS user the app account has, given as if it were the system user.
const APP_AS_SYSTEM: [(&str, &str); 3] = [
    ("NATS_USER", "app"),
    ("NATS_PASSWORD", "app"),
    ("NATS_CREDS", ""),
];

/// A restart of a 3-server cluster with `env` stops before its first eviction, saying
/// `says`: no server is replaced and the meta leader has not moved (read from the pods' UIDs
/// and from NATS itself).
fn restart_stops_before_its_first_eviction(prefix: &str, env: &[(&str, &str)], says: &str) {
    let _nodes = shared_nodes();
    let (ns, leader) = nats_cluster(prefix, 3);
    let before = uids(&ns.name);
    let (code, report, err) = verb(
        env,
        "restart",
        &["nats", "-n", &ns.name, "--timeout", "120s"],
    );
    assert_eq!(code, Some(1), "{err}\n{report:#}");
    assert!(
        err.contains(says) && err.contains("before changing anything"),
        "{err}"
    );
    assert_eq!(uids(&ns.name), before, "no server was replaced");
    assert_eq!(
        meta_leader(&ns.name, "nats-0"),
        Some(leader),
        "nothing moved"
    );
}

#[test]
fn restart_without_a_system_user_stops_before_its_first_eviction() {
    restart_stops_before_its_first_eviction("nats-restart-nouser", &NO_ENV, "system-account user");
}

#[test]
fn restart_as_a_user_outside_the_system_account_stops_before_its_first_eviction() {
    restart_stops_before_its_first_eviction(
        "nats-restart-app",
        &APP_AS_SYSTEM,
        // NATS answers it nothing: no responders, or (a slow server) no answer in time.
        "system account",
    );
}

#[test]
fn a_restart_dry_run_without_a_system_user_names_what_is_missing() {
    let _nodes = shared_nodes();
    let (ns, _) = nats_cluster("nats-restart-plan", 3);
    let (code, report, err) = verb(&NO_ENV, "restart", &["nats", "-n", &ns.name, "--dry-run"]);
    assert_eq!(code, Some(1), "{err}\n{report:#}");
    let r = &report;
    let message = r["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("would stop before changing anything")
            && message.contains("system-account user"),
        "{r:#}"
    );
    assert_eq!(
        r["cluster"]["plan"]["steps"].as_array().map(Vec::len),
        Some(3),
        "the plan is shown too: {r:#}"
    );
}

#[test]
fn drain_of_the_meta_leaders_node_without_a_system_user_stops_before_the_cordon() {
    let _nodes = exclusive_nodes();
    let (ns, leader) = nats_cluster("nats-drain-nouser", 3);
    let node = node_of(&ns.name, &leader);
    wait_node_alone(&node, &ns.name);
    // The meta leader may have moved while the node emptied: this test drains its node only.
    assert_eq!(
        meta_leader(&ns.name, "nats-0").as_deref(),
        Some(leader.as_str())
    );
    drain_stops_before_the_cordon(&ns.name, &node, &NO_ENV, "system-account user");
    assert_eq!(
        meta_leader(&ns.name, "nats-0"),
        Some(leader),
        "nothing moved"
    );
}

/// `kubectl raft drain` of `node` with `env` exits 1 saying `says` and that it stopped
/// before changing anything; the Node is not cordoned (read from the API server) and no pod
/// of `ns` was replaced.
fn drain_stops_before_the_cordon(ns: &str, node: &str, env: &[(&str, &str)], says: &str) {
    let before = uids(ns);
    // Uncordoned afterwards whatever happens, so the next test finds the node usable.
    let _uncordon = Cordoned(vec![node.to_string()]);
    let (code, report, err) = verb(
        env,
        "drain",
        &[node, "--via", "direct", "--credentials-from-env"],
    );
    let cordoned = kubectl_json(&["get", "node", node])["spec"]["unschedulable"]
        .as_bool()
        .unwrap_or(false);
    assert_eq!(code, Some(1), "{err}\n{report:#}");
    assert!(
        err.contains(says) && err.contains("before changing anything"),
        "{err}"
    );
    assert!(!cordoned, "{node} was cordoned");
    assert_eq!(uids(ns), before, "no server was replaced");
}

/// A drain of a follower's node, the follower leading APP's stream ORDERS, with `env` stops
/// before the cordon saying `says`; the stream's leader stays on it (read from /jsz).
fn drain_of_an_app_server_stops_before_the_cordon(prefix: &str, env: &[(&str, &str)], says: &str) {
    let _nodes = exclusive_nodes();
    let (ns, leader) = nats_cluster(prefix, 3);
    let server = followers_of(&leader, 3).pop().unwrap();
    streams_led_by(&ns.name, &server, &["ORDERS"]);
    let node = node_of(&ns.name, &server);
    wait_node_alone(&node, &ns.name);
    drain_stops_before_the_cordon(&ns.name, &node, env, says);
    assert!(
        leads(&ns.name, &server, "streams") > 0,
        "its stream leaders stayed: {:?}",
        groups_of(&ns.name, &server)
    );
}

#[test]
fn drain_of_a_server_with_an_accounts_streams_without_its_user_stops_before_the_cordon() {
    let sys_only = [
        ("NATS_USER", "sys"),
        ("NATS_PASSWORD", "sys-secret"),
        ("NATS_CREDS", ""),
        ("NATS_APP_USER", ""),
        ("NATS_APP_CREDS", ""),
    ];
    drain_of_an_app_server_stops_before_the_cordon("nats-drain-noapp", &sys_only, "NATS_APP_USER");
}

#[test]
fn drain_with_another_accounts_user_for_the_streams_stops_before_the_cordon() {
    // A real user with the right password, of the system account, given as APP's.
    let sys_as_app = [
        ("NATS_USER", "sys"),
        ("NATS_PASSWORD", "sys-secret"),
        ("NATS_CREDS", ""),
        ("NATS_APP_USER", "sys"),
        ("NATS_APP_PASSWORD", "sys-secret"),
        ("NATS_APP_CREDS", ""),
    ];
    drain_of_an_app_server_stops_before_the_cordon(
        "nats-drain-wrongacc",
        &sys_as_app,
        "not of APP",
    );
}
