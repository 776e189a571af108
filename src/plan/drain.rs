//! The drain planner: pure decisions over a survey, in kubectl drain's shape. Ordinary pods
//! go through a chain of small filters (`classify_pod`, like kubectl's `GetPodsForDeletion`),
//! each returning evict, skip or refuse with the reason the user sees. Raft pods are planned
//! per cluster (`plan_cluster`): followers first, the leader last after a transfer to a
//! member on a node that stays, and never an eviction that leaves fewer healthy, caught-up
//! voters than a quorum.
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
use crate::report::{ClusterReport, ReplicaReport, VotersFrom};

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

fn block(reason: BlockReason, pod: Option<&str>, message: String) -> Option<Blocker> {
    Some(Blocker {
        reason,
        pod: pod.map(str::to_string),
        message,
    })
}

/// One cluster's steps, in order, and what stops it, if anything does.
pub fn plan_cluster(c: &ClusterInput, opts: &DrainOptions) -> ClusterPlan {
    let r = &c.report;
    let cluster = format!("{}/{}", r.namespace, r.name);
    let mut replicas: Vec<&ReplicaReport> = r.replicas.iter().collect();
    replicas.sort_by(|a, b| a.pod.cmp(&b.pod));
    let claimants: Vec<&&ReplicaReport> = replicas
        .iter()
        .filter(|x| x.raft.role == Role::Leader)
        .collect();
    let leader = match claimants.as_slice() {
        [one] => Some(**one),
        _ => None,
    };
    let term = leader.and_then(|l| l.raft.term);
    let healthy: BTreeSet<&str> = replicas
        .iter()
        .filter(|x| healthy_voter(x, leader, opts.max_lag).is_ok())
        .map(|x| x.pod.as_str())
        .collect();
    // The run never counts fewer voters than it has seen: a member list that failed once, or
    // a scale-down meanwhile, does not shrink the quorum.
    let voters = r.summary.voters.max(c.least_voters);
    let quorum = crate::assess::quorum(voters);
    let mut plan = ClusterPlan {
        namespace: r.namespace.clone(),
        name: r.name.clone(),
        system: r.system.clone(),
        leader: leader.map(|l| l.pod.clone()),
        term,
        voters,
        healthy_voters: healthy.len() as u32,
        quorum,
        steps: vec![],
        blocker: None,
    };
    let on_drained = |x: &&ReplicaReport| {
        c.replace.contains(&x.pod) || x.node.as_ref().is_some_and(|n| opts.nodes.contains(n))
    };
    // Another rollout took over: nothing more is this run's, not even "done".
    if let Some(why) = &c.conflict {
        plan.blocker = block(
            BlockReason::RolloutConflict,
            None,
            format!("{cluster}: {why}"),
        );
        return plan;
    }
    let mut leaving: Vec<&ReplicaReport> = replicas.iter().copied().filter(on_drained).collect();
    if leaving.is_empty() {
        return plan;
    }
    // Members that count for nothing first (they cost no quorum), then followers (by name),
    // the leader last.
    leaving.sort_by_key(|x| {
        (
            leader.is_some_and(|l| l.pod == x.pod),
            healthy.contains(x.pod.as_str()),
            x.pod.clone(),
        )
    });

    if claimants.len() > 1 {
        let names: Vec<&str> = claimants.iter().map(|x| x.pod.as_str()).collect();
        plan.blocker = block(
            BlockReason::MultipleLeaders,
            None,
            format!(
                "{cluster}: {} replicas claim leadership ({}); waiting until one remains",
                names.len(),
                names.join(", ")
            ),
        );
        return plan;
    }
    let Some(leader) = leader else {
        plan.blocker = block(
            BlockReason::NoLeader,
            None,
            format!("{cluster} has no leader; waiting for one before evicting any member"),
        );
        return plan;
    };
    let counted_from_pods = r.summary.voters_from != VotersFrom::Configuration;
    if counted_from_pods && c.configuration_seen {
        plan.blocker = block(
            BlockReason::MembershipUnreadable,
            None,
            format!("{cluster}: {}'s member list, read earlier in this run, cannot be read now; waiting for it (a count of pods does not replace it)", r.system),
        );
        return plan;
    }
    if counted_from_pods && !opts.assume_voters_are_pods.covers(&cluster) {
        let what = match r.summary.voters_from {
            VotersFrom::Unreadable => "could not be read from",
            _ => "cannot be read from",
        };
        plan.blocker = block(
            BlockReason::MembershipUnknown,
            None,
            format!("{cluster}: its voters {what} {}'s own configuration, only counted from its {} pod(s); a server configured but not running (or scaled away without being removed) would make that count wrong and an eviction break quorum. Check the membership, then pass --assume-voters-are-pods={cluster} to drain on the pod count", r.system, r.replicas.len()),
        );
        return plan;
    }
    if c.liveness == Liveness::Unknown && !opts.assume_followers_current.covers(&cluster) {
        plan.blocker = block(
            BlockReason::LivenessUnknown,
            None,
            format!("{cluster}: {} says nothing that tells a follower still hears from its leader (no leader's view, last contact, sync state, or health check that needs the leader): a follower cut off from its leader can say \"follower\" for a while and be counted. Check the followers, then pass --assume-followers-current={cluster}", r.system),
        );
        return plan;
    }
    if let Some(why) = &c.controller_rolling {
        plan.blocker = block(
            BlockReason::RolloutInProgress,
            None,
            format!("{cluster}: {why}; an eviction beside it could leave two members down: waiting until the rollout is done"),
        );
        return plan;
    }
    if let Some(x) = replicas.iter().find(|x| x.terminating) {
        plan.blocker = block(
            BlockReason::Terminating,
            Some(&x.pod),
            format!(
                "{cluster}: {} is terminating; waiting until it is gone and replaced",
                x.pod
            ),
        );
        return plan;
    }
    // A member already kept away by this drain (its replacement cannot start): no second one.
    if let Some((pod, why)) = replicas
        .iter()
        .filter(|x| x.node.is_none())
        .find_map(|x| c.stuck.get(&x.pod).map(|w| (x.pod.as_str(), w)))
    {
        plan.blocker = block(
            BlockReason::Degraded,
            Some(pod),
            format!("{cluster} already runs without {pod} ({why}); no second member is evicted until it is back"),
        );
        return plan;
    }

    let mut sim: BTreeSet<&str> = healthy.clone();
    let mut degraded = false;
    for x in leaving {
        let node = x.node.clone().unwrap_or_default();
        // Back on a drained node after this run's eviction (a restart's member is replaced
        // again on purpose when the template changed meanwhile: not this).
        let back_on_drained =
            x.node.as_ref().is_some_and(|n| opts.nodes.contains(n)) && !c.replace.contains(&x.pod);
        if back_on_drained && c.evicted_before.contains(&x.pod) {
            plan.blocker = block(
                BlockReason::EvictedBefore,
                Some(&x.pod),
                format!("{cluster}: {} was evicted by this run and its replacement was scheduled onto drained node {node} again (it tolerates the unschedulable taint, or it is pinned there); it is not evicted twice. Find what brings it back (tolerations, a nodeName, a volume on the node), then run again", x.pod),
            );
            break;
        }
        if degraded {
            plan.blocker = block(
                BlockReason::Degraded,
                Some(&x.pod),
                format!("{cluster}: {} is not evicted: the cluster is already a member short until a drained node is back, and never loses a second", x.pod),
            );
            break;
        }
        let dirs = c.empty_dirs.get(&x.pod).filter(|d| !d.is_empty());
        if let (Some(dirs), false) = (dirs, opts.delete_emptydir_data) {
            plan.blocker = block(
                BlockReason::LocalData,
                Some(&x.pod),
                format!("{cluster}: {} has local storage in emptyDir ({}), lost on eviction: its replacement would start empty and have to join as a new member (use --delete-emptydir-data to evict it anyway)", x.pod, dirs.join(", ")),
            );
            break;
        }
        let host = c.host_paths.get(&x.pod).filter(|d| !d.is_empty());
        if let (Some(host), false) = (host, opts.allow_hostpath_data) {
            plan.blocker = block(
                BlockReason::LocalData,
                Some(&x.pod),
                format!("{cluster}: {} keeps its data on node {node} ({}): a replacement on another node would start without it and have to join as a new member (use --allow-hostpath-data to evict it anyway)", x.pod, host.join(", ")),
            );
            break;
        }
        if let (Some(why), false) = (&c.placement_unknown, opts.allow_degraded) {
            plan.blocker = block(
                BlockReason::PlacementUnknown,
                Some(&x.pod),
                format!("{cluster}: {} is not evicted: {why}, so it might not be replaced while node {node} is drained (grant list on them, or --allow-degraded to take that risk)", x.pod),
            );
            break;
        }
        let stuck = c.stuck.get(&x.pod);
        if let (Some(why), false) = (stuck, opts.allow_degraded) {
            plan.blocker = block(
                BlockReason::Pinned,
                Some(&x.pod),
                format!("{cluster}: {} cannot be replaced while node {node} is drained: {why}; evicting it leaves the cluster a member short until the node is back (--allow-degraded to do it anyway)", x.pod),
            );
            break;
        }
        let votes = counts_as_voter(x);
        if votes && voters.saturating_sub(1) < quorum {
            plan.blocker = block(
                BlockReason::TooFewVoters,
                Some(&x.pod),
                format!(
                    "{cluster}: evicting {} loses the quorum however long this waits: {} has {voters} voter(s) and needs {quorum}, so no member can go while it serves. Add members first (3 voters survive one eviction), or accept the outage and evict it with kubectl",
                    x.pod, r.system
                ),
            );
            break;
        }
        let during = sim.len() as u32 - u32::from(sim.contains(x.pod.as_str()));
        if during < quorum {
            let unhealthy: Vec<String> = replicas
                .iter()
                .filter(|y| !sim.contains(y.pod.as_str()) && y.pod != x.pod)
                .filter_map(|y| healthy_voter(y, Some(leader), opts.max_lag).err())
                .collect();
            // Voters the configuration lists beyond the pods (a member scaled away without
            // being removed, or one run elsewhere): counted in the quorum, never healthy here.
            let voter_pods = replicas.iter().filter(|y| counts_as_voter(y)).count() as u32;
            let ghosts = match voters.saturating_sub(voter_pods) {
                0 => String::new(),
                n => format!("; {n} of the {voters} voter(s) {} configures run in no pod of this StatefulSet (a member scaled away without being removed, or one running elsewhere): they count towards the quorum and never answer here", r.system),
            };
            plan.blocker = block(
                BlockReason::QuorumAtRisk,
                Some(&x.pod),
                format!(
                    "{cluster}: evicting {} would leave {during} healthy voter(s) where {quorum} are needed{}{ghosts}; waiting for the others to be healthy",
                    x.pod,
                    if unhealthy.is_empty() { String::new() } else { format!(" ({})", unhealthy.join("; ")) }
                ),
            );
            break;
        }
        let is_leader = x.pod == leader.pod;
        let (action, target, mut why) = if !is_leader {
            (
                Action::Evict,
                None,
                format!("a {}: followers go first", role_word(x)),
            )
        } else if !c.can_transfer {
            (
                Action::EvictLeader,
                None,
                format!("the leader goes last; {} cannot hand leadership over, so its eviction starts an election", r.system),
            )
        } else {
            let ropts = YieldOptions {
                avoid_nodes: opts.nodes.iter().cloned().collect(),
                avoid_pods: c.replace.iter().cloned().collect(),
                max_lag: opts.max_lag,
                ..Default::default()
            };
            let (ranked, _) = rank_targets(r, &x.pod, &ropts, c.target_needs_id);
            let target = ranked.first().map(|t| t.pod.clone());
            // Followers evicted before it come back on nodes that stay: they can take over.
            let replaced_before = plan.steps.iter().any(|s| s.degraded.is_none());
            if target.is_none() && !replaced_before {
                plan.blocker = block(
                    BlockReason::NoTarget,
                    Some(&x.pod),
                    format!("{cluster}: no healthy, caught-up voter on a node that stays can take over from the leader {}; waiting for one", x.pod),
                );
                break;
            }
            let to = match &target {
                Some(t) => format!("to {t}"),
                None => "to a replaced follower".to_string(),
            };
            (
                Action::TransferThenEvict,
                target,
                if opts.nodes.is_empty() {
                    format!("the leader goes last, after a verified transfer {to}")
                } else {
                    format!(
                        "the leader goes last, after a verified transfer {to} on a node that stays"
                    )
                },
            )
        };
        if let Some(dirs) = dirs {
            why = format!("{why}; its emptyDir data ({}) is deleted with it: the replacement starts empty and must catch up", dirs.join(", "));
        }
        plan.steps.push(DrainStep {
            pod: x.pod.clone(),
            node,
            action,
            target,
            why,
            healthy_voters_during: during,
            quorum,
            fault_tolerance_during: during - quorum,
            degraded: stuck.cloned(),
            new_revision: c.comes_back_at.get(&x.pod).cloned(),
        });
        if stuck.is_some() {
            degraded = true;
            sim.remove(x.pod.as_str());
        } else if votes {
            // The executor waits until the replacement has rejoined and caught up as the
            // voter it was; a learner's replacement comes back a learner and counts for nothing.
            sim.insert(x.pod.as_str());
        }
    }
    plan
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
