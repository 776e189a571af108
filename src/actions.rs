//! The reports of the verbs that act, `yield`, `drain` and `restart` (pure): what each did or,
//! in a dry run, would do, as `-o json|yaml` prints them (docs/yield.md, docs/drain.md,
//! docs/restart.md). They embed the plans they acted on, so they stand above `plan`; the
//! status report, which the planners read, stays below it in `report`.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::plan::drain::{ClusterPlan, PodVerdict};
use crate::plan::groups::GroupCall;
use crate::plan::restart::Restart;
use crate::plan::{ReplicaView, TransferCall};

// --- drain's and restart's reports -------------------------------------------------------

/// How a cluster's drain ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum ClusterResult {
    /// Every member moved off the nodes.
    Drained,
    /// Nothing of it was on the nodes (or it no longer exists).
    Unchanged,
    /// It stopped before the end; `message` says why, what was done and what is left.
    Stopped,
    /// A dry run: the plan only.
    Planned,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSummary {
    pub namespace: String,
    pub name: String,
    pub system: String,
    /// The plan as first made (the dry run prints it; a real drain re-plans before each step).
    pub plan: ClusterPlan,
    /// What each step answered in a dry run: the PDB's verdict for each planned eviction.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub pdb_answers: BTreeMap<String, String>,
    /// In a dry run: the other Raft groups (NATS streams, consumers) each evicted member leads,
    /// moved off it first.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub groups_to_move: BTreeMap<String, Vec<String>>,
    /// What was done, in order.
    pub done: Vec<String>,
    /// Members still on the drained nodes ("pod on node"), as last seen.
    pub left: Vec<String>,
    pub evictions: u32,
    /// Whether any eviction (or deletion) was sent, accepted or not (a leader's whose wait
    /// failed, one whose answer was lost): what may have left is not only what was counted.
    #[serde(skip)]
    pub eviction_sent: bool,
    pub transfers: u32,
    /// Term increments a transfer does not explain.
    pub elections: u64,
    /// Leaders of other Raft groups (NATS streams and consumers) moved off servers before
    /// their eviction.
    pub group_leaders_moved: u32,
    pub longest_leaderless_ms: Option<f64>,
    pub term_before: Option<u64>,
    pub term_after: Option<u64>,
    pub duration_ms: f64,
    pub result: ClusterResult,
    pub message: String,
}

impl ClusterResult {
    pub fn as_str(self) -> &'static str {
        match self {
            ClusterResult::Drained => "drained",
            ClusterResult::Unchanged => "unchanged",
            ClusterResult::Stopped => "stopped",
            ClusterResult::Planned => "planned",
        }
    }
}

impl ClusterSummary {
    pub fn new(ns: &str, name: &str, result: ClusterResult) -> Self {
        ClusterSummary {
            namespace: ns.to_string(),
            name: name.to_string(),
            system: String::new(),
            plan: empty_plan(ns, name),
            pdb_answers: BTreeMap::new(),
            groups_to_move: BTreeMap::new(),
            done: vec![],
            left: vec![],
            evictions: 0,
            eviction_sent: false,
            transfers: 0,
            elections: 0,
            group_leaders_moved: 0,
            longest_leaderless_ms: None,
            term_before: None,
            term_after: None,
            duration_ms: 0.0,
            result,
            message: String::new(),
        }
    }

    /// Keeps the longest leaderless window seen.
    pub fn record_window(&mut self, ms: Option<f64>) {
        if let Some(ms) = ms {
            self.longest_leaderless_ms = Some(self.longest_leaderless_ms.map_or(ms, |x| x.max(ms)));
        }
    }
}

fn empty_plan(ns: &str, name: &str) -> ClusterPlan {
    ClusterPlan {
        namespace: ns.into(),
        name: name.into(),
        system: String::new(),
        leader: None,
        term: None,
        voters: 0,
        healthy_voters: 0,
        quorum: 0,
        steps: vec![],
        blocker: None,
    }
}

/// The documented `-o json|yaml` result (docs/drain.md).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DrainReport {
    pub api_version: &'static str,
    pub kind: &'static str,
    pub nodes: Vec<String>,
    pub dry_run: bool,
    pub succeeded: bool,
    pub pods: Vec<PodReport>,
    pub clusters: Vec<ClusterSummary>,
    /// Why it stopped, and how to go on, when it did.
    pub message: String,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodReport {
    pub namespace: String,
    pub name: String,
    pub verdict: PodVerdict,
    /// What was done ("evicted", "already gone", ...) or, in a dry run, what the PDB answers.
    pub result: String,
}

