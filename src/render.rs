//! Rendering: tables for people, JSON and YAML for programs.

use std::io::Write;
use std::time::Duration;

use anyhow::Result;
use comfy_table::presets::NOTHING;
use comfy_table::{ContentArrangement, Table};

use std::borrow::Cow;

use crate::actions::{ClusterSummary, DrainReport, RestartReport};
use crate::model::human_duration;
use crate::plan::drain::{Action, DrainStep, PodVerdict};
use crate::report::{ClusterReport, ReplicaReport, StatusReport};

/// Whether a character could steer a terminal or reorder what it shows: C0 controls but
/// newline and tab, DEL, C1 controls (U+0080..U+009F; U+009B is a CSI on some terminals), and
/// Unicode format characters (bidi overrides, zero-width characters: `model::text`).
fn is_steering(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t') || crate::model::text::is_format(c)
}

/// `s` without anything that could steer a terminal: what replicas say (versions, member
/// ids, error text) reaches the admin's screen only through this or [`Clean`].
pub fn clean(s: &str) -> Cow<'_, str> {
    if s.chars().any(is_steering) {
        Cow::Owned(s.chars().filter(|c| !is_steering(*c)).collect())
    } else {
        Cow::Borrowed(s)
    }
}

/// A writer that drops the bytes of terminal controls (C0 but newline and tab, DEL, UTF-8
/// encoded C1) from everything written through it: stdout and stderr of every verb. JSON and
/// YAML escape such characters already, so only text written raw is changed.
pub struct Clean<W: Write>(pub W);

impl<W: Write> Write for Clean<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut kept: Vec<u8> = buf
            .iter()
            .copied()
            .filter(|b| !((*b < 0x20 && *b != b'\n' && *b != b'\t') || *b == 0x7f))
            .collect();
        // UTF-8 encoded C1 controls; removing one pair can bring two bytes together into
        // another, so until none is left.
        loop {
            let before = kept.len();
            let mut out = Vec::with_capacity(kept.len());
            let mut i = 0;
            while i < kept.len() {
                if kept[i] == 0xC2 && kept.get(i + 1).is_some_and(|n| (0x80..=0x9f).contains(n)) {
                    i += 2;
                    continue;
                }
                out.push(kept[i]);
                i += 1;
            }
            kept = out;
            if kept.len() == before {
                break;
            }
        }
        self.0.write_all(&kept)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

/// How a report is printed: the library's own output format (`-o` maps onto it in `cli`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// The table people read.
    Table,
    /// The table with more columns.
    Wide,
    /// Pretty JSON, as `kubectl -o json`.
    Json,
    /// YAML, as `kubectl -o yaml`.
    Yaml,
}

/// A report as `-o json` (pretty) or `-o yaml` prints it; false (nothing printed) for the
/// table outputs, which each verb renders itself.
pub fn structured<T: serde::Serialize>(
    report: &T,
    output: Format,
    out: &mut dyn Write,
) -> Result<bool> {
    match output {
        Format::Json => {
            serde_json::to_writer_pretty(&mut *out, report)?;
            writeln!(out)?;
            Ok(true)
        }
        Format::Yaml => {
            let text = serde_saphyr::to_string(report).map_err(|e| anyhow::anyhow!("{e}"))?;
            write!(out, "{text}")?;
            Ok(true)
        }
        Format::Table | Format::Wide => Ok(false),
    }
}

pub fn status(report: &StatusReport, output: Format, out: &mut dyn Write) -> Result<()> {
    status_marked(report, output, &Marks::new(), out)
}

