//! The drain planner: pure decisions over a survey, in kubectl drain's shape. Ordinary pods
//! go through a chain of small filters (`classify_pod`, like kubectl's `GetPodsForDeletion`),
//! each returning evict, skip or refuse with the reason the user sees. Raft pods are planned
//! per cluster (`plan_cluster`) in the same shape: the cluster's checks, then each leaving
//! member's, each passing, skipping or blocking with the reason the user sees. Followers go
//! first, the leader last after a transfer to a member on a node that stays, and never an
//! eviction that leaves fewer healthy, caught-up voters than a quorum.
//!
//! The executor takes only the first step of a fresh plan, acts, waits, surveys again and
//! plans again; `--dry-run` prints the whole plan. Running the same drain again therefore
//! resumes where it stopped.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Pod;
use serde::Serialize;

use crate::assess::voter::counts_as_voter;
use crate::model::profile::Liveness;
use crate::model::Role;
use crate::plan::{rank_targets, YieldOptions};
use crate::report::{CheckState, ClusterReport, ReplicaReport, VotersFrom};

// --- ordinary pods, as kubectl drain treats them ----------------------------------------------

/// kubectl drain's switches that decide what happens to ordinary pods.
#[derive(Debug, Clone, Default)]
pub struct PodRules {
    pub ignore_daemonsets: bool,
    pub delete_emptydir_data: bool,
    /// Unmanaged pods (no controller) are deleted too.
    pub force: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "verdict", content = "reason")]
pub enum PodVerdict {
    /// Evict it; the reason, when there is one, is a warning (`--force`, emptyDir data).
    Evict(Option<String>),
    /// Leave it where it is, with the reason.
    Skip(String),
    /// Stop before anything is evicted: the reason says which flag overrides it.
    Refuse(String),
}

/// kubectl drain's filters, in its order: the first that does not say "evict" decides.
pub fn classify_pod(p: &Pod, rules: &PodRules) -> PodVerdict {
    if let v @ PodVerdict::Skip(_) = mirror(p, rules) {
        return v;
    }
    // A finished pod holds nothing: it is deleted whatever else is true of it.
    if finished_phase(p) {
        return PodVerdict::Evict(None);
    }
    let mut warnings = vec![];
    for filter in [daemonset, emptydir, unmanaged] {
        match filter(p, rules) {
            PodVerdict::Evict(Some(w)) => warnings.push(w),
            PodVerdict::Evict(None) => {}
            other => return other,
        }
    }
    PodVerdict::Evict((!warnings.is_empty()).then(|| warnings.join("; ")))
}

fn controller(p: &Pod) -> Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference> {
    p.metadata
        .owner_references
        .as_ref()?
        .iter()
        .find(|o| o.controller == Some(true))
}

fn phase(p: &Pod) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

fn finished_phase(p: &Pod) -> bool {
    matches!(phase(p), "Succeeded" | "Failed")
}

fn mirror(p: &Pod, _: &PodRules) -> PodVerdict {
    let is_mirror = p
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key("kubernetes.io/config.mirror"));
    if is_mirror {
        PodVerdict::Skip(
            "a mirror pod (the kubelet runs it from a file; it cannot be evicted)".into(),
        )
    } else {
        PodVerdict::Evict(None)
    }
}

fn daemonset(p: &Pod, rules: &PodRules) -> PodVerdict {
    if controller(p).is_none_or(|c| c.kind != "DaemonSet") {
        return PodVerdict::Evict(None);
    }
    if rules.ignore_daemonsets {
        PodVerdict::Skip("managed by a DaemonSet (ignored: --ignore-daemonsets)".into())
    } else {
        PodVerdict::Refuse(
            "managed by a DaemonSet, which would recreate it at once (use --ignore-daemonsets to leave it)".into(),
        )
    }
}

fn emptydir(p: &Pod, rules: &PodRules) -> PodVerdict {
    let dirs = emptydir_volumes(p);
    match (dirs.is_empty(), rules.delete_emptydir_data) {
        (true, _) => PodVerdict::Evict(None),
        (false, true) => PodVerdict::Evict(Some(format!(
            "its emptyDir data ({}) is deleted with it",
            dirs.join(", ")
        ))),
        (false, false) => PodVerdict::Refuse(format!(
            "has local storage in emptyDir ({}), lost on eviction (use --delete-emptydir-data to delete it anyway)",
            dirs.join(", ")
        )),
    }
}

fn unmanaged(p: &Pod, rules: &PodRules) -> PodVerdict {
    if controller(p).is_some() {
        return PodVerdict::Evict(None);
    }
    if rules.force {
        PodVerdict::Evict(Some(
            "declares no controller: nothing recreates it (deleted anyway: --force)".into(),
        ))
    } else {
        PodVerdict::Refuse(
            "declares no controller, so nothing would recreate it (use --force to delete it anyway)".into(),
        )
    }
}

// --- Raft clusters ------------------------------------------------------------------------------

