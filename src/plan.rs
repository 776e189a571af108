//! The planner: pure decisions over assessed reports, like kubectl drain's filters. Each
//! decision returns what to do and why, or a refusal with its reason; nothing here does I/O,
//! so every rule is unit-tested and the properties are property-tested.
//!
//! `yield`: which leader, which target, which request; and, while waiting, whether a round
//! of observations shows the handover done.

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;

use crate::model::Role;
use crate::profile::{HttpRequest, Profile, SendTo, TransferRequest};
use crate::report::{CheckState, ClusterReport, ReplicaReport};

/// What the user asked of `yield`.
#[derive(Debug, Clone, Default)]
pub struct YieldOptions {
    /// `--to POD`.
    pub to: Option<String>,
    /// Nodes the target must not be on (drain passes the nodes it drains).
    pub avoid_nodes: Vec<String>,
    /// A target may be at most this many entries behind the leader.
    pub max_lag: u64,
    /// `--force`: go ahead despite the refusals that can be overridden.
    pub force: bool,
}

/// Why `yield` will not go ahead.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Refusal {
    pub reason: RefusalReason,
    pub message: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum RefusalReason {
    NoTransfer,
    NoLeader,
    MultipleLeaders,
    FaultToleranceZero,
    TargetIsLeader,
    TargetNotMember,
    TargetLearner,
    TargetUnreachable,
    TargetUnhealthy,
    TargetLagging,
    NotTargeted,
    NoCandidate,
}

