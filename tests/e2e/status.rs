//! `kubectl raft status` against real etcd StatefulSets in the test world.

use std::time::{Duration, Instant};

use crate::common::*;
use serde_json::Value;

#[test]
fn status_shows_one_leader_terms_indices_endpoints_and_fault_tolerance_one() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("status-ok");
    deploy_etcd(&ns.name, 3);
    let (leader_pod, leader_id) = etcd_leader(&ns.name).expect("one leader");
    let truth = etcd_status(&ns.name, &leader_pod).unwrap();

    let report = status_json(&["-n", &ns.name, "--probe-timeout", "5s"]);
    assert_eq!(report["apiVersion"], "kubectl-raft/v1alpha1");
    let c = cluster(&report, &ns.name);
    assert_eq!(c["name"], "etcd");
    assert_eq!(c["system"], "etcd");
    let s = &c["summary"];
    assert_eq!(s["members"], 3);
    assert_eq!(s["voters"], 3);
    assert_eq!(s["healthyVoters"], 3);
    assert_eq!(s["quorum"], 2);
    assert_eq!(s["hasQuorum"], true);
    assert_eq!(s["faultTolerance"], 1);
    assert_eq!(s["leader"], leader_pod.as_str());
    let replicas = c["replicas"].as_array().unwrap();
    assert_eq!(replicas.len(), 3);
    let leaders: Vec<&Value> = replicas
        .iter()
        .filter(|r| r["raft"]["role"] == "leader")
        .collect();
    assert_eq!(leaders.len(), 1, "exactly one leader");
    assert_eq!(leaders[0]["pod"], leader_pod.as_str());
    assert_eq!(leaders[0]["raft"]["memberId"], leader_id.as_str());
    let term: u64 = truth["raftTerm"].as_str().unwrap().parse().unwrap();
    let index: u64 = truth["raftIndex"].as_str().unwrap().parse().unwrap();
    assert_eq!(s["term"], term, "the leader's term as etcd reports it");
    for r in replicas {
        assert_eq!(r["raft"]["term"], term, "{}: term", r["pod"]);
        let idx = r["raft"]["commitIndex"].as_u64().expect("commit index");
        // Every /health check is a quorum read that moves the index, so compare loosely.
        assert!(
            idx >= index && idx < index + 100,
            "{}: index {idx} near {index}",
            r["pod"]
        );
        assert!(r["raft"]["appliedIndex"].as_u64().is_some());
        assert!(
            r["raft"]["lag"].as_u64().is_some_and(|l| l < 50),
            "{}: small lag",
            r["pod"]
        );
        assert_eq!(r["raft"]["health"]["state"], "ok");
        assert_eq!(r["raft"]["leaderPod"], leader_pod.as_str());
        assert_eq!(r["ready"], true);
        assert!(r["node"].as_str().is_some());
        let eps = r["endpoints"].as_array().unwrap();
        let names: Vec<&str> = eps.iter().map(|e| e["service"].as_str().unwrap()).collect();
        assert_eq!(
            names.len(),
            2,
            "both Services publish the replica: {names:?}"
        );
        assert!(names.contains(&"etcd") && names.contains(&"etcd-client"));
        for e in eps {
            assert_eq!(e["listed"], true);
            assert_eq!(e["ready"], true);
            assert_eq!(e["serving"], true);
            assert_eq!(e["terminating"], false);
        }
    }
    let services = c["services"].as_array().unwrap();
    let headless = services.iter().find(|s| s["name"] == "etcd").unwrap();
    assert_eq!(headless["headless"], true);
    assert_eq!(headless["publishNotReadyAddresses"], true);
    assert_eq!(c["pdb"]["name"], "etcd");
    assert_eq!(c["pdb"]["disruptionsAllowed"], 1);
    assert!(
        c["warnings"].as_array().unwrap().is_empty(),
        "a healthy cluster has no warnings: {}",
        c["warnings"]
    );

    // The table says the same.
    let out = raft(&["status", "-n", &ns.name, "--probe-timeout", "5s"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let table = stdout(&out);
    assert!(table.contains("fault tolerance 1"), "{table}");
    assert!(
        table.contains(&format!("leader {leader_pod} (term {term})")),
        "{table}"
    );
    let rows: Vec<&str> = table.lines().filter(|l| l.starts_with("etcd-")).collect();
    assert_eq!(rows.len(), 3, "{table}");
    assert_eq!(
        rows.iter().filter(|l| l.contains(" leader ")).count(),
        1,
        "{table}"
    );
    assert!(table.contains("etcd-client:ready"), "{table}");
    let wide = stdout(&raft(&["status", "etcd", "-n", &ns.name, "-o", "wide"]));
    assert!(
        wide.contains("MEMBER") && wide.contains(&leader_id),
        "{wide}"
    );
    // YAML carries the same schema.
    let yaml = stdout(&raft(&["status", "sts/etcd", "-n", &ns.name, "-o", "yaml"]));
    assert!(
        yaml.contains("apiVersion: kubectl-raft/v1alpha1") && yaml.contains("faultTolerance: 1"),
        "{yaml}"
    );
    // Direct to pod IPs (as from inside the cluster) gives the same facts.
    let direct = status_json(&["-n", &ns.name, "--via", "direct"]);
    assert_eq!(
        cluster(&direct, &ns.name)["summary"]["leader"],
        leader_pod.as_str()
    );
}

/// A member that hangs (SIGSTOP): the table still returns promptly, marks it, shows fault
/// tolerance 0 and warns; after SIGCONT all is well again.
#[test]
fn a_hung_member_is_marked_and_fault_tolerance_drops_to_zero() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("status-hung");
    deploy_etcd(&ns.name, 3);
    let (leader_pod, _) = etcd_leader(&ns.name).expect("one leader");
    let victim = etcd_pods(&ns.name)
        .iter()
        .map(|p| p["metadata"]["name"].as_str().unwrap().to_string())
        .find(|p| *p != leader_pod)
        .unwrap();
    let pid = container_pid(&ns.name, &victim);
    while_frozen(pid, || {
        let start = Instant::now();
        let out = raft(&["status", "-n", &ns.name, "--probe-timeout", "2s"]);
        let took = start.elapsed();
        assert!(out.status.success(), "{}", stderr(&out));
        let table = stdout(&out);
        assert!(
            took < Duration::from_secs(20),
            "returned in {took:?}, not stuck on the hung member"
        );
        assert!(table.contains("fault tolerance 0"), "{table}");
        let row = table
            .lines()
            .find(|l| l.trim_start().starts_with(&victim))
            .unwrap();
        assert!(
            row.contains("unreachable"),
            "the hung member is marked: {row}"
        );
        assert!(table.contains("WARNING: fault tolerance is 0"), "{table}");

        let report = status_json(&["-n", &ns.name]);
        let c = cluster(&report, &ns.name);
        assert_eq!(c["summary"]["faultTolerance"], 0);
        assert_eq!(c["summary"]["healthyVoters"], 2);
        assert_eq!(c["summary"]["hasQuorum"], true);
        assert_eq!(c["summary"]["leader"], leader_pod.as_str());
        let r = c["replicas"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["pod"] == victim.as_str())
            .unwrap();
        assert_eq!(r["raft"]["health"]["state"], "unreachable");
        assert!(
            r["raft"]["health"]["detail"]
                .as_str()
                .unwrap()
                .contains("no answer within 2s"),
            "{}",
            r["raft"]["health"]
        );
        let codes = warning_codes(c);
        assert!(codes.contains(&"FaultToleranceZero"), "{codes:?}");
        // The pod still counts as Ready to Kubernetes until its probe fails twice; either
        // way the contradiction or the outage is reported.
        assert!(
            codes
                .iter()
                .any(|c| *c == "ReadyButUnhealthy" || *c == "Unreachable"),
            "{codes:?}"
        );
    });
    wait_etcd_ready(&ns.name, 3);
    let after = status_json(&["-n", &ns.name, "--probe-timeout", "5s"]);
    assert_eq!(cluster(&after, &ns.name)["summary"]["faultTolerance"], 1);
}

