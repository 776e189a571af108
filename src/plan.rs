//! The planner: pure decisions over assessed reports, like kubectl drain's filters. Each
//! decision returns what to do and why, or a refusal with its reason; nothing here does I/O,
//! so every rule is unit-tested and the properties are property-tested.
//!
//! `yield`: which leader, which target, which request; and, while waiting, whether a round
//! of observations shows the handover done.

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;

use crate::assess::voter::{self, voter_health};
use crate::model::Role;
use crate::profile::{
    HttpRequest, PortSpec, Profile, SendTo, TcpWord, TransferRequest, TransferSpec,
};
use crate::report::{ClusterReport, ReplicaReport, VotersFrom};

/// What the user asked of `yield`.
#[derive(Debug, Clone, Default)]
pub struct YieldOptions {
    /// `--to POD`.
    pub to: Option<String>,
    /// Nodes the target must not be on (drain passes the nodes it drains).
    pub avoid_nodes: Vec<String>,
    /// Members that may not take over (restart passes those not yet restarted: leadership
    /// never goes to a member that is still to go, nor back to an old revision).
    pub avoid_pods: Vec<String>,
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
    /// The target's pod is terminating: it is about to stop, so leadership given to it moves
    /// again at once (`--force` never overrides this).
    TargetTerminating,
    TargetLagging,
    NotTargeted,
    NoCandidate,
    /// The request rendered with the target's member id would leave the replica's port or
    /// change its meaning (`render_call`): nothing is sent.
    UnsafeRequest,
    /// The transfer names its target and only the member list says who votes (Consul's and
    /// Nomad's non-voters answer as followers), and it cannot be read now: no target is
    /// chosen without it (`--force` does not override it).
    VotersUnknown,
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
    /// A NATS request (method `NATS`, path = the subject) goes to this port of the pod.
    #[serde(skip)]
    pub nats_port: Option<PortSpec>,
    /// Sent over raw TCP instead when the HTTP request answers 404 (`--via direct` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tcp_fallback: Option<TcpWord>,
}

