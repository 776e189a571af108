//! The test world stops where a kubelet would (shared/reference/world-audit.md): a silent
//! node acts on nothing, a node can be lost with its pods, grace periods are applied as the
//! kubelet applies them, a ReadWriteOnce volume is in one place at a time, a pinned volume
//! keeps its pod on its node, and DNS answers as cluster DNS does. One behaviour per test.
//!
//! The timeline checks (preStop before SIGTERM, SIGKILL at the deadline, a shortened grace
//! period, probes during termination, Ready to EndpointSlice, an eviction's DisruptionTarget,
//! hostPath DirectoryOrCreate) run twice, on the agent's nodes and on real kubelets
//! (`..._on_real_kubelets`, `kreal-N`: Kubernetes' kubelet over containerd and runc), with
//! the same manifest and the same assertions: where the agent differs, the pair says so.

use std::time::{Duration, Instant};

use crate::common::*;
use serde_json::Value;

fn ready_condition(ns: &str, pod: &str) -> String {
    pod_json(ns, pod)["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready").cloned())
        .map(|c| c["status"].as_str().unwrap_or_default().to_string())
        .unwrap_or_default()
}

fn evict(ns: &str, pod: &str) -> std::process::Output {
    let body = format!(
        r#"{{"apiVersion":"policy/v1","kind":"Eviction","metadata":{{"name":"{pod}","namespace":"{ns}"}}}}"#
    );
    let f = tempfile(&body);
    kubectl(&[
        "create",
        "--raw",
        &format!("/api/v1/namespaces/{ns}/pods/{pod}/eviction"),
        "-f",
        f.path_str(),
    ])
}

#[test]
fn a_paused_nodes_pods_turn_not_ready_and_the_pdb_stops_counting_them() {
    let _nodes = exclusive_nodes();
    let ns = TestNamespace::new("fid-pause");
    deploy_etcd(&ns.name, 3);
    let node = node_of(&ns.name, "etcd-0");
    let other = (1..3)
        .map(|i| format!("etcd-{i}"))
        .find(|p| node_of(&ns.name, p) != node)
        .unwrap();
    with_node(&node, false, || {
        wait_in(&ns.name, Duration::from_secs(90), "etcd-0 NotReady", || {
            ready_condition(&ns.name, "etcd-0") == "False"
        });
        // It stays so while the node is silent: nobody writes Ready=True back.
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(6) {
            assert_eq!(ready_condition(&ns.name, "etcd-0"), "False");
            std::thread::sleep(Duration::from_millis(500));
        }
        wait_in(
            &ns.name,
            Duration::from_secs(30),
            "the PDB to allow 0",
            || {
                kubectl_json(&["get", "pdb", "etcd", "-n", &ns.name])["status"]
                    ["disruptionsAllowed"]
                    == 0
            },
        );
        let out = evict(&ns.name, &other);
        assert!(
            !out.status.success(),
            "evicting a second member was refused"
        );
        assert!(
            stderr(&out).contains("disruption budget") || stderr(&out).contains("429"),
            "{}",
            stderr(&out)
        );
    });
    wait_in(
        &ns.name,
        Duration::from_secs(60),
        "etcd-0 Ready again",
        || ready_condition(&ns.name, "etcd-0") == "True",
    );
}

#[test]
fn a_deletion_on_a_paused_node_waits_for_the_node() {
    let _nodes = exclusive_nodes();
    let ns = TestNamespace::new("fid-delete");
    deploy_etcd(&ns.name, 3);
    let node = node_of(&ns.name, "etcd-2");
    let uid = pod_json(&ns.name, "etcd-2")["metadata"]["uid"].clone();
    let pid = container_pid(&ns.name, "etcd-2");
    with_node(&node, false, || {
        kubectl_ok(&["delete", "pod", "etcd-2", "-n", &ns.name, "--wait=false"]);
        std::thread::sleep(Duration::from_secs(6));
        let p = pod_json(&ns.name, "etcd-2");
        assert_eq!(p["metadata"]["uid"], uid, "the same pod, not a replacement");
        assert!(
            p["metadata"]["deletionTimestamp"].is_string(),
            "Terminating"
        );
        assert!(
            std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "its process still runs: nothing acts on a silent node"
        );
    });
    wait_in(
        &ns.name,
        Duration::from_secs(90),
        "a replacement etcd-2",
        || {
            kubectl_json(&["get", "pods", "-n", &ns.name, "-l", "app=etcd"])["items"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| {
                    p["metadata"]["name"] == "etcd-2" && p["metadata"]["uid"] != uid && pod_ready(p)
                })
        },
    );
}

#[test]
fn a_node_taken_down_loses_its_members_until_it_comes_back() {
    let _nodes = exclusive_nodes();
    let ns = TestNamespace::new("fid-down");
    deploy_etcd(&ns.name, 3);
    let node = node_of(&ns.name, "etcd-1");
    with_node(&node, true, || {
        wait_in(
            &ns.name,
            Duration::from_secs(30),
            "etcd-1 unreachable",
            || {
                let r = status_json(&["etcd", "-n", &ns.name]);
                let c = &r["clusters"][0];
                c["replicas"][1]["raft"]["health"]["state"] == "unreachable"
                    && c["summary"]["faultTolerance"] == 0
            },
        );
        wait_in(
            &ns.name,
            Duration::from_secs(90),
            "the node NotReady",
            || {
                kubectl_json(&["get", "node", &node])["status"]["conditions"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|c| c["type"] == "Ready" && c["status"] != "True")
            },
        );
    });
    wait_in(
        &ns.name,
        Duration::from_secs(60),
        "etcd-1 healthy again",
        || {
            let r = status_json(&["etcd", "-n", &ns.name]);
            r["clusters"][0]["summary"]["healthyVoters"] == 3
        },
    );
}

