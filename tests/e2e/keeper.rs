//! ClickHouse Keeper, end to end, against a STAND-IN (tests/standin/keeper_standin.py): Keeper
//! cannot run on this project's machines, so these tests run a server that speaks Keeper's
//! documented interfaces (`/ready` and the commands API on http_control, four-letter words on
//! the client port) with Keeper's timing: `ydld` is answered at once and the role flips only
//! later, after a moment in which no replica has a leader; a stopped leader hands nothing
//! over and the others elect after a timeout. What is proven here is the plugin's side of
//! that protocol, not Keeper itself.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::common::*;
use serde_json::Value;

/// How a test's stand-in is set up.
#[derive(Default)]
struct Keeper<'a> {
    /// `query` (26.x), `path` (the older handler), `none` (no commands API: 404).
    commands_api: &'a str,
    /// The moment between the old leader resigning and the successor leading, in seconds.
    gap: Option<f64>,
    /// A preStop exec hook (a shell command line).
    pre_stop: Option<String>,
    /// `four_letter_word_allow_list` (default: the stand-in's, which has ydld and rqld).
    allow: Option<&'a str>,
    /// An init container that runs this host executable with `copy-to /raft` (the image's
    /// binary: docs/yield.md's pattern), and an emptyDir `raft` shared with the container.
    init_copy_from: Option<PathBuf>,
}

/// Three stand-in replicas, keeper-0..2, in the shape docs/systems recommends: readiness on
/// `/ready`, a headless peer Service publishing not-ready addresses, a client Service, a PDB
/// and required anti-affinity. Returns the shared state directory. keeper-0 is elected first.
fn deploy_keeper(ns: &str, k: Keeper) -> PathBuf {
    let state = scratch_dir(ns).join("keeper");
    let _ = std::fs::remove_dir_all(&state);
    std::fs::create_dir_all(&state).unwrap();
    let script = repo().join("tests/standin/keeper_standin.py");
    let api = if k.commands_api.is_empty() {
        "query"
    } else {
        k.commands_api
    };
    let gap = k.gap.unwrap_or(0.1);
    let allow = k
        .allow
        .map(|a| format!(", --allow, \"{a}\""))
        .unwrap_or_default();
    let lifecycle = match &k.pre_stop {
        Some(cmd) => format!(
            "        lifecycle: {{preStop: {{exec: {{command: [/bin/sh, -c, {}]}}}}}}\n",
            serde_json::to_string(cmd).unwrap()
        ),
        None => String::new(),
    };
    let (init, raft_mount, raft_volume) = match &k.init_copy_from {
        Some(bin) => (
            format!(
                "      initContainers:\n      - name: kubectl-raft\n        image: ghcr.io/kubectl-raft/kubectl-raft:v{}\n        command: [{}, copy-to, /raft]\n        volumeMounts: [{{name: raft, mountPath: /raft}}]\n",
                env!("CARGO_PKG_VERSION"),
                bin.display()
            ),
            ", {name: raft, mountPath: /raft}",
            ", {name: raft, emptyDir: {}}",
        ),
        None => (String::new(), "", ""),
    };
    let manifest = format!(
        r#"apiVersion: v1
kind: Service
metadata: {{name: keeper}}
spec:
  clusterIP: None
  publishNotReadyAddresses: true
  selector: {{app: keeper}}
  ports: [{{name: raft, port: 9234}}]
---
apiVersion: v1
kind: Service
metadata: {{name: keeper-client}}
spec:
  selector: {{app: keeper}}
  ports: [{{name: client, port: 2181}}]
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {{name: keeper}}
spec:
  maxUnavailable: 1
  selector: {{matchLabels: {{app: keeper}}}}
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {{name: keeper}}
spec:
  serviceName: keeper
  replicas: 3
  podManagementPolicy: Parallel
  selector: {{matchLabels: {{app: keeper}}}}
  template:
    metadata: {{labels: {{app: keeper}}}}
    spec:
      terminationGracePeriodSeconds: 20
      affinity:
        podAntiAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
          - labelSelector: {{matchLabels: {{app: keeper}}}}
            topologyKey: kubernetes.io/hostname
{init}      containers:
      - name: keeper
        image: example/clickhouse-keeper-standin
        command: [/usr/bin/python3, {script}, --state, /state, --name, $(POD_NAME), --commands-api, {api}, --gap, "{gap}"{allow}]
        env:
        - {{name: POD_NAME, valueFrom: {{fieldRef: {{fieldPath: metadata.name}}}}}}
        ports: [{{name: client, containerPort: 2181}}, {{name: http-control, containerPort: 9123}}]
        readinessProbe: {{httpGet: {{path: /ready, port: http-control}}, periodSeconds: 1}}
{lifecycle}        volumeMounts: [{{name: state, mountPath: /state}}{raft_mount}]
      volumes: [{{name: state, hostPath: {{path: {dir}}}}}{raft_volume}]
"#,
        script = script.display(),
        dir = state.display()
    );
    let f = tempfile(&manifest);
    kubectl_ok(&["apply", "-n", ns, "-f", f.path_str()]);
    wait_in(
        ns,
        Duration::from_secs(90),
        "3 Keeper stand-ins Ready",
        || kubectl_json(&["get", "sts", "keeper", "-n", ns])["status"]["readyReplicas"] == 3,
    );
    state
}

