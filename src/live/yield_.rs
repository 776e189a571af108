//! One yield, start to end, as a library beside [`crate::live::restart::restart_statefulset`]:
//! find the cluster, take its lock (the one drain and restart take), look again under it,
//! decide ([`crate::plan::plan_yield`]; an election where the system cannot transfer and
//! `--allow-election` says so), act and wait ([`crate::handover::act_and_wait`]), and judge
//! the wait with the one handover verdict ([`crate::actions::Waited::verdict`]).
//!
//! It takes settings of its own ([`YieldSettings`], converted from flags in `cli.rs`), speaks
//! only through a [`Sink`] and returns the [`YieldReport`] for the caller to render. An error is
//! a stop before anything was sent; after that, every outcome is in the report.

use std::time::Duration;

use anyhow::{bail, Context, Result};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Preconditions};
use kube::runtime::wait::{await_condition, conditions};
use tokio_util::sync::CancellationToken;

use crate::actions::{HandoverFailure, Waited, YieldReport};
use crate::drain::nodes::Sink;
use crate::drain::Events;
use crate::errors::api_context;
use crate::groups::move_off;
use crate::handover::{act_and_wait, transfer_and_wait, WaitOptions};
use crate::live::lock;
use crate::model::{human_duration, ClusterObservation, OwnerKind, Selection};
use crate::plan::groups::{moves_off, GroupMoves};
use crate::plan::{plan_yield, Expect, RefusalReason, YieldOptions};
use crate::preflight::{self, Need};
use crate::report::{ClusterReport, API_VERSION};
use crate::survey::{SurveySettings, Surveyor};

/// One yield as asked (the library's own settings; `cli::yield_settings` is where flags meet
/// them): what [`yield_cluster`] and the in-pod hook ([`crate::live::hook`]) take.
#[derive(Debug, Clone)]
pub struct YieldSettings {
    /// NAME: a pod, or a StatefulSet (sts/NAME).
    pub name: Option<String>,
    pub nodes: Vec<String>,
    pub selector: Option<String>,
    pub to: Option<String>,
    pub max_lag: u64,
    pub force: bool,
    pub allow_election: bool,
    pub streams: bool,
    pub dry_run: bool,
    pub timeout: Duration,
    pub lock_namespace: String,
    /// How the replicas are reached and read (`--system` among them).
    pub survey: SurveySettings,
    /// `--local`: the in-pod handover of a preStop hook instead.
    pub local: Option<LocalSettings>,
}

/// `yield --local`'s own settings.
#[derive(Debug, Clone)]
pub struct LocalSettings {
    /// This replica's port, when it is not the profile's first.
    pub port: Option<u16>,
    /// The pod's termination grace period, in seconds, as given (`--pod-grace-period`).
    pub pod_grace_period: u32,
    pub wait_for_quorum: bool,
}