#[test]
fn a_node_down_for_a_while_comes_back_by_itself() {
    let _nodes = exclusive_nodes();
    let ns = TestNamespace::new("fid-down-for");
    deploy_etcd(&ns.name, 3);
    let node = node_of(&ns.name, "etcd-0");
    // Long enough that a status call (its listing, then a 2 s probe) lands inside the freeze
    // even on a loaded machine: with 6 s, the agent's 2 s heartbeat left a 4 s window that a
    // slow listing once missed.
    kworld(&["node-down", &node, "--for", "15s"]);
    let frozen = std::panic::catch_unwind(|| {
        wait_in(
            &ns.name,
            Duration::from_secs(30),
            "etcd-0 unreachable",
            || {
                status_json(&["etcd", "-n", &ns.name])["clusters"][0]["replicas"][0]["raft"]
                    ["health"]["state"]
                    == "unreachable"
            },
        );
    });
    let back = std::panic::catch_unwind(|| {
        wait_in(&ns.name, Duration::from_secs(60), "etcd-0 back", || {
            status_json(&["etcd", "-n", &ns.name])["clusters"][0]["summary"]["healthyVoters"] == 3
        });
    });
    kworld(&["node-resume", &node]);
    frozen.unwrap();
    back.unwrap();
}

/// A pod that ignores SIGTERM politely (logs it), with a preStop hook and a grace period.
/// A pod that logs its start and every SIGTERM (which it ignores) to a host directory, with
/// the given grace period and preStop hook, on the given kind of node.
fn deploy_lingerer(ns: &str, grace: u32, prestop: &str, extra: &str, nodes: Nodes) {
    let manifest = format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: linger}}
spec:
  terminationGracePeriodSeconds: {grace}
  containers:
  - name: c
    image: example/shell
    command: [/bin/sh, -c, 'echo "start $(date +%s.%N)" >> /data/log; trap "echo TERM \$(date +%s.%N) >> /data/log; echo TERM >> /data/beats" TERM; while true; do echo beat >> /data/beats; sleep 0.2; done']
    lifecycle: {{preStop: {prestop}}}
    volumeMounts: [{{name: d, mountPath: /data}}]
{extra}  volumes: [{{name: d, hostPath: {{path: {dir}}}}}]
"#,
        dir = scratch_dir(ns).display()
    );
    apply_on(ns, &manifest, nodes);
    wait_in(ns, Duration::from_secs(60), "linger running", || {
        pod_json(ns, "linger")["status"]["phase"] == "Running"
    });
    assert_pods_on(ns, nodes);
}

fn log_of(ns: &str) -> String {
    std::fs::read_to_string(scratch_dir(ns).join("log")).unwrap_or_default()
}

/// Waits until the kubelet (kworld's agent) has begun stopping `pod`'s containers: its
/// `Killing` event, which it posts before the preStop hook runs.
fn wait_killing(ns: &str, pod: &str) {
    wait_in(
        ns,
        Duration::from_secs(20),
        "the termination under way",
        || {
            kubectl_json(&[
                "get",
                "events",
                "-n",
                ns,
                "--field-selector",
                &format!("involvedObject.name={pod},reason=Killing"),
            ])["items"]
                .as_array()
                .is_some_and(|a| !a.is_empty())
        },
    );
}

fn gone(ns: &str, pod: &str) -> bool {
    !kubectl(&["get", "pod", pod, "-n", ns]).status.success()
}

/// A kubelet ends a termination with the grace period it began with: a second delete with a
/// shorter one (the API server takes it: the pod's deletionGracePeriodSeconds drops) neither
/// cuts the running preStop hook short nor brings SIGKILL forward. The kubelet's
/// SyncTerminatingPod runs on a context its pod worker cannot cancel (kubelet 1.34,
/// kubernetes#113606); the agent did shorten it until this pair ran on a real kubelet.
#[test]
fn a_shorter_grace_period_does_not_shorten_a_running_termination() {
    shorter_grace_does_not_shorten(Nodes::Agent);
}

#[test]
fn a_shorter_grace_period_does_not_shorten_a_running_termination_on_real_kubelets() {
    shorter_grace_does_not_shorten(Nodes::Kubelet);
}

fn shorter_grace_does_not_shorten(nodes: Nodes) {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("fid-grace");
    deploy_lingerer(
        &ns.name,
        14,
        r#"{exec: {command: [/bin/sh, -c, "echo prestop >> /data/log; sleep 4; echo prestop-end >> /data/log"]}}"#,
        "",
        nodes,
    );
    kubectl_ok(&["delete", "pod", "linger", "-n", &ns.name, "--wait=false"]);
    wait_in(
        &ns.name,
        Duration::from_secs(20),
        "the hook running",
        || log_of(&ns.name).contains("prestop\n"),
    );
    kubectl_ok(&[
        "delete",
        "pod",
        "linger",
        "-n",
        &ns.name,
        "--wait=false",
        "--grace-period=1",
    ]);
    let shortened = pod_json_opt(&ns.name, "linger")
        .and_then(|p| p["metadata"]["deletionGracePeriodSeconds"].as_u64());
    assert_eq!(
        shortened,
        Some(1),
        "the API server took the shorter grace period"
    );
    wait_in(
        &ns.name,
        Duration::from_secs(30),
        "the pod gone at its first grace period",
        || gone(&ns.name, "linger"),
    );
    let log = log_of(&ns.name);
    let (end, term) = (log.find("prestop-end"), log.find("TERM"));
    assert!(
        end.is_some() && term.is_some() && end < term,
        "the hook ran its 4 s (more than the 1 s asked for), then SIGTERM: {log}"
    );
    // And SIGKILL came at the first grace period's end, not 2 s after the hook (the kubelet's
    // minimum with the shortened one): the process beat on for seconds after SIGTERM.
    let beats = std::fs::read_to_string(scratch_dir(&ns.name).join("beats")).unwrap_or_default();
    let after_term = beats
        .lines()
        .skip_while(|l| *l != "TERM")
        .filter(|l| *l == "beat")
        .count();
    assert!(
        after_term >= 20,
        "the process ignored SIGTERM and lived on to the first deadline: {after_term} beats after it"
    );
}

