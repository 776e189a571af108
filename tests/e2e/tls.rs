//! TLS to the replicas end to end: a 3-member etcd that requires client certificates
//! (`--client-cert-auth`, TLS peers), its certificates made by the test. The truth is read
//! with curl, an independent TLS client, never from the plugin's report.

use std::path::Path;
use std::time::Duration;

use crate::common::*;

/// The client Secret the StatefulSet's annotation names, labelled by its writer.
fn client_secret(ns: &str, client: &Path, name: &str, keys: &[&str]) {
    let read = |k: &str| std::fs::read_to_string(client.join(k)).unwrap();
    let values: Vec<(String, String)> = keys.iter().map(|k| (k.to_string(), read(k))).collect();
    let pairs: Vec<(&str, &str)> = values
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    tls_secret(ns, name, &pairs, &["kubectl-raft.io/credentials=true"]);
}

/// Positive control: the server really refuses a client without a certificate.
fn assert_requires_client_certificates(ns: &str, client: &Path) {
    let ip = pod_json(ns, "etcd-0")["status"]["podIP"]
        .as_str()
        .unwrap()
        .to_string();
    let host = format!("etcd-0.etcd.{ns}.svc");
    let out = std::process::Command::new("curl")
        .args(["-sS", "--max-time", "3", "--cacert"])
        .arg(client.join("ca.crt"))
        .args(["--resolve", &format!("{host}:2379:{ip}"), "-d", "{}"])
        .arg(format!("https://{host}:2379/v3/maintenance/status"))
        .output()
        .unwrap();
    let answer: Option<serde_json::Value> = serde_json::from_slice(&out.stdout).ok();
    assert!(
        answer.is_none_or(|a| a.get("header").is_none()),
        "etcd answered a client without a certificate: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn status_reads_an_etcd_that_requires_client_certificates_on_every_route() {
    let _nodes = shared_nodes();
    let (ns, client, leader, term) = tls_etcd("tls-status");
    assert_requires_client_certificates(&ns.name, &client);
    status_on_every_route("etcd", &ns.name, &leader, term);
}

/// `status` of a TLS cluster on each route: every voter healthy, the leader and the term its
/// servers report (read with curl by the caller), read verified.
fn status_on_every_route(sts: &str, ns: &str, leader: &str, term: u64) {
    for via in ["proxy", "port-forward", "direct"] {
        let report = status_json(&[sts, "-n", ns, "--via", via, "--probe-timeout", "5s"]);
        let c = cluster(&report, ns);
        let s = &c["summary"];
        assert_eq!(s["healthyVoters"], 3, "--via {via}: {c:#}");
        assert_eq!(s["leader"], leader, "--via {via}");
        assert_eq!(s["term"], term, "--via {via}: the term the servers report");
        let codes: Vec<&str> = c["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|w| w["code"].as_str())
            .collect();
        assert!(!codes.contains(&"TlsUnverified"), "--via {via}: {codes:?}");
    }
}

#[test]
fn yield_hands_over_the_leadership_of_a_tls_etcd() {
    let _nodes = shared_nodes();
    let (ns, client, before, term) = tls_etcd("tls-yield");
    let (code, y, err) = yield_json(&["etcd", "-n", &ns.name, "--via", "port-forward"]);
    assert_eq!(code, Some(0), "yield failed: {err}\n{y:#}");
    let mut after = None;
    wait_in(
        &ns.name,
        std::time::Duration::from_secs(10),
        "etcd to name its new leader",
        || {
            after = etcd_tls_leader(&ns.name, &client);
            after.as_ref().is_some_and(|(l, _)| *l != before)
        },
    );
    let (after, new_term) = after.unwrap();
    assert_eq!(y["newLeader"], after.as_str(), "{y:#}");
    assert_eq!(new_term, term + 1, "one transfer, no election");
}

#[test]
fn a_tls_etcd_read_with_the_wrong_tls_says_what_is_wrong_and_what_to_do() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("tls-refused");
    let ca = TestCa::new();
    let client = deploy_etcd_tls(&ns.name, &ca);
    // The CA without a client certificate.
    client_secret(&ns.name, &client, "etcd-client-tls", &["ca.crt"]);
    // What status says of the cluster: it cannot look, so it stops with why, not a report.
    let detail = |args: &[&str]| status_refused("etcd", &ns.name, args);
    let d = detail(&[]);
    assert!(
        d.contains("requires a client certificate"),
        "no client certificate: {d}"
    );
    // Another CA's, named by the flags for this named cluster (over its annotation's).
    let other = TestCa::new();
    let wrong = tls_files(&ns.name, "wrong", &[("ca.crt", &other.pem())]);
    let d = detail(&["--tls-ca", wrong.join("ca.crt").to_str().unwrap()]);
    assert!(d.contains("unknown CA"), "another CA: {d}");
    // A client certificate that has expired.
    let expired = ca.issue(&["kubectl-raft".to_string()], -1);
    let old = tls_files(
        &ns.name,
        "expired",
        &[("tls.crt", &expired.cert), ("tls.key", &expired.key)],
    );
    let d = detail(&[
        "--tls-ca",
        client.join("ca.crt").to_str().unwrap(),
        "--tls-cert",
        old.join("tls.crt").to_str().unwrap(),
        "--tls-key",
        old.join("tls.key").to_str().unwrap(),
    ]);
    assert!(
        d.contains("refused the client certificate"),
        "expired client certificate: {d}"
    );
}

#[test]
fn a_tls_secret_its_writer_did_not_label_is_not_used() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("tls-unlabelled");
    let ca = TestCa::new();
    let client = deploy_etcd_tls(&ns.name, &ca);
    let read = |k: &str| std::fs::read_to_string(client.join(k)).unwrap();
    let (c, t, k) = (read("ca.crt"), read("tls.crt"), read("tls.key"));
    tls_secret(
        &ns.name,
        "etcd-client-tls",
        &[("ca.crt", &c), ("tls.crt", &t), ("tls.key", &k)],
        &[],
    );
    let report = status_json(&["-n", &ns.name, "--probe-timeout", "5s"]);
    let c = cluster(&report, &ns.name);
    assert_eq!(c["summary"]["healthyVoters"], 0, "{c:#}");
    let w = c["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["code"] == "CredentialsUnreadable")
        .unwrap_or_else(|| panic!("a warning: {c:#}"));
    assert!(
        w["message"].as_str().unwrap().contains("is not labelled"),
        "{w}"
    );
    // Read without its CA through pods/proxy, whose API server verifies nothing: marked.
    assert!(
        c["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w["code"] == "TlsUnverified"),
        "{c:#}"
    );
}

/// A TLS etcd whose annotation names its labelled client Secret: the namespace, the client's
/// files, the leader and the term (by etcd, read with curl).
fn tls_etcd(prefix: &str) -> TlsCluster {
    tls_cluster(prefix, deploy_etcd_tls, "etcd-client-tls", etcd_tls_leader)
}

/// A TLS cluster: its namespace, the client's files, the leader and the term (by its servers,
/// read with curl).
type TlsCluster = (TestNamespace, std::path::PathBuf, String, u64);

/// A TLS cluster deployed by `deploy`, whose annotation names the labelled client Secret
/// `secret`, and its leader by `leader`.
fn tls_cluster(
    prefix: &str,
    deploy: fn(&str, &TestCa) -> std::path::PathBuf,
    secret: &str,
    leader: fn(&str, &Path) -> Option<(String, u64)>,
) -> TlsCluster {
    let ns = TestNamespace::new(prefix);
    let ca = TestCa::new();
    let client = deploy(&ns.name, &ca);
    client_secret(&ns.name, &client, secret, &["ca.crt", "tls.crt", "tls.key"]);
    let (l, term) = leader(&ns.name, &client).expect("one leader, by its servers");
    (ns, client, l, term)
}

/// The leader and term once every member is back and etcd names a leader other than `old`.
fn tls_leader_after(ns: &str, client: &Path, old: &str) -> (String, u64) {
    wait_etcd_ready(ns, 3);
    new_leader(ns, client, old, etcd_tls_leader)
}

/// The leader and term once the servers (read by `leader`) name one other than `old`.
fn new_leader(
    ns: &str,
    client: &Path,
    old: &str,
    leader: fn(&str, &Path) -> Option<(String, u64)>,
) -> (String, u64) {
    let mut now = None;
    wait_in(
        ns,
        Duration::from_secs(30),
        "a new leader, by the servers",
        || {
            now = leader(ns, client).filter(|(l, _)| l != old);
            now.is_some()
        },
    );
    now.unwrap()
}

#[test]
fn drain_of_a_tls_etcd_leaders_node_moves_it_once_before_the_eviction() {
    let _nodes = exclusive_nodes();
    drain_of_the_leaders_node_moves_it_once(tls_etcd("tls-drain"), tls_leader_after);
}

/// `kubectl raft drain` of the leader's node: it ends, and the servers' own term is one
/// higher (one transfer, no election), the new leader elsewhere.
fn drain_of_the_leaders_node_moves_it_once(
    (ns, client, leader, term): TlsCluster,
    after: fn(&str, &Path, &str) -> (String, u64),
) {
    let node = node_of(&ns.name, &leader);
    wait_node_alone(&node, &ns.name);
    let _cordoned = Cordoned(vec![node.clone()]);
    let (code, report, err) = verb_json("drain", &[&node, "--timeout", "90s"]);
    assert_eq!(code, Some(0), "drain failed: {err}\n{report:#}");
    let (now, new_term) = after(&ns.name, &client, &leader);
    assert_ne!(node_of(&ns.name, &now), node);
    assert_eq!(
        new_term,
        term + 1,
        "one transfer, no election (by the servers' own term)"
    );
}

#[test]
fn restart_of_a_tls_etcd_replaces_every_member_and_moves_the_leader_once() {
    let _nodes = shared_nodes();
    let (ns, client, leader, term) = tls_etcd("tls-restart");
    let before = uids(&ns.name);
    let (code, report, err) = verb_json("restart", &["etcd", "-n", &ns.name, "--timeout", "120s"]);
    assert_eq!(code, Some(0), "restart failed: {err}\n{report:#}");
    let (_, after) = tls_leader_after(&ns.name, &client, &leader);
    let now = uids(&ns.name);
    for (pod, uid) in &before {
        assert_ne!(now.get(pod), Some(uid), "{pod} was not replaced");
    }
    assert_eq!(
        after,
        term + 1,
        "one transfer, no election (by etcd's own term)"
    );
}

#[test]
fn plain_kubectl_drain_of_a_tls_etcd_leaders_node_through_the_gate_gets_one_transfer() {
    let _nodes = exclusive_all_nodes();
    let (ns, client, leader, term) = tls_etcd("tls-gate");
    let _g = Gated::start(&ns.name);
    let node = node_of(&ns.name, &leader);
    wait_node_holds_only(&node, &[&ns.name, GATE_NS]);
    let _cordoned = Cordoned(vec![node.clone()]);
    plain_drain_ok(&node);
    let events = kubectl_json(&["get", "events", "-n", &ns.name]);
    assert!(
        events["items"].as_array().unwrap().iter().any(|e| {
            e["reason"] == "TransferStarted" && e["involvedObject"]["name"] == leader.as_str()
        }),
        "the gate moved the leader itself (an Event TransferStarted on {leader}): {events}"
    );
    let (_, after) = tls_leader_after(&ns.name, &client, &leader);
    assert_eq!(
        after,
        term + 1,
        "one transfer, no election (by etcd's own term)"
    );
}

/// The preStop hook with the pod's own mounted certificates (the server's, which etcd's CA
/// signed): it hands over before the kubelet stops the leader.
#[test]
fn yield_local_in_a_prestop_hook_hands_over_a_tls_etcd_with_the_pods_mounted_certificates() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("tls-hook");
    let ca = TestCa::new();
    let bin = env!("CARGO_BIN_EXE_kubectl-raft");
    let hook = format!(
        r#"command: [/bin/sh, -c, "{bin} yield --local --system etcd --tls-ca /etc/etcd/tls/ca.crt --tls-cert /etc/etcd/tls/tls.crt --tls-key /etc/etcd/tls/tls.key --pod-grace-period 30 >> /var/lib/etcd/prestop.log 2>&1"]"#
    );
    // Kubernetes' default grace period: the hook's time leaves room to look again when the
    // peers answer slowly under load (half of its 20 s).
    let client = deploy_etcd_tls_with(&ns.name, &ca, |m| {
        m.replace(
            r#"command: [/bin/sh, -c, "date +%s > /var/lib/etcd/prestop-ran"]"#,
            &hook,
        )
        .replace(
            "terminationGracePeriodSeconds: 10",
            "terminationGracePeriodSeconds: 30",
        )
    });
    let (leader, term) = etcd_tls_leader(&ns.name, &client).expect("one leader, by etcd");
    let pvc = kubectl_json(&["get", "pvc", &format!("data-{leader}"), "-n", &ns.name]);
    let pv = kubectl_json(&["get", "pv", pvc["spec"]["volumeName"].as_str().unwrap()]);
    let log = Path::new(pv["spec"]["hostPath"]["path"].as_str().unwrap()).join("prestop.log");
    kubectl_ok(&["delete", "pod", &leader, "-n", &ns.name, "--wait=true"]);
    let said = std::fs::read_to_string(&log).unwrap_or_else(|e| panic!("{}: {e}", log.display()));
    let (now, after) = tls_leader_after(&ns.name, &client, &leader);
    assert!(
        said.contains(&format!("handed leadership to {now}")),
        "the hook handed over to the member etcd names now: {said}"
    );
    assert_eq!(
        after,
        term + 1,
        "one transfer, no election (by etcd's own term)"
    );
}

// The Consul stand-in (hashicorp/raft behind Consul's HTTP API) on HTTPS only, client
// certificates required (Consul's `verify_incoming`), its pods declaring only the port `https`
// as Consul's Helm chart does: no scheme annotation, the consul profile's TLS port. The truth
// is hashicorp/raft's own Stats() on each server, read with curl.

/// The stand-in with its labelled client Secret: the namespace, the client's files, the
/// leader and the term (by the servers).
fn tls_consul(prefix: &str) -> TlsCluster {
    tls_cluster(
        prefix,
        deploy_hraft_tls,
        "hraft-client-tls",
        hraft_tls_leader,
    )
}

/// A new leader, by the servers, once there is one other than `old`.
fn consul_leader_after(ns: &str, client: &Path, old: &str) -> (String, u64) {
    new_leader(ns, client, old, hraft_tls_leader)
}

#[test]
fn status_reads_a_consul_standin_that_requires_client_certificates_on_every_route() {
    let _nodes = shared_nodes();
    let (ns, client, leader, term) = tls_consul("tls-consul-status");
    // Positive control: the server refuses curl without a client certificate.
    let ip = pod_json(&ns.name, "hraft-0")["status"]["podIP"]
        .as_str()
        .unwrap()
        .to_string();
    let host = format!("hraft-0.hraft.{}.svc", ns.name);
    let bare = std::process::Command::new("curl")
        .args(["-sS", "--max-time", "3", "--cacert"])
        .arg(client.join("ca.crt"))
        .args(["--resolve", &format!("{host}:8501:{ip}")])
        .arg(format!("https://{host}:8501/v1/agent/self"))
        .output()
        .unwrap();
    // (The same request with the client certificate is how the leader above was read.)
    assert!(
        !bare.status.success() && bare.stdout.is_empty(),
        "the stand-in answered a client without a certificate: {}",
        String::from_utf8_lossy(&bare.stdout)
    );
    status_on_every_route("hraft", &ns.name, &leader, term);
}

#[test]
fn yield_hands_over_the_leadership_of_a_tls_consul_standin() {
    let _nodes = shared_nodes();
    let (ns, client, before, term) = tls_consul("tls-consul-yield");
    let (code, y, err) = yield_json(&["hraft", "-n", &ns.name, "--via", "direct"]);
    assert_eq!(code, Some(0), "yield failed: {err}\n{y:#}");
    let (after, new_term) = consul_leader_after(&ns.name, &client, &before);
    assert_eq!(y["newLeader"], after.as_str(), "{y:#}");
    assert_eq!(new_term, term + 1, "one transfer, no election");
}

#[test]
fn drain_of_a_tls_consul_standin_leaders_node_moves_it_once_before_the_eviction() {
    let _nodes = exclusive_nodes();
    drain_of_the_leaders_node_moves_it_once(tls_consul("tls-consul-drain"), consul_leader_after);
}

#[test]
fn a_tls_consul_standin_read_without_a_client_certificate_says_so() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("tls-consul-nocert");
    let ca = TestCa::new();
    let client = deploy_hraft_tls(&ns.name, &ca);
    client_secret(&ns.name, &client, "hraft-client-tls", &["ca.crt"]);
    let d = status_refused("hraft", &ns.name, &[]);
    assert!(
        d.contains("requires a client certificate"),
        "no client certificate: {d}"
    );
}