/// One yield: its report (a dry run's plan included; `succeeded` false when the handover
/// failed, its message saying why). An error is a stop before anything was sent. A cluster
/// named by its StatefulSet is handed over under its lock, looked at again under it.
/// `cancel` (the caller's Ctrl-C) stops it before the request is sent, the lock given back;
/// once sent, the handover is waited for (at most `timeout`) and reported.
pub async fn yield_cluster<S: Sink + Sync>(
    surveyor: &Surveyor,
    sink: &S,
    settings: &YieldSettings,
    cancel: &CancellationToken,
) -> Result<YieldReport> {
    let (obs, report) = find_cluster(surveyor, settings).await?;
    // A dry run changes nothing; pods chosen by -l have no StatefulSet to lock (drain's and
    // restart's locks are per StatefulSet).
    if settings.dry_run || obs.target.owner_kind != OwnerKind::StatefulSet {
        let before_send = BeforeSend { cancel, held: None };
        return decide_and_act(surveyor, sink, settings, &before_send, obs, report).await;
    }
    // One maintenance of a cluster at a time: the cluster's lock (drain's and restart's) is
    // taken before anything is sent, and the cluster is looked at again under it.
    let (ns, name) = (report.namespace.clone(), report.name.clone());
    if cancel.is_cancelled() {
        return Err(interrupted(&format!("{ns}/{name}")));
    }
    let needs = preflight::lock_steps(&settings.lock_namespace);
    let warn = |m: &str| sink.say(&format!("Warning: {m}"));
    preflight::check(&surveyor.conn.client, "the yield", &needs, &warn).await?;
    let holder = lock::holder_identity(&format!("yield {ns}/{name}"));
    let say = |m: &str| sink.say(m);
    let (held, took_over) = lock::acquire(
        &surveyor.conn.client,
        &settings.lock_namespace,
        &ns,
        &name,
        &holder,
        &say,
        cancel,
    )
    .await
    .with_context(|| format!("cannot yield in {ns}/{name}: nothing was sent"))?;
    if let Some(who) = took_over {
        sink.say(&format!(
            "Warning: took over {ns}/{name}'s stale lock from {who}"
        ));
    }
    // Found again as it was found the first time (named, or not: a cluster `-l` or `--node`
    // matched gets no credentials of the user's own on this look either).
    let before_send = BeforeSend {
        cancel,
        held: Some(&held),
    };
    let result = match find_cluster(surveyor, settings).await {
        Ok((obs, report)) if obs.target.namespace == ns && obs.target.name == name => {
            decide_and_act(surveyor, sink, settings, &before_send, obs, report).await
        }
        Ok((obs, _)) => Err(anyhow::anyhow!(
            "{ns}/{name} is no longer the cluster this yield names ({}/{} is); nothing was sent",
            obs.target.namespace,
            obs.target.name
        )),
        Err(e) => Err(e),
    };
    held.release().await;
    result
}

/// A yield's report as it starts: the cluster, how leadership is to move, from whom; no
/// target, nothing waited for yet.
fn started(
    report: &ClusterReport,
    mode: &'static str,
    dry_run: bool,
    leader: &str,
    term_before: Option<u64>,
) -> YieldReport {
    YieldReport {
        api_version: API_VERSION,
        kind: "YieldReport",
        namespace: report.namespace.clone(),
        name: report.name.clone(),
        system: report.system.clone(),
        mode,
        dry_run,
        leader: leader.to_string(),
        term_before,
        target: None,
        targeted: false,
        why: String::new(),
        request: None,
        overridden: vec![],
        succeeded: true,
        message: String::new(),
        refusal: None,
        waited: None,
        groups_planned: vec![],
        groups: None,
    }
}

fn interrupted(cluster: &str) -> anyhow::Error {
    anyhow::anyhow!("interrupted (Ctrl-C): nothing was sent to {cluster}")
}

/// What is checked at the last moment before the request (or the leader's deletion) goes:
/// no Ctrl-C, and the cluster's lock, where one is held, still this yield's by a fresh read.
struct BeforeSend<'a> {
    cancel: &'a CancellationToken,
    held: Option<&'a lock::Held>,
}

impl BeforeSend<'_> {
    async fn check(&self, cluster: &str) -> Result<()> {
        if self.cancel.is_cancelled() {
            return Err(interrupted(cluster));
        }
        if let Some(held) = self.held {
            held.verify()
                .await
                .with_context(|| format!("cannot yield in {cluster}: nothing was sent"))?;
        }
        Ok(())
    }
}