#[test]
fn a_prestop_hook_is_cut_off_when_the_grace_period_ends() {
    prestop_cut_off(Nodes::Agent);
}

#[test]
fn a_prestop_hook_is_cut_off_when_the_grace_period_ends_on_real_kubelets() {
    prestop_cut_off(Nodes::Kubelet);
}

fn prestop_cut_off(nodes: Nodes) {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("fid-hook");
    deploy_lingerer(
        &ns.name,
        4,
        r#"{exec: {command: [/bin/sh, -c, "echo prestop >> /data/log; sleep 40; echo prestop-end >> /data/log"]}}"#,
        "",
        nodes,
    );
    kubectl_ok(&["delete", "pod", "linger", "-n", &ns.name, "--wait=false"]);
    wait_in(
        &ns.name,
        Duration::from_secs(20),
        "the pod gone at its grace period",
        || gone(&ns.name, "linger"),
    );
    let log = log_of(&ns.name);
    assert!(log.contains("prestop\n"), "the hook ran: {log}");
    assert!(!log.contains("prestop-end"), "and was cut off: {log}");
    assert_eq!(
        log.matches("TERM").count(),
        1,
        "SIGTERM came once, after the hook: {log}"
    );
}

/// The API keeps a sleep hook below the pod's grace period; an eviction that asks for a
/// shorter one before the termination begins (its delete options) still cuts the hook off.
#[test]
fn a_sleep_prestop_hook_is_bounded_by_the_grace_period() {
    sleep_hook_bounded(Nodes::Agent);
}

#[test]
fn a_sleep_prestop_hook_is_bounded_by_the_grace_period_on_real_kubelets() {
    sleep_hook_bounded(Nodes::Kubelet);
}

fn sleep_hook_bounded(nodes: Nodes) {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("fid-sleep");
    deploy_lingerer(&ns.name, 60, "{sleep: {seconds: 50}}", "", nodes);
    let body = format!(
        r#"{{"apiVersion":"policy/v1","kind":"Eviction","metadata":{{"name":"linger","namespace":"{}"}},"deleteOptions":{{"gracePeriodSeconds":3}}}}"#,
        ns.name
    );
    let f = tempfile(&body);
    kubectl_ok(&[
        "create",
        "--raw",
        &format!("/api/v1/namespaces/{}/pods/linger/eviction", ns.name),
        "-f",
        f.path_str(),
    ]);
    wait_in(
        &ns.name,
        Duration::from_secs(20),
        "the pod gone at its grace period",
        || gone(&ns.name, "linger"),
    );
    assert!(
        log_of(&ns.name).contains("TERM"),
        "SIGTERM after the cut-off hook"
    );
}

#[test]
fn liveness_probes_stop_once_deletion_starts() {
    liveness_stops_at_deletion(Nodes::Agent);
}

#[test]
fn liveness_probes_stop_once_deletion_starts_on_real_kubelets() {
    liveness_stops_at_deletion(Nodes::Kubelet);
}

fn liveness_stops_at_deletion(nodes: Nodes) {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("fid-live");
    // The hook makes the liveness probe fail; a kubelet stops liveness probing at deletion,
    // so the hook finishes and SIGTERM follows instead of a kill in the middle of the hook.
    deploy_lingerer(
        &ns.name,
        20,
        r#"{exec: {command: [/bin/sh, -c, "touch /data/dying; echo prestop >> /data/log; sleep 4; echo prestop-end >> /data/log"]}}"#,
        "    livenessProbe: {exec: {command: [/bin/sh, -c, 'test ! -f /data/dying']}, periodSeconds: 1, failureThreshold: 1}\n",
        nodes,
    );
    let _ = std::fs::remove_file(scratch_dir(&ns.name).join("dying"));
    kubectl_ok(&["delete", "pod", "linger", "-n", &ns.name, "--wait=false"]);
    wait_in(&ns.name, Duration::from_secs(40), "the pod gone", || {
        gone(&ns.name, "linger")
    });
    let log = log_of(&ns.name);
    assert!(log.contains("prestop-end") && log.contains("TERM"), "{log}");
    let events = kubectl_ok(&["get", "events", "-n", &ns.name]);
    assert!(!events.contains("Liveness probe failed"), "{events}");
}

#[test]
fn a_liveness_restart_runs_prestop_and_sigterm_first() {
    liveness_restart_runs_prestop(Nodes::Agent);
}

#[test]
fn a_liveness_restart_runs_prestop_and_sigterm_first_on_real_kubelets() {
    liveness_restart_runs_prestop(Nodes::Kubelet);
}