/// The stand-ins' shared state (leader, term, elections, transfers).
fn state(dir: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("state.json")).unwrap()).unwrap()
}

fn events(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("events.log")).unwrap_or_default()
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// The time of the first event line containing `what`, after `after`.
fn event_at(dir: &Path, what: &str, after: f64) -> Option<f64> {
    events(dir).lines().find_map(|l| {
        let t: f64 = l.split(' ').next()?.parse().ok()?;
        (t >= after && l.contains(what)).then_some(t)
    })
}

fn keeper_status(ns: &str) -> Value {
    let out = raft(&["status", "keeper", "-n", ns, "-o", "json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    report["clusters"][0].clone()
}

#[test]
fn status_reads_keeper_through_ready_and_the_commands_api() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("keeper-status");
    deploy_keeper(&ns.name, Keeper::default());
    let c = keeper_status(&ns.name);
    assert_eq!(c["system"], "clickhouse-keeper", "{c:#}");
    assert_eq!(c["summary"]["leader"], "keeper-0", "{c:#}");
    assert_eq!(c["summary"]["healthyVoters"], 3, "{c:#}");
    for r in c["replicas"].as_array().unwrap() {
        assert_eq!(
            r["raft"]["version"], "v26.7.5.10-standin",
            "mntr read: {r:#}"
        );
        assert_eq!(r["raft"]["hasLeader"], true, "{r:#}");
    }
}

#[test]
fn yield_waits_for_keepers_delayed_flip_and_reports_the_gap() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("keeper-yield");
    let dir = deploy_keeper(
        &ns.name,
        Keeper {
            gap: Some(0.3),
            ..Default::default()
        },
    );
    let started = now();
    let (code, y, err) = yield_json(&["keeper", "-n", &ns.name, "--timeout", "20s"]);
    let returned = now();
    assert_eq!(code, Some(0), "{err}\n{y:#}");
    assert_eq!(y["outcome"], "Transferred", "{y:#}");
    assert_eq!(y["leader"], "keeper-0");
    let new = y["newLeader"].as_str().unwrap().to_string();
    assert_ne!(new, "keeper-0", "{y:#}");
    // ydld was answered before the handover; the command ended only after the flip.
    let flipped = event_at(&dir, "transferred keeper-0 ->", started)
        .unwrap_or_else(|| panic!("no handover in the stand-in's log:\n{}", events(&dir)));
    assert!(flipped <= returned, "yield returned before the flip");
    assert_eq!(state(&dir)["leader"], new.as_str(), "the stand-in agrees");
    assert!(
        y["leaderlessWindowMs"].is_number(),
        "the moment without a leader was observed: {y:#}"
    );
    assert_eq!(state(&dir)["elections"], 1, "only the first election");
}

#[test]
fn yield_to_a_named_keeper_sends_rqld_to_it() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("keeper-rqld");
    let dir = deploy_keeper(&ns.name, Keeper::default());
    let (code, y, err) = yield_json(&["keeper", "-n", &ns.name, "--to", "keeper-2"]);
    assert_eq!(code, Some(0), "{err}\n{y:#}");
    assert_eq!(y["newLeader"], "keeper-2", "{y:#}");
    assert_eq!(
        y["request"]["pod"], "keeper-2",
        "rqld goes to the target: {y:#}"
    );
    assert!(
        events(&dir).contains("handover keeper-0 -> keeper-2 requested"),
        "{}",
        events(&dir)
    );
}

