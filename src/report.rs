//! The status report: what `status` prints, and the stable schema of `-o json|yaml`
//! (documented field by field in docs/status-schema.md). Add fields; never rename or
//! remove one without bumping `apiVersion`.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::model::{OwnerKind, Role};
use crate::plan::drain::{ClusterPlan, PodVerdict};
use crate::plan::groups::GroupCall;
use crate::plan::restart::Restart;
use crate::plan::{ReplicaView, TransferCall};

pub const API_VERSION: &str = "kubectl-raft/v1alpha1";

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusReport {
    pub api_version: &'static str,
    pub kind: &'static str,
    pub clusters: Vec<ClusterReport>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterReport {
    pub namespace: String,
    pub name: String,
    /// "StatefulSet", or "Selector" for pods chosen with -l.
    pub owner_kind: OwnerKind,
    pub system: String,
    pub summary: Summary,
    pub pdb: Option<PdbReport>,
    pub services: Vec<ServiceReport>,
    pub replicas: Vec<ReplicaReport>,
    pub warnings: Vec<Warning>,
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// Desired replicas of the StatefulSet (pods found, for a selector).
    pub desired_replicas: u32,
    /// Raft members: from the system's own member list where it has one, else the replicas.
    pub members: u32,
    pub voters: u32,
    /// Voters that answer healthy by the system's own check.
    pub healthy_voters: u32,
    /// Votes needed to elect a leader and commit: voters / 2 + 1.
    pub quorum: u32,
    pub has_quorum: bool,
    /// How many more voters may fail before quorum is lost (0 when it is already lost).
    pub fault_tolerance: u32,
    /// The pod that leads, when exactly one does.
    pub leader: Option<String>,
    pub term: Option<u64>,
    pub ready_pods: u32,
    /// Where `voters` comes from: the system's own configuration, or (where it cannot be
    /// read) the pods, which is a guess: `drain` does not act on it unless told to.
    pub voters_from: VotersFrom,
}

#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum VotersFrom {
    /// The member list (or voter count) the system itself reports.
    Configuration,
    /// The StatefulSet's replicas: the system's configuration could not be read.
    Pods,
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct PdbReport {
    pub name: String,
    pub min_available: Option<String>,
    pub max_unavailable: Option<String>,
    pub current_healthy: i32,
    pub desired_healthy: i32,
    pub disruptions_allowed: i32,
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ServiceReport {
    pub name: String,
    pub headless: bool,
    pub publish_not_ready_addresses: bool,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaReport {
    pub pod: String,
    pub node: Option<String>,
    pub node_unschedulable: bool,
    pub node_ready: Option<bool>,
    pub pod_ip: Option<String>,
    pub phase: String,
    /// The pod's Ready condition.
    pub ready: bool,
    pub terminating: bool,
    /// When a terminating pod's grace period ends (its deletionTimestamp, RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub terminating_until: Option<String>,
    /// Why Kubernetes is taking the pod away, from its `DisruptionTarget` condition:
    /// `EvictionByEvictionAPI`, `PreemptionByScheduler`, `DeletionByTaintManager`,
    /// `TerminationByKubelet`, ... (with its message after a colon, where it has one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disruption: Option<String>,
    pub restarts: i32,
    pub probes: Probes,
    pub raft: RaftReport,
    pub endpoints: Vec<EndpointReport>,
}

#[derive(Debug, Clone, Serialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct Probes {
    pub readiness: Option<String>,
    pub liveness: Option<String>,
    pub startup: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Check {
    /// "ok", "failing", "unreachable" or "unknown".
    pub state: CheckState,
    pub detail: String,
}

#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum CheckState {
    Ok,
    Failing,
    Unreachable,
    Unknown,
}

impl CheckState {
    pub fn as_str(self) -> &'static str {
        match self {
            CheckState::Ok => "ok",
            CheckState::Failing => "failing",
            CheckState::Unreachable => "unreachable",
            CheckState::Unknown => "unknown",
        }
    }
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RaftReport {
    pub health: Check,
    /// The system's own readiness check, where it has one.
    pub readiness: Option<Check>,
    pub role: Role,
    pub member_id: Option<String>,
    /// The leader as this replica sees it (its id), and the pod that id belongs to.
    pub leader_id: Option<String>,
    pub leader_pod: Option<String>,
    pub has_leader: Option<bool>,
    pub term: Option<u64>,
    pub commit_index: Option<u64>,
    pub applied_index: Option<u64>,
    /// Entries behind the leader's commit index.
    pub lag: Option<u64>,
    pub learner: bool,
    pub version: Option<String>,
    /// How many of the other Raft groups (NATS: streams, consumers) this member leads, by
    /// kind; absent when the system has none or they could not be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub leads: Option<BTreeMap<String, u64>>,
    /// Requests that failed, one message each.
    pub errors: Vec<String>,
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct EndpointReport {
    pub service: String,
    /// False when no EndpointSlice of the Service lists the pod.
    pub listed: bool,
    pub ready: Option<bool>,
    pub serving: Option<bool>,
    pub terminating: Option<bool>,
}

impl EndpointReport {
    /// How a client of the Service sees the replica: routed, standby, terminating, absent.
    pub fn short(&self) -> &'static str {
        if !self.listed {
            return "absent";
        }
        match (self.ready, self.serving, self.terminating) {
            (_, Some(true), Some(true)) => "terminating(serving)",
            (_, _, Some(true)) => "terminating",
            (Some(false), _, _) => "not-ready",
            _ => "ready",
        }
    }
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Warning {
    /// A stable machine-readable code, e.g. `NoLeader`.
    pub code: WarningCode,
    pub pod: Option<String>,
    pub message: String,
}

/// Every warning `status` can give, serialised as its name (docs/status-schema.md lists them;
/// a test keeps the two the same).
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum WarningCode {
    QuorumLost,
    NoLeader,
    MultipleLeaders,
    FaultToleranceZero,
    ReadyButUnhealthy,
    ReadyWithoutLeader,
    Unreachable,
    ServiceRoutesToUnready,
    WeakReadinessProbe,
    LeaderOnCordonedNode,
    NoPodDisruptionBudget,
    DisruptionBudgetTooLoose,
    MembershipUnknown,
    CredentialsUnreadable,
}

#[cfg(test)]
impl WarningCode {
    pub const ALL: &'static [WarningCode] = &[
        WarningCode::QuorumLost,
        WarningCode::NoLeader,
        WarningCode::MultipleLeaders,
        WarningCode::FaultToleranceZero,
        WarningCode::ReadyButUnhealthy,
        WarningCode::ReadyWithoutLeader,
        WarningCode::Unreachable,
        WarningCode::ServiceRoutesToUnready,
        WarningCode::WeakReadinessProbe,
        WarningCode::LeaderOnCordonedNode,
        WarningCode::NoPodDisruptionBudget,
        WarningCode::DisruptionBudgetTooLoose,
        WarningCode::MembershipUnknown,
        WarningCode::CredentialsUnreadable,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            WarningCode::QuorumLost => "QuorumLost",
            WarningCode::NoLeader => "NoLeader",
            WarningCode::MultipleLeaders => "MultipleLeaders",
            WarningCode::FaultToleranceZero => "FaultToleranceZero",
            WarningCode::ReadyButUnhealthy => "ReadyButUnhealthy",
            WarningCode::ReadyWithoutLeader => "ReadyWithoutLeader",
            WarningCode::Unreachable => "Unreachable",
            WarningCode::ServiceRoutesToUnready => "ServiceRoutesToUnready",
            WarningCode::WeakReadinessProbe => "WeakReadinessProbe",
            WarningCode::LeaderOnCordonedNode => "LeaderOnCordonedNode",
            WarningCode::NoPodDisruptionBudget => "NoPodDisruptionBudget",
            WarningCode::DisruptionBudgetTooLoose => "DisruptionBudgetTooLoose",
            WarningCode::MembershipUnknown => "MembershipUnknown",
            WarningCode::CredentialsUnreadable => "CredentialsUnreadable",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        crate::render::structured(&report, crate::cli::Output::Json, &mut out).unwrap();
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/yield.json");
        if std::env::var_os("UPDATE_GOLDEN").is_some() {
            std::fs::write(&path, &out).unwrap();
        }
        let golden = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e} (create it with UPDATE_GOLDEN=1)", path.display()));
        assert_eq!(String::from_utf8(out).unwrap(), golden);
    }

    /// docs/status-schema.md lists every warning code, and nothing else.
    #[test]
    fn the_documented_warning_codes_are_the_codes() {
        let doc = include_str!("../docs/status-schema.md");
        let mut documented: Vec<&str> = doc
            .lines()
            .filter_map(|l| l.strip_prefix("| `"))
            .filter_map(|l| l.split_once('`').map(|(code, _)| code))
            .collect();
        documented.sort();
        let mut codes: Vec<&str> = WarningCode::ALL.iter().map(|c| c.as_str()).collect();
        codes.sort();
        assert_eq!(documented, codes);
        for c in WarningCode::ALL {
            assert_eq!(
                serde_json::to_value(c).unwrap(),
                serde_json::Value::String(c.as_str().into()),
                "serialised as its name"
            );
        }
    }
}

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
    pub elapsed_ms: f64,
}

impl GroupsMoved {
    pub fn succeeded(&self) -> bool {
        self.failed.is_empty() && self.still_led.is_empty()
    }

    /// One line for the user.
    pub fn summary(&self) -> String {
        let mut s = if self.moved.is_empty() && self.failed.is_empty() {
            format!("{} leads no streams or consumers", self.server)
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
        if !self.failed.is_empty() {
            s.push_str(&format!("; not moved: {}", self.failed.join("; ")));
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
    #[serde(flatten)]
    pub waited: Option<Waited>,
    /// With --streams: the stepdowns of the old leader's other groups (a dry run: planned).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub groups_planned: Vec<GroupCall>,
    /// With --streams: what moving them did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub groups: Option<GroupsMoved>,
}