fn liveness_restart_runs_prestop(nodes: Nodes) {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("fid-restart");
    deploy_lingerer(
        &ns.name,
        3,
        r#"{exec: {command: [/bin/sh, -c, "echo prestop >> /data/log"]}}"#,
        "    livenessProbe: {exec: {command: [/bin/sh, -c, 'test ! -f /data/sick']}, periodSeconds: 1, failureThreshold: 1}\n",
        nodes,
    );
    std::fs::write(scratch_dir(&ns.name).join("sick"), "").unwrap();
    wait_in(
        &ns.name,
        Duration::from_secs(40),
        "a liveness restart",
        || {
            pod_json(&ns.name, "linger")["status"]["containerStatuses"][0]["restartCount"].as_u64()
                >= Some(1)
        },
    );
    let _ = std::fs::remove_file(scratch_dir(&ns.name).join("sick"));
    let log = log_of(&ns.name);
    let (hook, term) = (log.find("prestop"), log.find("TERM"));
    assert!(
        hook.is_some() && term.is_some() && hook < term,
        "preStop, then SIGTERM, before the restart: {log}"
    );
}

#[test]
fn a_replacement_never_shares_a_volume_with_a_pod_still_terminating() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("fid-rwo");
    let manifest = r#"apiVersion: apps/v1
kind: StatefulSet
metadata: {name: pr}
spec:
  serviceName: pr
  replicas: 1
  selector: {matchLabels: {app: pr}}
  template:
    metadata: {labels: {app: pr}}
    spec:
      terminationGracePeriodSeconds: 8
      containers:
      - name: c
        image: example/shell
        command: [/bin/sh, -c, 'trap "" TERM; while true; do echo "$POD_UID $(date +%s.%N)" >> /data/hb; sleep 0.1; done']
        env: [{name: POD_UID, valueFrom: {fieldRef: {fieldPath: metadata.uid}}}]
        volumeMounts: [{name: data, mountPath: /data}]
  volumeClaimTemplates:
  - metadata: {name: data}
    spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}
"#;
    let f = tempfile(manifest);
    kubectl_ok(&["apply", "-n", &ns.name, "-f", f.path_str()]);
    wait_in(&ns.name, Duration::from_secs(60), "pr-0 running", || {
        // A StatefulSet's pod: not there until its controller creates it.
        pod_json_opt(&ns.name, "pr-0").is_some_and(|p| p["status"]["phase"] == "Running")
    });
    let old = pod_json(&ns.name, "pr-0")["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_string();
    kubectl_ok(&["delete", "pod", "pr-0", "-n", &ns.name, "--wait=false"]);
    wait_killing(&ns.name, "pr-0");
    kubectl_ok(&[
        "delete",
        "pod",
        "pr-0",
        "-n",
        &ns.name,
        "--force",
        "--grace-period=0",
    ]);
    wait_in(
        &ns.name,
        Duration::from_secs(60),
        "the replacement running",
        || {
            pod_json_opt(&ns.name, "pr-0").is_some_and(|p| {
                p["metadata"]["uid"] != old.as_str() && p["status"]["phase"] == "Running"
            })
        },
    );
    let pvc = kubectl_json(&["get", "pvc", "data-pr-0", "-n", &ns.name]);
    let pv = kubectl_json(&["get", "pv", pvc["spec"]["volumeName"].as_str().unwrap()]);
    let hb_path = std::path::Path::new(pv["spec"]["hostPath"]["path"].as_str().unwrap()).join("hb");
    let new = pod_json(&ns.name, "pr-0")["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_string();
    wait_in(
        &ns.name,
        Duration::from_secs(20),
        "the new process writing",
        || {
            std::fs::read_to_string(&hb_path)
                .is_ok_and(|hb| hb.lines().filter(|l| l.starts_with(new.as_str())).count() >= 3)
        },
    );
    let hb = std::fs::read_to_string(&hb_path).unwrap();
    let stamps = |uid: &str, last: bool| -> f64 {
        let it = hb
            .lines()
            .filter(|l| l.starts_with(uid))
            .filter_map(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok());
        if last {
            it.fold(f64::MIN, f64::max)
        } else {
            it.fold(f64::MAX, f64::min)
        }
    };
    assert!(
        stamps(&old, true) < stamps(&new, false),
        "the old process stopped writing before the new one started"
    );
    // The replacement waited for the volume, and said why, as the attach/detach controller
    // does for a ReadWriteOnce volume still attached elsewhere.
    let events = kubectl_ok(&["get", "events", "-n", &ns.name]);
    assert!(
        events.contains("FailedAttachVolume") && events.contains("Multi-Attach"),
        "{events}"
    );
}

#[test]
fn a_pinned_volume_keeps_its_pod_on_its_node() {
    let _nodes = exclusive_nodes();
    let ns = TestNamespace::new("fid-pinned");
    let manifest = r#"apiVersion: apps/v1
kind: StatefulSet
metadata: {name: pin}
spec:
  serviceName: pin
  replicas: 1
  selector: {matchLabels: {app: pin}}
  template:
    metadata: {labels: {app: pin}}
    spec:
      containers:
      - {name: c, image: example/shell, command: [/bin/sh, -c, 'while true; do sleep 1; done'], volumeMounts: [{name: data, mountPath: /data}]}
  volumeClaimTemplates:
  - metadata: {name: data}
    spec: {storageClassName: kworld-local-pinned, accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}
"#;
    let f = tempfile(manifest);
    kubectl_ok(&["apply", "-n", &ns.name, "-f", f.path_str()]);
    wait_in(&ns.name, Duration::from_secs(60), "pin-0 running", || {
        // A StatefulSet's pod: not there until its controller creates it.
        pod_json_opt(&ns.name, "pin-0").is_some_and(|p| p["status"]["phase"] == "Running")
    });
    let node = node_of(&ns.name, "pin-0");
    let pvc = kubectl_json(&["get", "pvc", "data-pin-0", "-n", &ns.name]);
    let pv = kubectl_json(&["get", "pv", pvc["spec"]["volumeName"].as_str().unwrap()]);
    assert_eq!(
        pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]
            ["values"][0],
        node.as_str()
    );
    kubectl_ok(&["cordon", &node]);
    let stuck = std::panic::catch_unwind(|| {
        kubectl_ok(&["delete", "pod", "pin-0", "-n", &ns.name]);
        wait_in(
            &ns.name,
            Duration::from_secs(30),
            "a FailedScheduling event",
            || {
                kubectl_ok(&[
                    "get",
                    "events",
                    "-n",
                    &ns.name,
                    "--field-selector",
                    "reason=FailedScheduling",
                ])
                .contains("pin-0")
            },
        );
        assert_eq!(pod_json(&ns.name, "pin-0")["status"]["phase"], "Pending");
    });
    kubectl_ok(&["uncordon", &node]);
    stuck.unwrap();
    wait_in(
        &ns.name,
        Duration::from_secs(60),
        "pin-0 back on its node",
        || {
            let p = pod_json(&ns.name, "pin-0");
            p["status"]["phase"] == "Running" && p["spec"]["nodeName"] == node.as_str()
        },
    );
}

