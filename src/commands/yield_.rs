//! `kubectl raft yield`: survey, decide (plan::plan_yield), act and wait (handover).

use std::io::{IsTerminal, Write};

use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Preconditions};
use kube::runtime::wait::{await_condition, conditions};

use crate::actions::{HandoverFailure, YieldReport};
use crate::cli::{GlobalArgs, YieldArgs};
use crate::errors::{api_context, Reported};
use crate::groups::move_off;
use crate::handover::{act_and_wait, send_transfer, WaitOptions, Waited};
use crate::live::lock;
use crate::model::{human_duration, ClusterObservation, Selection};
use crate::plan::groups::{moves_off, GroupMoves};
use crate::plan::{plan_yield, Expect, RefusalReason, ReplicaView, YieldOptions};
use crate::preflight::{self, Need};
use crate::render::Format;
use crate::report::{ClusterReport, API_VERSION};
use crate::survey::{SurveySettings, Surveyor};

/// One yield as the flags ask it, read once (`YieldSettings::new`, below): what the steps
/// below and `yield --local` take, never clap's struct.
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
    pub timeout: std::time::Duration,
    pub output: Format,
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

impl YieldSettings {
    /// The one place yield's flags meet its steps (cli.rs cannot name a verb's type: the edge
    /// imports downwards only).
    pub fn new(g: &GlobalArgs, a: &YieldArgs) -> Self {
        YieldSettings {
            name: a.name.clone(),
            nodes: a.select.node.iter().cloned().collect(),
            selector: a.select.selector.clone(),
            to: a.to.clone(),
            max_lag: a.max_lag,
            force: a.force,
            allow_election: a.allow_election,
            streams: a.streams,
            dry_run: a.dry_run,
            timeout: a.timeout,
            output: a.output.into(),
            lock_namespace: a.lock_namespace.clone(),
            survey: crate::cli::survey_settings(g, &a.select, &a.probe),
            local: a.local.then_some(LocalSettings {
                port: a.port,
                pod_grace_period: a.pod_grace_period,
                wait_for_quorum: a.wait_for_quorum,
            }),
        }
    }
}