/// Cells to mark as changed (`status --watch`): (cluster `namespace/name`, pod, column).
pub type Marks = std::collections::BTreeSet<(String, String, &'static str)>;

/// `status`, with each marked cell followed by `*`.
pub fn status_marked(
    report: &StatusReport,
    output: Format,
    marks: &Marks,
    out: &mut dyn Write,
) -> Result<()> {
    if structured(report, output, out)? {
        return Ok(());
    }
    for (i, c) in report.clusters.iter().enumerate() {
        if i > 0 {
            writeln!(out)?;
        }
        cluster_table(c, output == Format::Wide, marks, out)?;
    }
    Ok(())
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map(|x| x.to_string()).unwrap_or_else(|| "-".into())
}

/// The gate's line of a cluster: shown when it decides the cluster's evictions or refused one.
fn gate_line(g: &crate::report::GateReport) -> Option<String> {
    use crate::report::GateState;
    // An Event anyone allowed to write Events in the namespace could have written: each
    // part one line, never a line of its own in the table.
    let line = |s: &str| crate::model::text::one_line(s, 300);
    let refusal = g.last_refusal.as_ref().map(|r| {
        let times = if r.count > 1 {
            format!(" ({}×)", r.count)
        } else {
            String::new()
        };
        format!(
            "; last refused {} at {}{times}: {} ({})",
            line(&r.pod),
            line(&r.at),
            line(&r.message),
            line(&r.reason)
        )
    });
    let mode = match g.mode.as_deref() {
        Some(m @ ("warn" | "audit")) => {
            format!(", {m} mode: a trial, nothing refused, what it would refuse recorded")
        }
        _ => String::new(),
    };
    let policy = g.failure_policy.as_deref().unwrap_or("Fail");
    let down = match (g.ready_endpoints, policy) {
        (Some(0), "Fail") => "; NO GATE REPLICA IS READY: every eviction of these pods fails (500, kubectl drain stops) until one is (kubectl get pods -l app.kubernetes.io/name=kubectl-raft-gate -A)",
        (Some(0), _) => "; no gate replica is ready: evictions of these pods pass unchecked (failurePolicy Ignore)",
        _ => "",
    };
    let state = match (g.state, &g.webhook) {
        (GateState::Gated, Some(w)) => format!(
            "evictions decided by the gate (webhook {w}, failurePolicy {policy}{mode}){down}"
        ),
        (GateState::NotGated, _) => "not gated (evictions see only the PodDisruptionBudget)".into(),
        _ => format!(
            "unknown ({})",
            g.unknown_because.as_deref().unwrap_or("not read")
        ),
    };
    match (g.state, refusal) {
        (GateState::Gated, r) => Some(format!("Gate: {state}{}", r.unwrap_or_default())),
        (_, Some(r)) => Some(format!("Gate: {state}{r}")),
        _ => None,
    }
}

fn cluster_table(c: &ClusterReport, wide: bool, marks: &Marks, out: &mut dyn Write) -> Result<()> {
    let s = &c.summary;
    let quorum = if s.has_quorum {
        format!("fault tolerance {}", s.fault_tolerance)
    } else {
        "QUORUM LOST".to_string()
    };
    let leader = match (&s.leader, s.term) {
        (Some(l), Some(t)) => format!("leader {l} (term {t})"),
        (Some(l), None) => format!("leader {l}"),
        (None, _) => "NO LEADER".to_string(),
    };
    let counted = match s.voters_from {
        crate::report::VotersFrom::Configuration => "",
        crate::report::VotersFrom::Pods => " (counted from pods)",
        crate::report::VotersFrom::Unreadable => " (counted from pods: member list unreadable)",
    };
    writeln!(
        out,
        "{}/{} ({}, {}): {} members{counted}, {}/{} voters healthy, quorum {}, {}, {}",
        c.namespace,
        c.name,
        c.system,
        c.owner_kind.as_str(),
        s.members,
        s.healthy_voters,
        s.voters,
        s.quorum,
        quorum,
        leader
    )?;
    if let Some(p) = &c.pdb {
        writeln!(
            out,
            "PodDisruptionBudget {}: {} disruption(s) allowed ({} healthy, {} required)",
            p.name, p.disruptions_allowed, p.current_healthy, p.desired_healthy
        )?;
    }
    if let Some(line) = c.gate.as_ref().and_then(gate_line) {
        writeln!(out, "{line}")?;
    }
    if !c.services.is_empty() {
        let svcs: Vec<String> = c
            .services
            .iter()
            .map(|s| match (s.headless, s.publish_not_ready_addresses) {
                (true, true) => format!("{} (headless, publishes not-ready)", s.name),
                (true, false) => format!("{} (headless)", s.name),
                (false, true) => format!("{} (publishes not-ready)", s.name),
                (false, false) => s.name.clone(),
            })
            .collect();
        writeln!(out, "Services: {}", svcs.join(", "))?;
    }
    let mut t = Table::new();
    t.load_preset(NOTHING)
        .set_content_arrangement(ContentArrangement::Disabled);
    let mut header = vec![
        "POD", "NODE", "STATUS", "READY", "RESTARTS", "HEALTH", "ROLE", "TERM", "INDEX", "LAG",
    ];
    if wide {
        header.extend([
            "APPLIED",
            "IP",
            "MEMBER",
            "SEES LEADER",
            "READINESS PROBE",
            "VERSION",
        ]);
    }
    // Systems with Raft groups besides the main one (NATS streams and consumers): how many
    // of them each member leads.
    let groups = c.replicas.iter().any(|r| r.raft.leads.is_some());
    if groups {
        header.push("LEADS");
    }
    header.push("ENDPOINTS");
    t.set_header(header.clone());
    // kubectl's look: no borders, columns three spaces apart, nothing before the first.
    for col in t.column_iter_mut() {
        col.set_padding((0, 3));
    }
    let cluster = format!("{}/{}", c.namespace, c.name);
    for r in &c.replicas {
        let mut row = replica_row(r, wide, groups);
        for (i, column) in header.iter().enumerate() {
            if marks.contains(&(cluster.clone(), r.pod.clone(), *column)) {
                row[i].push('*');
            }
        }
        t.add_row(row);
    }
    for line in t.to_string().lines() {
        writeln!(out, "{}", line.trim_end())?;
    }
    for w in &c.warnings {
        writeln!(out, "WARNING: {}", w.message)?;
    }
    Ok(())
}

/// The STATUS column: the phase, or Terminating with what is left of its grace period (as of
/// `now`), and why Kubernetes is taking the pod away where it says (`DisruptionTarget`).
pub fn pod_status(r: &ReplicaReport, now: k8s_openapi::jiff::Timestamp) -> String {
    let mut s = if r.terminating {
        let left = r
            .terminating_until
            .as_deref()
            .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
            .map(|until| until.as_second() - now.as_second());
        match left {
            Some(l) if l > 0 => format!("Terminating ({l}s left)"),
            Some(_) => "Terminating (grace period over)".to_string(),
            None => "Terminating".to_string(),
        }
    } else {
        r.phase.clone()
    };
    if let Some(d) = &r.disruption {
        let reason = d.split(':').next().unwrap_or(d);
        s.push_str(&format!(", {reason}"));
    }
    s
}

fn replica_row(r: &ReplicaReport, wide: bool, groups: bool) -> Vec<String> {
    let node = match (&r.node, r.node_unschedulable, r.node_ready) {
        (Some(n), true, _) => format!("{n} (cordoned)"),
        (Some(n), false, Some(false)) => format!("{n} (NotReady)"),
        (Some(n), _, _) => n.clone(),
        (None, _, _) => "-".into(),
    };
    let status = pod_status(r, k8s_openapi::jiff::Timestamp::now());
    let health = match &r.raft.readiness {
        Some(rd) if rd.state.as_str() != r.raft.health.state.as_str() => {
            format!(
                "{}/{}",
                r.raft.health.state.as_str(),
                if rd.state.as_str() == "ok" {
                    "ready"
                } else {
                    "not-ready"
                }
            )
        }
        _ => r.raft.health.state.as_str().to_string(),
    };
    let endpoints = if r.endpoints.is_empty() {
        "-".to_string()
    } else {
        r.endpoints
            .iter()
            .map(|e| format!("{}:{}", e.service, e.short()))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let mut row = vec![
        r.pod.clone(),
        node,
        status,
        if r.ready {
            "true".into()
        } else {
            "false".into()
        },
        r.restarts.to_string(),
        health,
        r.raft.role.as_str().to_string(),
        opt(r.raft.term),
        opt(r.raft.commit_index),
        opt(r.raft.lag),
    ];
    if wide {
        row.extend([
            opt(r.raft.applied_index),
            opt(r.pod_ip.clone()),
            opt(r.raft.member_id.clone()),
            opt(r.raft.leader_pod.clone().or(r.raft.leader_id.clone())),
            opt(r.probes.readiness.clone()),
            opt(r.raft.version.clone()),
        ]);
    }
    if groups {
        row.push(match &r.raft.leads {
            Some(leads) => leads
                .iter()
                .map(|(kind, n)| format!("{kind}:{n}"))
                .collect::<Vec<_>>()
                .join(" "),
            None => "?".into(),
        });
    }
    row.push(endpoints);
    row
}

#[cfg(test)]
mod clean_tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Whatever a replica says, nothing printed steers a terminal.
        #[test]
        fn no_control_character_survives(text in any::<String>(), bytes in prop::collection::vec(any::<u8>(), 0..512)) {
            prop_assert!(!clean(&text).chars().any(is_steering));
            let mut w = Clean(Vec::new());
            w.write_all(&bytes).unwrap();
            let out = w.0;
            prop_assert!(!out.iter().any(|b| (*b < 0x20 && *b != b'\n' && *b != b'\t') || *b == 0x7f));
            prop_assert!(!out.windows(2).any(|p| p[0] == 0xC2 && (0x80..=0x9f).contains(&p[1])));
        }
    }

    #[test]
    fn escape_sequences_never_reach_the_terminal() {
        assert_eq!(clean("3.5.\u{1b}[2J0\u{7}"), "3.5.[2J0");
        assert_eq!(clean("a\u{9b}31mb\r"), "a31mb");
        assert_eq!(clean("two\nlines\tok"), "two\nlines\tok");
        let mut w = Clean(Vec::new());
        w.write_all("id \u{1b}]0;owned\u{7} \u{9b}1m é\n".as_bytes())
            .unwrap();
        assert_eq!(String::from_utf8(w.0).unwrap(), "id ]0;owned 1m é\n");
    }
}

