//! `kubectl raft status --watch` in the test world: beside a yield and a restart it records
//! exactly the leader changes they report and an eviction's DisruptionTarget reason; the line
//! stream, the JSON events and the terminal's redraw (through a pseudo-terminal).

use std::process::Command;
use std::time::Duration;

use crate::common::*;
use serde_json::Value;

/// A watch of `etcd` in `ns` every 500ms with `output` ("json" or "table"), started and past
/// its first round.
fn watching(ns: &str, output: &str) -> Running {
    let mut w = Running::start(&[
        "status",
        "etcd",
        "-n",
        ns,
        "--watch",
        "--interval",
        "500ms",
        "-o",
        output,
    ]);
    w.wait_for("watching 1 cluster(s)", Duration::from_secs(60));
    w
}

/// Ends the watch with Ctrl-C: (its stdout, its stderr).
fn stop(w: Running) -> (String, String) {
    signal(w.pid(), "INT");
    let (code, out, err) = w.finish(Duration::from_secs(30));
    assert_eq!(code, Some(0), "Ctrl-C ends it cleanly: {err}");
    (out, err)
}

fn events(out: &str) -> Vec<Value> {
    out.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
        .collect()
}

/// Waits until the watch's last leader is `leader`: it has seen the end of what the verb did.
fn until_it_sees_lead(w: &mut Running, leader: &str) {
    w.wait_for_stdout(
        &format!("leader change to {leader}"),
        Duration::from_secs(30),
        |out| leaders(&events(out)).last().map(String::as_str) == Some(leader),
    );
}

/// The leaders the events name, in order, without the gaps ("-") between them.
fn leaders(events: &[Value]) -> Vec<String> {
    let mut out: Vec<String> = vec![];
    for e in events.iter().filter(|e| e["field"] == "leader") {
        for v in [&e["from"], &e["to"]] {
            let v = v.as_str().unwrap().to_string();
            if v != "-" && out.last() != Some(&v) {
                out.push(v);
            }
        }
    }
    out
}

#[test]
fn a_watch_beside_a_yield_sees_exactly_its_leader_change() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("watch-yield");
    deploy_etcd(&ns.name, 3);
    let before = etcd_leader(&ns.name).unwrap().0;
    let mut w = watching(&ns.name, "json");
    let (code, y, err) = yield_json(&["etcd", "-n", &ns.name]);
    assert_eq!(code, Some(0), "{err}\n{y:#}");
    let after = y["newLeader"].as_str().unwrap().to_string();
    until_it_sees_lead(&mut w, &after);
    let (out, err) = stop(w);
    let ev = events(&out);
    assert_eq!(ev[0]["field"], "appeared", "{out}");
    assert_eq!(leaders(&ev), [before, after], "{out}");
    assert!(err.contains("1 leader change(s)"), "{err}");
}

/// etcd-3.yaml whose preStop hook takes 3 s: each evicted member stays Terminating (with its
/// DisruptionTarget condition) for several rounds of the watch.
fn deploy_slow_to_stop(ns: &str, nodes: Nodes) {
    let text = std::fs::read_to_string(repo().join("tests/manifests/etcd-3.yaml")).unwrap();
    let slow = text.replace(
        r#"date +%s > /var/lib/etcd/prestop-ran"#,
        r#"sleep 3; date +%s > /var/lib/etcd/prestop-ran"#,
    );
    assert_ne!(slow, text);
    apply_on(ns, &slow, nodes);
    wait_etcd_ready(ns, 3);
    assert_pods_on(ns, nodes);
}

#[test]
fn a_watch_beside_a_restart_sees_the_evictions_reason() {
    a_watch_beside_a_restart(Nodes::Agent);
}

/// On a real kubelet the condition is the API server's (the Eviction API sets it), kept by a
/// kubelet that writes only the conditions it owns.
#[test]
fn a_watch_beside_a_restart_sees_the_evictions_reason_on_real_kubelets() {
    a_watch_beside_a_restart(Nodes::Kubelet);
}

fn a_watch_beside_a_restart(nodes: Nodes) {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("watch-restart");
    deploy_slow_to_stop(&ns.name, nodes);
    let mut w = watching(&ns.name, "json");
    let (code, report, err) = verb_json("restart", &["etcd", "-n", &ns.name, "--timeout", "90s"]);
    assert_eq!(code, Some(0), "{err}\n{report:#}");
    until_it_sees_lead(&mut w, &etcd_leader(&ns.name).unwrap().0);
    let (out, err) = stop(w);
    let ev = events(&out);
    let reasons: Vec<&str> = ev
        .iter()
        .filter(|e| e["field"] == "disruption")
        .filter_map(|e| e["to"].as_str())
        .filter(|t| *t != "-")
        .collect();
    assert!(
        reasons
            .iter()
            .any(|r| r.starts_with("EvictionByEvictionAPI")),
        "{out}"
    );
    let c = &report["cluster"];
    let changes = leaders(&ev).len() - 1;
    assert_eq!(
        changes as u64,
        c["transfers"].as_u64().unwrap() + c["elections"].as_u64().unwrap(),
        "{out}\n{c:#}"
    );
    assert!(
        err.contains(&format!("{changes} leader change(s)")),
        "{err}"
    );
}