#[test]
fn without_the_commands_api_ydld_goes_over_the_client_port_through_a_port_forward() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("keeper-404");
    let dir = deploy_keeper(
        &ns.name,
        Keeper {
            commands_api: "none",
            ..Default::default()
        },
    );
    // status needs only /ready.
    assert_eq!(keeper_status(&ns.name)["summary"]["leader"], "keeper-0");
    // HTTP through pods/proxy answers 404; the four-letter word goes through a port-forward.
    let (code, y, err) = yield_json(&["keeper", "-n", &ns.name]);
    assert_eq!(code, Some(0), "{err}\n{y:#}");
    assert_eq!(y["outcome"], "Transferred", "{y:#}");
    assert_ne!(state(&dir)["leader"], "keeper-0");
}

#[test]
fn a_keeper_without_the_commands_api_or_the_word_is_named_with_what_to_do() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("keeper-404-403");
    let dir = deploy_keeper(
        &ns.name,
        Keeper {
            commands_api: "none",
            allow: Some("ruok,srvr,mntr"),
            ..Default::default()
        },
    );
    let (code, y, err) = yield_json(&["keeper", "-n", &ns.name]);
    assert_eq!(code, Some(1), "{y:#}");
    assert_eq!(y["outcome"], "Failed", "{y:#}");
    assert!(
        err.contains("no command API") && err.contains("four_letter_word_allow_list"),
        "{err}"
    );
    assert_eq!(state(&dir)["leader"], "keeper-0", "nothing moved");
}

#[test]
fn a_disallowed_ydld_is_named_with_the_allow_list() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("keeper-403");
    let dir = deploy_keeper(
        &ns.name,
        Keeper {
            commands_api: "path",
            allow: Some("ruok,srvr,mntr,lgif"),
            ..Default::default()
        },
    );
    let (code, y, err) = yield_json(&["keeper", "-n", &ns.name]);
    assert_eq!(code, Some(1), "{y:#}");
    assert!(
        err.contains("HTTP 403") && err.contains("four_letter_word_allow_list"),
        "{err}"
    );
    assert_eq!(state(&dir)["leader"], "keeper-0", "nothing moved");
}

/// Deletes keeper-0 (the leader), waits for its replacement and returns what its preStop
/// hook wrote to `prestop-keeper-0.log` in the state directory.
fn delete_the_leader_and_read_its_hook_log(ns: &str, dir: &Path) -> String {
    let uid = pod_json(ns, "keeper-0")["metadata"]["uid"].clone();
    kubectl_ok(&["delete", "pod", "keeper-0", "-n", ns, "--wait=false"]);
    wait_in(ns, Duration::from_secs(60), "keeper-0 replaced", || {
        pod_json_opt(ns, "keeper-0").is_some_and(|p| p["metadata"]["uid"] != uid)
    });
    std::fs::read_to_string(dir.join("prestop-keeper-0.log")).unwrap_or_default()
}

/// docs/yield.md's pattern with the release image: an init container runs the image's binary
/// (`copy-to /raft`, the image has no shell and no cp), and the preStop hook runs the copy.
#[test]
fn the_images_binary_copied_by_an_init_container_runs_the_prestop_hook() {
    // Waited for before the nodes are taken (#41): see tests/common image_binary.
    let binary = image_binary();
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("keeper-image");
    let dir = deploy_keeper(
        &ns.name,
        Keeper {
            init_copy_from: Some(binary),
            pre_stop: Some(
                "/raft/kubectl-raft yield --local --system clickhouse-keeper --pod-grace-period 20 >> /state/prestop-$POD_NAME.log 2>&1"
                    .into(),
            ),
            ..Default::default()
        },
    );
    let log = delete_the_leader_and_read_its_hook_log(&ns.name, &dir);
    assert!(
        log.contains("handed leadership over"),
        "the copied binary's line: {log:?}\nevents:\n{}",
        events(&dir)
    );
    assert_eq!(
        state(&dir)["elections"],
        1,
        "no election:\n{}",
        events(&dir)
    );
}

#[test]
fn yield_local_in_a_prestop_hook_hands_keepers_leadership_over_without_an_election() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("keeper-prestop");
    let bin = env!("CARGO_BIN_EXE_kubectl-raft");
    let dir = deploy_keeper(
        &ns.name,
        Keeper {
            pre_stop: Some(format!(
                "{bin} yield --local --system clickhouse-keeper --pod-grace-period 20 >> /state/prestop-$POD_NAME.log 2>&1"
            )),
            ..Default::default()
        },
    );
    let log = delete_the_leader_and_read_its_hook_log(&ns.name, &dir);
    assert!(
        log.contains("handed leadership over"),
        "the hook's line: {log:?}\nevents:\n{}",
        events(&dir)
    );
    let ev = events(&dir);
    assert!(ev.contains("transferred keeper-0 ->"), "{ev}");
    assert!(
        !ev.contains("stopped while leading"),
        "SIGTERM came first:\n{ev}"
    );
    assert_eq!(state(&dir)["elections"], 1, "no election:\n{ev}");
}