/// Plans the handover on `report` (taken under the cluster's lock, but for a dry run) and
/// carries it out.
async fn decide_and_act<S: Sink + Sync>(
    surveyor: &Surveyor,
    sink: &S,
    settings: &YieldSettings,
    before_send: &BeforeSend<'_>,
    obs: ClusterObservation,
    report: ClusterReport,
) -> Result<YieldReport> {
    let opts = YieldOptions {
        to: settings.to.clone(),
        avoid_nodes: vec![],
        avoid_pods: vec![],
        max_lag: settings.max_lag,
        force: settings.force,
    };
    let profile = &obs.target.profile;
    let cluster = format!("{}/{}", report.namespace, report.name);
    let wait = WaitOptions::new(settings.timeout, surveyor.probe_timeout);
    let plan = match plan_yield(&report, profile, &opts) {
        Ok(p) => p,
        Err(r) if r.reason == RefusalReason::NoTransfer && settings.allow_election => {
            return election(surveyor, sink, settings, before_send, &obs, &report, &wait).await;
        }
        // Refused before anything was sent: reported, with the reason's code for `-o json`.
        Err(r) => {
            let leader = report.summary.leader.clone().unwrap_or_default();
            let term = report.summary.term;
            return Ok(YieldReport {
                succeeded: false,
                message: format!("cannot yield: {r}"),
                refusal: Some(r),
                ..started(&report, "transfer", settings.dry_run, &leader, term)
            });
        }
    };
    for o in &plan.overridden {
        sink.say(&format!("Warning: --force overrides: {o}"));
    }
    let group_moves = if settings.streams {
        Some(planned_group_moves(&obs, &plan.leader)?)
    } else {
        None
    };
    let mut y = YieldReport {
        target: Some(plan.target.clone()),
        targeted: plan.targeted,
        why: plan.why.clone(),
        request: Some(plan.call.clone()),
        overridden: plan.overridden.iter().map(|r| r.message.clone()).collect(),
        groups_planned: group_moves
            .as_ref()
            .map(|m| m.calls.clone())
            .unwrap_or_default(),
        ..started(
            &report,
            "transfer",
            settings.dry_run,
            &plan.leader,
            plan.term,
        )
    };
    if settings.dry_run {
        y.message = format!("dry run: nothing was sent to {}", plan.call.pod);
        return Ok(y);
    }
    let transport = surveyor
        .transport_for(&obs.target)
        .await
        .with_context(|| format!("cannot yield in {cluster}: nothing was sent"))?;
    before_send.check(&cluster).await?;
    let line = sink.line(&cluster);
    line.doing(&format!(
        "asking {} to hand leadership {} and waiting",
        plan.leader,
        if plan.targeted {
            format!("to {}", plan.target)
        } else {
            "over".into()
        }
    ));
    let waited = transfer_and_wait(
        &transport,
        &obs.target,
        &report,
        &plan,
        &wait,
        settings.timeout,
    )
    .await;
    line.finish();
    conclude(&mut y, waited, &cluster);
    if let (Some(moves), true) = (&group_moves, y.succeeded) {
        let old = obs
            .target
            .pods
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(plan.leader.as_str()));
        if let (Some(pod), Err(e)) = (old, before_send.check(&cluster).await) {
            // Stopped (Ctrl-C, or the lock lost) before the groups' stepdowns were sent.
            y.succeeded = false;
            y.message = format!(
                "{}; {}'s streams' and consumers' leaders were not moved: {}",
                y.message,
                pod.metadata.name.as_deref().unwrap_or("?"),
                crate::errors::anyhow_chain(&e)
            );
        } else if let Some(pod) = old {
            let line = sink.line(&cluster);
            line.doing(&format!(
                "moving the leaders of {}'s streams and consumers off it",
                plan.leader
            ));
            let m = move_off(&transport, &obs.target, pod, moves, settings.timeout).await;
            line.finish();
            if !m.succeeded() {
                y.succeeded = false;
            }
            y.message = format!("{}; {}", y.message, m.summary());
            y.groups = Some(m);
        }
    }
    Ok(y)
}

/// The stepdowns `--streams` would send: the groups the leader leads, as the servers list
/// them. Refused for systems without other groups.
fn planned_group_moves(obs: &ClusterObservation, leader: &str) -> Result<GroupMoves> {
    let profile = &obs.target.profile;
    if profile.groups.is_none() {
        bail!(
            "--streams moves the leaders of other Raft groups (NATS streams and consumers); {} has none",
            profile.name
        );
    }
    match moves_off(obs, leader) {
        Some(moves) => Ok(moves),
        None => bail!(
            "--streams: the leader {leader} did not say its member id; see `kubectl raft status`"
        ),
    }
}