/// The documented `-o json|yaml` result (docs/restart.md).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RestartReport {
    pub api_version: &'static str,
    pub kind: &'static str,
    pub dry_run: bool,
    /// What was replaced: the members (by pod UID) there were when it was asked for, or those
    /// not at the update revision.
    pub restart: Restart,
    pub succeeded: bool,
    pub cluster: ClusterSummary,
    pub message: String,
    /// What changed under it and how it followed (a newer template during a driven update).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub followed: Vec<String>,
}

// --- yield's report ------------------------------------------------------------------------

/// How the wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Outcome {
    /// The old leader follows and the target (or, untargeted, another member) leads.
    Transferred,
    /// A new leader, but not the one asked for.
    WentElsewhere,
    /// The old leader stepped down and was chosen again: leadership did not move.
    Returned,
    /// The request was refused or failed.
    Failed,
    /// No handover within the time limit.
    TimedOut,
}

/// What the waiting saw.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Waited {
    pub outcome: Outcome,
    /// The leader all replicas agreed on at the end.
    pub new_leader: Option<String>,
    pub term_after: Option<u64>,
    /// First round without an agreed leader to the first round with the new one; None when
    /// no round lacked a leader (the gap, if any, was shorter than a round).
    pub leaderless_window_ms: Option<f64>,
    /// The request's own time (or the deletion's), and the whole wait.
    pub action_ms: Option<f64>,
    pub total_ms: f64,
    /// Answers received, from all replicas together.
    pub rounds: usize,
    /// Mean time between two answers of one replica: the resolution of the window.
    pub round_ms: f64,
    /// The request's failure, when it failed.
    pub error: Option<String>,
    /// Each replica in the last round (printed on failure and timeout).
    pub last_round: Vec<ReplicaView>,
}

/// Why a handover is not a success: the one verdict yield, drain, restart and the in-pod
/// hook give the same wait (`Waited::verdict`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandoverFailure {
    /// Another member took over (an election?).
    WentElsewhere { to: String },
    /// The old leader stepped down and was chosen again.
    Returned,
    /// Leadership reached the target, but the term moved by more than a transfer moves it:
    /// an election happened besides it.
    TermJumped { to: String, by: u64 },
    /// The request was refused or failed.
    Failed(String),
    /// No completed handover in time.
    TimedOut,
}

impl std::fmt::Display for HandoverFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HandoverFailure::WentElsewhere { to } => write!(
                f,
                "leadership went to {to}, not where it was asked: an election, not the transfer"
            ),
            HandoverFailure::Returned => write!(
                f,
                "the leader stepped down and was chosen again: leadership did not move"
            ),
            HandoverFailure::TermJumped { to, by } => write!(
                f,
                "leadership reached {to}, but the term moved by {by} where a transfer moves it by 1: an election happened besides the transfer"
            ),
            HandoverFailure::Failed(e) => write!(f, "the transfer failed: {e}"),
            HandoverFailure::TimedOut => write!(f, "no completed handover in time"),
        }
    }
}

impl Waited {
    /// Whether the handover this wait watched succeeded, `term_before` being the leader's
    /// term when it was asked for and `targeted` whether a member was named: the old leader
    /// follows, the target (or, untargeted, another member) leads, and a targeted transfer
    /// moved the term by at most one.
    pub fn verdict(&self, term_before: Option<u64>, targeted: bool) -> Result<(), HandoverFailure> {
        let to = self.new_leader.clone().unwrap_or_else(|| "?".into());
        match self.outcome {
            Outcome::Transferred => match (term_before, self.term_after) {
                // Checked: replicas' terms may be anything up to u64::MAX.
                (Some(a), Some(b)) if targeted && b.saturating_sub(a) > 1 => {
                    Err(HandoverFailure::TermJumped { to, by: b - a })
                }
                _ => Ok(()),
            },
            Outcome::WentElsewhere => Err(HandoverFailure::WentElsewhere { to }),
            Outcome::Returned => Err(HandoverFailure::Returned),
            Outcome::Failed => Err(HandoverFailure::Failed(
                self.error.clone().unwrap_or_default(),
            )),
            Outcome::TimedOut => Err(HandoverFailure::TimedOut),
        }
    }
}

