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
    /// Evict members whose data is in an emptyDir (kubectl drain's rule, for members too):
    /// each replacement starts empty and must catch up as a new member.
    pub delete_emptydir_data: bool,
    /// Act on a cluster whose voters could only be counted from its pods (its system's
    /// configuration could not be read): `--assume-voters-are-pods`.
    pub assume_voters_are_pods: bool,
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
    /// Per pod, the emptyDir volumes it has (`emptydir_volumes`): lost with the pod.
    pub empty_dirs: BTreeMap<String, Vec<String>>,
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

/// Whether a replica counts toward a quorum that can commit: `plan::voter::voter_health`,
/// the one definition yield and drain share.
pub fn healthy_voter(
    x: &ReplicaReport,
    leader: Option<&ReplicaReport>,
    max_lag: u64,
) -> Result<(), String> {
    crate::plan::voter::voter_health(x, leader, max_lag).map_err(|(_, why)| why)
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
    let mut plan = ClusterPlan {
        namespace: r.namespace.clone(),
        name: r.name.clone(),
        system: r.system.clone(),
        leader: leader.map(|l| l.pod.clone()),
        term,
        voters: r.summary.voters,
        healthy_voters: healthy.len() as u32,
        quorum: r.summary.quorum,
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
    if r.summary.voters_from == VotersFrom::Pods && !opts.assume_voters_are_pods {
        plan.blocker = block(
            BlockReason::MembershipUnknown,
            None,
            format!("{cluster}: its voters could not be read from {}'s own configuration, only counted from its {} pod(s); a server configured but not running (or scaled away without being removed) would make that count wrong and an eviction break quorum. Check the membership, then pass --assume-voters-are-pods to drain on the pod count", r.system, r.replicas.len()),
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
    let quorum = r.summary.quorum;
    let mut degraded = false;
    for x in leaving {
        let node = x.node.clone().unwrap_or_default();
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
        let votes = x.raft.role.is_voter() && !x.raft.learner;
        if votes && r.summary.voters.saturating_sub(1) < quorum {
            plan.blocker = block(
                BlockReason::TooFewVoters,
                Some(&x.pod),
                format!(
                    "{cluster}: evicting {} loses the quorum however long this waits: {} has {} voter(s) and needs {quorum}, so no member can go while it serves. Add members first (3 voters survive one eviction), or accept the outage and evict it with kubectl",
                    x.pod, r.system, r.summary.voters
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
            let voter_pods = replicas.iter().filter(|y| y.raft.role.is_voter()).count() as u32;
            let ghosts = match r.summary.voters.saturating_sub(voter_pods) {
                0 => String::new(),
                n => format!("; {n} of the {} voter(s) {} configures run in no pod of this StatefulSet (a member scaled away without being removed, or one running elsewhere): they count towards the quorum and never answer here", r.summary.voters, r.system),
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
        } else {
            // The executor waits until the replacement has rejoined and caught up.
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