/// What the user asked of the Raft side of `drain`.
#[derive(Debug, Clone, Default)]
pub struct DrainOptions {
    /// The nodes being drained.
    pub nodes: BTreeSet<String>,
    /// A member more entries behind the leader than this is not counted healthy.
    pub max_lag: u64,
    /// Evict a member whose replacement cannot start elsewhere, leaving the cluster with one
    /// member fewer until the node is back.
    pub allow_degraded: bool,
    /// Evict members whose data is in an emptyDir or an ephemeral volume (kubectl drain's
    /// rule, for members too): each replacement starts empty and must catch up as a new member.
    pub delete_emptydir_data: bool,
    /// Evict members whose data is in a hostPath volume: it stays on the node, and a
    /// replacement elsewhere starts without it.
    pub allow_hostpath_data: bool,
    /// Act on a cluster whose voters could only be counted from its pods (its system's
    /// configuration could not be read): `--assume-voters-are-pods`, for every cluster of
    /// the run or the ones it names.
    pub assume_voters_are_pods: Assume,
    /// Act on a cluster whose system says nothing of whether a follower still hears from its
    /// leader (`Liveness::Unknown`): `--assume-followers-current`.
    pub assume_followers_current: Assume,
}

/// An assumption the user makes on the command line, for every cluster of the run or only
/// for the clusters named (NAMESPACE/NAME).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Assume {
    #[default]
    Nothing,
    Every,
    Only(BTreeSet<String>),
}

impl Assume {
    /// From a flag given without values (every cluster), with values (those), or not at all.
    pub fn from_flag(values: Option<&[String]>) -> Self {
        match values {
            None => Assume::Nothing,
            Some([]) => Assume::Every,
            Some(v) => Assume::Only(v.iter().cloned().collect()),
        }
    }

    /// Whether it is assumed of cluster NAMESPACE/NAME.
    pub fn covers(&self, cluster: &str) -> bool {
        match self {
            Assume::Nothing => false,
            Assume::Every => true,
            Assume::Only(names) => names.contains(cluster),
        }
    }
}

/// One cluster as the planner sees it: its assessed report, whether its system can hand
/// leadership over, and, per pod, why a replacement could not start anywhere else
/// (from `placement::replacement_blocker`).
#[derive(Debug, Clone)]
pub struct ClusterInput {
    pub report: ClusterReport,
    pub can_transfer: bool,
    /// The transfer names its target by member id (`plan::transfer_needs_member_id`).
    pub target_needs_id: bool,
    pub stuck: BTreeMap<String, String>,
    /// Per pod, its emptyDir and ephemeral volumes (`node_local_volumes`): lost with the pod.
    pub empty_dirs: BTreeMap<String, Vec<String>>,
    /// Per pod, its hostPath volumes (`node_local_volumes`): left on the node.
    pub host_paths: BTreeMap<String, Vec<String>>,
    /// Why `stuck` could not be worked out (no right to list PersistentVolumes or nodes).
    pub placement_unknown: Option<String>,
    /// Members to be replaced wherever they run (`restart`: those not yet restarted, or not
    /// yet at the update revision), as drained nodes' members are; a transfer never goes to
    /// one of them.
    pub replace: BTreeSet<String>,
    /// Why no member may be replaced by this run any more (`plan::restart::follow`'s
    /// conflict): the plan stops with it before any step.
    pub conflict: Option<String>,
    /// Per pod, the revision its replacement would start from when that is not its own
    /// (`plan::restart::comes_back_at`).
    pub comes_back_at: BTreeMap<String, String>,
    /// What tells that a follower is live, for this cluster's system.
    pub liveness: Liveness,
    /// The most voters this run has seen the cluster configured with: a later look that
    /// counts fewer (a member list that failed once, a scale-down meanwhile) never shrinks
    /// the quorum below what it was.
    pub least_voters: u32,
    /// An earlier look of this run read the system's member list: one that cannot be read
    /// now is waited for, never replaced by a count of pods.
    pub configuration_seen: bool,
    /// Members this run has already evicted and that are back on a drained node (a
    /// replacement scheduled there again): never evicted twice.
    pub evicted_before: BTreeSet<String>,
    /// The StatefulSet's controller is rolling it (a RollingUpdate under way: it deletes the
    /// next member once the last is Ready, not caught up): a drain's eviction beside it could
    /// leave two members down. Waited for.
    pub controller_rolling: Option<String>,
}

impl ClusterInput {
    /// A cluster as its survey alone describes it: nothing stuck or on node-local storage,
    /// nothing to replace, no conflict, no rollout, no memory of earlier looks. The adapters
    /// (and an embedder's) fill in what they know.
    pub fn new(
        report: ClusterReport,
        can_transfer: bool,
        target_needs_id: bool,
        liveness: Liveness,
    ) -> Self {
        ClusterInput {
            report,
            can_transfer,
            target_needs_id,
            stuck: BTreeMap::new(),
            empty_dirs: BTreeMap::new(),
            host_paths: BTreeMap::new(),
            placement_unknown: None,
            replace: BTreeSet::new(),
            conflict: None,
            comes_back_at: BTreeMap::new(),
            liveness,
            least_voters: 0,
            configuration_seen: false,
            evicted_before: BTreeSet::new(),
            controller_rolling: None,
        }
    }
}