#[test]
fn without_a_terminal_each_change_is_one_line() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("watch-lines");
    deploy_etcd(&ns.name, 3);
    let before = etcd_leader(&ns.name).unwrap().0;
    let mut w = watching(&ns.name, "table");
    let (code, y, err) = yield_json(&["etcd", "-n", &ns.name]);
    assert_eq!(code, Some(0), "{err}\n{y:#}");
    let after = y["newLeader"].as_str().unwrap().to_string();
    let cluster = format!("{}/etcd", ns.name);
    let (went, came) = (
        format!("{cluster}: leader {before} -> "),
        format!(" -> {after}"),
    );
    w.wait_for_stdout(
        &format!("{after} leading"),
        Duration::from_secs(30),
        |out| {
            out.lines()
                .any(|l| l.contains(&format!("{cluster}: leader ")) && l.ends_with(&came))
        },
    );
    let (out, _) = stop(w);
    assert!(out.lines().any(|l| l.contains(&went)), "{out}");
    assert!(out.contains("watched for"), "{out}");
    assert!(
        !out.contains('\x1b'),
        "no terminal control without a terminal"
    );
}

/// Through a pseudo-terminal (util-linux `script`): the table is redrawn in place, with the
/// running line per cluster; Ctrl-C (here `timeout -s INT` inside it) ends it with the summary.
#[test]
fn on_a_terminal_the_table_is_redrawn_with_a_running_line() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("watch-tty");
    deploy_etcd(&ns.name, 3);
    let bin = env!("CARGO_BIN_EXE_kubectl-raft");
    let cmd = format!(
        "timeout -s INT 4 {bin} status etcd -n {} --watch --interval 500ms",
        ns.name
    );
    let out = Command::new("script")
        .args(["-qfec", &cmd, "/dev/null"])
        .env("KUBECONFIG", &world().kubeconfig)
        .output()
        .expect("script runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.matches("\x1b[H\x1b[2J").count() >= 2,
        "redrawn: {text}"
    );
    assert!(
        text.contains("Every 500ms: kubectl raft status --watch"),
        "{text}"
    );
    assert!(
        text.contains(&format!("{}/etcd: 0 leader change(s)", ns.name)),
        "{text}"
    );
    assert!(text.contains("watched for"), "{text}");
}

/// "Done when" of the watch: beside a drain of the leader's node, the watch records the same
/// leader changes as the drain's report (transfers + elections) and the same longest
/// leaderless window within one polling interval (500ms).
#[test]
fn a_watch_beside_a_drain_agrees_with_its_report() {
    let _nodes = exclusive_nodes();
    let ns = TestNamespace::new("watch-drain");
    deploy_etcd(&ns.name, 3);
    let leader = etcd_leader(&ns.name).unwrap().0;
    let node = node_of(&ns.name, &leader);
    wait_node_alone(&node, &ns.name);
    let _c = Cordoned(vec![node.clone()]);
    let mut w = watching(&ns.name, "json");
    let (code, report, err) = verb_json("drain", &[&node, "--timeout", "90s"]);
    assert_eq!(code, Some(0), "{err}\n{report:#}");
    until_it_sees_lead(&mut w, &etcd_leader(&ns.name).unwrap().0);
    let (out, werr) = stop(w);
    let c = cluster(&report, &ns.name);
    let (transfers, elections) = (
        c["transfers"].as_u64().unwrap(),
        c["elections"].as_u64().unwrap(),
    );
    assert_eq!(transfers + elections, 1, "{c:#}");
    let ev = events(&out);
    assert_eq!(
        (leaders(&ev).len() - 1) as u64,
        transfers + elections,
        "{out}\n{c:#}"
    );
    // The watch's summary line of this cluster: "... longest without a leader Nms ...".
    let line = werr
        .lines()
        .find(|l| l.contains(&format!("{}/etcd:", ns.name)))
        .unwrap_or_else(|| panic!("no summary line: {werr}"));
    let watched: f64 = line
        .split("longest without a leader ")
        .nth(1)
        .and_then(|r| r.split("ms").next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    let drained = c["longestLeaderlessMs"].as_f64().unwrap_or(0.0);
    assert!(
        (watched - drained).abs() <= 500.0,
        "the watch saw {watched}ms without a leader, the drain measured {drained}ms: {line}\n{c:#}"
    );
}