fn apply(ns: &str, manifest: &str) {
    let f = tempfile(manifest);
    kubectl_ok(&["apply", "-n", ns, "-f", f.path_str()]);
}

#[test]
fn pod_names_resolve_only_through_a_headless_service_that_publishes_them() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("fid-dns");
    apply(
        &ns.name,
        r#"apiVersion: v1
kind: Service
metadata: {name: strict}
spec: {clusterIP: None, selector: {app: strict}, ports: [{name: p, port: 80}]}
---
apiVersion: v1
kind: Service
metadata: {name: open}
spec: {clusterIP: None, publishNotReadyAddresses: true, selector: {app: strict}, ports: [{name: p, port: 80}]}
---
apiVersion: v1
kind: Pod
metadata: {name: s1, labels: {app: strict}}
spec:
  hostname: s1
  subdomain: open
  containers:
  - {name: c, image: example/shell, command: [/bin/sh, -c, 'while true; do sleep 1; done'], readinessProbe: {exec: {command: [/bin/false]}, periodSeconds: 1}}
---
apiVersion: v1
kind: Pod
metadata: {name: s3, labels: {app: strict}}
spec:
  hostname: s3
  subdomain: strict
  containers:
  - {name: c, image: example/shell, command: [/bin/sh, -c, 'while true; do sleep 1; done'], readinessProbe: {exec: {command: [/bin/false]}, periodSeconds: 1}}
---
apiVersion: v1
kind: Pod
metadata: {name: s2}
spec:
  hostname: s2
  subdomain: nosvc
  containers:
  - {name: c, image: example/shell, command: [/bin/sh, -c, 'while true; do sleep 1; done']}
"#,
    );
    wait_in(&ns.name, Duration::from_secs(60), "pods running", || {
        ["s1", "s2", "s3"]
            .iter()
            .all(|p| pod_json(&ns.name, p)["status"]["phase"] == "Running")
    });
    let ip = pod_json(&ns.name, "s1")["status"]["podIP"]
        .as_str()
        .unwrap()
        .to_string();
    let n = &ns.name;
    // A Service that publishes not-ready addresses names the not-ready pod ...
    wait_in(n, Duration::from_secs(30), "s1.open resolves", || {
        dns_a(&format!("s1.open.{n}.svc.cluster.local"))
            .is_ok_and(|a| a.iter().any(|x| x.to_string() == ip))
    });
    // ... one that does not, does not; and no Service, no name.
    assert_eq!(dns_a(&format!("s1.strict.{n}.svc.cluster.local")), Err(3));
    assert_eq!(dns_a(&format!("s2.nosvc.{n}.svc.cluster.local")), Err(3));
}

#[test]
fn a_replacement_keeps_its_name_in_dns_after_the_old_pod_is_gone() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("fid-dns-race");
    deploy_etcd(&ns.name, 3);
    let n = &ns.name;
    let old = pod_json(n, "etcd-1")["metadata"]["uid"].clone();
    kubectl_ok(&[
        "delete",
        "pod",
        "etcd-1",
        "-n",
        n,
        "--force",
        "--grace-period=0",
    ]);
    // The replacement itself, Ready (the StatefulSet's count can still be the old pod's).
    wait_in(n, Duration::from_secs(90), "a new etcd-1 Ready", || {
        pod_json_opt(n, "etcd-1").is_some_and(|p| p["metadata"]["uid"] != old && pod_ready(&p))
    });
    let ip = pod_json(n, "etcd-1")["status"]["podIP"]
        .as_str()
        .unwrap()
        .to_string();
    let name = format!("etcd-1.etcd.{n}.svc.cluster.local");
    let answer = || dns_a(&name).map(|a| a.iter().map(|x| x.to_string()).collect::<Vec<_>>());
    // The name follows the replacement (its endpoints are written after it is Ready).
    wait_in(
        n,
        Duration::from_secs(30),
        "the name answering with the new IP",
        || answer() == Ok(vec![ip.clone()]),
    );
}

