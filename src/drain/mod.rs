//! The drain executor, as a library: one Raft cluster's members moved off the drained nodes,
//! a step at a time, each step the first of a plan made from a survey taken just before it.
//!
//! It decides nothing itself (`plan::drain::plan_cluster` does) and touches nothing itself:
//! everything it observes or changes goes through [`ClusterOps`], and everything it has to
//! say goes to an [`Events`] sink. `commands::drain` implements both against a real cluster;
//! the tests here implement them with a *scripted* cluster whose answers change between steps
//! (a member hangs during a PDB wait, a transfer flips back, the lock is overtaken, a
//! replacement returns empty), as kubectl's `drain.Helper` is a library others embed.
//!
//! The invariant, held by the shape of [`drain_cluster`]: **every action (a transfer, an
//! eviction) is taken on a plan made from a `look()` done in the same iteration of the loop**,
//! after the lock was checked; every wait (a blocker, a PDB's refusal) goes back to the top of
//! the loop, to look and plan again. No decision outlives the survey it was made from.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use anyhow::{bail, Result};
use tokio::time::Instant;

pub use crate::actions::{ClusterResult, ClusterSummary};
use crate::model::{human_duration, ClusterObservation, OwnerKind};
use crate::plan::drain::{
    plan_cluster, Action, ClusterInput, ClusterPlan, DrainOptions, DrainStep,
};
use crate::report::VotersFrom;

pub mod nodes;
pub mod rollout;

/// How often a blocked cluster is surveyed again.
pub const RECHECK_EVERY: Duration = Duration::from_secs(2);
/// How long after a PDB's refusal the cluster is surveyed and planned again (kubectl drain
/// retries a refused eviction every 5 s).
pub const RETRY_EVERY: Duration = Duration::from_secs(5);

/// One look at the cluster: what its replicas said, and the planner's input made from it.
#[derive(Debug, Clone)]
pub struct Look {
    pub obs: ClusterObservation,
    pub input: ClusterInput,
}

/// What happened to an eviction.
#[derive(Debug, PartialEq, Eq)]
pub enum Evicted {
    /// Accepted: the pod is terminating.
    Accepted,
    /// It had already gone, or was recreated under the same name (a new UID): not evicted.
    AlreadyGone,
}

/// One eviction request's answer.
#[derive(Debug, PartialEq, Eq)]
pub enum Attempt {
    Done(Evicted),
    /// A PodDisruptionBudget refused it (429), with the blocking PDB named.
    Refused(String),
}

/// A verified leadership transfer.
#[derive(Debug, Clone)]
pub struct Handover {
    pub from: String,
    pub to: String,
    pub term_before: Option<u64>,
    pub term_after: Option<u64>,
    pub window_ms: Option<f64>,
}

/// The election a leader's eviction started, once a new leader was agreed.
#[derive(Debug, Clone)]
pub struct Election {
    pub new_leader: String,
    pub window_ms: Option<f64>,
}

/// Leaders of other Raft groups (NATS streams, consumers) moved off a server.
#[derive(Debug, Clone)]
pub struct GroupsMoved {
    pub moved: u32,
    pub summary: String,
}