impl RefusalReason {
    /// Refusals `--force` may override; the others describe something that cannot be done.
    pub fn overridable(self) -> bool {
        matches!(
            self,
            RefusalReason::MultipleLeaders
                | RefusalReason::FaultToleranceZero
                | RefusalReason::TargetUnhealthy
                | RefusalReason::TargetLagging
                | RefusalReason::TargetUnreachable
        )
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

fn refuse(reason: RefusalReason, message: String) -> Refusal {
    Refusal { reason, message }
}

/// The request that hands leadership over, rendered for its replica.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TransferCall {
    /// The pod it is sent to.
    pub pod: String,
    pub method: String,
    pub path: String,
    pub body: Option<String>,
    /// Header templates as the profile gives them (`${VAULT_TOKEN}`, not its value).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    #[serde(skip)]
    pub ok_status: Vec<u16>,
    #[serde(skip)]
    pub error_json: Option<String>,
    #[serde(skip)]
    pub hints: BTreeMap<u16, String>,
    pub synchronous: bool,
}

impl TransferCall {
    pub fn request(&self) -> HttpRequest {
        HttpRequest {
            headers: self.headers.clone(),
            method: self.method.clone(),
            path: self.path.clone(),
            body: self.body.clone(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct YieldPlan {
    pub leader: String,
    pub leader_id: Option<String>,
    pub term: Option<u64>,
    /// The member leadership should go to. For an untargeted transfer, the one the planner
    /// would have chosen: the system picks, and any other healthy member is a success.
    pub target: String,
    pub target_id: Option<String>,
    /// False when the system picks the successor itself.
    pub targeted: bool,
    /// Why this target, in words.
    pub why: String,
    pub call: TransferCall,
    /// Refusals that `--force` overrode.
    pub overridden: Vec<Refusal>,
}

/// The replicas a target may be picked from, best first; each rejected one with its reason.
pub fn rank_targets(
    r: &ClusterReport,
    leader: &str,
    opts: &YieldOptions,
) -> (Vec<ReplicaReport>, Vec<(String, String)>) {
    let mut ok = vec![];
    let mut rejected = vec![];
    for x in &r.replicas {
        if x.pod == leader {
            continue;
        }
        match target_problem(x, opts) {
            Some((_, why)) => rejected.push((x.pod.clone(), why)),
            None => ok.push(x.clone()),
        }
    }
    // Least lag first; then a schedulable, Ready node; then the name, so that the order of
    // the input never changes the choice.
    ok.sort_by_key(|x| {
        (
            x.raft.lag.unwrap_or(u64::MAX),
            x.node_unschedulable || x.node_ready == Some(false),
            x.pod.clone(),
        )
    });
    rejected.sort();
    (ok, rejected)
}

/// Why a replica cannot take leadership, if it cannot.
fn target_problem(x: &ReplicaReport, opts: &YieldOptions) -> Option<(RefusalReason, String)> {
    let p = &x.pod;
    if x.raft.learner || !x.raft.role.is_voter() {
        return Some((
            RefusalReason::TargetLearner,
            format!("{p} is a {} and does not vote", x.raft.role.as_str()),
        ));
    }
    if x.terminating {
        return Some((
            RefusalReason::TargetUnhealthy,
            format!("{p} is terminating"),
        ));
    }
    match x.raft.health.state {
        CheckState::Ok => {}
        CheckState::Unreachable => {
            return Some((
                RefusalReason::TargetUnreachable,
                format!("{p} is unreachable: {}", x.raft.health.detail),
            ))
        }
        s => {
            return Some((
                RefusalReason::TargetUnhealthy,
                format!(
                    "{p}'s health check is {}: {}",
                    s.as_str(),
                    x.raft.health.detail
                ),
            ))
        }
    }
    if x.raft.role != Role::Follower {
        return Some((
            RefusalReason::TargetUnhealthy,
            format!("{p} is {}, not a follower", x.raft.role.as_str()),
        ));
    }
    if x.raft.member_id.is_none() {
        return Some((
            RefusalReason::TargetNotMember,
            format!("{p} reports no member id"),
        ));
    }
    if let Some(node) = x.node.as_ref().filter(|n| opts.avoid_nodes.contains(n)) {
        return Some((
            RefusalReason::TargetUnhealthy,
            format!("{p} is on node {node}, which is being drained"),
        ));
    }
    match x.raft.lag {
        Some(l) if l > opts.max_lag => Some((
            RefusalReason::TargetLagging,
            format!(
                "{p} lags {l} entries behind the leader (limit {})",
                opts.max_lag
            ),
        )),
        _ => None,
    }
}

/// Decides a leadership transfer: which leader, which target, which request, or why not.
pub fn plan_yield(
    r: &ClusterReport,
    profile: &Profile,
    opts: &YieldOptions,
) -> Result<YieldPlan, Refusal> {
    let cluster = format!("{}/{}", r.namespace, r.name);
    let Some(spec) = &profile.transfer else {
        let why = profile
            .no_transfer
            .clone()
            .unwrap_or_else(|| format!("the {} profile has no leadership transfer", profile.name));
        return Err(refuse(
            RefusalReason::NoTransfer,
            format!("{cluster}: {why}; use --allow-election to delete the leader pod and wait for an election instead"),
        ));
    };
    let mut overridden = vec![];
    let mut check = |reason: RefusalReason, message: String| -> Result<(), Refusal> {
        let r = refuse(reason, message);
        if opts.force && reason.overridable() {
            overridden.push(r);
            Ok(())
        } else {
            Err(r)
        }
    };

    let claimants: Vec<&ReplicaReport> = r
        .replicas
        .iter()
        .filter(|x| x.raft.role == Role::Leader)
        .collect();
    let leader = match claimants.as_slice() {
        [] => {
            return Err(refuse(
                RefusalReason::NoLeader,
                format!("{cluster} has no leader now: there is nothing to hand over (see `kubectl raft status`)"),
            ))
        }
        [one] => *one,
        many => {
            let mut many = many.to_vec();
            many.sort_by(|a, b| a.pod.cmp(&b.pod));
            let names: Vec<String> = many
                .iter()
                .map(|x| format!("{} (term {})", x.pod, x.raft.term.map_or("?".into(), |t| t.to_string())))
                .collect();
            check(
                RefusalReason::MultipleLeaders,
                format!("{cluster}: {} replicas claim leadership ({}); wait until one remains, or --force to transfer from the one with the highest term", many.len(), names.join(", ")),
            )?;
            many.iter()
                .max_by_key(|x| (x.raft.term, std::cmp::Reverse(x.pod.clone())))
                .copied()
                .expect("several")
        }
    };
    let (ranked, rejected) = rank_targets(r, &leader.pod, opts);
    let target: ReplicaReport = match &opts.to {
        Some(to) => {
            if to == &leader.pod {
                return Err(refuse(
                    RefusalReason::TargetIsLeader,
                    format!("{to} is already the leader of {cluster}; name a follower with --to, or leave --to out to pick the best one"),
                ));
            }
            let Some(x) = r.replicas.iter().find(|x| &x.pod == to) else {
                let pods: Vec<&str> = r.replicas.iter().map(|x| x.pod.as_str()).collect();
                return Err(refuse(
                    RefusalReason::TargetNotMember,
                    format!(
                        "{to} is not a replica of {cluster} (its replicas: {})",
                        pods.join(", ")
                    ),
                ));
            };
            if let Some((reason, why)) = target_problem(x, opts) {
                let hint = if reason.overridable() {
                    "; --force to try anyway"
                } else {
                    ""
                };
                check(
                    reason,
                    format!("cannot hand {cluster}'s leadership to {why}{hint}"),
                )?;
            }
            x.clone()
        }
        None => match ranked.first() {
            Some(x) => x.clone(),
            None => {
                let why: Vec<String> = rejected.iter().map(|(_, w)| w.clone()).collect();
                return Err(refuse(
                    RefusalReason::NoCandidate,
                    format!(
                        "{cluster}: no member can take over from {}: {}",
                        leader.pod,
                        if why.is_empty() {
                            "it has no other replica".to_string()
                        } else {
                            why.join("; ")
                        }
                    ),
                ));
            }
        },
    };
    // After the target's own problems, which say more about a named target.
    if !r.summary.has_quorum || r.summary.fault_tolerance == 0 {
        check(
            RefusalReason::FaultToleranceZero,
            format!(
                "{cluster}: fault tolerance is 0 ({} of {} voters healthy, {} needed): a transfer that goes wrong stops the cluster; fix the unhealthy members first, or --force",
                r.summary.healthy_voters, r.summary.voters, r.summary.quorum
            ),
        )?;
    }

    let why = match &opts.to {
        Some(_) => format!("named with --to ({})", describe(&target)),
        None => {
            let mut s = format!("the best candidate: {}", describe(&target));
            if !rejected.is_empty() {
                let others: Vec<String> = rejected.iter().map(|(_, w)| w.clone()).collect();
                s.push_str(&format!("; not {}", others.join("; ")));
            }
            s
        }
    };
    let (request, targeted): (&TransferRequest, bool) = match (&spec.targeted, &spec.untargeted, &opts.to) {
        (Some(t), _, Some(_)) => (t, true),
        (None, Some(_), Some(_)) => {
            return Err(refuse(
                RefusalReason::NotTargeted,
                format!("{} cannot hand leadership to a chosen member; leave --to out and it picks the successor itself", profile.name),
            ))
        }
        (_, Some(u), None) => (u, false),
        (Some(t), None, None) => (t, true),
        (None, None, _) => {
            return Err(refuse(
                RefusalReason::NoTransfer,
                format!("the {} profile's transfer names no request", profile.name),
            ))
        }
    };
    let target_id = target.raft.member_id.clone();
    let fill = |s: &str| s.replace("{target_id}", target_id.as_deref().unwrap_or(""));
    let call = TransferCall {
        pod: match request.send_to {
            SendTo::Leader => leader.pod.clone(),
            SendTo::Target => target.pod.clone(),
        },
        method: request.request.method.clone(),
        path: fill(&request.request.path),
        body: request.request.body.as_deref().map(fill),
        headers: request.request.headers.clone(),
        ok_status: request.ok_status.clone(),
        error_json: request.error_json.clone(),
        hints: request.hints.clone(),
        synchronous: request.synchronous,
    };
    Ok(YieldPlan {
        leader: leader.pod.clone(),
        leader_id: leader.raft.member_id.clone(),
        term: leader.raft.term,
        target: target.pod.clone(),
        target_id,
        targeted,
        why,
        call,
        overridden,
    })
}

fn describe(x: &ReplicaReport) -> String {
    let lag = match x.raft.lag {
        Some(0) => "caught up".to_string(),
        Some(l) => format!("{l} entries behind"),
        None => "lag unknown".to_string(),
    };
    let node = match (&x.node, x.node_unschedulable, x.node_ready) {
        (Some(n), false, Some(true) | None) => format!("on node {n}"),
        (Some(n), true, _) => format!("on cordoned node {n}"),
        (Some(n), _, Some(false)) => format!("on NotReady node {n}"),
        (None, _, _) => "on no node".to_string(),
    };
    format!("{} is healthy, {lag}, {node}", x.pod)
}

// --- waiting for the handover ----------------------------------------------------------------

/// One replica in one round of polling.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaView {
    pub pod: String,
    /// None: no answer this round.
    pub role: Option<Role>,
    /// The pod it names as leader.
    pub leader: Option<String>,
    /// Some(false): it says it knows no leader.
    pub has_leader: Option<bool>,
    pub term: Option<u64>,
    /// The failure, when it did not answer.
    pub error: Option<String>,
}

/// What one round of observations says about the handover.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Judgement {
    /// The pod a majority agrees leads, when one does and nobody reachable says "no leader".
    pub agreed: Option<String>,
    pub term: Option<u64>,
    pub done: Done,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Done {
    /// Keep polling.
    No,
    /// The old leader is a follower and the target (or, untargeted, another member) leads.
    Transferred,
    /// Leadership moved, but not to the target.
    WentElsewhere(String),
}

/// Names the leader every replica agrees on: `members` voters, a strict majority of which
/// must name the same pod, which must itself claim leadership; and no replica that answered
/// may say it has no leader.
pub fn agreed_leader(views: &[ReplicaView], members: usize) -> Option<String> {
    if views
        .iter()
        .any(|v| v.role.is_some() && v.has_leader == Some(false))
    {
        return None;
    }
    let mut votes: BTreeMap<&str, usize> = BTreeMap::new();
    for v in views {
        let named = match (&v.leader, v.role) {
            (Some(l), _) => Some(l.as_str()),
            (None, Some(Role::Leader)) => Some(v.pod.as_str()),
            _ => None,
        };
        if let Some(n) = named {
            *votes.entry(n).or_default() += 1;
        }
    }
    let majority = members.max(views.len()) / 2 + 1;
    votes
        .into_iter()
        .filter(|(_, n)| *n >= majority)
        .map(|(p, _)| p)
        .find(|p| {
            views
                .iter()
                .any(|v| v.pod == *p && v.role == Some(Role::Leader))
        })
        .map(str::to_string)
}

/// What the waiting looks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expect {
    pub old_leader: String,
    /// The member that must lead; None when any other member will do.
    pub target: Option<String>,
    /// The old leader's pod is going away (an election by deletion): its silence counts as
    /// having stepped down. Otherwise it must itself report that it no longer leads.
    pub old_leader_may_vanish: bool,
}

impl YieldPlan {
    pub fn expect(&self) -> Expect {
        Expect {
            old_leader: self.leader.clone(),
            target: self.targeted.then(|| self.target.clone()),
            old_leader_may_vanish: false,
        }
    }
}

pub fn judge(expect: &Expect, views: &[ReplicaView], members: usize) -> Judgement {
    let agreed = agreed_leader(views, members);
    let term = agreed
        .as_ref()
        .and_then(|a| views.iter().find(|v| &v.pod == a))
        .and_then(|v| v.term);
    let old_stepped_down = match views.iter().find(|v| v.pod == expect.old_leader) {
        Some(ReplicaView { role: Some(r), .. }) => *r != Role::Leader,
        _ => expect.old_leader_may_vanish,
    };
    let done = match &agreed {
        Some(a) if a != &expect.old_leader && old_stepped_down => match &expect.target {
            Some(t) if t != a => Done::WentElsewhere(a.clone()),
            _ => Done::Transferred,
        },
        _ => Done::No,
    };
    Judgement { agreed, term, done }
}

pub mod drain;
pub mod placement;

#[cfg(test)]
mod tests;