/// What moving a server's groups did (`groups` in yield's and drain's `-o json`).
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupsMoved {
    pub server: String,
    /// Groups whose stepdown was accepted.
    pub moved: Vec<String>,
    /// Groups not moved: "streams APP/ORDERS: <why>".
    pub failed: Vec<String>,
    /// Of the moved groups, those the server still led when the wait ended.
    pub still_led: Vec<String>,
    /// Groups whose stepdown met no leader (silence, or a member's "no leader now"), listed
    /// by the server as led by another server by then, or no longer listed: nothing was left
    /// to move, and the tool did not move them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub led_elsewhere: Vec<String>,
    pub elapsed_ms: f64,
}

impl GroupsMoved {
    pub fn succeeded(&self) -> bool {
        self.failed.is_empty() && self.still_led.is_empty()
    }

    /// One line for the user. Each group's reason may hold `; ` itself, so the groups not
    /// moved are set apart by ` | `.
    pub fn summary(&self) -> String {
        let mut s = if self.moved.is_empty() && self.failed.is_empty() {
            if self.led_elsewhere.is_empty() {
                format!("{} leads no streams or consumers", self.server)
            } else {
                format!(
                    "{} leads none of its groups any more ({:.0}ms)",
                    self.server, self.elapsed_ms
                )
            }
        } else {
            format!(
                "{} group leader(s) moved off {} in {:.0}ms",
                self.moved.len() - self.still_led.len(),
                self.server,
                self.elapsed_ms
            )
        };
        if !self.still_led.is_empty() {
            s.push_str(&format!("; still led there: {}", self.still_led.join(", ")));
        }
        if !self.led_elsewhere.is_empty() {
            s.push_str(&format!(
                "; no longer led there, not moved by this command (their stepdown met no leader; another server leads them, or they are gone): {}",
                self.led_elsewhere.join(", ")
            ));
        }
        if !self.failed.is_empty() {
            s.push_str(&format!("; not moved: {}", self.failed.join(" | ")));
        }
        s
    }
}