/// Everything the executor does to, or learns from, the world. Errors are the user's
/// sentences (they end up in the summary's message).
#[allow(async_fn_in_trait)]
pub trait ClusterOps {
    /// Survey the cluster now; None when it no longer exists.
    async fn look(&self) -> Result<Option<Look>>;
    /// The drain lock is still this drain's (a fresh read).
    async fn check_lock(&self) -> Result<()>;
    /// Why the drain lock is known to be lost already (its renewal found another holder),
    /// without asking: checked every round, so an overtaken drain stops even while it waits.
    fn lock_lost(&self) -> Option<String>;
    /// Hand leadership over to a member on a node that stays, and wait until it is done
    /// (yield's full wait); an error says why not and that nothing was evicted.
    async fn transfer(&self, look: &Look, step: &DrainStep) -> Result<Handover>;
    /// Move the leaders of other Raft groups off `pod` (None when it leads none), all within
    /// `within`; an error fails the step.
    async fn move_groups_off(
        &self,
        look: &Look,
        pod: &str,
        within: Duration,
    ) -> Result<Option<GroupsMoved>>;
    /// What a PDB answers to this eviction now (a server-side dry run): Some(why) if refused.
    async fn refused_now(&self, look: &Look, pod: &str) -> Option<String>;
    /// Why the members' controller makes an eviction unsafe now
    /// (`plan::restart::controller_busy`), read afresh just before it: the look's StatefulSet
    /// is as old as the look's probes, and a `kubectl rollout restart` in between would let
    /// the controller delete a member beside this one. Some(why) holds the eviction back, as
    /// a PDB's refusal does, and the step is planned again; a StatefulSet that cannot be
    /// read is Some too.
    async fn controller_busy_now(&self, look: &Look) -> Option<String>;
    /// The member's own answer now (its role and term), read just before its eviction and
    /// judged by `plan::drain::still_as_looked`: the look's probes are seconds old by then.
    async fn member_now(&self, look: &Look, pod: &str) -> crate::plan::ReplicaView;
    /// One eviction request.
    async fn evict(&self, look: &Look, pod: &str) -> Result<Attempt>;
    /// Until the evicted pod (this UID) is gone.
    async fn wait_gone(&self, look: &Look, pod: &str) -> Result<()>;
    /// Evict the leader of a system that cannot transfer, and wait for the election.
    async fn evict_leader(&self, look: &Look, step: &DrainStep) -> Result<Election>;
    /// Until the replacement of `pod` (a new UID) is scheduled and Ready.
    async fn wait_replacement_ready(&self, look: &Look, pod: &str) -> Result<()>;
    /// Sleep `d`, or less if interrupted; true when interrupted (Ctrl-C).
    async fn pause(&self, d: Duration) -> bool;
    fn interrupted(&self) -> bool;
}

/// What the executor says while it works: what it does now (a progress line), and what
/// happened (kept). The command renders them; tests record them.
pub trait Events {
    fn doing(&self, msg: &str);
    fn did(&self, msg: &str);
    /// The task is over (its live line goes).
    fn finish(&self) {}
}

/// The executor's limits, from the command's flags.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The longest wait for any one thing (a blocker, a PDB, a replacement).
    pub timeout: Duration,
}

/// The members still on the drained nodes ("pod on node") or still to be restarted.
/// The end of a drain, checked as a user would: `still` are the pods on the drained nodes now
/// (namespace, pod, node), `members` each cluster's members (by namespace and name). A cluster
/// reported drained whose member is still there (a pod deleted with `--cascade=orphan`, a
/// controller that put it back) is reported stopped instead.
pub fn check_nothing_left(
    summaries: &mut [ClusterSummary],
    still: &[(String, String, String)],
    members: &BTreeMap<(String, String), BTreeSet<String>>,
) {
    for s in summaries
        .iter_mut()
        .filter(|s| s.result == ClusterResult::Drained)
    {
        let Some(mine) = members.get(&(s.namespace.clone(), s.name.clone())) else {
            continue;
        };
        let left: Vec<String> = still
            .iter()
            .filter(|(ns, pod, _)| *ns == s.namespace && mine.contains(pod))
            .map(|(_, pod, node)| format!("{pod} on {node}"))
            .collect();
        if !left.is_empty() {
            s.result = ClusterResult::Stopped;
            s.left = left.clone();
            s.message = format!(
                "{}/{}: {} still on the drained node(s) after the drain (a pod deleted with --cascade=orphan, or a controller that put it back)",
                s.namespace,
                s.name,
                left.join(", ")
            );
        }
    }
}

/// A whole drain's verdict: drained, or where it stopped and how to go on (`failures`: each
/// ordinary pod's and each stopped cluster's message).
pub fn verdict(nodes: &[String], failures: &[String]) -> (bool, String) {
    if failures.is_empty() {
        return (true, format!("drained {}", nodes.join(", ")));
    }
    (
        false,
        format!(
            "the drain stopped: {}. The node(s) stay cordoned. Fix what is named and run the same command again to resume (it plans from what it finds), or `kubectl uncordon {}` to give up",
            failures.join("; "),
            nodes.join(" ")
        ),
    )
}

pub fn left_on(input: &ClusterInput, nodes: &BTreeSet<String>) -> Vec<String> {
    input
        .report
        .replicas
        .iter()
        .filter_map(|x| match x.node.as_ref().filter(|n| nodes.contains(*n)) {
            Some(n) => Some(format!("{} on {n}", x.pod)),
            None => input
                .replace
                .contains(&x.pod)
                .then(|| format!("{} (not yet restarted)", x.pod)),
        })
        .collect()
}