#[test]
fn all_namespaces_and_node_filter() {
    let _nodes = shared_nodes();
    let a = TestNamespace::new("status-a");
    let b = TestNamespace::new("status-b");
    deploy_etcd(&a.name, 3);
    deploy_etcd(&b.name, 3);
    let report = status_json(&["-A"]);
    cluster(&report, &a.name);
    cluster(&report, &b.name);
    let node = etcd_pods(&a.name)[0]["spec"]["nodeName"]
        .as_str()
        .unwrap()
        .to_string();
    let on_node = status_json(&["-A", "--node", &node]);
    for c in on_node["clusters"].as_array().unwrap() {
        let here = c["replicas"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["node"] == node.as_str());
        assert!(
            here,
            "every listed cluster has a replica on {node}: {}",
            c["name"]
        );
    }
    cluster(&on_node, &a.name);
    // An empty namespace: a note on stderr, nothing on stdout, success.
    let empty = TestNamespace::new("status-empty");
    let out = raft(&["status", "-n", &empty.name]);
    assert!(out.status.success());
    assert!(
        stderr(&out).contains("No Raft clusters found"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn systems_the_tool_does_not_know_can_be_named_or_described() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("status-custom");
    let annotate = |changes: &[&str]| {
        let mut args = vec!["annotate", "sts", "etcd", "-n", &ns.name, "--overwrite"];
        args.extend_from_slice(changes);
        kubectl_ok(&args);
    };
    // The same etcd under an image name nobody recognises.
    let manifest = std::fs::read_to_string(repo().join("tests/manifests/etcd-3.yaml")).unwrap();
    let disguised = manifest
        .replace("quay.io/coreos/etcd:v3.4.23", "registry.local/kv-store:1")
        .replace(
            "[/usr/bin/etcd]",
            "[/bin/sh, -c, 'exec /usr/bin/etcd \"$@\"', kv]",
        );
    let f = tempfile(&disguised);
    kubectl_ok(&["apply", "-n", &ns.name, "-f", f.path_str()]);
    wait_etcd_ready(&ns.name, 3);

    let out = raft(&["status", "-n", &ns.name]);
    assert!(out.status.success());
    assert!(
        stderr(&out).contains("No Raft clusters found"),
        "not recognised: {}",
        stderr(&out)
    );
    let out = raft(&["status", "etcd", "-n", &ns.name]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.starts_with("error: ") && err.contains("kubectl-raft.io/health-path"),
        "says how to describe it: {err}"
    );

    let forced = status_json(&["etcd", "-n", &ns.name, "--system", "etcd"]);
    assert_eq!(cluster(&forced, &ns.name)["summary"]["faultTolerance"], 1);

    // Health from annotations alone: no role, but health, quorum and endpoints.
    annotate(&[
        "kubectl-raft.io/port=client",
        "kubectl-raft.io/health-path=/health",
    ]);
    let described = status_json(&["-n", &ns.name]);
    let c = cluster(&described, &ns.name);
    assert_eq!(c["summary"]["healthyVoters"], 3);
    assert!(c["replicas"]
        .as_array()
        .unwrap()
        .iter()
        .all(|r| r["raft"]["health"]["state"] == "ok"));

    // Garbage and 404s are shown as such, per replica, and never stop the report.
    annotate(&[
        "kubectl-raft.io/role-path=/metrics",
        "kubectl-raft.io/role-json-pointer=/role",
    ]);
    let garbage = status_json(&["-n", &ns.name]);
    for r in cluster(&garbage, &ns.name)["replicas"].as_array().unwrap() {
        assert_eq!(r["raft"]["role"], "unknown");
        let errors = r["raft"]["errors"].to_string();
        assert!(
            errors.contains("/metrics") && errors.contains("not JSON"),
            "{errors}"
        );
    }
    annotate(&["kubectl-raft.io/health-path=/no-such-path"]);
    let missing = status_json(&["-n", &ns.name]);
    let c = cluster(&missing, &ns.name);
    assert_eq!(
        c["summary"]["hasQuorum"], false,
        "no replica passes a health check that 404s"
    );
    for r in c["replicas"].as_array().unwrap() {
        assert_eq!(r["raft"]["health"]["state"], "failing");
        assert!(
            r["raft"]["health"]["detail"]
                .as_str()
                .unwrap()
                .contains("HTTP 404"),
            "{}",
            r["raft"]["health"]
        );
    }
    annotate(&[
        "kubectl-raft.io/role-path-",
        "kubectl-raft.io/role-json-pointer-",
        "kubectl-raft.io/health-path=/health",
    ]);

    annotate(&[
        "kubectl-raft.io/system=etcd",
        "kubectl-raft.io/health-path-",
    ]);
    let named = status_json(&["-n", &ns.name]);
    assert!(cluster(&named, &ns.name)["summary"]["leader"]
        .as_str()
        .is_some());
}

fn assert_fails(args: &[&str], expect: &[&str]) {
    let out = raft(args);
    assert_eq!(
        out.status.code(),
        Some(1),
        "kubectl raft {} should fail; stdout: {}",
        args.join(" "),
        stdout(&out)
    );
    let err = stderr(&out);
    assert!(err.starts_with("error: "), "one clear error line: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    for e in expect {
        assert!(
            err.contains(e),
            "kubectl raft {}: {err:?} should mention {e:?}",
            args.join(" ")
        );
    }
    assert!(stdout(&out).is_empty(), "nothing on stdout");
}

#[test]
fn bad_input_gets_a_clear_error_and_a_nonzero_exit() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("status-bad");
    assert_fails(
        &["status", "-n", "no-such-namespace"],
        &["namespace \"no-such-namespace\" not found"],
    );
    assert_fails(
        &["status", "nope", "-n", &ns.name],
        &["statefulset \"nope\" not found"],
    );
    assert_fails(
        &["status", "--node", "no-such-node"],
        &["node \"no-such-node\" not found"],
    );
    assert_fails(
        &["status", "-n", &ns.name, "-l", "app=nothing-here"],
        &["no pods match"],
    );
    assert_fails(
        &["status", "--system", "mongodb", "-n", &ns.name],
        &["unknown system \"mongodb\"", "etcd"],
    );
    assert_fails(
        &["status", "deploy/x", "-n", &ns.name],
        &["only StatefulSets"],
    );
    let garbage = tempfile("this: [is not a kubeconfig");
    let out = raft_with(std::path::Path::new(garbage.path_str()), &["status"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("kubeconfig"), "{}", stderr(&out));
    let out = raft(&["status", "--kubeconfig", "/nonexistent/kubeconfig"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("/nonexistent/kubeconfig"),
        "{}",
        stderr(&out)
    );
    let out = raft(&["status", "--context", "no-such-context"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("no-such-context"), "{}", stderr(&out));
    // A usage error is clap's exit code 2, like kubectl's.
    assert_eq!(raft(&["status", "-o", "xml"]).status.code(), Some(2));
}

/// Least privilege: a ServiceAccount with no rights is told which verb on which resource it
/// lacks; one that may list but not use pods/proxy is told that, and pointed to --via direct.
#[test]
fn rbac_refusals_name_the_missing_permission() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("status-rbac");
    deploy_etcd(&ns.name, 3);
    kubectl_ok(&["create", "serviceaccount", "viewer", "-n", &ns.name]);
    let kubeconfig_for = |sa: &str| {
        let out = std::process::Command::new(world_dir().join("bin/kworld"))
            .args(["kubeconfig-for", &ns.name, sa])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::path::PathBuf::from(String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    let kc = kubeconfig_for("viewer");
    let out = raft_with(&kc, &["status"]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    assert!(
        err.contains("forbidden") && err.contains("list") && err.contains("statefulsets.apps"),
        "{err}"
    );

    let grant = |role: &str, verbs: &str, resources: &str| {
        kubectl_ok(&[
            "create",
            "role",
            role,
            "-n",
            &ns.name,
            &format!("--verb={verbs}"),
            &format!("--resource={resources}"),
        ]);
        let binding = [
            "create".to_string(),
            "rolebinding".into(),
            role.into(),
            "-n".into(),
            ns.name.clone(),
            format!("--role={role}"),
            format!("--serviceaccount={}:viewer", ns.name),
        ];
        kubectl_ok(&binding.iter().map(String::as_str).collect::<Vec<_>>());
    };
    grant(
        "raft-reader",
        "get,list",
        "statefulsets,pods,services,endpointslices.discovery.k8s.io,poddisruptionbudgets.policy",
    );
    wait_until(Duration::from_secs(10), "the role to apply", || {
        !stderr(&raft_with(&kc, &["status"])).contains("statefulsets.apps")
    });
    let out = raft_with(&kc, &["status"]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("forbidden") && err.contains("pods/proxy") && err.contains("--via direct"),
        "{err}"
    );

    grant("raft-proxy", "get,create", "pods/proxy");
    wait_until(Duration::from_secs(10), "the proxy role to apply", || {
        raft_with(&kc, &["status"]).status.success()
    });
    let out = raft_with(&kc, &["status", "-o", "json"]);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        cluster(&report, &ns.name)["summary"]["faultTolerance"],
        1,
        "least privilege is enough: get/list + pods/proxy"
    );
}

/// A second real system: ZooKeeper 3.8, read through its AdminServer. Its chart-style TCP
/// readiness probe is exactly what the tool warns about; a frozen follower is caught by the
/// tool while Kubernetes, probing TCP, still calls it Ready.
#[test]
fn zookeeper_ensemble_is_read_through_its_admin_server() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("status-zk");
    let manifest = repo().join("tests/manifests/zookeeper-3.yaml");
    kubectl_ok(&["apply", "-n", &ns.name, "-f", manifest.to_str().unwrap()]);
    let mut report = Value::Null;
    wait_until(
        Duration::from_secs(120),
        "the ensemble to elect a leader",
        || {
            let out = raft(&["status", "-n", &ns.name, "-o", "json"]);
            report = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
            report["clusters"][0]["summary"]["leader"].is_string()
                && report["clusters"][0]["summary"]["healthyVoters"] == 3
        },
    );
    let c = cluster(&report, &ns.name);
    assert_eq!(c["system"], "zookeeper");
    assert_eq!(c["summary"]["faultTolerance"], 1);
    let leader = c["summary"]["leader"].as_str().unwrap().to_string();
    let replicas = c["replicas"].as_array().unwrap();
    assert_eq!(
        replicas
            .iter()
            .filter(|r| r["raft"]["role"] == "leader")
            .count(),
        1
    );
    for r in replicas {
        assert_eq!(
            r["raft"]["leaderPod"],
            leader.as_str(),
            "{}: every server names the same leader",
            r["pod"]
        );
        assert!(r["raft"]["memberId"].as_str().is_some());
        assert!(
            r["raft"]["version"].as_str().unwrap().starts_with("3.8"),
            "{}",
            r["raft"]["version"]
        );
    }
    let codes = warning_codes(c);
    assert_eq!(
        codes,
        ["WeakReadinessProbe"],
        "only the TCP probe is wrong with this ensemble"
    );

    // Freeze a follower: TCP still connects, so Kubernetes keeps it Ready; the tool does not.
    let follower = replicas
        .iter()
        .find(|r| r["raft"]["role"] == "follower")
        .unwrap()["pod"]
        .as_str()
        .unwrap()
        .to_string();
    let pid = container_pid(&ns.name, &follower);
    while_frozen(pid, || {
        std::thread::sleep(Duration::from_secs(5)); // several readiness periods
        let report = status_json(&["-n", &ns.name]);
        let c = cluster(&report, &ns.name);
        let r = replica(c, &follower);
        assert_eq!(
            r["ready"], true,
            "a TCP probe keeps the frozen server Ready"
        );
        assert_eq!(r["raft"]["health"]["state"], "unreachable");
        assert_eq!(c["summary"]["faultTolerance"], 0);
        let codes = warning_codes(c);
        for want in [
            "ReadyButUnhealthy",
            "ServiceRoutesToUnready",
            "FaultToleranceZero",
            "WeakReadinessProbe",
        ] {
            assert!(codes.contains(&want), "{want} in {codes:?}");
        }
    });
}

/// A one-replica StatefulSet whose "health port" runs a Python program, described to the
/// plugin by annotations, Ready by a TCP probe.
/// A replica whose every answer is `bytes` long.
fn deploy_large_answer(ns: &str, name: &str, bytes: usize) {
    deploy_python_replica(
        ns,
        name,
        &format!(
            "import http.server\n\
             body = b'x' * {bytes}\n\
             class H(http.server.BaseHTTPRequestHandler):\n    \
                 def do_GET(self):\n        \
                     self.send_response(200)\n        \
                     self.send_header('Content-Length', str(len(body)))\n        \
                     self.end_headers()\n        \
                     self.wfile.write(body)\n\
             http.server.ThreadingHTTPServer(('0.0.0.0', 8080), H).serve_forever()"
        ),
    );
}

fn deploy_python_replica(ns: &str, name: &str, program: &str) {
    deploy_python_sts(
        ns,
        name,
        program,
        &[
            ("kubectl-raft.io/port", "8080"),
            ("kubectl-raft.io/health-path", "/health"),
        ],
        None,
    );
}

#[test]
fn a_replica_that_closes_connections_is_reported_as_closed_not_as_a_timeout() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("status-closer");
    deploy_python_replica(
        &ns.name,
        "closer",
        "import socket\n\
         s = socket.socket()\n\
         s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
         s.bind(('0.0.0.0', 8080))\n\
         s.listen(64)\n\
         while True:\n    c, _ = s.accept()\n    c.close()",
    );
    // A generous limit: the answer must say what happened, not that time ran out.
    let report = status_json(&["closer", "-n", &ns.name, "--probe-timeout", "10s"]);
    let health = &cluster(&report, &ns.name)["replicas"][0]["raft"]["health"];
    assert_eq!(health["state"], "unreachable", "{health}");
    let detail = health["detail"].as_str().unwrap();
    assert!(
        detail.contains("closed without an answer") && !detail.contains("no answer within"),
        "through pods/proxy: {detail}"
    );
    let c = cluster(&report, &ns.name);
    assert!(warning_codes(c).contains(&"ReadyButUnhealthy"), "{c}");
}

#[test]
fn a_profile_request_with_a_larger_max_bytes_reads_a_large_answer() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("status-bulky");
    deploy_large_answer(&ns.name, "bulky", 3_000_000);
    let profile = tempfile(
        "- name: bulky\n  \
         description: a system whose health answer is 3 MB\n  \
         detect: {images: [bulky]}\n  \
         port: {numbers: [8080]}\n  \
         health: {request: {path: /health, max_bytes: 4000000}}\n",
    );
    let report = status_json(&[
        "bulky",
        "-n",
        &ns.name,
        "--system",
        "bulky",
        "--profiles",
        profile.path_str(),
    ]);
    let health = &cluster(&report, &ns.name)["replicas"][0]["raft"]["health"];
    assert_eq!(health["state"], "ok", "{health}");
}

#[test]
fn a_ready_replica_whose_answer_is_too_large_is_warned_about() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("status-large");
    deploy_large_answer(&ns.name, "large", 10_000_000);
    let report = status_json(&["large", "-n", &ns.name]);
    let c = cluster(&report, &ns.name);
    let health = &c["replicas"][0]["raft"]["health"];
    assert_eq!(health["state"], "unknown", "{health}");
    assert!(
        health["detail"].as_str().unwrap().contains("larger than"),
        "{health}"
    );
    let warnings = c["warnings"].as_array().unwrap();
    let w = warnings
        .iter()
        .find(|w| w["code"] == "ReadyButUnhealthy")
        .unwrap_or_else(|| panic!("a ReadyButUnhealthy warning: {c}"));
    assert_eq!(w["pod"], "large-0");
}

/// On a real kubelet: a member frozen behind a TCP readiness probe passes probe after probe
/// (the kernel still accepts the connection; the kubelet's own counters say so) and its pod
/// stays Ready, while the tool, which asks the member itself, flags it.
#[test]
fn a_frozen_member_behind_a_tcp_probe_stays_ready_and_is_flagged_on_real_kubelets() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("st-tcp-real");
    let manifest = std::fs::read_to_string(repo().join("tests/manifests/etcd-3.yaml")).unwrap();
    let tcp = manifest.replace(
        "httpGet: {path: /health, port: client}",
        "tcpSocket: {port: client}",
    );
    assert_ne!(tcp, manifest, "the manifest's readiness probe changed");
    apply_on(&ns.name, &tcp, Nodes::Kubelet);
    wait_etcd_ready(&ns.name, 3);
    assert_pods_on(&ns.name, Nodes::Kubelet);
    let (leader, _) = await_etcd_leader(&ns.name);
    let follower = others_than(&leader, "etcd", 3).remove(0);
    let node = node_of(&ns.name, &follower);
    assert!(node.starts_with(Nodes::Kubelet.prefix()), "{node}");
    let pid = container_pid(&ns.name, &follower);
    while_frozen(pid, || {
        wait_probes(&node, &ns.name, &follower, "Readiness", "successful", 3);
        let report = status_json(&["-n", &ns.name]);
        let c = cluster(&report, &ns.name);
        let r = replica(c, &follower);
        assert_eq!(r["ready"], true, "the kubelet keeps it Ready: {r:#}");
        assert_eq!(r["raft"]["health"]["state"], "unreachable", "{r:#}");
        assert_eq!(c["summary"]["faultTolerance"], 0, "{c:#}");
        let codes = warning_codes(c);
        for want in [
            "ReadyButUnhealthy",
            "FaultToleranceZero",
            "WeakReadinessProbe",
        ] {
            assert!(codes.contains(&want), "{want} in {codes:?}");
        }
    });
}

/// One replica's row of a cluster's report.
fn replica(c: &Value, pod: &str) -> Value {
    c["replicas"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["pod"] == pod)
        .unwrap_or_else(|| panic!("no replica {pod} in {c:#}"))
        .clone()
}