/// A credentials Secret that cannot be read (absent) costs the cluster its token, not its TLS:
/// the replicas are still read over verified TLS with the client certificate.
#[test]
fn an_unreadable_credentials_secret_keeps_the_clusters_tls() {
    let _nodes = shared_nodes();
    let (ns, _client, leader, _term) = tls_etcd("tls-nocreds");
    unreadable_credentials(&ns.name);
    let report = status_json(&[
        "etcd",
        "-n",
        &ns.name,
        "--via",
        "direct",
        "--probe-timeout",
        "5s",
    ]);
    let c = cluster(&report, &ns.name);
    let codes: Vec<&str> = c["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|w| w["code"].as_str())
        .collect();
    assert!(codes.contains(&"CredentialsUnreadable"), "{c:#}");
    assert_eq!(c["summary"]["healthyVoters"], 3, "{c:#}");
    assert_eq!(c["summary"]["leader"], leader.as_str(), "{c:#}");
}

/// Its credentials Secret cannot be read, so its leader's transfer (sent with them) would fail:
/// the restart stops before its first eviction, naming why, instead of replacing the followers
/// and stopping at the leader. (Read without its credentials, over its TLS, the cluster looks
/// healthy.)
#[test]
fn restart_of_a_cluster_whose_credentials_cannot_be_read_stops_before_its_first_eviction() {
    let _nodes = shared_nodes();
    let (ns, client, leader, term) = tls_etcd("tls-restart-nocreds");
    unreadable_credentials(&ns.name);
    let before = uids(&ns.name);
    let (code, report, err) = verb_json("restart", &["etcd", "-n", &ns.name, "--timeout", "60s"]);
    assert_eq!(code, Some(1), "{err}\n{report:#}");
    assert!(
        err.contains("could not be read") && err.contains("before changing anything"),
        "{err}"
    );
    assert_eq!(uids(&ns.name), before, "no member was replaced");
    assert_eq!(
        etcd_tls_leader(&ns.name, &client),
        Some((leader, term)),
        "nothing moved (by etcd)"
    );
}

/// The etcd StatefulSet of `ns` names a credentials Secret that does not exist: its
/// credentials cannot be read.
fn unreadable_credentials(ns: &str) {
    kubectl_ok(&[
        "annotate",
        "sts",
        "etcd",
        "-n",
        ns,
        "kubectl-raft.io/credentials-secret=absent",
    ]);
}

/// `kubectl raft status CLUSTER -n NS ARGS` that fails: what it says on stderr.
fn status_refused(cluster: &str, ns: &str, args: &[&str]) -> String {
    let mut a = vec!["status", cluster, "-n", ns, "--probe-timeout", "5s"];
    a.extend_from_slice(args);
    let out = raft(&a);
    if out.status.success() {
        // What each replica's probe said, for the failure's message.
        a.extend(["-o", "json"]);
        let json = stdout(&raft(&a));
        panic!("status succeeded: {}\n{json}", stdout(&out));
    }
    stderr(&out)
}