/// A step that could not be taken now and is decided again from a fresh look (a PDB or an
/// eviction gate that refuses the eviction): never retried on the old decision.
#[derive(Debug)]
pub struct StepBlocked(pub String);

impl std::fmt::Display for StepBlocked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for StepBlocked {}

/// What one cluster's run has seen across its looks, which every later plan takes into
/// account: the planner is pure and sees one look; the run remembers.
#[derive(Debug, Default)]
struct Seen {
    /// The most voters any look counted.
    voters: u32,
    /// A look read the system's member list.
    configuration: bool,
    /// Members this run evicted.
    evicted: BTreeSet<String>,
    /// Per member, how many times its other groups' leaders were moved off it.
    group_moves: BTreeMap<String, u32>,
    /// Per member, when moving its other groups' leaders first began.
    group_moves_since: BTreeMap<String, Instant>,
    /// Members this run handed leadership over from, and to whom: a fresh plan then sees a
    /// follower, and its eviction says why it follows.
    handed_over: BTreeMap<String, String>,
}

/// How many rounds of moving a server's other groups' leaders off it before its eviction.
const MAX_GROUP_MOVES: u32 = 3;

impl Seen {
    /// What the run remembers, put into a fresh look's planner input; then the look itself
    /// remembered.
    fn apply(&mut self, input: &mut ClusterInput) {
        input.least_voters = input.least_voters.max(self.voters);
        input.configuration_seen |= self.configuration;
        input.evicted_before.extend(self.evicted.iter().cloned());
        let s = &input.report.summary;
        self.voters = self.voters.max(s.voters);
        self.configuration |= s.voters_from == VotersFrom::Configuration;
    }
}