/// For systems without a transfer: delete the leader pod (its grace period and preStop hook
/// run as usual) and wait until the others agree on a new leader.
async fn election<S: Sink + Sync>(
    surveyor: &Surveyor,
    sink: &S,
    settings: &YieldSettings,
    before_send: &BeforeSend<'_>,
    obs: &ClusterObservation,
    report: &ClusterReport,
    wait: &WaitOptions,
) -> Result<YieldReport> {
    let cluster = format!("{}/{}", report.namespace, report.name);
    let Some(leader) = report.summary.leader.clone() else {
        bail!("cannot hold an election in {cluster}: it has no single leader now (see `kubectl raft status`)");
    };
    if !settings.force && (!report.summary.has_quorum || report.summary.fault_tolerance == 0) {
        bail!(
            "cannot delete {cluster}'s leader {leader}: fault tolerance is 0, so the election could not complete; fix the unhealthy members first, or --force"
        );
    }
    let term = report.leader_replica().and_then(|r| r.raft.term);
    let mut y = YieldReport {
        why: format!(
            "{} cannot hand leadership over: the leader pod is deleted and the others elect a new leader",
            report.system
        ),
        ..started(report, "election", settings.dry_run, &leader, term)
    };
    if settings.dry_run {
        y.message = format!("dry run: pod {leader} was not deleted");
        return Ok(y);
    }
    let needs = [
        Need::new("delete", "pods", "delete the leader pod (--allow-election)")
            .in_namespace(&report.namespace),
        Need::new("watch", "pods", "wait until the leader pod is gone")
            .in_namespace(&report.namespace),
    ];
    let warn = |m: &str| sink.say(&format!("Warning: {m}"));
    preflight::check(&surveyor.conn.client, "the yield", &needs, &warn).await?;
    // Watched as a transfer is: with the cluster's own credentials.
    let transport = surveyor
        .transport_for(&obs.target)
        .await
        .with_context(|| format!("cannot yield in {cluster}: nothing was deleted"))?;
    before_send.check(&cluster).await?;
    sink.say(&format!(
        "{cluster}: {} has no leadership transfer; deleting the leader pod {leader} (--allow-election): expect an election",
        report.system
    ));
    let pods: Api<Pod> = Api::namespaced(surveyor.conn.client.clone(), &report.namespace);
    let uid = obs
        .target
        .pods
        .iter()
        .find(|p| p.metadata.name.as_deref() == Some(leader.as_str()))
        .and_then(|p| p.metadata.uid.clone())
        .unwrap_or_default();
    // The deletion, and then the pod object's end (its grace period and preStop hook run
    // first): the action's time is how long the old leader's pod took to go. The pod's UID
    // is a precondition: a pod recreated under its name meanwhile is not the leader that was
    // judged, and is not deleted.
    let precondition = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some(uid.clone()),
            resource_version: None,
        }),
        ..Default::default()
    };
    let delete = async {
        pods.delete(&leader, &precondition)
            .await
            .map_err(|e| crate::errors::anyhow_chain(&api_context(e, "delete", "pods", "")))?;
        await_condition(pods.clone(), &leader, conditions::is_deleted(&uid))
            .await
            .map(|_| ())
            .map_err(|e| format!("waiting for pod {leader} to be deleted: {e}"))
    };
    let line = sink.line(&cluster);
    line.doing("waiting for a new leader");
    let expect = Expect {
        old_leader: leader.clone(),
        target: None,
        old_leader_may_vanish: true,
    };
    let waited = act_and_wait(&transport, &obs.target, report, expect, wait, delete).await;
    line.finish();
    conclude(&mut y, waited, &cluster);
    Ok(y)
}

