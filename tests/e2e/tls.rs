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
    restart_replaces_every_member_and_moves_the_leader_once(
        "etcd",
        tls_etcd("tls-restart"),
        tls_leader_after,
    );
}

#[test]
fn restart_of_a_tls_consul_standin_replaces_every_server_and_moves_the_leader_once() {
    let _nodes = shared_nodes();
    restart_replaces_every_member_and_moves_the_leader_once(
        "hraft",
        tls_consul("tls-consul-restart"),
        consul_leader_after,
    );
}

/// `kubectl raft restart STS`: every member replaced (by its pod's uid), and the servers' own
/// term one higher once all are back (one transfer, no election).
fn restart_replaces_every_member_and_moves_the_leader_once(
    sts: &str,
    (ns, client, leader, term): TlsCluster,
    after: fn(&str, &Path, &str) -> (String, u64),
) {
    let before = uids(&ns.name);
    let (code, report, err) = verb_json("restart", &[sts, "-n", &ns.name, "--timeout", "120s"]);
    assert_eq!(code, Some(0), "restart failed: {err}\n{report:#}");
    let (_, new_term) = after(&ns.name, &client, &leader);
    let now = uids(&ns.name);
    for (pod, uid) in &before {
        assert_ne!(now.get(pod), Some(uid), "{pod} was not replaced");
    }
    assert_eq!(
        new_term,
        term + 1,
        "one transfer, no election (by the servers' own term)"
    );
}

#[test]
fn plain_kubectl_drain_of_a_tls_etcd_leaders_node_through_the_gate_gets_one_transfer() {
    let _nodes = exclusive_all_nodes();
    plain_drain_through_the_gate_moves_the_leader_once(tls_etcd("tls-gate"), tls_leader_after);
}

#[test]
fn plain_kubectl_drain_of_a_tls_consul_standin_leaders_node_through_the_gate_gets_one_transfer() {
    let _nodes = exclusive_all_nodes();
    plain_drain_through_the_gate_moves_the_leader_once(
        tls_consul("tls-consul-gate"),
        consul_leader_after,
    );
}