/// Drains one cluster's members off `opts.nodes`, a step at a time, each on a fresh plan.
pub async fn drain_cluster<O: ClusterOps, E: Events>(
    ops: &O,
    events: &E,
    opts: &DrainOptions,
    settings: &Settings,
    ns: &str,
    name: &str,
) -> ClusterSummary {
    let start = Instant::now();
    let cluster = format!("{ns}/{name}");
    let mut s = ClusterSummary::new(ns, name, ClusterResult::Drained);
    let mut blocked_since: Option<Instant> = None;
    let mut seen = Seen::default();
    // Why it stopped; the message is made after the loop, with what is left as it is then.
    let mut stopped: Option<String> = None;
    let mut stop = |s: &mut ClusterSummary, why: String| {
        s.result = ClusterResult::Stopped;
        stopped = Some(
            why.strip_prefix(&format!("{cluster}: "))
                .unwrap_or(&why)
                .to_string(),
        );
    };
    loop {
        if ops.interrupted() {
            stop(&mut s, "interrupted".into());
            break;
        }
        if let Some(why) = ops.lock_lost() {
            stop(
                &mut s,
                format!("{why}; this drain stopped before its next action"),
            );
            break;
        }
        // Look, then plan: the only source of what to do next.
        let mut look = match ops.look().await {
            Ok(Some(l)) => l,
            Ok(None) => {
                if s.done.is_empty() {
                    s.result = ClusterResult::Unchanged;
                }
                s.message = format!("{cluster}: it no longer exists");
                break;
            }
            Err(e) => {
                stop(
                    &mut s,
                    format!("cannot survey it: {}", crate::errors::anyhow_chain(&e)),
                );
                break;
            }
        };
        seen.apply(&mut look.input);
        let plan = plan_cluster(&look.input, opts);
        s.left = left_on(&look.input, &opts.nodes);
        if s.system.is_empty() {
            s.system = look.input.report.system.clone();
            s.plan = plan.clone();
            s.term_before = plan.term;
        }
        if plan.term.is_some() {
            s.term_after = plan.term;
        }
        let Some(step) = plan.steps.first().cloned() else {
            match plan.blocker {
                None => {
                    if s.done.is_empty() {
                        s.result = ClusterResult::Unchanged;
                    }
                    s.message = format!("{cluster}: no member left on the drained node(s)");
                    break;
                }
                Some(b) if b.reason.waitable() => {
                    let since = *blocked_since.get_or_insert_with(Instant::now);
                    if since.elapsed() >= settings.timeout {
                        stop(
                            &mut s,
                            format!(
                                "still blocked after {}: {}",
                                human_duration(settings.timeout),
                                b.message
                            ),
                        );
                        break;
                    }
                    events.doing(&format!("waiting: {}", b.message));
                    ops.pause(RECHECK_EVERY).await;
                    continue;
                }
                Some(b) => {
                    stop(&mut s, b.message);
                    break;
                }
            }
        };
        // The lock is still ours, by a fresh read, right before the action.
        if let Err(e) = ops.check_lock().await {
            stop(&mut s, crate::errors::anyhow_chain(&e));
            break;
        }
        let r = match step.action {
            Action::TransferThenEvict => {
                transfer(ops, events, &look, &step, &mut s, &mut seen).await
            }
            Action::Evict | Action::EvictLeader => {
                evict_member(ops, events, opts, settings, &look, &step, &mut s, &mut seen).await
            }
        };
        match r {
            // A step taken: the next wait is a new one. (A step refused for now is not: the
            // fresh plans it goes back to add up to one wait, bounded by the timeout.)
            Ok(()) => blocked_since = None,
            // Not now: wait, then look and plan again; what was decided is not retried.
            Err(e) if e.downcast_ref::<StepBlocked>().is_some() => {
                let since = *blocked_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= settings.timeout {
                    stop(
                        &mut s,
                        format!(
                            "still blocked after {}: {e}",
                            human_duration(settings.timeout)
                        ),
                    );
                    break;
                }
                events.doing(&format!(
                    "waiting: {e}; planning again every {}s",
                    RETRY_EVERY.as_secs()
                ));
                ops.pause(RETRY_EVERY).await;
            }
            Err(e) => {
                stop(&mut s, crate::errors::anyhow_chain(&e));
                break;
            }
        }
    }
    // An overtaken drain does not report the other drain's work as its own.
    if s.result != ClusterResult::Stopped {
        if let Some(why) = ops.lock_lost() {
            stop(
                &mut s,
                format!("{why}; this drain stopped before its next action"),
            );
        }
    }
    if let Some(why) = stopped {
        // What is left now, not at the last plan: a member may have moved meanwhile.
        if let Ok(Some(l)) = ops.look().await {
            s.left = left_on(&l.input, &opts.nodes);
        }
        let done = if s.done.is_empty() {
            "nothing".to_string()
        } else {
            s.done.join("; ")
        };
        let done = if s.left.is_empty() {
            done
        } else {
            format!("{done}; left: {}", s.left.join(", "))
        };
        s.message = format!("{cluster}: {why} (done: {done})");
    }
    // Elections: the leader evictions that started one, or the term increments a transfer
    // does not explain, whichever says more.
    if let (Some(a), Some(b)) = (s.term_before, s.term_after) {
        let unexplained = (b.saturating_sub(a)).saturating_sub(u64::from(s.transfers));
        s.elections = s.elections.max(unexplained);
    }
    s.duration_ms = start.elapsed().as_secs_f64() * 1000.0;
    s
}

fn said<E: Events>(events: &E, s: &mut ClusterSummary, msg: String) {
    events.did(&msg);
    s.done.push(msg);
}

/// Hands the leadership to a member on a node that stays, with yield's full wait.
async fn transfer<O: ClusterOps, E: Events>(
    ops: &O,
    events: &E,
    look: &Look,
    step: &DrainStep,
    s: &mut ClusterSummary,
    seen: &mut Seen,
) -> Result<()> {
    let planned = first_planned_target(&s.plan, step).map(str::to_string);
    let changed = |to: &str| target_changed(planned.as_deref(), to, step);
    events.doing(&format!(
        "handing leadership {} → {} before evicting {}{}",
        step.pod,
        step.target.as_deref().unwrap_or("a follower"),
        step.pod,
        step.target.as_deref().map(changed).unwrap_or_default()
    ));
    let h = ops.transfer(look, step).await?;
    s.record_window(h.window_ms);
    s.transfers += 1;
    seen.handed_over.insert(h.from.clone(), h.to.clone());
    let msg = format!(
        "leadership {} → {} (term {} → {}, {}){}",
        h.from,
        h.to,
        h.term_before.map_or("?".into(), |t| t.to_string()),
        h.term_after.map_or("?".into(), |t| t.to_string()),
        crate::model::leaderless_window(h.window_ms, None),
        changed(&h.to)
    );
    said(events, s, msg);
    Ok(())
}