#[test]
fn crash_loop_back_off_grows_like_the_kubelets() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("fid-backoff");
    apply(
        &ns.name,
        "apiVersion: v1\nkind: Pod\nmetadata: {name: crasher}\nspec:\n  containers:\n  - {name: main, image: example/shell, command: [/bin/sh, -c, \"exit 3\"]}\n",
    );
    let waiting = |p: &Value| {
        p["status"]["containerStatuses"][0]["state"]["waiting"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    wait_in(
        &ns.name,
        Duration::from_secs(60),
        "a 10s back-off after the second crash",
        || waiting(&pod_json(&ns.name, "crasher")).contains("back-off 10s"),
    );
    wait_in(&ns.name, Duration::from_secs(60), "then 20s", || {
        waiting(&pod_json(&ns.name, "crasher")).contains("back-off 20s")
    });
}

/// Init containers run one after another to completion before the containers start, on the
/// volumes they share (what docs/yield.md's init container relies on).
#[test]
fn init_containers_run_in_order_before_the_containers() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("fid-init");
    apply(
        &ns.name,
        "apiVersion: v1\nkind: Pod\nmetadata: {name: init}\nspec:\n  initContainers:\n  - {name: first, image: example/shell, command: [/bin/sh, -c, 'echo first >> /shared/order'], volumeMounts: [{name: s, mountPath: /shared}]}\n  - {name: second, image: example/shell, command: [/bin/sh, -c, 'sleep 1; echo second >> /shared/order'], volumeMounts: [{name: s, mountPath: /shared}]}\n  containers:\n  - {name: main, image: example/shell, command: [/bin/sh, -c, 'echo main >> /shared/order; exec sleep 600'], volumeMounts: [{name: s, mountPath: /shared}], readinessProbe: {exec: {command: [/bin/sh, -c, 'grep -q main /shared/order']}, periodSeconds: 1}}\n  volumes: [{name: s, emptyDir: {}}]\n",
    );
    wait_in(&ns.name, Duration::from_secs(30), "the pod Ready", || {
        ready_condition(&ns.name, "init") == "True"
    });
    let out = kubectl_ok(&["exec", "init", "-n", &ns.name, "--", "cat", "/shared/order"]);
    assert_eq!(out, "first\nsecond\nmain\n");
}

/// A failing init container holds the containers back (reason Init:Error) and runs again.
#[test]
fn a_failing_init_container_holds_the_pod_and_is_retried() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("fid-init-fail");
    apply(
        &ns.name,
        "apiVersion: v1\nkind: Pod\nmetadata: {name: init}\nspec:\n  initContainers:\n  - {name: flaky, image: example/shell, command: [/bin/sh, -c, 'echo x >> /shared/tries; test $(wc -l < /shared/tries) -ge 3'], volumeMounts: [{name: s, mountPath: /shared}]}\n  containers:\n  - {name: main, image: example/shell, command: [/bin/sleep, '600'], volumeMounts: [{name: s, mountPath: /shared}]}\n  volumes: [{name: s, emptyDir: {}}]\n",
    );
    wait_in(
        &ns.name,
        Duration::from_secs(30),
        "Init:Error while it fails",
        || {
            pod_json(&ns.name, "init")["status"]["containerStatuses"][0]["state"]["waiting"]
                ["reason"]
                == "Init:Error"
        },
    );
    wait_in(
        &ns.name,
        Duration::from_secs(30),
        "running after the third try",
        || pod_json(&ns.name, "init")["status"]["phase"] == "Running",
    );
    let out = kubectl_ok(&["exec", "init", "-n", &ns.name, "--", "cat", "/shared/tries"]);
    assert_eq!(out, "x\nx\nx\n", "tried until it passed, then not again");
}

/// Exec probes and hooks run with the container's environment, as CRI exec runs them: a
/// readiness probe that needs the container's `$FOO` passes.
#[test]
fn exec_probes_see_the_containers_environment() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("exec-env");
    apply(
        &ns.name,
        "apiVersion: v1\nkind: Pod\nmetadata: {name: env}\nspec:\n  containers:\n  - name: main\n    image: example/shell\n    command: [/bin/sleep, \"600\"]\n    env: [{name: FOO, value: bar}]\n    readinessProbe: {exec: {command: [/bin/sh, -c, 'test \"$FOO\" = bar']}, periodSeconds: 1}\n",
    );
    wait_in(
        &ns.name,
        Duration::from_secs(30),
        "the exec probe to pass",
        || ready_condition(&ns.name, "env") == "True",
    );
}

/// The node agent serves the kubelet's streaming API: `kubectl logs` reads a container's
/// output through the API server.
#[test]
fn kubectl_logs_reads_a_containers_output() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("kubelet-logs");
    apply(
        &ns.name,
        "apiVersion: v1\nkind: Pod\nmetadata: {name: talker}\nspec:\n  containers:\n  - {name: main, image: example/shell, command: [/bin/sh, -c, 'echo first; echo second; exec sleep 600']}\n",
    );
    wait_in(
        &ns.name,
        Duration::from_secs(30),
        "the pod's output",
        || kubectl(&["logs", "-n", &ns.name, "talker"]).stdout == b"first\nsecond\n",
    );
    let tail = kubectl_ok(&["logs", "-n", &ns.name, "talker", "--tail", "1"]);
    assert_eq!(tail, "second\n");
}

/// `kubectl exec` runs a command in the container with its environment and returns its
/// exit code.
#[test]
fn kubectl_exec_runs_in_the_container_and_returns_its_exit_code() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("kubelet-exec");
    apply(
        &ns.name,
        "apiVersion: v1\nkind: Pod\nmetadata: {name: box}\nspec:\n  containers:\n  - name: main\n    image: example/shell\n    command: [/bin/sleep, \"600\"]\n    env: [{name: GREETING, value: hello}]\n",
    );
    wait_in(&ns.name, Duration::from_secs(30), "the pod to run", || {
        pod_json(&ns.name, "box")["status"]["phase"] == "Running"
    });
    let out = kubectl(&[
        "exec",
        "-n",
        &ns.name,
        "box",
        "--",
        "/bin/sh",
        "-c",
        "echo $GREETING from $(hostname); exit 7",
    ]);
    assert_eq!(stdout(&out), "hello from box\n", "{}", stderr(&out));
    assert_eq!(out.status.code(), Some(7), "{}", stderr(&out));
}