/// The verdict, in words; success only when leadership went where it was asked and the term
/// moved no more than a transfer explains.
fn conclude(y: &mut YieldReport, w: Waited, cluster: &str) {
    let new = w.new_leader.clone().unwrap_or_else(|| "?".into());
    let terms = match (y.term_before, w.term_after) {
        (Some(a), Some(b)) => format!(", term {a} → {b}"),
        _ => String::new(),
    };
    let window = crate::model::leaderless_window(w.leaderless_window_ms, Some(w.round_ms));
    let total = human_duration(Duration::from_secs_f64(w.total_ms / 1000.0));
    let targeted = y.mode == "transfer" && y.targeted;
    (y.succeeded, y.message) = match w.verdict(y.term_before, targeted) {
        Ok(()) => (true, format!("{cluster}: leadership moved {} → {new}{terms}, {window}, total {total}", y.leader)),
        Err(HandoverFailure::TermJumped { by, .. }) => (false, format!(
            "{cluster}: leadership reached {new}{terms}, but the term moved by {by} where a transfer moves it by 1: an election happened besides the transfer"
        )),
        Err(HandoverFailure::WentElsewhere { .. }) => (false, format!(
            "{cluster}: leadership moved {} → {new}{terms}, not to the target {}: another member took over (an election?)",
            y.leader,
            y.target.as_deref().unwrap_or("?")
        )),
        Err(HandoverFailure::Returned) => (false, format!(
            "{cluster}: {} stepped down and was chosen again{terms}: leadership did not move (the system picks the successor; run yield again, or check that the others can lead)",
            y.leader
        )),
        Err(HandoverFailure::Failed(e)) => (false, format!(
            "{cluster}: the transfer failed: {e}"
        )),
        Err(HandoverFailure::TimedOut) => (false, format!(
            "{cluster}: no completed handover within {total}; the last observations are above. Check `kubectl raft status`, then run yield again"
        )),
    };
    y.waited = Some(w);
}

/// NAME is a StatefulSet (NAME or sts/NAME) or any pod of a recognised cluster.
async fn find_cluster(
    surveyor: &Surveyor,
    settings: &YieldSettings,
) -> Result<(ClusterObservation, ClusterReport)> {
    let explicit_sts = settings.name.as_deref().is_some_and(|n| n.contains('/'));
    let sel = Selection {
        name: settings.name.clone().filter(|_| explicit_sts),
        named: explicit_sts,
        nodes: settings.nodes.clone(),
        selector: settings.selector.clone(),
        system: settings.survey.system.clone(),
    };
    let survey = surveyor.survey(&sel).await?;
    let mut found: Vec<(ClusterObservation, ClusterReport)> = survey
        .observations
        .into_iter()
        .zip(survey.reports)
        .filter(|(o, _)| match (&settings.name, explicit_sts) {
            (Some(n), false) => {
                &o.target.name == n
                    || o.target
                        .pods
                        .iter()
                        .any(|p| p.metadata.name.as_deref() == Some(n.as_str()))
            }
            _ => true,
        })
        .collect();
    match found.len() {
        // Named by one of its pods: look again by its StatefulSet's name, so that it is
        // surveyed as a cluster the user named (with the environment's credentials, which go
        // only to clusters the user names: docs/security.md).
        1 if settings.name.is_some() && !found[0].0.target.named => {
            let (obs, _) = found.remove(0);
            let by_name = Selection {
                name: Some(obs.target.name.clone()),
                named: true,
                ..sel
            };
            let again = surveyor
                .survey_in(Some(&obs.target.namespace), &by_name)
                .await?;
            again
                .observations
                .into_iter()
                .zip(again.reports)
                .next()
                .ok_or_else(|| {
                    anyhow::anyhow!("{}/{} is gone", obs.target.namespace, obs.target.name)
                })
        }
        1 => Ok(found.remove(0)),
        0 => {
            let what = settings.name.as_deref().unwrap_or("the selected pods");
            bail!(
                "no Raft cluster {what:?} in {}: neither a recognised StatefulSet nor a pod of one has that name (`kubectl raft status` lists them)",
                surveyor.place()
            )
        }
        _ => {
            let names: Vec<String> = found
                .iter()
                .map(|(_, r)| format!("{}/{}", r.namespace, r.name))
                .collect();
            bail!(
                "{} clusters match ({}); name one",
                names.len(),
                names.join(", ")
            )
        }
    }
}