/// The target the drain's first plan (the one its `--dry-run` shows) named for `step`'s
/// transfer, if it named one.
fn first_planned_target<'a>(first: &'a ClusterPlan, step: &DrainStep) -> Option<&'a str> {
    first
        .steps
        .iter()
        .find(|p| p.pod == step.pod && p.action == Action::TransferThenEvict)
        .and_then(|p| p.target.as_deref())
}

/// Where the leadership goes to another member than the first plan named: "; not X as first
/// planned: why", from the fresh plan's reasons (empty where it goes where planned).
fn target_changed(planned: Option<&str>, to: &str, step: &DrainStep) -> String {
    match planned {
        Some(was) if was != to => {
            let why = step
                .passed_over
                .iter()
                .find(|(p, _)| p == was)
                .map(|(_, why)| why.clone())
                .unwrap_or_else(|| format!("{was} was not the target when the step came"));
            format!("; not {was} as first planned: {why}")
        }
        _ => String::new(),
    }
}

/// Evicts one member, then waits for its replacement to be Ready and rejoined (unless it
/// cannot come back while the node is drained).
#[allow(clippy::too_many_arguments)]
async fn evict_member<O: ClusterOps, E: Events>(
    ops: &O,
    events: &E,
    opts: &DrainOptions,
    settings: &Settings,
    look: &Look,
    step: &DrainStep,
    s: &mut ClusterSummary,
    seen: &mut Seen,
) -> Result<()> {
    let pod = step.pod.as_str();
    if !look
        .obs
        .target
        .pods
        .iter()
        .any(|p| p.metadata.name.as_deref() == Some(pod))
    {
        bail!("pod {pod} is no longer part of the cluster");
    }
    // Moving a server's other groups' leaders (NATS streams) is a step of its own: it can
    // take long, and the cluster changes meanwhile, so the eviction is decided again on a
    // fresh look (and after the lock is checked and Ctrl-C seen) once they are moved. A
    // server that keeps being given leaders back is not chased for ever.
    // One deadline for all the rounds of one member's moves (--timeout), from the first.
    let started = Instant::now();
    let within = match seen.group_moves_since.get(pod) {
        Some(since) => settings.timeout.saturating_sub(since.elapsed()),
        None => settings.timeout,
    };
    if within.is_zero() {
        bail!(
            "the time for moving {pod}'s other groups' leaders off it ({}) ran out; it was not evicted",
            human_duration(settings.timeout)
        );
    }
    if let Some(g) = ops.move_groups_off(look, pod, within).await? {
        seen.group_moves_since
            .entry(pod.to_string())
            .or_insert(started);
        s.group_leaders_moved += g.moved;
        said(events, s, g.summary);
        let rounds = seen.group_moves.entry(pod.to_string()).or_default();
        *rounds += 1;
        if *rounds > MAX_GROUP_MOVES {
            bail!(
                "{pod} was given other groups' leaders again after {MAX_GROUP_MOVES} rounds of moving them off; it was not evicted"
            );
        }
        return Ok(());
    }
    // The controller, read again just before the eviction (the look's read of it is as old
    // as the look): a rollout begun since holds the member back, and the step is planned
    // again on a fresh look.
    if let Some(why) = ops.controller_busy_now(look).await {
        return Err(StepBlocked(format!("cannot evict {pod} yet: {why}")).into());
    }
    // The member itself, asked again: leadership may have moved to it since the look.
    if step.action == Action::Evict {
        let now = ops.member_now(look, pod).await;
        if let Err(why) = crate::plan::drain::still_as_looked(step, &look.input.report, &now) {
            return Err(StepBlocked(format!("cannot evict {pod} yet: {why}")).into());
        }
    }
    // A member this run handed leadership over from is planned afresh as a follower: said as
    // what it is, the leader that handed over, not as a follower going first.
    let why = match (step.action, seen.handed_over.get(pod)) {
        (Action::Evict, Some(to)) => format!("it handed leadership over to {to} and follows"),
        _ => step.why.clone(),
    };
    events.doing(&format!("evicting {pod} ({why}) from {}", step.node));
    if step.action == Action::EvictLeader {
        // A PDB that refuses now sends the decision back to planning, before the election
        // is started and measured.
        if let Some(why) = ops.refused_now(look, pod).await {
            return Err(StepBlocked(format!("cannot evict the leader {pod} yet: {why}")).into());
        }
        s.eviction_sent = true;
        let e = ops.evict_leader(look, step).await?;
        seen.evicted.insert(pod.to_string());
        s.record_window(e.window_ms);
        s.evictions += 1;
        s.elections += 1;
        let msg = format!(
            "evicted the leader {pod} (election: {} leads, {})",
            e.new_leader,
            crate::model::leaderless_window(e.window_ms, None)
        );
        said(events, s, msg);
    } else {
        s.eviction_sent = true;
        match ops.evict(look, pod).await? {
            Attempt::Refused(why) => {
                return Err(StepBlocked(format!("cannot evict {pod} yet: {why}")).into())
            }
            Attempt::Done(Evicted::AlreadyGone) => {
                events.did(&format!("{pod} had already gone; not evicted again"));
            }
            Attempt::Done(Evicted::Accepted) => {
                // Said as soon as it is accepted: a wait that fails after it must not leave
                // the eviction out of the report.
                seen.evicted.insert(pod.to_string());
                s.evictions += 1;
                said(events, s, format!("evicted {pod} from {}", step.node));
                events.doing(&format!("waiting for {pod} to stop"));
                ops.wait_gone(look, pod).await?;
            }
        }
    }
    if let Some(rev) = &step.new_revision {
        let msg = format!(
            "{pod}'s replacement starts from the StatefulSet's update revision {rev} (OnDelete with a pending update): this drain rolled the new template onto it"
        );
        said(events, s, msg);
    }
    if let Some(why) = &step.degraded {
        let msg = format!(
            "{} runs a member short until node {} is back ({why}); its fault tolerance is reduced meanwhile",
            s.plan.cluster(),
            step.node
        );
        said(events, s, msg);
        return Ok(());
    }
    rejoin(ops, events, opts, settings, look, pod, s).await
}