impl TransferCall {
    pub fn request(&self) -> HttpRequest {
        HttpRequest {
            headers: self.headers.clone(),
            method: self.method.clone(),
            path: self.path.clone(),
            body: self.body.clone(),
            max_bytes: None,
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
/// `needs_id`: the transfer names the target by its member id (`transfer_needs_member_id`).
pub fn rank_targets(
    r: &ClusterReport,
    leader: &str,
    opts: &YieldOptions,
    needs_id: bool,
) -> (Vec<ReplicaReport>, Vec<(String, String)>) {
    let mut ok = vec![];
    let mut rejected = vec![];
    let the_leader = r.replicas.iter().find(|x| x.pod == leader);
    for x in &r.replicas {
        if x.pod == leader {
            continue;
        }
        match target_problem(x, the_leader, opts, needs_id) {
            Some((_, why)) => rejected.push((x.pod.clone(), why)),
            None => ok.push(x.clone()),
        }
    }
    // A schedulable, Ready node first (a member on a cordoned node is the next to be drained:
    // leadership given to it moves again); then the least lag (every one is within the
    // limit); then the name, so that the order of the input never changes the choice.
    ok.sort_by_key(|x| {
        (
            x.node_unschedulable || x.node_ready == Some(false),
            x.raft.lag.unwrap_or(u64::MAX),
            x.pod.clone(),
        )
    });
    rejected.sort();
    (ok, rejected)
}

/// Why a replica cannot take leadership, if it cannot.
fn target_problem(
    x: &ReplicaReport,
    leader: Option<&ReplicaReport>,
    opts: &YieldOptions,
    needs_id: bool,
) -> Option<(RefusalReason, String)> {
    let p = &x.pod;
    // One definition of a healthy voter (assess::voter), mapped to yield's refusals.
    if let Err((u, why)) = voter_health(x, leader, opts.max_lag) {
        use voter::Unhealthy as U;
        let reason = match u {
            U::NotVoter => RefusalReason::TargetLearner,
            U::Unreachable => RefusalReason::TargetUnreachable,
            U::Lagging => RefusalReason::TargetLagging,
            U::Terminating => RefusalReason::TargetTerminating,
            _ => RefusalReason::TargetUnhealthy,
        };
        return Some((reason, why));
    }
    if x.raft.role != Role::Follower {
        return Some((
            RefusalReason::TargetUnhealthy,
            format!("{p} is {}, not a follower", x.raft.role.as_str()),
        ));
    }
    // Only where the request names the target by its id (Keeper's /ready reports none, and
    // its transfer names nobody).
    if needs_id && x.raft.member_id.is_none() {
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
    if opts.avoid_pods.contains(&x.pod) {
        return Some((
            RefusalReason::TargetUnhealthy,
            format!("{p} is still to be restarted"),
        ));
    }
    None
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
    // A transfer aimed at a member is aimed by the list (an untargeted one, Vault's step-down,
    // leaves the choice to the system).
    let aimed = chosen_request(spec, opts.to.is_some()).is_some_and(|(_, targeted)| targeted);
    if aimed
        && profile
            .membership
            .as_ref()
            .is_some_and(|m| m.voter.is_some())
        && r.summary.voters_from == VotersFrom::Unreadable
    {
        return Err(refuse(
            RefusalReason::VotersUnknown,
            format!("{cluster}: its member list cannot be read now, and only it says which members vote ({}'s non-voters answer as followers): no member is chosen without it; see `kubectl raft status`, then try again", profile.name),
        ));
    }
    let needs_id = transfer_needs_member_id(profile, opts.to.is_some());
    let (ranked, rejected) = rank_targets(r, &leader.pod, opts, needs_id);
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
            if let Some((reason, why)) = target_problem(x, Some(leader), opts, needs_id) {
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
    let (request, targeted) = match chosen_request(spec, opts.to.is_some()) {
        Some(chosen) => chosen,
        None if opts.to.is_some() && spec.untargeted.is_some() => {
            return Err(refuse(
                RefusalReason::NotTargeted,
                format!("{} cannot hand leadership to a chosen member; leave --to out and it picks the successor itself", profile.name),
            ))
        }
        None => {
            return Err(refuse(
                RefusalReason::NoTransfer,
                format!("the {} profile's transfer names no request", profile.name),
            ))
        }
    };
    let target_id = target.raft.member_id.clone();
    // A request that names the target by its id is never sent without one (a target named
    // with --to and overridden with --force may have answered nothing).
    if needs_id && target_id.is_none() {
        return Err(refuse(
            RefusalReason::TargetNotMember,
            format!(
                "{cluster}: {} reports no member id, which the transfer needs to name it; nothing was sent",
                target.pod
            ),
        ));
    }
    let to = match request.send_to {
        SendTo::Leader => &leader.pod,
        SendTo::Target => &target.pod,
    };
    let call = render_call(request, to, target_id.as_deref()).map_err(|why| {
        refuse(
            RefusalReason::UnsafeRequest,
            format!("{cluster}: {why}; nothing was sent"),
        )
    })?;
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

/// The request a transfer uses, and whether it is aimed at a chosen member: with `--to`
/// (`named`) the targeted one; without, the untargeted one where the system has it (it picks
/// the successor itself, as Keeper's ydld does), else the targeted one aimed at the best.
fn chosen_request(spec: &TransferSpec, named: bool) -> Option<(&TransferRequest, bool)> {
    match (&spec.targeted, &spec.untargeted, named) {
        (Some(t), _, true) => Some((t, true)),
        (None, Some(_), true) => None,
        (_, Some(u), false) => Some((u, false)),
        (Some(t), None, false) => Some((t, true)),
        (None, None, _) => None,
    }
}

/// Whether the transfer `yield` would send names the target by its member id, so that a
/// target without one cannot be chosen.
pub fn transfer_needs_member_id(profile: &Profile, named: bool) -> bool {
    let Some((req, _)) = profile
        .transfer
        .as_ref()
        .and_then(|spec| chosen_request(spec, named))
    else {
        return false;
    };
    let mentions = |s: &str| s.contains("{target_id}");
    let nats_body = req.nats.as_ref().and_then(|n| n.body.as_deref());
    mentions(&req.request.path)
        || req.request.body.as_deref().is_some_and(mentions)
        || nats_body.is_some_and(mentions)
}

/// `id` percent-encoded as RFC 3986 allows in a path segment or a query value: everything but
/// the unreserved characters (letters, digits, `-._~`) as `%XX`.
pub fn percent_encode(id: &str) -> String {
    let mut out = String::with_capacity(id.len());
    for b in id.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `template` with `{target_id}` filled in as its context needs: percent-encoded in a path
/// or query, a JSON string's content in a JSON body, as it is elsewhere. The result is checked
/// again: a path must stay on the replica's port, a JSON body must still be the JSON it was.
fn fill_target(template: &str, id: &str, context: Context) -> Result<String, String> {
    const SLOT: &str = "{target_id}";
    if !template.contains(SLOT) {
        return Ok(template.to_string());
    }
    let filled = match context {
        Context::Path => match template.split_once('?') {
            Some((path, query)) => format!(
                "{}?{}",
                path.replace(SLOT, &percent_encode(id)),
                query.replace(SLOT, &percent_encode(id))
            ),
            None => template.replace(SLOT, &percent_encode(id)),
        },
        Context::Body if is_json(template) => {
            let quoted = serde_json::to_string(id).expect("a string serialises");
            template.replace(SLOT, &quoted[1..quoted.len() - 1])
        }
        Context::Body => template.replace(SLOT, id),
    };
    match context {
        Context::Path if crate::profile::escapes_its_pod(&filled) => Err(format!(
            "the member id {id:?} would take the request {filled:?} off the replica's port"
        )),
        Context::Body
            if is_json(template) && serde_json::from_str::<serde_json::Value>(&filled).is_err() =>
        {
            Err(format!(
                "the member id {id:?} would not fit the request's JSON body"
            ))
        }
        _ => Ok(filled),
    }
}

/// Where a member id is filled in.
#[derive(Clone, Copy)]
enum Context {
    Path,
    Body,
}

/// A body template that is JSON once its slot holds a plain value.
fn is_json(template: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(&template.replace("{target_id}", "x")).is_ok()
}

/// A transfer request of the profile, rendered for the pod it goes to.
fn render_call(
    request: &TransferRequest,
    pod: &str,
    target_id: Option<&str>,
) -> Result<TransferCall, String> {
    let id = target_id.unwrap_or("");
    let body = |b: Option<&String>| b.map(|b| fill_target(b, id, Context::Body)).transpose();
    if let Some(n) = &request.nats {
        return Ok(TransferCall {
            pod: pod.to_string(),
            method: "NATS".into(),
            path: n.subject.clone(),
            body: body(n.body.as_ref())?,
            headers: BTreeMap::new(),
            ok_status: vec![],
            error_json: request.error_json.clone(),
            hints: request.hints.clone(),
            synchronous: request.synchronous,
            nats_port: Some(n.port.clone()),
            tcp_fallback: None,
        });
    }
    Ok(TransferCall {
        pod: pod.to_string(),
        method: request.request.method.clone(),
        path: fill_target(&request.request.path, id, Context::Path)?,
        body: body(request.request.body.as_ref())?,
        headers: request.request.headers.clone(),
        ok_status: request.ok_status.clone(),
        error_json: request.error_json.clone(),
        hints: request.hints.clone(),
        synchronous: request.synchronous,
        nats_port: None,
        tcp_fallback: request.tcp_fallback.clone(),
    })
}

/// For a leader that cannot see its peers (`yield --local` where the system gives no member
/// list, as ClickHouse Keeper): the untargeted request it sends to itself, the system
/// choosing the successor. Refused when the profile has no transfer, or only a targeted one
/// (which needs a peer to name) or one that must go to the target.
pub fn self_yield_call(profile: &Profile, leader_pod: &str) -> Result<TransferCall, Refusal> {
    let spec = profile.transfer.as_ref().ok_or_else(|| {
        refuse(
            RefusalReason::NoTransfer,
            profile.no_transfer.clone().unwrap_or_else(|| {
                format!("the {} profile has no leadership transfer", profile.name)
            }),
        )
    })?;
    match &spec.untargeted {
        Some(u) if u.send_to == SendTo::Leader => render_call(u, leader_pod, None)
            .map_err(|why| refuse(RefusalReason::UnsafeRequest, why)),
        _ => Err(refuse(
            RefusalReason::NoCandidate,
            format!(
                "the {} profile's member list gives no member URLs or addresses, which --local needs to find the peers (and its transfer needs a peer to name)",
                profile.name
            ),
        )),
    }
}

/// The handover is done as far as the old leader alone can tell: it no longer leads, and it
/// knows a leader that is not itself, where the system says (Keeper's `hasLeader`, a named
/// leader); a system that says neither (Vault's standby) is taken at its role.
pub fn stepped_down(me: &ReplicaView) -> bool {
    let follows = me.role.is_some_and(Role::is_known_non_leader);
    let knows_another = match (me.has_leader, me.leader.as_deref()) {
        (Some(false), _) => false,
        (_, Some(l)) => l != me.pod,
        (Some(true), None) => true,
        (None, None) => true,
    };
    follows && knows_another
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

impl ReplicaView {
    /// A replica that has not answered (yet).
    pub fn silent(pod: String) -> Self {
        ReplicaView {
            pod,
            role: None,
            leader: None,
            has_leader: None,
            term: None,
            error: None,
        }
    }
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
    /// The old leader stepped down and was chosen again (Vault's step-down may do that):
    /// leadership did not move.
    Returned,
}

/// Names the leader every replica agrees on: `members` voters, a strict majority of which
/// must name the same pod, which must itself claim leadership; and no replica that answered
/// may say it has no leader. Where a system's replicas cannot name the leader (ClickHouse
/// Keeper's `/ready` says only `hasLeader`, Vault's standby says nothing), a replica that
/// answered, does not lead, names nobody and does not say "no leader" agrees with the one
/// replica that claims to lead, if there is exactly one.
pub fn agreed_leader(views: &[ReplicaView], members: usize) -> Option<String> {
    if views
        .iter()
        .any(|v| v.role.is_some() && v.has_leader == Some(false))
    {
        return None;
    }
    let claimants: Vec<&str> = views
        .iter()
        .filter(|v| v.role == Some(Role::Leader))
        .map(|v| v.pod.as_str())
        .collect();
    let sole_claimant = match claimants.as_slice() {
        [one] => Some(*one),
        _ => None,
    };
    let mut votes: BTreeMap<&str, usize> = BTreeMap::new();
    for v in views {
        let named = match (&v.leader, v.role) {
            (Some(l), _) => Some(l.as_str()),
            (None, Some(Role::Leader)) => Some(v.pod.as_str()),
            (None, Some(r)) if r.is_known_non_leader() => sole_claimant,
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

/// `judge`, remembering one thing across rounds: whether the old leader was ever seen to
/// follow. If it was, and the members now agree on it again, leadership returned to it.
pub fn judge_with_history(
    expect: &Expect,
    views: &[ReplicaView],
    members: usize,
    old_seen_following: &mut bool,
) -> Judgement {
    let j = judge(expect, views, members);
    if views
        .iter()
        .any(|v| v.pod == expect.old_leader && v.role.is_some_and(Role::is_known_non_leader))
    {
        *old_seen_following = true;
    }
    if *old_seen_following
        && j.done == Done::No
        && j.agreed.as_deref() == Some(expect.old_leader.as_str())
    {
        return Judgement {
            done: Done::Returned,
            ..j
        };
    }
    j
}

pub mod drain;
pub mod groups;
pub mod placement;
pub mod restart;

#[cfg(test)]
pub(crate) mod tests;