pub async fn run(
    g: &GlobalArgs,
    args: &YieldArgs,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<()> {
    // Clap's flags stop here: what follows reads the verb's own settings.
    let settings = &YieldSettings::new(g, args);
    if let Some(local) = &settings.local {
        return crate::commands::local::run(settings, local, out, err).await;
    }
    let surveyor = Surveyor::new(&settings.survey).await?;
    let (obs, report) = find_cluster(&surveyor, settings).await?;
    // A dry run changes nothing; pods chosen by -l have no StatefulSet to lock (drain's and
    // restart's locks are per StatefulSet).
    if settings.dry_run || obs.target.owner_kind != crate::model::OwnerKind::StatefulSet {
        return decide_and_act(&surveyor, settings, obs, report, out, err).await;
    }
    // One maintenance of a cluster at a time: the cluster's lock (drain's and restart's) is
    // taken before anything is sent, and the cluster is looked at again under it.
    let (ns, name) = (report.namespace.clone(), report.name.clone());
    // Its lock, before anything is taken (the replicas' ports were reached by the survey).
    let needs = preflight::lock_steps(&settings.lock_namespace);
    let warn = |m: &str| eprintln!("Warning: {}", crate::render::clean(m));
    preflight::check(&surveyor.conn.client, "the yield", &needs, &warn).await?;
    let holder = lock::holder_identity(&format!("yield {ns}/{name}"));
    let say = |m: &str| eprintln!("{}", crate::render::clean(m));
    let (held, took_over) = lock::acquire(
        &surveyor.conn.client,
        &settings.lock_namespace,
        &ns,
        &name,
        &holder,
        &say,
    )
    .await
    .with_context(|| format!("cannot yield in {ns}/{name}: nothing was sent"))?;
    if let Some(who) = took_over {
        writeln!(
            err,
            "Warning: took over {ns}/{name}'s stale lock from {who}"
        )?;
    }
    // Found again as it was found the first time (named, or not: a cluster `-l` or `--node`
    // matched gets no credentials of the user's own on this look either).
    let result = match find_cluster(&surveyor, settings).await {
        Ok((obs, report)) if obs.target.namespace == ns && obs.target.name == name => {
            decide_and_act(&surveyor, settings, obs, report, out, err).await
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

/// Plans the handover on `report` (taken under the cluster's lock, but for a dry run) and
/// carries it out.
async fn decide_and_act(
    surveyor: &Surveyor,
    args: &YieldSettings,
    obs: ClusterObservation,
    report: ClusterReport,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<()> {
    let opts = YieldOptions {
        to: args.to.clone(),
        avoid_nodes: vec![],
        avoid_pods: vec![],
        max_lag: args.max_lag,
        force: args.force,
    };
    let profile = &obs.target.profile;
    let cluster = format!("{}/{}", report.namespace, report.name);
    let wait = WaitOptions::new(args.timeout, surveyor.probe_timeout);
    let plan = match plan_yield(&report, profile, &opts) {
        Ok(p) => p,
        Err(r) if r.reason == RefusalReason::NoTransfer && args.allow_election => {
            return election(surveyor, args, &obs, &report, &wait, out, err).await;
        }
        Err(r) => bail!("cannot yield: {r}"),
    };
    for o in &plan.overridden {
        writeln!(err, "Warning: --force overrides: {o}")?;
    }
    let group_moves = if args.streams {
        Some(planned_group_moves(&obs, &plan.leader)?)
    } else {
        None
    };
    let mut y = YieldReport {
        api_version: API_VERSION,
        kind: "YieldReport",
        namespace: report.namespace.clone(),
        name: report.name.clone(),
        system: report.system.clone(),
        mode: "transfer",
        dry_run: args.dry_run,
        leader: plan.leader.clone(),
        term_before: plan.term,
        target: Some(plan.target.clone()),
        targeted: plan.targeted,
        why: plan.why.clone(),
        request: Some(plan.call.clone()),
        overridden: plan.overridden.iter().map(|r| r.message.clone()).collect(),
        succeeded: true,
        message: String::new(),
        waited: None,
        groups_planned: group_moves
            .as_ref()
            .map(|m| m.calls.clone())
            .unwrap_or_default(),
        groups: None,
    };
    if args.dry_run {
        y.message = format!("dry run: nothing was sent to {}", plan.call.pod);
        return print(&y, args.output, surveyor.transport.describe(), out);
    }
    let spinner = progress(&format!(
        "{cluster}: asking {} to hand leadership {} and waiting",
        plan.leader,
        if plan.targeted {
            format!("to {}", plan.target)
        } else {
            "over".into()
        }
    ));
    let transport = surveyor
        .transport_for(&obs.target)
        .await
        .with_context(|| format!("cannot yield in {cluster}: nothing was sent"))?;
    let waited = act_and_wait(
        &transport,
        &obs.target,
        &report,
        plan.expect(),
        &wait,
        send_transfer(&transport, &obs.target, &plan.call, args.timeout),
    )
    .await;
    if let Some(s) = spinner {
        s.finish_and_clear();
    }
    conclude(&mut y, waited, &cluster);
    if let (Some(moves), true) = (&group_moves, y.succeeded) {
        let old = obs
            .target
            .pods
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(plan.leader.as_str()));
        if let Some(pod) = old {
            let spinner = progress(&format!(
                "{cluster}: moving the leaders of {}'s streams and consumers off it",
                plan.leader
            ));
            let m = move_off(&transport, &obs.target, pod, moves, args.timeout).await;
            if let Some(s) = spinner {
                s.finish_and_clear();
            }
            if !m.succeeded() {
                y.succeeded = false;
            }
            y.message = format!("{}; {}", y.message, m.summary());
            y.groups = Some(m);
        }
    }
    report_verdict(&y, args.output, surveyor.transport.describe(), out, err)
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
async fn election(
    surveyor: &Surveyor,
    args: &YieldSettings,
    obs: &ClusterObservation,
    report: &ClusterReport,
    wait: &WaitOptions,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<()> {
    let cluster = format!("{}/{}", report.namespace, report.name);
    let Some(leader) = report.summary.leader.clone() else {
        bail!("cannot hold an election in {cluster}: it has no single leader now (see `kubectl raft status`)");
    };
    if !args.force && (!report.summary.has_quorum || report.summary.fault_tolerance == 0) {
        bail!(
            "cannot delete {cluster}'s leader {leader}: fault tolerance is 0, so the election could not complete; fix the unhealthy members first, or --force"
        );
    }
    let leader_report = report.replicas.iter().find(|r| r.pod == leader);
    let y = YieldReport {
        api_version: API_VERSION,
        kind: "YieldReport",
        namespace: report.namespace.clone(),
        name: report.name.clone(),
        system: report.system.clone(),
        mode: "election",
        dry_run: args.dry_run,
        leader: leader.clone(),
        term_before: leader_report.and_then(|r| r.raft.term),
        target: None,
        targeted: false,
        why: format!(
            "{} cannot hand leadership over: the leader pod is deleted and the others elect a new leader",
            report.system
        ),
        request: None,
        overridden: vec![],
        succeeded: true,
        message: String::new(),
        waited: None,
        groups_planned: vec![],
        groups: None,
    };
    if args.dry_run {
        let y = YieldReport {
            message: format!("dry run: pod {leader} was not deleted"),
            ..y
        };
        return print(&y, args.output, surveyor.transport.describe(), out);
    }
    let needs = [
        Need::new("delete", "pods", "delete the leader pod (--allow-election)")
            .in_namespace(&report.namespace),
        Need::new("watch", "pods", "wait until the leader pod is gone")
            .in_namespace(&report.namespace),
    ];
    let warn = |m: &str| eprintln!("Warning: {}", crate::render::clean(m));
    preflight::check(&surveyor.conn.client, "the yield", &needs, &warn).await?;
    // Watched as a transfer is: with the cluster's own credentials.
    let transport = surveyor
        .transport_for(&obs.target)
        .await
        .with_context(|| format!("cannot yield in {cluster}: nothing was deleted"))?;
    writeln!(
        err,
        "{cluster}: {} has no leadership transfer; deleting the leader pod {leader} (--allow-election): expect an election",
        report.system
    )?;
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
    let spinner = progress(&format!("{cluster}: waiting for a new leader"));
    let expect = Expect {
        old_leader: leader.clone(),
        target: None,
        old_leader_may_vanish: true,
    };
    let waited = act_and_wait(&transport, &obs.target, report, expect, wait, delete).await;
    if let Some(s) = spinner {
        s.finish_and_clear();
    }
    finish(
        y,
        waited,
        &cluster,
        args.output,
        surveyor.transport.describe(),
        out,
        err,
    )
}

/// The verdict, printed; exit 1 (already explained) unless it succeeded.
fn finish(
    mut y: YieldReport,
    waited: Waited,
    cluster: &str,
    output: Format,
    via: &str,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<()> {
    conclude(&mut y, waited, cluster);
    report_verdict(&y, output, via, out, err)
}

/// The report printed; exit 1 (already explained) unless it succeeded.
fn report_verdict(
    y: &YieldReport,
    output: Format,
    via: &str,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<()> {
    print(y, output, via, out)?;
    if y.succeeded {
        Ok(())
    } else {
        writeln!(err, "error: {}", y.message)?;
        Err(Reported.into())
    }
}

fn progress(msg: &str) -> Option<ProgressBar> {
    std::io::stderr().is_terminal().then(|| {
        let s = ProgressBar::new_spinner().with_message(msg.to_string());
        s.set_style(
            ProgressStyle::with_template("{spinner} {msg} ({elapsed})").expect("valid template"),
        );
        s.enable_steady_tick(std::time::Duration::from_millis(100));
        s
    })
}

/// The verdict, in words; success only when leadership went where it was asked and the term
/// moved no more than a transfer explains.
fn conclude(y: &mut YieldReport, w: Waited, cluster: &str) {
    let new = w.new_leader.clone().unwrap_or_else(|| "?".into());
    let terms = match (y.term_before, w.term_after) {
        (Some(a), Some(b)) => format!(", term {a} → {b}"),
        _ => String::new(),
    };
    let window = match w.leaderless_window_ms {
        Some(ms) => format!(
            "leaderless window {}",
            human_duration(std::time::Duration::from_secs_f64(ms / 1000.0))
        ),
        None => format!(
            "no round without a leader (rounds every {:.0}ms)",
            w.round_ms
        ),
    };
    let total = human_duration(std::time::Duration::from_secs_f64(w.total_ms / 1000.0));
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

fn print(y: &YieldReport, output: Format, via: &str, out: &mut dyn Write) -> Result<()> {
    if crate::render::structured(y, output, out)? {
        return Ok(());
    }
    let cluster = format!("{}/{}", y.namespace, y.name);
    if y.dry_run {
        let term = y
            .term_before
            .map_or(String::new(), |t| format!(" (term {t})"));
        writeln!(out, "{cluster} ({}): leader {}{term}", y.system, y.leader)?;
        match &y.request {
            Some(r) => {
                writeln!(
                    out,
                    "target: {} ({})",
                    y.target.as_deref().unwrap_or("-"),
                    y.why
                )?;
                if !y.targeted {
                    writeln!(
                        out,
                        "  {} picks the successor itself; any other healthy member is a success",
                        y.system
                    )?;
                }
                writeln!(
                    out,
                    "request: {} {}{} to {} (through {via})",
                    r.method,
                    r.path,
                    r.body
                        .as_deref()
                        .map(|b| format!(" {b}"))
                        .unwrap_or_default(),
                    r.pod
                )?;
            }
            None => writeln!(
                out,
                "election: {}; pod {} would be deleted",
                y.why, y.leader
            )?,
        }
        for c in &y.groups_planned {
            writeln!(
                out,
                "then: {} → NATS request {}{}",
                c.group,
                c.subject,
                c.account
                    .as_deref()
                    .map(|a| format!(" as account {a}"))
                    .unwrap_or_default()
            )?;
        }
        writeln!(out, "{}", y.message)?;
        return Ok(());
    }
    if let Some(w) = &y.waited {
        // The replicas' last answers explain a failed handover (not a failed --streams).
        if !y.succeeded && y.groups.is_none() {
            last_round(&w.last_round, out)?;
        }
    }
    if y.succeeded {
        writeln!(out, "{}", y.message)?;
    }
    Ok(())
}

fn last_round(views: &[ReplicaView], out: &mut dyn Write) -> Result<()> {
    let mut t = comfy_table::Table::new();
    t.load_preset(comfy_table::presets::NOTHING)
        .set_header(["POD", "ROLE", "LEADER", "TERM", "ERROR"]);
    for v in views {
        t.add_row([
            v.pod.clone(),
            v.role.map_or("-".into(), |r| r.as_str().to_string()),
            v.leader.clone().unwrap_or_else(|| {
                if v.has_leader == Some(false) {
                    "none".into()
                } else {
                    "-".into()
                }
            }),
            v.term.map_or("-".into(), |t| t.to_string()),
            v.error.clone().unwrap_or_default(),
        ]);
    }
    for line in t.to_string().lines() {
        writeln!(out, "{}", line.trim_end())?;
    }
    Ok(())
}

/// NAME is a StatefulSet (NAME or sts/NAME) or any pod of a recognised cluster.
async fn find_cluster(
    surveyor: &Surveyor,
    args: &YieldSettings,
) -> Result<(ClusterObservation, ClusterReport)> {
    let explicit_sts = args.name.as_deref().is_some_and(|n| n.contains('/'));
    let sel = Selection {
        name: args.name.clone().filter(|_| explicit_sts),
        named: explicit_sts,
        nodes: args.nodes.clone(),
        selector: args.selector.clone(),
        system: args.survey.system.clone(),
    };
    let survey = surveyor.survey(&sel).await?;
    let mut found: Vec<(ClusterObservation, ClusterReport)> = survey
        .observations
        .into_iter()
        .zip(survey.reports)
        .filter(|(o, _)| match (&args.name, explicit_sts) {
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
        1 if args.name.is_some() && !found[0].0.target.named => {
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
            let what = args.name.as_deref().unwrap_or("the selected pods");
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