/// The names of a pod's emptyDir volumes, kubectl drain's "local storage".
pub fn emptydir_volumes(p: &Pod) -> Vec<String> {
    p.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .filter(|v| v.empty_dir.is_some())
        .map(|v| v.name.clone())
        .collect()
}

/// A member's data that does not follow it to another node: its emptyDir and generic
/// ephemeral volumes (deleted with the pod: its claim goes too), and apart, its hostPath
/// volumes (left on the node: a replacement elsewhere starts without them).
pub fn node_local_volumes(p: &Pod) -> (Vec<String>, Vec<String>) {
    let volumes = || p.spec.iter().flat_map(|s| s.volumes.iter().flatten());
    let deleted = volumes()
        .filter_map(|v| {
            if v.empty_dir.is_some() {
                Some(v.name.clone())
            } else if v.ephemeral.is_some() {
                Some(format!("{} (an ephemeral volume)", v.name))
            } else {
                None
            }
        })
        .collect();
    let host = volumes()
        .filter_map(|v| {
            let h = v.host_path.as_ref()?;
            Some(format!("{} (hostPath {})", v.name, h.path))
        })
        .collect();
    (deleted, host)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Action {
    /// Evict a follower (or a member that leads no longer).
    Evict,
    /// Hand leadership to a member on a node that stays, wait until it has, then evict.
    TransferThenEvict,
    /// The system cannot transfer: evicting the leader starts an election.
    EvictLeader,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DrainStep {
    pub pod: String,
    pub node: String,
    pub action: Action,
    /// For a transfer: the member that would take over now (the executor decides again
    /// when the step comes, from a fresh survey).
    pub target: Option<String>,
    /// For a transfer: the members not chosen as its target, each with why (a sentence naming
    /// it). The executor says this when the target differs from the one its first plan named.
    #[serde(skip)]
    pub passed_over: Vec<(String, String)>,
    pub why: String,
    /// While this member is gone: healthy voters, the quorum, and the fault tolerance left.
    pub healthy_voters_during: u32,
    pub quorum: u32,
    pub fault_tolerance_during: u32,
    /// Why no replacement can start until the node is back (only with --allow-degraded).
    pub degraded: Option<String>,
    /// The revision its replacement starts from when that is not the one it runs (an OnDelete
    /// StatefulSet with a pending update): the drain rolls the new template onto it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub new_revision: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum BlockReason {
    NoLeader,
    MultipleLeaders,
    Terminating,
    QuorumAtRisk,
    NoTarget,
    Pinned,
    Degraded,
    /// A member's data is in an emptyDir and --delete-emptydir-data was not given.
    LocalData,
    /// The voters could only be counted from the pods, and --assume-voters-are-pods was not
    /// given.
    MembershipUnknown,
    /// Where a replacement could start could not be checked (no right to list PVs or nodes),
    /// and --allow-degraded was not given.
    PlacementUnknown,
    /// Another actor took over what this run replaces (restart: the StatefulSet's controller
    /// now rolls members itself): going on would interleave two rollouts.
    RolloutConflict,
    /// The system says nothing of whether a follower still hears from its leader, and
    /// --assume-followers-current was not given.
    LivenessUnknown,
    /// The member list read earlier in this run cannot be read now.
    MembershipUnreadable,
    /// The StatefulSet's controller is rolling the members itself.
    RolloutInProgress,
    /// A member this run evicted came back on a drained node: evicting it again would never
    /// end.
    EvictedBefore,
    /// The cluster has too few voters to lose one: even with every other configured voter
    /// healthy, the eviction leaves no quorum (a 1- or 2-voter cluster). Waiting cannot help.
    TooFewVoters,
}

impl BlockReason {
    /// Whether waiting may clear it (an election ends, a member catches up, a pod goes);
    /// the others need the operator.
    pub fn waitable(self) -> bool {
        matches!(
            self,
            BlockReason::NoLeader
                | BlockReason::MultipleLeaders
                | BlockReason::Terminating
                | BlockReason::QuorumAtRisk
                | BlockReason::NoTarget
                | BlockReason::MembershipUnreadable
                | BlockReason::RolloutInProgress
        )
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Blocker {
    pub reason: BlockReason,
    /// The pod it is about, when it is about one.
    pub pod: Option<String>,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterPlan {
    pub namespace: String,
    pub name: String,
    pub system: String,
    pub leader: Option<String>,
    pub term: Option<u64>,
    pub voters: u32,
    pub healthy_voters: u32,
    pub quorum: u32,
    /// In order; the first is what the executor does next.
    pub steps: Vec<DrainStep>,
    /// What stops the plan after its steps, when something does.
    pub blocker: Option<Blocker>,
}

impl ClusterPlan {
    pub fn cluster(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// Whether a replica counts toward a quorum that can commit: `assess::voter::voter_health`,
/// the one definition yield and drain share.
pub fn healthy_voter(
    x: &ReplicaReport,
    leader: Option<&ReplicaReport>,
    max_lag: u64,
) -> Result<(), String> {
    crate::assess::voter::voter_health(x, leader, max_lag).map_err(|(_, why)| why)
}

/// Every cluster's plan, in the order of their names: the order of the input changes nothing.
pub fn plan_drain(clusters: &[ClusterInput], opts: &DrainOptions) -> Vec<ClusterPlan> {
    let mut plans: Vec<ClusterPlan> = clusters.iter().map(|c| plan_cluster(c, opts)).collect();
    plans.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    plans
}

/// Whether a step that evicts a member that does not lead still stands on the member's own
/// answer just before the eviction (`now`): the one re-read of the member that drain, restart
/// and the gate make, because a look's probes are seconds old by then (a paused leader, a
/// hashicorp/raft member that won an election meanwhile). Err(why) holds the eviction back and
/// the step is planned again on a fresh look:
/// - it leads now: its eviction would start an election, where the plan evicts it as a
///   follower;
/// - it stands for election now, where the look did not find it a candidate (a candidate that
///   was already stuck at the look, counted out by the plan, is evicted as planned: that is
///   its repair);
/// - it answered at the look, healthy, and does not now: what it is now cannot be told;
/// - it reads a term newer than any the look saw, not being a candidate itself: an election
///   happened, and the plan's leader and quorum are those of before it;
/// - it names a leader other than the look's (systems that read no term: ZooKeeper, Keeper,
///   spurctld): leadership moved.
///
/// Other steps pass (a leader that cannot transfer is evicted as the leader it is; a transfer
/// is verified by its own wait). A member the look does not hold is refused.
pub fn still_as_looked(
    step: &DrainStep,
    report: &ClusterReport,
    now: &crate::plan::ReplicaView,
) -> Result<(), String> {
    if step.action != Action::Evict {
        return Ok(());
    }
    let pod = &step.pod;
    let Some(then) = report.replicas.iter().find(|x| &x.pod == pod) else {
        return Err(format!("{pod} is not among the members the look found"));
    };
    let was = then.raft.role;
    if now.role == Some(Role::Leader) && was != Role::Leader {
        return Err(format!(
            "{pod} leads now, where the look found it {}: evicting it would start an election instead of following a transfer",
            was.as_str()
        ));
    }
    let candidate = now.role == Some(Role::Candidate);
    if candidate && was != Role::Candidate {
        return Err(format!(
            "{pod} stands for election now: leadership is changing"
        ));
    }
    // Silence now matters only where the look counted on the member: healthy by its own
    // check and telling its role or term (a member already hung at the look is planned as
    // such, and a profile that reads no role never answers one).
    let counted = then.raft.health.state == CheckState::Ok
        && (was != Role::Unknown || then.raft.term.is_some());
    if counted && now.role.is_none() && now.term.is_none() {
        return Err(format!(
            "{pod} did not answer just before its eviction, as it did when the cluster was looked at{}",
            now.error
                .as_deref()
                .map_or(String::new(), |e| format!(" ({e})"))
        ));
    }
    // The newest term the look saw anywhere (the leader's, a member's own).
    let newest = report
        .replicas
        .iter()
        .filter_map(|x| x.raft.term)
        .chain(report.summary.term)
        .max();
    if !candidate {
        if let (Some(a), Some(b)) = (newest, now.term) {
            if b > a {
                return Err(format!(
                    "{pod} reads term {b} where the cluster was looked at in term {a}: an election happened since"
                ));
            }
        }
    }
    if let (Some(a), Some(b)) = (report.summary.leader.as_ref(), now.leader.as_ref()) {
        if a != b {
            return Err(format!(
                "{pod} follows {b} now, where the look found {a} leading: leadership moved since"
            ));
        }
    }
    Ok(())
}

/// One cluster's steps, in order, and what stops it, if anything does. The cluster's checks
/// run first, then each leaving member's, in the fixed orders of `CLUSTER_CHECKS` and
/// `MEMBER_CHECKS` (kubectl drain's `filterPods` shape); the first that does not pass ends
/// the plan where it stands.
pub fn plan_cluster(c: &ClusterInput, opts: &DrainOptions) -> ClusterPlan {
    let mut d = Draft::new(c, opts);
    for check in CLUSTER_CHECKS {
        match check(&d) {
            ClusterCheck::Pass => {}
            ClusterCheck::Skip => return d.plan,
            ClusterCheck::Block(b) => return d.stop(b),
        }
    }
    for x in d.leaving.clone() {
        let mut notes = vec![];
        for check in MEMBER_CHECKS {
            match check(&d, x) {
                MemberCheck::Pass(note) => notes.extend(note),
                MemberCheck::Block(b) => return d.stop(b),
            }
        }
        d.take(x, notes);
    }
    d.plan
}

/// What a check says of the whole cluster.
enum ClusterCheck {
    /// Nothing against it: the next check decides.
    Pass,
    /// Nothing of this run's is left in it: the plan ends with no step and no blocker.
    Skip,
    /// The plan stops before any step, with the reason the user sees.
    Block(Blocker),
}

/// What a check says of one leaving member.
enum MemberCheck {
    /// Nothing against its eviction; a note, when there is one, is added to the step's reason.
    Pass(Option<String>),
    /// It is not evicted, nor any member after it: the plan stops with the reason the user sees.
    Block(Blocker),
}

impl ClusterCheck {
    fn block(reason: BlockReason, pod: Option<&str>, message: String) -> Self {
        ClusterCheck::Block(Blocker {
            reason,
            pod: pod.map(str::to_string),
            message,
        })
    }
}

impl MemberCheck {
    fn block(reason: BlockReason, x: &ReplicaReport, message: String) -> Self {
        MemberCheck::Block(Blocker {
            reason,
            pod: Some(x.pod.clone()),
            message,
        })
    }
}

/// The cluster's checks, in order.
const CLUSTER_CHECKS: &[fn(&Draft) -> ClusterCheck] = &[
    rollout_conflict,
    nothing_leaving,
    multiple_leaders,
    no_leader,
    membership_unreadable,
    membership_unknown,
    liveness_unknown,
    rollout_in_progress,
    terminating,
    already_degraded,
];

/// Each leaving member's checks, in order, before its step.
const MEMBER_CHECKS: &[fn(&Draft, &ReplicaReport) -> MemberCheck] = &[
    evicted_before,
    already_short,
    emptydir_data,
    hostpath_data,
    placement_unknown,
    pinned,
    too_few_voters,
    quorum_at_risk,
    no_target,
];

/// One cluster's plan as it is drawn: what its checks read, worked out once, and what the
/// steps so far leave.
struct Draft<'a> {
    c: &'a ClusterInput,
    opts: &'a DrainOptions,
    /// NAMESPACE/NAME, as the messages name it.
    cluster: String,
    /// By pod name.
    replicas: Vec<&'a ReplicaReport>,
    /// Every replica that says it leads.
    claimants: Vec<&'a ReplicaReport>,
    /// The one claimant, when there is exactly one.
    leader: Option<&'a ReplicaReport>,
    /// The members this run replaces, in the order they go: members that count for nothing
    /// first (they cost no quorum), then followers (by name), the leader last.
    leaving: Vec<&'a ReplicaReport>,
    /// Never fewer than the run has seen: a member list that failed once, or a scale-down
    /// meanwhile, does not shrink the quorum.
    voters: u32,
    quorum: u32,
    /// The healthy voters once the steps so far are done.
    sim: BTreeSet<&'a str>,
    /// A step so far leaves the cluster a member short until a drained node is back.
    degraded: bool,
    plan: ClusterPlan,
}

impl<'a> Draft<'a> {
    fn new(c: &'a ClusterInput, opts: &'a DrainOptions) -> Self {
        let r = &c.report;
        let mut replicas: Vec<&ReplicaReport> = r.replicas.iter().collect();
        replicas.sort_by(|a, b| a.pod.cmp(&b.pod));
        let claimants: Vec<&ReplicaReport> = replicas
            .iter()
            .copied()
            .filter(|x| x.raft.role == Role::Leader)
            .collect();
        let leader = match claimants.as_slice() {
            [one] => Some(*one),
            _ => None,
        };
        let healthy: BTreeSet<&str> = replicas
            .iter()
            .filter(|x| healthy_voter(x, leader, opts.max_lag).is_ok())
            .map(|x| x.pod.as_str())
            .collect();
        let voters = r.summary.voters.max(c.least_voters);
        let quorum = crate::assess::quorum(voters);
        let mut leaving: Vec<&ReplicaReport> = replicas
            .iter()
            .copied()
            .filter(|x| c.replace.contains(&x.pod) || on_drained_node(x, opts))
            .collect();
        leaving.sort_by_key(|x| {
            (
                leader.is_some_and(|l| l.pod == x.pod),
                healthy.contains(x.pod.as_str()),
                x.pod.clone(),
            )
        });
        let plan = ClusterPlan {
            namespace: r.namespace.clone(),
            name: r.name.clone(),
            system: r.system.clone(),
            leader: leader.map(|l| l.pod.clone()),
            term: leader.and_then(|l| l.raft.term),
            voters,
            healthy_voters: healthy.len() as u32,
            quorum,
            steps: vec![],
            blocker: None,
        };
        Draft {
            c,
            opts,
            cluster: format!("{}/{}", r.namespace, r.name),
            replicas,
            claimants,
            leader,
            leaving,
            voters,
            quorum,
            sim: healthy,
            degraded: false,
            plan,
        }
    }

    fn system(&self) -> &str {
        &self.c.report.system
    }

    fn is_leader(&self, x: &ReplicaReport) -> bool {
        self.leader.is_some_and(|l| l.pod == x.pod)
    }

    /// The voters could only be counted from the pods, not read from the system's member list.
    fn counted_from_pods(&self) -> bool {
        self.c.report.summary.voters_from != VotersFrom::Configuration
    }

    /// The healthy voters left while `x` is gone, after the steps so far.
    fn during(&self, x: &ReplicaReport) -> u32 {
        self.sim.len() as u32 - u32::from(self.sim.contains(x.pod.as_str()))
    }

    /// The member that would take over from the leader `x` now.
    fn transfer_target(&self, x: &ReplicaReport) -> Option<String> {
        self.ranked_targets(x).0
    }

    /// The member that would take over from the leader `x` now, and every other member with
    /// why it would not: refused (the sentence `rank_targets` gives) or ranked after it.
    fn ranked_targets(&self, x: &ReplicaReport) -> (Option<String>, Vec<(String, String)>) {
        let ropts = YieldOptions {
            avoid_nodes: self.opts.nodes.iter().cloned().collect(),
            avoid_pods: self.c.replace.iter().cloned().collect(),
            max_lag: self.opts.max_lag,
            ..Default::default()
        };
        let (ranked, mut passed_over) =
            rank_targets(&self.c.report, &x.pod, &ropts, self.c.target_needs_id);
        let first = ranked.first().map(|t| t.pod.clone());
        if let Some(first) = ranked.first() {
            for other in &ranked[1..] {
                passed_over.push((other.pod.clone(), ranked_after(other, first)));
            }
        }
        (first, passed_over)
    }

    fn stop(mut self, b: Blocker) -> ClusterPlan {
        self.plan.blocker = Some(b);
        self.plan
    }

    /// `x`'s step, once every check passed, and what it leaves for the members after it.
    fn take(&mut self, x: &'a ReplicaReport, notes: Vec<String>) {
        let mut passed = vec![];
        let (action, target, why) = if !self.is_leader(x) {
            (
                Action::Evict,
                None,
                format!("a {}: followers go first", role_word(x)),
            )
        } else if !self.c.can_transfer {
            (
                Action::EvictLeader,
                None,
                format!("the leader goes last; {} cannot hand leadership over, so its eviction starts an election", self.system()),
            )
        } else {
            let (target, passed_over) = self.ranked_targets(x);
            passed = passed_over;
            let to = match &target {
                Some(t) => format!("to {t}"),
                None => "to a replaced follower".to_string(),
            };
            let why = if self.opts.nodes.is_empty() {
                format!("the leader goes last, after a verified transfer {to}")
            } else {
                format!("the leader goes last, after a verified transfer {to} on a node that stays")
            };
            (Action::TransferThenEvict, target, why)
        };
        let why = notes.iter().fold(why, |why, note| format!("{why}; {note}"));
        let during = self.during(x);
        let stuck = self.c.stuck.get(&x.pod);
        self.plan.steps.push(DrainStep {
            pod: x.pod.clone(),
            node: node(x).to_string(),
            action,
            target,
            passed_over: passed,
            why,
            healthy_voters_during: during,
            quorum: self.quorum,
            fault_tolerance_during: during - self.quorum,
            degraded: stuck.cloned(),
            new_revision: self.c.comes_back_at.get(&x.pod).cloned(),
        });
        if stuck.is_some() {
            self.degraded = true;
            self.sim.remove(x.pod.as_str());
        } else if counts_as_voter(x) {
            // The executor waits until the replacement has rejoined and caught up as the
            // voter it was; a learner's replacement comes back a learner and counts for nothing.
            self.sim.insert(x.pod.as_str());
        }
    }
}

fn on_drained_node(x: &ReplicaReport, opts: &DrainOptions) -> bool {
    x.node.as_ref().is_some_and(|n| opts.nodes.contains(n))
}

fn node(x: &ReplicaReport) -> &str {
    x.node.as_deref().unwrap_or_default()
}

// --- the cluster's checks -----------------------------------------------------------------------

/// Another rollout took over: nothing more is this run's, not even "done".
fn rollout_conflict(d: &Draft) -> ClusterCheck {
    match &d.c.conflict {
        Some(why) => ClusterCheck::block(
            BlockReason::RolloutConflict,
            None,
            format!("{}: {why}", d.cluster),
        ),
        None => ClusterCheck::Pass,
    }
}

fn nothing_leaving(d: &Draft) -> ClusterCheck {
    if d.leaving.is_empty() {
        ClusterCheck::Skip
    } else {
        ClusterCheck::Pass
    }
}

fn multiple_leaders(d: &Draft) -> ClusterCheck {
    if d.claimants.len() <= 1 {
        return ClusterCheck::Pass;
    }
    let names: Vec<&str> = d.claimants.iter().map(|x| x.pod.as_str()).collect();
    ClusterCheck::block(
        BlockReason::MultipleLeaders,
        None,
        format!(
            "{}: {} replicas claim leadership ({}); waiting until one remains",
            d.cluster,
            names.len(),
            names.join(", ")
        ),
    )
}

fn no_leader(d: &Draft) -> ClusterCheck {
    if d.leader.is_some() {
        return ClusterCheck::Pass;
    }
    ClusterCheck::block(
        BlockReason::NoLeader,
        None,
        format!(
            "{} has no leader; waiting for one before evicting any member",
            d.cluster
        ),
    )
}

/// A member list read earlier in this run is waited for, never replaced by a count of pods.
fn membership_unreadable(d: &Draft) -> ClusterCheck {
    if !(d.counted_from_pods() && d.c.configuration_seen) {
        return ClusterCheck::Pass;
    }
    ClusterCheck::block(
        BlockReason::MembershipUnreadable,
        None,
        format!("{}: {}'s member list, read earlier in this run, cannot be read now; waiting for it (a count of pods does not replace it)", d.cluster, d.system()),
    )
}

fn membership_unknown(d: &Draft) -> ClusterCheck {
    let cluster = &d.cluster;
    if !d.counted_from_pods() || d.opts.assume_voters_are_pods.covers(cluster) {
        return ClusterCheck::Pass;
    }
    let what = match d.c.report.summary.voters_from {
        VotersFrom::Unreadable => "could not be read from",
        _ => "cannot be read from",
    };
    ClusterCheck::block(
        BlockReason::MembershipUnknown,
        None,
        format!("{cluster}: its voters {what} {}'s own configuration, only counted from its {} pod(s); a server configured but not running (or scaled away without being removed) would make that count wrong and an eviction break quorum. Check the membership, then pass --assume-voters-are-pods={cluster} to drain on the pod count", d.system(), d.replicas.len()),
    )
}

fn liveness_unknown(d: &Draft) -> ClusterCheck {
    let cluster = &d.cluster;
    if d.c.liveness != Liveness::Unknown || d.opts.assume_followers_current.covers(cluster) {
        return ClusterCheck::Pass;
    }
    ClusterCheck::block(
        BlockReason::LivenessUnknown,
        None,
        format!("{cluster}: {} says nothing that tells a follower still hears from its leader (no leader's view, last contact, sync state, or health check that needs the leader): a follower cut off from its leader can say \"follower\" for a while and be counted. Check the followers, then pass --assume-followers-current={cluster}", d.system()),
    )
}

fn rollout_in_progress(d: &Draft) -> ClusterCheck {
    match &d.c.controller_rolling {
        Some(why) => ClusterCheck::block(
            BlockReason::RolloutInProgress,
            None,
            format!("{}: {why}; an eviction beside it could leave two members down: waiting until the rollout is done", d.cluster),
        ),
        None => ClusterCheck::Pass,
    }
}

fn terminating(d: &Draft) -> ClusterCheck {
    match d.replicas.iter().find(|x| x.terminating) {
        Some(x) => ClusterCheck::block(
            BlockReason::Terminating,
            Some(&x.pod),
            format!(
                "{}: {} is terminating; waiting until it is gone and replaced",
                d.cluster, x.pod
            ),
        ),
        None => ClusterCheck::Pass,
    }
}

/// A member already kept away by this drain (its replacement cannot start): no second one.
fn already_degraded(d: &Draft) -> ClusterCheck {
    let away = d
        .replicas
        .iter()
        .filter(|x| x.node.is_none())
        .find_map(|x| d.c.stuck.get(&x.pod).map(|w| (x.pod.as_str(), w)));
    match away {
        Some((pod, why)) => ClusterCheck::block(
            BlockReason::Degraded,
            Some(pod),
            format!("{} already runs without {pod} ({why}); no second member is evicted until it is back", d.cluster),
        ),
        None => ClusterCheck::Pass,
    }
}

// --- each leaving member's checks ---------------------------------------------------------------

/// Back on a drained node after this run's eviction: never evicted twice (a restart's member
/// is replaced again on purpose when the template changed meanwhile: not this).
fn evicted_before(d: &Draft, x: &ReplicaReport) -> MemberCheck {
    let back_on_drained = on_drained_node(x, d.opts) && !d.c.replace.contains(&x.pod);
    if !(back_on_drained && d.c.evicted_before.contains(&x.pod)) {
        return MemberCheck::Pass(None);
    }
    MemberCheck::block(
        BlockReason::EvictedBefore,
        x,
        format!("{}: {} was evicted by this run and its replacement was scheduled onto drained node {} again (it tolerates the unschedulable taint, or it is pinned there); it is not evicted twice. Find what brings it back (tolerations, a nodeName, a volume on the node), then run again", d.cluster, x.pod, node(x)),
    )
}

/// A step before this one leaves the cluster a member short: never a second.
fn already_short(d: &Draft, x: &ReplicaReport) -> MemberCheck {
    if !d.degraded {
        return MemberCheck::Pass(None);
    }
    MemberCheck::block(
        BlockReason::Degraded,
        x,
        format!("{}: {} is not evicted: the cluster is already a member short until a drained node is back, and never loses a second", d.cluster, x.pod),
    )
}

fn emptydir_data(d: &Draft, x: &ReplicaReport) -> MemberCheck {
    let Some(dirs) = d.c.empty_dirs.get(&x.pod).filter(|v| !v.is_empty()) else {
        return MemberCheck::Pass(None);
    };
    if d.opts.delete_emptydir_data {
        return MemberCheck::Pass(Some(format!("its emptyDir data ({}) is deleted with it: the replacement starts empty and must catch up", dirs.join(", "))));
    }
    MemberCheck::block(
        BlockReason::LocalData,
        x,
        format!("{}: {} has local storage in emptyDir ({}), lost on eviction: its replacement would start empty and have to join as a new member (use --delete-emptydir-data to evict it anyway)", d.cluster, x.pod, dirs.join(", ")),
    )
}

fn hostpath_data(d: &Draft, x: &ReplicaReport) -> MemberCheck {
    match (d.c.host_paths.get(&x.pod).filter(|v| !v.is_empty()), d.opts.allow_hostpath_data) {
        (Some(host), false) => MemberCheck::block(
            BlockReason::LocalData,
            x,
            format!("{}: {} keeps its data on node {} ({}): a replacement on another node would start without it and have to join as a new member (use --allow-hostpath-data to evict it anyway)", d.cluster, x.pod, node(x), host.join(", ")),
        ),
        _ => MemberCheck::Pass(None),
    }
}

fn placement_unknown(d: &Draft, x: &ReplicaReport) -> MemberCheck {
    match (&d.c.placement_unknown, d.opts.allow_degraded) {
        (Some(why), false) => MemberCheck::block(
            BlockReason::PlacementUnknown,
            x,
            format!("{}: {} is not evicted: {why}, so it might not be replaced while node {} is drained (grant list on them, or --allow-degraded to take that risk)", d.cluster, x.pod, node(x)),
        ),
        _ => MemberCheck::Pass(None),
    }
}

fn pinned(d: &Draft, x: &ReplicaReport) -> MemberCheck {
    match (d.c.stuck.get(&x.pod), d.opts.allow_degraded) {
        (Some(why), false) => MemberCheck::block(
            BlockReason::Pinned,
            x,
            format!("{}: {} cannot be replaced while node {} is drained: {why}; evicting it leaves the cluster a member short until the node is back (--allow-degraded to do it anyway)", d.cluster, x.pod, node(x)),
        ),
        _ => MemberCheck::Pass(None),
    }
}

fn too_few_voters(d: &Draft, x: &ReplicaReport) -> MemberCheck {
    let (voters, quorum) = (d.voters, d.quorum);
    if !counts_as_voter(x) || voters.saturating_sub(1) >= quorum {
        return MemberCheck::Pass(None);
    }
    MemberCheck::block(
        BlockReason::TooFewVoters,
        x,
        format!(
            "{}: evicting {} loses the quorum however long this waits: {} has {voters} voter(s) and needs {quorum}, so no member can go while it serves. Add members first (3 voters survive one eviction), or accept the outage and evict it with kubectl",
            d.cluster, x.pod, d.system()
        ),
    )
}

fn quorum_at_risk(d: &Draft, x: &ReplicaReport) -> MemberCheck {
    let (during, voters, quorum) = (d.during(x), d.voters, d.quorum);
    if during >= quorum {
        return MemberCheck::Pass(None);
    }
    let unhealthy: Vec<String> = d
        .replicas
        .iter()
        .filter(|y| !d.sim.contains(y.pod.as_str()) && y.pod != x.pod)
        .filter_map(|y| healthy_voter(y, d.leader, d.opts.max_lag).err())
        .collect();
    // Voters the configuration lists beyond the pods (a member scaled away without being
    // removed, or one run elsewhere): counted in the quorum, never healthy here.
    let voter_pods = d.replicas.iter().filter(|y| counts_as_voter(y)).count() as u32;
    let ghosts = match voters.saturating_sub(voter_pods) {
        0 => String::new(),
        n => format!("; {n} of the {voters} voter(s) {} configures run in no pod of this StatefulSet (a member scaled away without being removed, or one running elsewhere): they count towards the quorum and never answer here", d.system()),
    };
    MemberCheck::block(
        BlockReason::QuorumAtRisk,
        x,
        format!(
            "{}: evicting {} would leave {during} healthy voter(s) where {quorum} are needed{}{ghosts}; waiting for the others to be healthy",
            d.cluster,
            x.pod,
            if unhealthy.is_empty() { String::new() } else { format!(" ({})", unhealthy.join("; ")) }
        ),
    )
}

/// The leader goes after a transfer to a member on a node that stays, or to a follower this
/// run replaced before it (its replacement came back on a node that stays).
/// Why `other`, a member that could take over too, is not the target: `first` ranks before it
/// by `rank_targets`' order (a schedulable, Ready node; then the least lag; then the name).
fn ranked_after(other: &ReplicaReport, first: &ReplicaReport) -> String {
    let unschedulable = |x: &ReplicaReport| x.node_unschedulable || x.node_ready == Some(false);
    let (p, f) = (&other.pod, &first.pod);
    if unschedulable(other) && !unschedulable(first) {
        return format!("{p}'s node is cordoned or not Ready, {f}'s is not");
    }
    match (other.raft.lag, first.raft.lag) {
        (Some(a), Some(b)) if a > b => format!("{p} lags by {a}, {f} by {b}"),
        (None, Some(_)) => format!("{p} reports no lag, {f} does"),
        _ => format!("{f} comes first by name, as good a target otherwise"),
    }
}

fn no_target(d: &Draft, x: &ReplicaReport) -> MemberCheck {
    if !d.is_leader(x) || !d.c.can_transfer {
        return MemberCheck::Pass(None);
    }
    let replaced_before = d.plan.steps.iter().any(|s| s.degraded.is_none());
    if replaced_before || d.transfer_target(x).is_some() {
        return MemberCheck::Pass(None);
    }
    MemberCheck::block(
        BlockReason::NoTarget,
        x,
        format!("{}: no healthy, caught-up voter on a node that stays can take over from the leader {}; waiting for one", d.cluster, x.pod),
    )
}

fn role_word(x: &ReplicaReport) -> &'static str {
    match x.raft.role {
        Role::Leader => "leader",
        Role::Follower => "follower",
        Role::Learner => "learner",
        _ => "member",
    }
}

pub mod nodes;

#[cfg(test)]
mod tests;