/// `kubectl port-forward` reaches a pod's port through the API server.
#[test]
fn kubectl_port_forward_reaches_a_pods_port() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("kubelet-pf");
    deploy_etcd(&ns.name, 3);
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut pf = std::process::Command::new(kubectl_bin())
        .args([
            "port-forward",
            "-n",
            &ns.name,
            "pod/etcd-0",
            &format!("{port}:2379"),
        ])
        .env("KUBECONFIG", &world().kubeconfig)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut health = String::new();
    wait_until(
        Duration::from_secs(20),
        "etcd's /health through the forward",
        || {
            use std::io::{Read, Write};
            let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
                return false;
            };
            let _ = s.write_all(b"GET /health HTTP/1.0\r\nHost: localhost\r\n\r\n");
            health.clear();
            s.read_to_string(&mut health).is_ok() && health.contains("\"health\":\"true\"")
        },
    );
    let _ = pf.kill();
    let _ = pf.wait();
}

/// A pod that sets `automountServiceAccountToken: true` gets its ServiceAccount's token, the
/// cluster CA and its namespace where the kubelet puts them, and reaches the API server at
/// `KUBERNETES_SERVICE_HOST:PORT` as that ServiceAccount (which may do nothing here: the API
/// server names it in its refusal).
#[test]
fn a_pod_that_asks_for_its_token_reaches_the_api_server_as_its_service_account() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("fid-token");
    apply(
        &ns.name,
        "apiVersion: v1\nkind: Pod\nmetadata: {name: tok}\nspec:\n  automountServiceAccountToken: true\n  containers:\n  - {name: main, image: example/shell, command: [/bin/sleep, '600']}\n",
    );
    wait_in(&ns.name, Duration::from_secs(30), "the pod running", || {
        pod_json(&ns.name, "tok")["status"]["phase"] == "Running"
    });
    let dir = "/var/run/secrets/kubernetes.io/serviceaccount";
    let said = kubectl_ok(&[
        "exec",
        "tok",
        "-n",
        &ns.name,
        "--",
        "cat",
        &format!("{dir}/namespace"),
    ]);
    assert_eq!(said.trim(), ns.name);
    // The world's own kubectl, in the pod, with no kubeconfig: in-cluster configuration.
    let ask = format!(
        "{} get pods 2>&1 || true",
        world_dir().join("bin/kubectl").display()
    );
    let answer = kubectl_ok(&["exec", "tok", "-n", &ns.name, "--", "/bin/sh", "-c", &ask]);
    assert!(
        answer.contains(&format!("system:serviceaccount:{}:default", ns.name))
            && answer.contains("Forbidden"),
        "{answer}"
    );
}

/// A pod whose readiness is a file on the host, behind a Service: (ready file).
fn deploy_ready_on_a_file(ns: &str, nodes: Nodes) -> std::path::PathBuf {
    let ready = scratch_dir(ns).join("ready");
    std::fs::write(&ready, "").unwrap();
    let manifest = format!(
        r#"apiVersion: v1
kind: Service
metadata: {{name: web}}
spec: {{selector: {{app: web}}, ports: [{{name: p, port: 80}}]}}
---
apiVersion: v1
kind: Pod
metadata: {{name: web, labels: {{app: web}}}}
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: c
    image: example/shell
    command: [/bin/sh, -c, 'while true; do sleep 1; done']
    readinessProbe: {{exec: {{command: [/bin/sh, -c, 'test -f /data/ready']}}, periodSeconds: 1, failureThreshold: 1}}
    volumeMounts: [{{name: d, mountPath: /data}}]
  volumes: [{{name: d, hostPath: {{path: {dir}}}}}]
"#,
        dir = scratch_dir(ns).display()
    );
    apply_on(ns, &manifest, nodes);
    wait_in(
        ns,
        Duration::from_secs(60),
        "web Ready in its Service",
        || ready_condition(ns, "web") == "True" && ready_endpoints(ns, "web") == 1,
    );
    assert_pods_on(ns, nodes);
    ready
}

fn readiness_failure_leaves_the_service(nodes: Nodes) {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("fid-ready");
    let ready = deploy_ready_on_a_file(&ns.name, nodes);
    std::fs::remove_file(&ready).unwrap();
    wait_in(
        &ns.name,
        Duration::from_secs(30),
        "Ready False and the endpoint not ready",
        || ready_condition(&ns.name, "web") == "False" && ready_endpoints(&ns.name, "web") == 0,
    );
    std::fs::write(&ready, "").unwrap();
    wait_in(
        &ns.name,
        Duration::from_secs(30),
        "Ready again and back in the Service",
        || ready_condition(&ns.name, "web") == "True" && ready_endpoints(&ns.name, "web") == 1,
    );
}

#[test]
fn a_failing_readiness_probe_takes_the_pod_out_of_its_service_and_back() {
    readiness_failure_leaves_the_service(Nodes::Agent);
}

#[test]
fn a_failing_readiness_probe_takes_the_pod_out_of_its_service_and_back_on_real_kubelets() {
    readiness_failure_leaves_the_service(Nodes::Kubelet);
}

