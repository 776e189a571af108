//! The status report: what `status` prints, and the stable schema of `-o json|yaml`
//! (documented field by field in docs/status-schema.md). Add fields; never rename or
//! remove one without bumping `apiVersion`.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::model::{OwnerKind, Role};

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
    /// Whether evictions of the cluster's pods go through `kubectl-raft gate`, and what it
    /// last refused (`status` only; absent from `--watch` and other verbs' reports).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gate: Option<GateReport>,
}

impl ClusterReport {
    /// Each replica's member id and its pod: how a leader a member names is told as a pod.
    pub fn pod_of_member(&self) -> std::collections::BTreeMap<String, String> {
        self.replicas
            .iter()
            .filter_map(|r| Some((r.raft.member_id.clone()?, r.pod.clone())))
            .collect()
    }

    /// The replica of the one leader the report agrees on (`summary.leader`), if any.
    pub fn leader_replica(&self) -> Option<&ReplicaReport> {
        let leader = self.summary.leader.as_deref()?;
        self.replicas.iter().find(|x| x.pod == leader)
    }
}

/// What `status` knows of the eviction gate for one cluster.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct GateReport {
    pub state: GateState,
    /// The ValidatingWebhookConfiguration that sends the cluster's evictions to the gate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub webhook: Option<String>,
    /// Its failurePolicy ("Fail": with the gate unreachable, nothing is evicted).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure_policy: Option<String>,
    /// The mode the gate says it runs in (`enforce`, or the trials `warn` and `audit`, which
    /// refuse nothing), from its configuration's annotation kubectl-raft.io/gate-mode; None
    /// before a gate wrote it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// The ready endpoints of the Service the webhook calls (None: it calls a URL, or they
    /// could not be read). 0 with failurePolicy Fail: every eviction of the cluster's pods
    /// fails until a gate replica is Ready.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ready_endpoints: Option<u32>,
    /// Why the state is unknown (a right the user lacks).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unknown_because: Option<String>,
    /// The newest refusal the gate recorded as an Event on one of the cluster's pods (Events
    /// live for an hour by default); None when there is none or they could not be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_refusal: Option<GateRefusal>,
}

#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
pub enum GateState {
    /// A gate webhook matches the namespace: evictions of its pods are decided by the gate.
    Gated,
    /// No gate webhook matches: evictions see only the PodDisruptionBudget.
    NotGated,
    /// The webhooks or the namespace's labels could not be read.
    Unknown,
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct GateRefusal {
    pub pod: String,
    /// The gate's stable code (docs/gate.md), e.g. "QuorumAtRisk".
    pub reason: String,
    pub message: String,
    /// When it was last refused (RFC 3339).
    pub at: String,
    /// How many times the Event was counted (a retrying evictor).
    pub count: u32,
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
    /// The StatefulSet's replicas: the system has no member list kubectl raft can read.
    Pods,
    /// The StatefulSet's replicas: the system has a member list, but it could not be read
    /// this time (no answer, no token, garbage).
    Unreadable,
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
    /// What the system's own configuration says of this replica: a voter, a non-voter, not
    /// listed at all; `unknown` where the system lists no member ids.
    pub configured: Configured,
    /// Milliseconds since it last heard from its leader, where the system says
    /// (hashicorp/raft's `last_contact`; `never` is the largest number).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_contact_ms: Option<u64>,
    /// Live now, in step with its leader, by the best evidence its system gives (the
    /// leader's view, its last contact, its own sync state, or a health check that needs the
    /// leader: `kubectl raft systems` says which); absent where the system gives none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub current: Option<bool>,
    pub version: Option<String>,
    /// How many of the other Raft groups (NATS: streams, consumers) this member leads, by
    /// kind; absent when the system has none or they could not be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub leads: Option<BTreeMap<String, u64>>,
    /// Requests that failed, one message each.
    pub errors: Vec<String>,
}

/// A replica as the Raft configuration lists it, matched by the member id it reports (or by
/// the pod name a member's name starts with).
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub enum Configured {
    /// A voter of the configuration.
    Voter,
    /// Listed, but as a non-voter (a learner, a read replica, a server autopilot keeps out).
    NonVoter,
    /// Not listed (or it reported no id to look it up by): it does not vote, whatever it says.
    NotListed,
    /// Another replica reports the same member id: which of them is configured is unknown.
    DuplicateId,
    /// The system lists no member ids (or the list could not be read): its role is all there
    /// is.
    #[default]
    Unknown,
}

impl Configured {
    /// Whether the configuration, as far as it is known, lets this replica vote.
    pub fn may_vote(self) -> bool {
        matches!(self, Configured::Voter | Configured::Unknown)
    }
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
    TlsUnverified,
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
        WarningCode::TlsUnverified,
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
            WarningCode::TlsUnverified => "TlsUnverified",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