#[cfg(test)]
mod mark_tests {
    use super::*;
    use crate::model::Role;
    use crate::plan::tests::{cluster, m};

    #[test]
    fn a_marked_cell_is_starred_and_no_other() {
        let c = cluster(&[m(Role::Leader), m(Role::Follower)]);
        let key = format!("{}/{}", c.namespace, c.name);
        let pod = c.replicas[1].pod.clone();
        let report = StatusReport {
            api_version: crate::report::API_VERSION,
            kind: "StatusReport",
            clusters: vec![c],
        };
        let marks: Marks = [(key, pod.clone(), "ROLE")].into();
        let mut out = vec![];
        status_marked(&report, Format::Table, &marks, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let row = text
            .lines()
            .find(|l| l.starts_with(&format!("{pod} ")))
            .unwrap();
        assert!(row.contains("follower*"), "{text}");
        assert_eq!(text.matches('*').count(), 1, "{text}");
    }
}

// --- drain and restart -------------------------------------------------------------------

/// A planned step in words: "evict etcd-0", "hand leadership to etcd-2, then restart etcd-1".
fn step_what(s: &DrainStep, verb: &str, any_target: &str) -> String {
    match s.action {
        Action::Evict => format!("{verb} {}", s.pod),
        Action::TransferThenEvict => format!(
            "hand leadership to {}, then {verb} {}",
            s.target.as_deref().unwrap_or(any_target),
            s.pod
        ),
        Action::EvictLeader => format!("{verb} the leader {} (an election)", s.pod),
    }
}

/// `drain`'s summary: `-o json|yaml` the documented report, else the plan (dry run) or what
/// was done, per cluster.
pub fn drain_summary(r: &DrainReport, output: Format, out: &mut dyn Write) -> Result<()> {
    if structured(r, output, out)? {
        return Ok(());
    }
    if r.dry_run {
        for n in &r.nodes {
            writeln!(out, "node/{n} would be cordoned")?;
        }
        for p in &r.pods {
            let what = match &p.verdict {
                PodVerdict::Evict(None) => format!("evict ({})", p.result),
                PodVerdict::Evict(Some(w)) => format!("evict ({}); {w}", p.result),
                PodVerdict::Skip(why) => format!("skip: {why}"),
                PodVerdict::Refuse(why) => format!("BLOCKED: {why}"),
            };
            writeln!(out, "pod {}/{}: {what}", p.namespace, p.name)?;
        }
    }
    for c in &r.clusters {
        let p = &c.plan;
        write_cluster_line(c, r.dry_run, out)?;
        if r.dry_run {
            for (i, s) in p.steps.iter().enumerate() {
                let what = step_what(s, "evict", "a replaced follower");
                writeln!(
                    out,
                    "  {}. {what} on {}: {}; meanwhile {} healthy voter(s), {} needed, fault tolerance {}; PDB: {}",
                    i + 1,
                    s.node,
                    s.why,
                    s.healthy_voters_during,
                    s.quorum,
                    s.fault_tolerance_during,
                    c.pdb_answers.get(&s.pod).map_or("-", String::as_str)
                )?;
                if let Some(rev) = &s.new_revision {
                    writeln!(out, "     its replacement starts from the update revision {rev} (the StatefulSet is OnDelete with a pending update): this drain rolls the new template onto it")?;
                }
                if let Some(d) = &s.degraded {
                    writeln!(out, "     its replacement cannot start until {} is back ({d}): the cluster runs a member short", s.node)?;
                }
                if let Some(groups) = c.groups_to_move.get(&s.pod) {
                    writeln!(
                        out,
                        "     first, the leaders it holds move off it: {}",
                        groups.join(", ")
                    )?;
                }
            }
            if let Some(b) = &p.blocker {
                writeln!(out, "  BLOCKED: {}", b.message)?;
            }
            if p.steps.is_empty() && p.blocker.is_none() {
                writeln!(out, "  nothing to do")?;
            }
        } else {
            write_done(c, &format!("{}: ", c.result.as_str()), "eviction(s)", out)?;
        }
    }
    writeln!(out, "{}", r.message)?;
    Ok(())
}

/// A cluster's first line in a summary: its voters, quorum and leader as first planned; after
/// a run that acted (`dry_run` false), said to be what it was before (its leader may have moved).
pub fn write_cluster_line(c: &ClusterSummary, dry_run: bool, out: &mut dyn Write) -> Result<()> {
    let p = &c.plan;
    writeln!(
        out,
        "{} ({}){}: {} voters, {} healthy, quorum {}, leader {}{}",
        p.cluster(),
        c.system,
        if dry_run { "" } else { " before" },
        p.voters,
        p.healthy_voters,
        p.quorum,
        p.leader.as_deref().unwrap_or("none"),
        p.term.map_or(String::new(), |t| format!(" (term {t})"))
    )?;
    Ok(())
}

/// What was done, a line each, then the counts (`what`: "eviction(s)", "restart(s)").
pub fn write_done(c: &ClusterSummary, prefix: &str, what: &str, out: &mut dyn Write) -> Result<()> {
    for d in &c.done {
        writeln!(out, "  {d}")?;
    }
    let window = crate::model::leaderless_window(c.longest_leaderless_ms, None);
    writeln!(
        out,
        "  {prefix}{} {what}, {} transfer(s), {} election(s), longest {window}, {}",
        c.evictions,
        c.transfers,
        c.elections,
        human_duration(Duration::from_secs_f64(c.duration_ms / 1000.0))
    )?;
    Ok(())
}

/// `restart`'s summary: `-o json|yaml` the documented report, else the order (dry run) or what
/// was done.
pub fn restart_summary(r: &RestartReport, output: Format, out: &mut dyn Write) -> Result<()> {
    if structured(r, output, out)? {
        return Ok(());
    }
    let c = &r.cluster;
    let p = &c.plan;
    write_cluster_line(c, r.dry_run, out)?;
    if r.dry_run {
        for (i, s) in p.steps.iter().enumerate() {
            let what = step_what(s, "restart", "a restarted member");
            writeln!(
                out,
                "  {}. {what}: {}; meanwhile {} healthy voter(s), {} needed, fault tolerance {}",
                i + 1,
                s.why,
                s.healthy_voters_during,
                s.quorum,
                s.fault_tolerance_during,
            )?;
        }
        if let Some(b) = &p.blocker {
            writeln!(out, "  BLOCKED: {}", b.message)?;
        }
    } else {
        write_done(c, "", "restart(s)", out)?;
    }
    writeln!(out, "{}", r.message)?;
    Ok(())
}