/// The pod's DisruptionTarget condition, as (status, reason).
fn disruption_target(p: &Value) -> Option<(String, String)> {
    let c = p["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "DisruptionTarget")?
        .clone();
    Some((
        c["status"].as_str().unwrap_or_default().to_string(),
        c["reason"].as_str().unwrap_or_default().to_string(),
    ))
}

fn an_eviction_marks_the_disruption(nodes: Nodes) {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("fid-disrupt");
    deploy_lingerer(
        &ns.name,
        20,
        r#"{exec: {command: [/bin/sh, -c, "echo prestop >> /data/log; sleep 6; echo prestop-end >> /data/log"]}}"#,
        "",
        nodes,
    );
    let out = evict(&ns.name, "linger");
    assert!(out.status.success(), "{}", stderr(&out));
    // The API server sets it with the deletion; the node's status writes (the hook running,
    // the container stopping) must keep it until the pod is gone.
    wait_killing(&ns.name, "linger");
    wait_in(
        &ns.name,
        Duration::from_secs(20),
        "the hook running",
        || log_of(&ns.name).contains("prestop\n"),
    );
    let mut seen = vec![];
    wait_in(
        &ns.name,
        Duration::from_secs(40),
        "the pod gone",
        || match pod_json_opt(&ns.name, "linger") {
            Some(p) => {
                seen.push(disruption_target(&p));
                false
            }
            None => true,
        },
    );
    assert!(!seen.is_empty(), "the pod was seen terminating");
    for s in &seen {
        assert_eq!(
            s.as_ref().map(|(st, r)| (st.as_str(), r.as_str())),
            Some(("True", "EvictionByEvictionAPI")),
            "every look while it terminated: {seen:?}"
        );
    }
    assert!(
        log_of(&ns.name).contains("prestop-end"),
        "the hook ran to its end"
    );
}

#[test]
fn an_evictions_disruption_target_stays_until_the_pod_is_gone() {
    an_eviction_marks_the_disruption(Nodes::Agent);
}

#[test]
fn an_evictions_disruption_target_stays_until_the_pod_is_gone_on_real_kubelets() {
    an_eviction_marks_the_disruption(Nodes::Kubelet);
}

fn a_missing_host_directory_is_created(nodes: Nodes) {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("fid-hostpath");
    let dir = scratch_dir(&ns.name).join("made/by/the/node");
    assert!(!dir.exists());
    let manifest = format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: hp}}
spec:
  containers:
  - name: c
    image: example/shell
    command: [/bin/sh, -c, 'echo here > /data/file; while true; do sleep 1; done']
    volumeMounts: [{{name: d, mountPath: /data}}]
  volumes: [{{name: d, hostPath: {{path: {dir}, type: DirectoryOrCreate}}}}]
"#,
        dir = dir.display()
    );
    apply_on(&ns.name, &manifest, nodes);
    wait_in(
        &ns.name,
        Duration::from_secs(60),
        "the pod writing into the directory its node made",
        || std::fs::read_to_string(dir.join("file")).is_ok_and(|f| f == "here\n"),
    );
    assert_pods_on(&ns.name, nodes);
}

#[test]
fn a_directory_or_create_host_path_that_is_missing_is_created() {
    a_missing_host_directory_is_created(Nodes::Agent);
}

#[test]
fn a_directory_or_create_host_path_that_is_missing_is_created_on_real_kubelets() {
    a_missing_host_directory_is_created(Nodes::Kubelet);
}

/// A force delete takes the pod out of the API at once, but not its processes off the node:
/// the kubelet goes on with the termination it had begun, to the end of its grace period,
/// while a replacement may already run elsewhere (the agent killed them at once until this
/// pair ran on a real kubelet).
fn force_delete_leaves_the_process(nodes: Nodes) {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("fid-force");
    let manifest = format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: beat}}
spec:
  terminationGracePeriodSeconds: 20
  containers:
  - name: c
    image: example/shell
    command: [/bin/sh, -c, 'trap "echo TERM >> /data/beats" TERM; while true; do echo beat >> /data/beats; sleep 0.2; done']
    volumeMounts: [{{name: d, mountPath: /data}}]
  volumes: [{{name: d, hostPath: {{path: {dir}}}}}]
"#,
        dir = scratch_dir(&ns.name).display()
    );
    apply_on(&ns.name, &manifest, nodes);
    wait_in(&ns.name, Duration::from_secs(60), "beat running", || {
        pod_json(&ns.name, "beat")["status"]["phase"] == "Running"
    });
    assert_pods_on(&ns.name, nodes);
    let beats = scratch_dir(&ns.name).join("beats");
    let count = || {
        std::fs::read_to_string(&beats)
            .map(|b| b.lines().filter(|l| *l == "beat").count())
            .unwrap_or(0)
    };
    kubectl_ok(&["delete", "pod", "beat", "-n", &ns.name, "--wait=false"]);
    wait_killing(&ns.name, "beat");
    kubectl_ok(&[
        "delete",
        "pod",
        "beat",
        "-n",
        &ns.name,
        "--force",
        "--grace-period=0",
    ]);
    assert!(gone(&ns.name, "beat"), "the object left the API at once");
    let after = count();
    wait_in(
        &ns.name,
        Duration::from_secs(10),
        "the process still beating after the force delete",
        || count() >= after + 20,
    );
    // ... and ends at the end of its grace period, SIGKILLed: the beats stop by themselves.
    let mut last = count();
    let mut still_since = Instant::now();
    wait_in(
        &ns.name,
        Duration::from_secs(40),
        "the beats to stop",
        || {
            let n = count();
            if n != last {
                (last, still_since) = (n, Instant::now());
            }
            still_since.elapsed() > Duration::from_secs(3)
        },
    );
    let log = std::fs::read_to_string(&beats).unwrap();
    assert_eq!(
        log.matches("TERM").count(),
        1,
        "SIGTERM once, before: {log}"
    );
}

#[test]
fn a_force_delete_leaves_a_terminating_process_to_its_grace_period() {
    force_delete_leaves_the_process(Nodes::Agent);
}

#[test]
fn a_force_delete_leaves_a_terminating_process_to_its_grace_period_on_real_kubelets() {
    force_delete_leaves_the_process(Nodes::Kubelet);
}