/// Waits until the replacement is scheduled and Ready, then until its Raft answers as a
/// member that counts again: a voter by the one definition of a healthy voter, a learner or
/// observer by its own role's test (looks).
async fn rejoin<O: ClusterOps, E: Events>(
    ops: &O,
    events: &E,
    opts: &DrainOptions,
    settings: &Settings,
    look: &Look,
    pod: &str,
    s: &mut ClusterSummary,
) -> Result<()> {
    let start = Instant::now();
    // What it was before its eviction decides what it must be again.
    let was_voter = crate::assess::voter::was_voter(&look.input.report, pod);
    if look.obs.target.owner_kind == OwnerKind::StatefulSet {
        events.doing(&format!(
            "waiting for {pod}'s replacement to be scheduled and Ready"
        ));
        ops.wait_replacement_ready(look, pod).await?;
    }
    events.doing(&format!(
        "waiting for {pod} to rejoin: a member that knows the leader and has caught up"
    ));
    loop {
        let last = match ops.look().await {
            Ok(Some(now)) => {
                let r = &now.input.report;
                let leader = r.leader_replica();
                match r.replicas.iter().find(|x| x.pod == pod) {
                    Some(x) => {
                        match crate::assess::voter::rejoined(x, was_voter, leader, opts.max_lag) {
                            Ok(()) => {
                                let msg = format!(
                                    "{pod} rejoined on {} ({} after the eviction)",
                                    x.node.clone().unwrap_or_default(),
                                    human_duration(start.elapsed())
                                );
                                said(events, s, msg);
                                return Ok(());
                            }
                            Err(why) => why,
                        }
                    }
                    None => format!("{pod} is not a replica any more"),
                }
            }
            Ok(None) => "the cluster was not found".into(),
            Err(e) => crate::errors::anyhow_chain(&e),
        };
        if start.elapsed() >= settings.timeout {
            bail!(
                "{pod}'s replacement did not rejoin within {}: {last}; no further member was evicted",
                human_duration(settings.timeout)
            );
        }
        if ops.pause(RECHECK_EVERY / 2).await {
            bail!("interrupted while waiting for {pod} to rejoin ({last})");
        }
    }
}

#[cfg(test)]
pub(crate) mod fixtures;
#[cfg(test)]
mod prop_tests;
#[cfg(test)]
pub(crate) mod tests;