/// The documented `-o json|yaml` result (docs/yield.md).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct YieldReport {
    pub api_version: &'static str,
    pub kind: &'static str,
    pub namespace: String,
    pub name: String,
    pub system: String,
    /// "transfer", or "election" with --allow-election.
    pub mode: &'static str,
    pub dry_run: bool,
    pub leader: String,
    pub term_before: Option<u64>,
    pub target: Option<String>,
    pub targeted: bool,
    pub why: String,
    pub request: Option<TransferCall>,
    pub overridden: Vec<String>,
    pub succeeded: bool,
    pub message: String,
    /// Why the yield would not go ahead (nothing was sent): the planner's reason, a code a
    /// script can branch on (docs/troubleshooting.md lists them), and its words.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refusal: Option<crate::plan::Refusal>,
    #[serde(flatten)]
    pub waited: Option<Waited>,
    /// With --streams: the stepdowns of the old leader's other groups (a dry run: planned).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub groups_planned: Vec<GroupCall>,
    /// With --streams: what moving them did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub groups: Option<GroupsMoved>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Role;
    use crate::report::API_VERSION;

    fn groups(moved: &[&str], failed: &[&str], led_elsewhere: &[&str]) -> GroupsMoved {
        let v = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        GroupsMoved {
            server: "nats-2".into(),
            moved: v(moved),
            failed: v(failed),
            still_led: vec![],
            led_elsewhere: v(led_elsewhere),
            elapsed_ms: 12.0,
        }
    }

    #[test]
    fn the_groups_not_moved_are_told_apart_though_their_reasons_hold_semicolons() {
        let s = groups(
            &[],
            &["consumer APP/ORDERS/a: x; y", "consumer APP/ORDERS/b: z"],
            &[],
        )
        .summary();
        assert!(
            s.ends_with("not moved: consumer APP/ORDERS/a: x; y | consumer APP/ORDERS/b: z"),
            "{s}"
        );
    }

    #[test]
    fn a_server_whose_groups_all_went_elsewhere_reads_as_leading_none() {
        let s = groups(&[], &[], &["consumer APP/ORDERS/work"]).summary();
        assert!(
            s.starts_with("nats-2 leads none of its groups any more"),
            "{s}"
        );
        assert!(!s.contains("0 group leader(s) moved"), "{s}");
        assert!(
            s.ends_with("they are gone): consumer APP/ORDERS/work"),
            "{s}"
        );
    }

    /// `yield -o json` is a promise (docs/yield.md): a fixed report renders to the same bytes
    /// as `tests/golden/yield.json`. To change it on purpose, run the test with UPDATE_GOLDEN=1
    /// and review the diff.
    #[test]
    fn the_yield_report_matches_the_golden_file() {
        let view = |pod: &str, role: Role| ReplicaView {
            pod: pod.into(),
            role: Some(role),
            leader: Some("etcd-2".into()),
            has_leader: Some(true),
            term: Some(8),
            error: None,
        };
        let report = YieldReport {
            api_version: API_VERSION,
            kind: "YieldReport",
            namespace: "db".into(),
            name: "etcd".into(),
            system: "etcd".into(),
            mode: "transfer",
            dry_run: false,
            leader: "etcd-1".into(),
            term_before: Some(7),
            target: Some("etcd-2".into()),
            targeted: true,
            why: "the healthy voter with the least lag".into(),
            request: Some(TransferCall {
                pod: "etcd-1".into(),
                method: "POST".into(),
                path: "/v3/maintenance/transfer-leadership".into(),
                body: Some(r#"{"targetID":"123"}"#.into()),
                headers: BTreeMap::new(),
                ok_status: vec![200],
                error_json: None,
                hints: BTreeMap::new(),
                synchronous: true,
                nats_port: None,
                tcp_fallback: None,
            }),
            overridden: vec![],
            succeeded: true,
            message: "etcd-1 handed leadership to etcd-2 in 212ms (term 7 → 8)".into(),
            refusal: None,
            waited: Some(Waited {
                outcome: Outcome::Transferred,
                new_leader: Some("etcd-2".into()),
                term_after: Some(8),
                leaderless_window_ms: Some(25.0),
                action_ms: Some(180.5),
                total_ms: 212.0,
                rounds: 40,
                round_ms: 25.0,
                error: None,
                last_round: vec![
                    view("etcd-0", Role::Follower),
                    view("etcd-1", Role::Follower),
                    view("etcd-2", Role::Leader),
                ],
            }),
            groups_planned: vec![],
            groups: None,
        };
        let mut out = vec![];
        crate::render::structured(&report, crate::render::Format::Json, &mut out).unwrap();
        crate::golden::check("yield.json", &String::from_utf8(out).unwrap());
    }

    /// `drain -o json` is a promise (docs/drain.md): a fixed dry-run report renders to the
    /// same bytes as `tests/golden/drain-dry-run.json`. To change it on purpose, run the test
    /// with UPDATE_GOLDEN=1 and review the diff.
    #[test]
    fn the_drain_report_matches_the_golden_file() {
        use crate::plan::drain::{Action, DrainStep};
        let mut c = ClusterSummary::new("db", "etcd", ClusterResult::Planned);
        c.system = "etcd".into();
        c.term_before = Some(7);
        c.pdb_answers
            .insert("etcd-1".into(), "allowed now (1 disruption(s))".into());
        c.plan = ClusterPlan {
            namespace: "db".into(),
            name: "etcd".into(),
            system: "etcd".into(),
            leader: Some("etcd-1".into()),
            term: Some(7),
            voters: 3,
            healthy_voters: 3,
            quorum: 2,
            steps: vec![DrainStep {
                pod: "etcd-1".into(),
                node: "n2".into(),
                action: Action::TransferThenEvict,
                target: Some("etcd-0".into()),
                passed_over: vec![],
                why:
                    "the leader goes last, after a verified transfer to etcd-0 on a node that stays"
                        .into(),
                healthy_voters_during: 2,
                quorum: 2,
                fault_tolerance_during: 0,
                degraded: None,
                new_revision: None,
            }],
            blocker: None,
        };
        let report = DrainReport {
            api_version: API_VERSION,
            kind: "DrainReport",
            nodes: vec!["n2".into()],
            dry_run: true,
            succeeded: true,
            pods: vec![PodReport {
                namespace: "web".into(),
                name: "web-7d9f".into(),
                verdict: PodVerdict::Evict(None),
                result: "allowed now (no PodDisruptionBudget)".into(),
            }],
            clusters: vec![c],
            message: "dry run: nothing blocks draining n2; nothing was changed".into(),
        };
        let mut out = vec![];
        crate::render::drain_summary(&report, crate::render::Format::Json, &mut out).unwrap();
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/golden/drain-dry-run.json");
        if std::env::var_os("UPDATE_GOLDEN").is_some() {
            std::fs::write(&path, &out).unwrap();
        }
        let golden = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e} (create it with UPDATE_GOLDEN=1)", path.display()));
        assert_eq!(String::from_utf8(out).unwrap(), golden);
    }
}