/// The gate moved `leader` itself: an Event TransferStarted on it.
fn assert_the_gate_moved_it(ns: &str, leader: &str) {
    let events = kubectl_json(&["get", "events", "-n", ns]);
    assert!(
        events["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| { e["reason"] == "TransferStarted" && e["involvedObject"]["name"] == leader }),
        "the gate moved the leader itself (an Event TransferStarted on {leader}): {events}"
    );
}

/// Plain `kubectl drain` of the leader's node with the gate on: the gate moved the leader
/// itself over the cluster's TLS (an Event TransferStarted on it), and the servers' own term
/// is one higher (one transfer, no election).
fn plain_drain_through_the_gate_moves_the_leader_once(
    (ns, client, leader, term): TlsCluster,
    after: fn(&str, &Path, &str) -> (String, u64),
) {
    let _g = Gated::start(&ns.name);
    let node = node_of(&ns.name, &leader);
    wait_node_holds_only(&node, &[&ns.name, GATE_NS]);
    let _cordoned = Cordoned(vec![node.clone()]);
    plain_drain_ok(&node);
    assert_the_gate_moved_it(&ns.name, &leader);
    let (_, new_term) = after(&ns.name, &client, &leader);
    assert_eq!(
        new_term,
        term + 1,
        "one transfer, no election (by the servers' own term)"
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

// NATS with TLS (tests/manifests/nats-3-tls.yaml): one `tls {}` block, so the client port takes
// only TLS with a client certificate signed by the CA (`verify: true`) and the monitor serves
// HTTPS only. The truth is each server's own /jsz, read over HTTPS through the API server's
// pods/proxy (which verifies nothing), and a client of the test's own (Python's ssl).

/// A TLS NATS whose annotation names its labelled client Secret holding `keys` of the
/// client's files: the namespace, the client's files, the meta leader (by the servers).
fn tls_nats(prefix: &str, keys: &[&str]) -> (TestNamespace, std::path::PathBuf, String) {
    let ns = TestNamespace::new(prefix);
    let ca = TestCa::new();
    let client = deploy_nats_tls(&ns.name, &ca);
    client_secret(&ns.name, &client, "nats-client-tls", keys);
    let leader = nats_tls_meta_leader(&ns.name, "nats-0").expect("a meta leader, by the servers");
    (ns, client, leader)
}

/// The first line a NATS server answers a PING with over TLS, as the account APP's user, from
/// a client of the test's own (Python's ssl: INFO in the clear, then the TLS handshake), with
/// the client certificate in `client` if `present`; or how it failed.
fn nats_tls_ping(ns: &str, pod: &str, client: &Path, present: bool) -> String {
    let ip = pod_json(ns, pod)["status"]["podIP"]
        .as_str()
        .unwrap()
        .to_string();
    let script = r#"
import socket, ssl, sys
ip, ca, cert, key = sys.argv[1:5]
s = socket.create_connection((ip, 4222), timeout=5)
info = b""
while not info.endswith(b"\r\n"):
    info += s.recv(1)
ctx = ssl.create_default_context(cafile=ca)
ctx.check_hostname = False
if cert:
    ctx.load_cert_chain(cert, key)
try:
    t = ctx.wrap_socket(s)
    t.sendall(b'CONNECT {"verbose":false,"user":"app","pass":"app"}\r\nPING\r\n')
    print(t.recv(4096).decode().splitlines()[0])
except Exception as e:
    print("failed:", e)
"#;
    let (cert, key) = if present {
        (client.join("tls.crt"), client.join("tls.key"))
    } else {
        Default::default()
    };
    let out = std::process::Command::new("python3")
        .args(["-c", script, &ip])
        .arg(client.join("ca.crt"))
        .args([&cert, &key])
        .output()
        .unwrap();
    format!("{}{}", stdout(&out), stderr(&out))
}

/// The system account's user, from the TLS manifest's Secret nats-sys.
const NATS_SYS: [(&str, &str); 2] = [("NATS_USER", "sys"), ("NATS_PASSWORD", "sys-secret")];

#[test]
fn status_reads_a_nats_cluster_whose_monitor_speaks_https_on_every_route() {
    let _nodes = shared_nodes();
    let (ns, client, leader) = tls_nats("tls-nats-status", &CLIENT_KEYS);
    // Positive control: the servers take a client only over TLS with its certificate.
    let with = nats_tls_ping(&ns.name, "nats-0", &client, true);
    let without = nats_tls_ping(&ns.name, "nats-0", &client, false);
    assert!(
        with.starts_with("PONG"),
        "with a client certificate: {with}"
    );
    assert!(!without.contains("PONG"), "without one: {without}");
    for via in ["proxy", "port-forward", "direct"] {
        let report = status_json(&[
            "nats",
            "-n",
            &ns.name,
            "--via",
            via,
            "--probe-timeout",
            "5s",
        ]);
        let c = cluster(&report, &ns.name);
        assert_eq!(c["summary"]["healthyVoters"], 3, "--via {via}: {c:#}");
        assert_eq!(
            c["summary"]["leader"],
            leader.as_str(),
            "--via {via}: {c:#}"
        );
    }
}

#[test]
fn yield_moves_the_meta_leader_of_a_nats_cluster_that_requires_client_certificates() {
    let _nodes = shared_nodes();
    let (ns, _client, leader) = tls_nats("tls-nats-yield", &CLIENT_KEYS);
    let target = ["nats-0", "nats-1", "nats-2"]
        .into_iter()
        .find(|n| *n != leader)
        .unwrap();
    // The default route: HTTPS through a port-forward (pods/proxy verifies nothing), and the
    // stepdown over the NATS client protocol through another, TLS end to end.
    let out = raft_env(
        &NATS_SYS,
        &[
            "yield", "nats", "-n", &ns.name, "--to", target, "-o", "json",
        ],
    );
    let y: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    assert_eq!(out.status.code(), Some(0), "{}\n{y:#}", stderr(&out));
    for server in ["nats-0", "nats-1", "nats-2"] {
        assert_eq!(
            nats_tls_meta_leader(&ns.name, server).as_deref(),
            Some(target),
            "{server} names the new meta leader"
        );
    }
}

#[test]
fn yield_of_a_nats_cluster_without_a_client_certificate_says_one_is_required() {
    let _nodes = shared_nodes();
    let (ns, _client, leader) = tls_nats("tls-nats-nocert", &["ca.crt"]);
    let out = raft_env(
        &NATS_SYS,
        &["yield", "nats", "-n", &ns.name, "--via", "direct"],
    );
    let err = stderr(&out);
    assert_ne!(
        out.status.code(),
        Some(0),
        "yield succeeded without a client certificate"
    );
    assert!(
        err.contains("requires a client certificate and none was given"),
        "{err}"
    );
    assert_eq!(
        nats_tls_meta_leader(&ns.name, "nats-0"),
        Some(leader),
        "the meta leader did not move"
    );
}

/// Every key of the client's files: the CA, and the client certificate the servers require.
const CLIENT_KEYS: [&str; 3] = ["ca.crt", "tls.crt", "tls.key"];

/// The meta leader once all three TLS servers are Ready and name the same one.
fn tls_nats_leader_agreed(ns: &str) -> String {
    let mut agreed = None;
    wait_in(
        ns,
        Duration::from_secs(120),
        "3 Ready TLS NATS servers naming one meta leader",
        || {
            let ready =
                kubectl_json(&["get", "sts", "nats", "-n", ns])["status"]["readyReplicas"] == 3;
            let named: Vec<Option<String>> = ["nats-0", "nats-1", "nats-2"]
                .iter()
                .map(|s| nats_tls_meta_leader(ns, s))
                .collect();
            agreed = named[0]
                .clone()
                .filter(|l| named.iter().all(|n| n.as_ref() == Some(l)));
            ready && agreed.is_some()
        },
    );
    agreed.unwrap()
}

/// `kubectl raft drain` of the meta leader's node: it ends (the meta stepdown went over the
/// client port's TLS with the client certificate: without them it stops), and the servers
/// name a meta leader on another node.
#[test]
fn drain_of_a_tls_nats_meta_leaders_node_moves_it_off_the_node() {
    let _nodes = exclusive_nodes();
    let (ns, _client, leader) = tls_nats("tls-nats-drain", &CLIENT_KEYS);
    let node = node_of(&ns.name, &leader);
    wait_node_alone(&node, &ns.name);
    let _cordoned = Cordoned(vec![node.clone()]);
    let out = raft_env(
        &NATS_SYS,
        &["drain", &node, "--timeout", "90s", "--credentials-from-env"],
    );
    assert_eq!(out.status.code(), Some(0), "drain failed: {}", stderr(&out));
    let now = tls_nats_leader_agreed(&ns.name);
    assert_ne!(node_of(&ns.name, &now), node, "the meta leader left {node}");
}

/// Plain `kubectl drain` of the TLS NATS meta leader's node with the gate on, at the pods' IPs
/// as docs/gate.yaml runs it: the gate moved the meta leader itself (an Event TransferStarted
/// on it) over the client port's TLS, with the client certificate and the system user the
/// StatefulSet names, and the meta group's own term is one higher (one transfer, no election).
#[test]
fn plain_kubectl_drain_of_a_tls_nats_meta_leaders_node_through_the_gate_gets_one_transfer() {
    let _nodes = exclusive_nodes();
    let (ns, _client, leader) = tls_nats("tls-nats-gate", &CLIENT_KEYS);
    nats_ops_credentials(&ns.name);
    let term = meta_term_at(&ns.name, &format!("https:{leader}:8222")).expect("a meta term");
    let _g = Gated::start_with(&ns.name, &["--via", "direct"]);
    let node = node_of(&ns.name, &leader);
    wait_node_holds_only(&node, &[&ns.name, GATE_NS]);
    let _cordoned = Cordoned(vec![node.clone()]);
    plain_drain_ok(&node);
    assert_the_gate_moved_it(&ns.name, &leader);
    let now = tls_nats_leader_agreed(&ns.name);
    assert_ne!(now, leader, "the meta leader moved");
    assert_eq!(
        meta_term_at(&ns.name, &format!("https:{now}:8222")),
        Some(term + 1),
        "one meta leader change, by the servers' own term (an election besides it would move it more)"
    );
}

/// `kubectl raft restart` of the TLS servers: every server replaced (by its pod's uid), and the
/// servers agree on a meta leader after.
#[test]
fn restart_of_a_tls_nats_cluster_replaces_every_server() {
    let _nodes = shared_nodes();
    let (ns, _client, _leader) = tls_nats("tls-nats-restart", &CLIENT_KEYS);
    let before = uids(&ns.name);
    let out = raft_env(
        &NATS_SYS,
        &["restart", "nats", "-n", &ns.name, "--timeout", "180s"],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "restart failed: {}",
        stderr(&out)
    );
    let now = uids(&ns.name);
    for (pod, uid) in &before {
        assert_ne!(now.get(pod), Some(uid), "{pod} was not replaced");
    }
    tls_nats_leader_agreed(&ns.name);
}