#[test]
fn a_plain_delete_of_keepers_leader_costs_an_election() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("keeper-delete");
    let dir = deploy_keeper(&ns.name, Keeper::default());
    kubectl_ok(&["delete", "pod", "keeper-0", "-n", &ns.name, "--wait=false"]);
    wait_until(Duration::from_secs(30), "an election", || {
        state(&dir)["elections"] == 2
    });
    let ev = events(&dir);
    assert!(ev.contains("stopped while leading keeper-0"), "{ev}");
}

#[test]
fn drain_of_keepers_leaders_node_hands_over_first_and_waits_for_the_flip() {
    let _nodes = exclusive_nodes();
    let ns = TestNamespace::new("keeper-drain");
    let dir = deploy_keeper(&ns.name, Keeper::default());
    let node = node_of(&ns.name, "keeper-0");
    wait_node_alone(&node, &ns.name);
    let _cordoned = Cordoned(vec![node.clone()]);
    // Keeper (and its stand-in) reports no Raft configuration: without the flag the drain
    // refuses (drain_refuses_keeper_without_assume_voters_are_pods); the stand-in runs
    // exactly its three pods. Its state is shared through a hostPath (the test's, not the
    // node's data): allowed.
    let (code, report, err) = verb_json(
        "drain",
        &[
            &node,
            "--timeout",
            "90s",
            "--assume-voters-are-pods",
            "--allow-hostpath-data",
        ],
    );
    assert_eq!(code, Some(0), "{err}\n{report:#}");
    let c = cluster(&report, &ns.name);
    assert_eq!(drain_counts(c), (Some(1), Some(1), Some(0)), "{c:#}");
    let ev = events(&dir);
    assert!(ev.contains("transferred keeper-0 ->"), "{ev}");
    assert!(!ev.contains("stopped while leading"), "{ev}");
    assert_eq!(state(&dir)["elections"], 1, "no election:\n{ev}");
}

#[test]
fn without_the_commands_api_ydld_goes_over_the_client_port_with_via_direct() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("keeper-4lw");
    let dir = deploy_keeper(
        &ns.name,
        Keeper {
            commands_api: "none",
            ..Default::default()
        },
    );
    let (code, y, err) = yield_json(&["keeper", "-n", &ns.name, "--via", "direct"]);
    assert_eq!(code, Some(0), "{err}\n{y:#}");
    assert_eq!(y["outcome"], "Transferred", "{y:#}");
    assert_ne!(state(&dir)["leader"], "keeper-0");
    assert!(
        events(&dir).contains("handover keeper-0 ->"),
        "{}",
        events(&dir)
    );
}

#[test]
fn drain_refuses_keeper_without_assume_voters_are_pods() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("keeper-unknown");
    deploy_keeper(&ns.name, Keeper::default());
    let node = node_of(&ns.name, "keeper-1");
    let (code, report, err) = verb_json("drain", &[&node, "--dry-run"]);
    assert_eq!(code, Some(1), "{err}\n{report:#}");
    let c = cluster(&report, &ns.name);
    assert_eq!(c["plan"]["blocker"]["reason"], "MembershipUnknown", "{c:#}");
    assert!(
        c["plan"]["blocker"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("--assume-voters-are-pods"),
        "{c:#}"
    );
}

/// `restart` of the stand-in: every replica restarted once, the leader (keeper-0) last after
/// one handover it waits for (the stand-in flips only after a moment without a leader), no
/// election.
#[test]
fn restart_hands_keepers_leadership_over_once_and_restarts_every_replica() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("keeper-restart");
    let dir = deploy_keeper(&ns.name, Keeper::default());
    let (code, report, err) = verb_json(
        "restart",
        &[
            "keeper",
            "-n",
            &ns.name,
            "--timeout",
            "90s",
            "--assume-voters-are-pods",
            "--allow-hostpath-data",
        ],
    );
    assert_eq!(code, Some(0), "{err}\n{report:#}");
    let c = &report["cluster"];
    assert_eq!(drain_counts(c), (Some(3), Some(1), Some(0)), "{c:#}");
    let ev = events(&dir);
    assert!(ev.contains("transferred keeper-0 ->"), "{ev}");
    assert!(!ev.contains("stopped while leading"), "{ev}");
    assert_eq!(state(&dir)["elections"], 1, "no election:\n{ev}");
}
