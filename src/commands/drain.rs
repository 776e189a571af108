//! `kubectl raft drain`: lock, cordon, decide (plan::drain), then act one step at a time,
//! surveying again before every step rather than trusting what was seen before.
//!
//! Ordinary pods go as `kubectl drain` sends them. Each Raft cluster with a replica on the
//! nodes goes member by member: followers first, the leader last after a verified transfer
//! (handover::act_and_wait, as `yield`), each eviction only while the others form a quorum
//! of healthy voters, each replacement Ready and rejoined before the next.

mod evict;
mod lock;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, Pod};
use kube::api::{Api, ListParams};
use kube::runtime::wait::await_condition;
use kube::ResourceExt;
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::cli::{DrainArgs, GlobalArgs, Output, SelectArgs};
use crate::commands::progress::{Line, Progress};
use crate::errors::{api_context, is_forbidden, Reported};
use crate::groups::move_off;
use crate::handover::{act_and_wait, send_transfer, Outcome, WaitOptions};
use crate::model::{human_duration, pod_ready, ClusterObservation, Selection};
use crate::plan::drain::{
    classify_pod, emptydir_volumes, healthy_voter, plan_cluster, plan_drain, Action, ClusterInput,
    ClusterPlan, DrainOptions, DrainStep, PodRules, PodVerdict,
};
use crate::plan::groups::{moves_off, GroupMoves};
use crate::plan::placement::stuck_members;
use crate::plan::{plan_yield, Expect, YieldOptions};
use crate::report::{ClusterReport, API_VERSION};
use crate::survey::Surveyor;
use evict::{sleep_or_cancel, Attempt, Evicted, Evictor};

/// A step that could not be taken now and is decided again from a fresh survey (a PDB that
/// refuses the eviction): never retried on the old decision.
#[derive(Debug)]
struct StepBlocked(String);

impl std::fmt::Display for StepBlocked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for StepBlocked {}

/// How often a blocked cluster is surveyed again.
const RECHECK_EVERY: Duration = Duration::from_secs(2);

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
    /// Members still on the drained nodes at the last survey ("pod on node").
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
    /// "drained", "unchanged" (nothing on the nodes), "stopped" or "planned" (dry run).
    pub result: String,
    pub message: String,
}

pub async fn run(
    g: &GlobalArgs,
    args: &DrainArgs,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<()> {
    let select = SelectArgs {
        all_namespaces: true,
        profiles: args.profiles.clone(),
        ..Default::default()
    };
    let surveyor = Arc::new(Surveyor::new(g, &select, &args.probe).await?);
    let client = surveyor.conn.client.clone();
    let nodes = resolve_nodes(&client, args).await?;
    let client = &client;
    let drained: BTreeSet<String> = nodes.iter().cloned().collect();

    // Which Raft clusters have a member there.
    let first = surveyor
        .survey_in(
            None,
            &Selection {
                nodes: nodes.clone(),
                ..Default::default()
            },
        )
        .await?;
    for why in &first.skipped {
        writeln!(
            err,
            "Warning: {}: its pods on the node(s) are treated as ordinary pods",
            crate::render::clean(why)
        )?;
    }
    let raft_pods: BTreeSet<(String, String)> = first
        .observations
        .iter()
        .flat_map(|o| o.target.pods.iter())
        .map(|p| (p.namespace().unwrap_or_default(), p.name_any()))
        .collect();
    // Every pod on the nodes (that --pod-selector selects): the clusters to drain are those
    // with one of them; the others are ordinary pods.
    let mut on_nodes: Vec<Pod> = vec![];
    for n in &nodes {
        let mut lp = ListParams::default().fields(&format!("spec.nodeName={n}"));
        if let Some(s) = &args.pod_selector {
            lp = lp.labels(s);
        }
        let pods = Api::<Pod>::all(client.clone())
            .list(&lp)
            .await
            .map_err(|e| api_context(e, "list", "pods", "in any namespace"))?;
        on_nodes.extend(pods.items);
    }
    let selected: BTreeSet<(String, String)> = on_nodes
        .iter()
        .map(|p| (p.namespace().unwrap_or_default(), p.name_any()))
        .collect();
    let clusters: Vec<(String, String)> = first
        .observations
        .iter()
        .filter(|o| {
            o.target
                .pods
                .iter()
                .any(|p| selected.contains(&(p.namespace().unwrap_or_default(), p.name_any())))
        })
        .map(|o| (o.target.namespace.clone(), o.target.name.clone()))
        .collect();

    let evictor = Arc::new(Evictor {
        client: surveyor.conn.probe_client.clone(),
        grace_period: args.grace_period,
        disable_eviction: args.disable_eviction,
        timeout: args.timeout,
        cancel: CancellationToken::new(),
    });

    // Lock every cluster before changing anything.
    let mut locks = vec![];
    if !args.dry_run {
        let holder = lock::holder_identity(&nodes);
        for (ns, name) in &clusters {
            match lock::acquire(client, ns, name, &holder).await {
                Ok((held, took_over)) => {
                    if let Some(who) = took_over {
                        writeln!(
                            err,
                            "Warning: took over {ns}/{name}'s stale drain lock from {who}"
                        )?;
                    }
                    locks.push(held);
                }
                Err(e) => {
                    for l in locks {
                        l.release().await;
                    }
                    return Err(e);
                }
            }
        }
    }
    let found = Found {
        first: &first,
        raft_pods: &raft_pods,
        on_nodes: &on_nodes,
        clusters: &clusters,
        pvs: Arc::new(list_pvs(client).await?),
    };
    let result = drain(
        &surveyor, &evictor, args, &nodes, &drained, &found, out, err,
    )
    .await;
    for l in locks {
        l.release().await;
    }
    result
}

/// What the first look at the nodes found.
struct Found<'a> {
    /// The survey of every Raft cluster with a member on the nodes.
    first: &'a crate::survey::Survey,
    /// Their pods (not ordinary pods), by namespace and name.
    raft_pods: &'a BTreeSet<(String, String)>,
    /// Every pod on the nodes that --pod-selector selects.
    on_nodes: &'a [Pod],
    /// The clusters to drain: those with one of those pods.
    clusters: &'a [(String, String)],
    pvs: Arc<Vec<PersistentVolume>>,
}

#[allow(clippy::too_many_arguments)]
async fn drain(
    surveyor: &Arc<Surveyor>,
    evictor: &Arc<Evictor>,
    args: &DrainArgs,
    nodes: &[String],
    drained: &BTreeSet<String>,
    found: &Found<'_>,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<()> {
    let Found {
        raft_pods,
        on_nodes,
        clusters,
        ..
    } = *found;
    let client = surveyor.conn.client.clone();
    let node_api: Api<Node> = Api::all(client.clone());
    if !args.dry_run {
        for n in nodes {
            node_api
                .cordon(n)
                .await
                .map_err(|e| api_context(e, "patch", "nodes", ""))
                .with_context(|| format!("cordoning node {n}"))?;
            writeln!(err, "node/{n} cordoned")?;
        }
    }

    // Ordinary pods: kubectl drain's filters; any refusal stops everything before an eviction.
    let rules = PodRules {
        ignore_daemonsets: args.ignore_daemonsets,
        delete_emptydir_data: args.delete_emptydir_data,
        force: args.force,
    };
    let mut ordinary: Vec<(Pod, PodVerdict)> = on_nodes
        .iter()
        .filter(|p| !raft_pods.contains(&(p.namespace().unwrap_or_default(), p.name_any())))
        .map(|p| (p.clone(), classify_pod(p, &rules)))
        .collect();
    ordinary.sort_by_key(|(p, _)| (p.namespace(), p.name_any()));
    let refused: Vec<String> = ordinary
        .iter()
        .filter_map(|(p, v)| match v {
            PodVerdict::Refuse(why) => Some(format!(
                "{}/{}: {why}",
                p.namespace().unwrap_or_default(),
                p.name_any()
            )),
            _ => None,
        })
        .collect();
    for (p, v) in &ordinary {
        match v {
            PodVerdict::Skip(why) => writeln!(
                err,
                "Warning: ignoring pod {}/{}: {why}",
                p.namespace().unwrap_or_default(),
                p.name_any()
            )?,
            PodVerdict::Evict(Some(w)) => writeln!(
                err,
                "Warning: pod {}/{}: {w}",
                p.namespace().unwrap_or_default(),
                p.name_any()
            )?,
            _ => {}
        }
    }

    let opts = DrainOptions {
        nodes: drained.clone(),
        max_lag: args.max_lag,
        allow_degraded: args.allow_degraded,
        delete_emptydir_data: args.delete_emptydir_data,
        assume_voters_are_pods: args.assume_voters_are_pods,
    };

    if args.dry_run {
        return dry_run(evictor, args, nodes, &ordinary, &refused, found, &opts, out).await;
    }
    if !refused.is_empty() {
        writeln!(
            err,
            "error: cannot drain {}: these pods cannot be moved:",
            nodes.join(", ")
        )?;
        for r in &refused {
            writeln!(err, "  {r}")?;
        }
        writeln!(
            err,
            "Nothing was evicted; the node(s) stay cordoned (`kubectl uncordon {}` to undo).",
            nodes.join(" ")
        )?;
        return Err(Reported.into());
    }

    let progress = Arc::new(Progress::new());
    let cancel = evictor.cancel.clone();
    let ctrl_c = {
        let cancel = cancel.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                cancel.cancel();
                eprintln!("interrupted: stopping after the current step (Ctrl-C again to exit at once; a transfer in flight is then not reported)");
                if tokio::signal::ctrl_c().await.is_ok() {
                    std::process::exit(130);
                }
            }
        })
    };

    let ordinary_work = async {
        let line = progress.line("pods");
        let results = futures::future::join_all(
            ordinary
                .iter()
                .filter(|(_, v)| matches!(v, PodVerdict::Evict(_)))
                .map(|(p, v)| {
                    let line = &line;
                    async move {
                        let result = match evictor.evict(p, line).await {
                            Ok(Evicted::AlreadyGone) => {
                                Ok("already gone (not evicted again)".to_string())
                            }
                            Ok(Evicted::Accepted) => {
                                evictor.wait_gone(p).await.map(|_| "evicted".to_string())
                            }
                            Err(e) => Err(e),
                        };
                        (p, v, result)
                    }
                }),
        )
        .await;
        line.finish();
        results
    };
    let raft_work = futures::stream::iter(clusters.iter().cloned())
        .map(|(ns, name)| {
            let surveyor = surveyor.clone();
            let evictor = evictor.clone();
            let progress = progress.clone();
            let cancel = cancel.clone();
            let opts = opts.clone();
            let pvs = found.pvs.clone();
            async move {
                drain_cluster(
                    &surveyor, &evictor, &pvs, args, &opts, &ns, &name, &progress, &cancel,
                )
                .await
            }
        })
        .buffer_unordered(args.parallel_clusters as usize)
        .collect::<Vec<ClusterSummary>>();
    let (pod_results, mut summaries) = tokio::join!(ordinary_work, raft_work);
    ctrl_c.abort();
    summaries.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));

    let mut failures: Vec<String> = vec![];
    let mut pods = vec![];
    for (p, v, r) in pod_results {
        let (ns, name) = (p.namespace().unwrap_or_default(), p.name_any());
        let result = match r {
            Ok(s) => {
                writeln!(err, "pod/{name} {s}")?;
                s
            }
            Err(e) => {
                let m = crate::errors::anyhow_chain(&e);
                failures.push(m.clone());
                m
            }
        };
        pods.push(PodReport {
            namespace: ns,
            name,
            verdict: v.clone(),
            result,
        });
    }
    for s in &summaries {
        if s.result == "stopped" {
            failures.push(s.message.clone());
        }
    }
    let succeeded = failures.is_empty();
    let message = if succeeded {
        format!("drained {}", nodes.join(", "))
    } else {
        format!(
            "the drain stopped: {}. The node(s) stay cordoned. Fix what is named and run the same command again to resume (it plans from what it finds), or `kubectl uncordon {}` to give up",
            failures.join("; "),
            nodes.join(" ")
        )
    };
    let report = DrainReport {
        api_version: API_VERSION,
        kind: "DrainReport",
        nodes: nodes.to_vec(),
        dry_run: false,
        succeeded,
        pods,
        clusters: summaries,
        message,
    };
    print_summary(&report, args.output, out)?;
    if succeeded {
        for n in nodes {
            writeln!(err, "node/{n} drained")?;
        }
        Ok(())
    } else {
        writeln!(err, "error: {}", report.message)?;
        Err(Reported.into())
    }
}

/// The node names: as given, or those the selector matches.
async fn resolve_nodes(client: &kube::Client, args: &DrainArgs) -> Result<Vec<String>> {
    let api: Api<Node> = Api::all(client.clone());
    if let Some(sel) = &args.selector {
        let list = api
            .list(&ListParams::default().labels(sel))
            .await
            .map_err(|e| api_context(e, "list", "nodes", ""))?;
        let names: Vec<String> = list.items.iter().map(|n| n.name_any()).collect();
        if names.is_empty() {
            bail!("no node matches the selector {sel:?} (list them with `kubectl get nodes --show-labels`)");
        }
        return Ok(names);
    }
    let mut names = args.nodes.clone();
    names.sort();
    names.dedup();
    for n in &names {
        if let Err(e) = api.get(n).await {
            if crate::errors::is_not_found(&e) {
                bail!("node {n:?} not found (list them with `kubectl get nodes`)");
            }
            return Err(api_context(e, "get", "nodes", ""));
        }
    }
    Ok(names)
}

/// Every PersistentVolume (pinned volumes decide where replacements can go). Listed once per
/// drain: a member's replacement keeps its claim and so its volume. Without the right to list
/// them, none is known to pin anything.
async fn list_pvs(client: &kube::Client) -> Result<Vec<PersistentVolume>> {
    match Api::<PersistentVolume>::all(client.clone())
        .list(&ListParams::default())
        .await
    {
        Ok(l) => Ok(l.items),
        Err(e) if is_forbidden(&e) => Ok(vec![]),
        Err(e) => Err(api_context(e, "list", "persistentvolumes", "")),
    }
}

/// The planner's input for one surveyed cluster.
fn cluster_input(
    obs: &ClusterObservation,
    report: ClusterReport,
    snapshot: &crate::model::Snapshot,
    pvs: &[PersistentVolume],
    drained: &BTreeSet<String>,
) -> ClusterInput {
    let stuck = stuck_members(
        &obs.target.pods,
        report.summary.leader.as_deref(),
        pvs,
        snapshot.nodes.as_deref(),
        &snapshot.pods,
        drained,
    );
    let empty_dirs = obs
        .target
        .pods
        .iter()
        .map(|p| (p.name_any(), emptydir_volumes(p)))
        .filter(|(_, d)| !d.is_empty())
        .collect();
    ClusterInput {
        report,
        can_transfer: obs.target.profile.transfer.is_some(),
        target_needs_id: crate::plan::transfer_needs_member_id(&obs.target.profile, false),
        stuck,
        empty_dirs,
    }
}

/// One cluster now: its survey, and the planner's input; None when it no longer exists.
async fn look(
    surveyor: &Surveyor,
    pvs: &[PersistentVolume],
    ns: &str,
    name: &str,
    drained: &BTreeSet<String>,
) -> Result<Option<(ClusterObservation, ClusterInput)>> {
    let sel = Selection {
        name: Some(name.to_string()),
        ..Default::default()
    };
    let survey = match surveyor.survey_in(Some(ns), &sel).await {
        Ok(s) => s,
        // Its namespace or StatefulSet was deleted meanwhile: nothing left to drain.
        Err(e) if e.to_string().contains("not found") => return Ok(None),
        Err(e) => return Err(e),
    };
    let Some((obs, report)) = survey.observations.into_iter().zip(survey.reports).next() else {
        return Ok(None);
    };
    let input = cluster_input(&obs, report, &survey.snapshot, pvs, drained);
    Ok(Some((obs, input)))
}

/// What every step of one cluster's drain works with.
struct Ctx<'a> {
    surveyor: &'a Surveyor,
    evictor: &'a Evictor,
    args: &'a DrainArgs,
    opts: &'a DrainOptions,
    line: &'a Line,
}

/// Drains one cluster's members off the nodes, a step at a time, surveying before each.
#[allow(clippy::too_many_arguments)]
async fn drain_cluster(
    surveyor: &Surveyor,
    evictor: &Evictor,
    pvs: &[PersistentVolume],
    args: &DrainArgs,
    opts: &DrainOptions,
    ns: &str,
    name: &str,
    progress: &Progress,
    cancel: &CancellationToken,
) -> ClusterSummary {
    let start = Instant::now();
    let cluster = format!("{ns}/{name}");
    let line = progress.line(&cluster);
    let mut s = ClusterSummary {
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
        result: "drained".into(),
        message: String::new(),
    };
    let mut blocked_since: Option<Instant> = None;
    // Why it stopped; the message is made after the loop, with what is left as it is then.
    let mut stopped: Option<String> = None;
    let mut stop = |s: &mut ClusterSummary, why: String| {
        s.result = "stopped".into();
        stopped = Some(
            why.strip_prefix(&format!("{cluster}: "))
                .unwrap_or(&why)
                .to_string(),
        );
    };
    loop {
        if cancel.is_cancelled() {
            stop(&mut s, "interrupted".into());
            break;
        }
        let (obs, input) = match look(surveyor, pvs, ns, name, &opts.nodes).await {
            Ok(Some(x)) => x,
            Ok(None) => {
                if s.done.is_empty() {
                    s.result = "unchanged".into();
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
        let plan = plan_cluster(&input, opts);
        s.left = left_on(&input.report, &opts.nodes);
        if s.system.is_empty() {
            s.system = input.report.system.clone();
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
                        s.result = "unchanged".into();
                    }
                    s.message = format!("{cluster}: no member left on the drained node(s)");
                    break;
                }
                Some(b) if b.reason.waitable() => {
                    let since = *blocked_since.get_or_insert_with(Instant::now);
                    if since.elapsed() >= args.timeout {
                        stop(
                            &mut s,
                            format!(
                                "still blocked after {}: {}",
                                human_duration(args.timeout),
                                b.message
                            ),
                        );
                        break;
                    }
                    line.set(&format!("waiting: {}", b.message));
                    sleep_or_cancel(cancel, RECHECK_EVERY).await;
                    continue;
                }
                Some(b) => {
                    stop(&mut s, b.message);
                    break;
                }
            }
        };
        blocked_since = None;
        let ctx = Ctx {
            surveyor,
            evictor,
            args,
            opts,
            line: &line,
        };
        let r = match step.action {
            Action::TransferThenEvict => transfer(&ctx, &obs, &input.report, &step, &mut s).await,
            Action::Evict | Action::EvictLeader => {
                evict_member(&ctx, &obs, &input.report, &step, &mut s).await
            }
        };
        match r {
            Ok(()) => {}
            // Not now: wait, then survey and plan again; what was decided is not retried.
            Err(e) if e.downcast_ref::<StepBlocked>().is_some() => {
                let since = *blocked_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= args.timeout {
                    stop(
                        &mut s,
                        format!("still blocked after {}: {e}", human_duration(args.timeout)),
                    );
                    break;
                }
                line.set(&format!(
                    "waiting: {e}; planning again every {}s",
                    evict::RETRY_EVERY.as_secs()
                ));
                sleep_or_cancel(cancel, evict::RETRY_EVERY).await;
            }
            Err(e) => {
                stop(&mut s, crate::errors::anyhow_chain(&e));
                break;
            }
        }
    }
    if let Some(why) = stopped {
        // What is left now, not at the last plan: a member may have moved meanwhile.
        if let Ok(Some((_, input))) = look(surveyor, pvs, ns, name, &opts.nodes).await {
            s.left = left_on(&input.report, &opts.nodes);
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
    line.finish();
    // Elections: the leader evictions that started one, or the term increments a transfer
    // does not explain, whichever says more.
    if let (Some(a), Some(b)) = (s.term_before, s.term_after) {
        let unexplained = (b.saturating_sub(a)).saturating_sub(u64::from(s.transfers));
        s.elections = s.elections.max(unexplained);
    }
    s.duration_ms = start.elapsed().as_secs_f64() * 1000.0;
    s
}

/// The members still on the drained nodes, "pod on node".
fn left_on(report: &ClusterReport, nodes: &BTreeSet<String>) -> Vec<String> {
    report
        .replicas
        .iter()
        .filter_map(|x| {
            let n = x.node.as_ref().filter(|n| nodes.contains(*n))?;
            Some(format!("{} on {n}", x.pod))
        })
        .collect()
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

fn record_window(s: &mut ClusterSummary, ms: Option<f64>) {
    if let Some(ms) = ms {
        s.longest_leaderless_ms = Some(s.longest_leaderless_ms.map_or(ms, |x| x.max(ms)));
    }
}

/// Hands the leadership to a member on a node that stays, with yield's full wait.
async fn transfer(
    ctx: &Ctx<'_>,
    obs: &ClusterObservation,
    report: &ClusterReport,
    step: &DrainStep,
    s: &mut ClusterSummary,
) -> Result<()> {
    let Ctx {
        surveyor,
        args,
        opts,
        line,
        ..
    } = *ctx;
    let yopts = YieldOptions {
        to: None,
        avoid_nodes: opts.nodes.iter().cloned().collect(),
        max_lag: opts.max_lag,
        force: false,
    };
    let plan = plan_yield(report, &obs.target.profile, &yopts).map_err(|r| {
        anyhow!(
            "cannot hand {}'s leadership over before evicting it: {r}",
            step.pod
        )
    })?;
    line.set(&format!(
        "handing leadership {} → {} before evicting {}",
        plan.leader, plan.target, step.pod
    ));
    let wait = wait_options(args);
    let transport = surveyor.transport_for(&obs.target).await.with_context(|| {
        format!(
            "cannot hand {}'s leadership over before evicting it",
            step.pod
        )
    })?;
    let w = act_and_wait(
        &transport,
        &obs.target,
        report,
        plan.expect(),
        &wait,
        send_transfer(&transport, &obs.target, &plan.call, args.timeout),
    )
    .await;
    record_window(s, w.leaderless_window_ms);
    let new = w.new_leader.clone().unwrap_or_else(|| "?".into());
    match w.outcome {
        Outcome::Transferred => {
            s.transfers += 1;
            let msg = format!(
                "leadership {} → {new} (term {} → {}, leaderless window {})",
                plan.leader,
                plan.term.map_or("?".into(), |t| t.to_string()),
                w.term_after.map_or("?".into(), |t| t.to_string()),
                w.leaderless_window_ms.map_or("none observed".into(), |m| format!("{m:.0}ms"))
            );
            line.note(&msg);
            s.done.push(msg);
            Ok(())
        }
        Outcome::WentElsewhere => bail!("leadership went from {} to {new}, not to {}: an election, not the transfer; nothing was evicted", plan.leader, plan.target),
        Outcome::Returned => bail!("{} stepped down and was chosen again: leadership did not move; nothing was evicted", plan.leader),
        Outcome::Failed => bail!("the transfer from {} failed: {}; nothing was evicted", plan.leader, w.error.unwrap_or_default()),
        Outcome::TimedOut => bail!("no completed handover from {} within {}; nothing was evicted", plan.leader, human_duration(args.timeout)),
    }
}

fn wait_options(args: &DrainArgs) -> WaitOptions {
    WaitOptions {
        timeout: args.timeout,
        probe_limit: args.probe.probe_timeout.min(Duration::from_secs(1)),
    }
}

/// Evicts one member, then waits for its replacement to be Ready and rejoined (unless it
/// cannot come back while the node is drained).
async fn evict_member(
    ctx: &Ctx<'_>,
    obs: &ClusterObservation,
    report: &ClusterReport,
    step: &DrainStep,
    s: &mut ClusterSummary,
) -> Result<()> {
    let Ctx {
        surveyor,
        evictor,
        args,
        line,
        ..
    } = *ctx;
    let pod = obs
        .target
        .pods
        .iter()
        .find(|p| p.name_any() == step.pod)
        .cloned()
        .ok_or_else(|| anyhow!("pod {} is no longer part of the cluster", step.pod))?;
    if let Some(moves) = moves_off(obs, &step.pod).filter(|m| !m.is_empty()) {
        move_groups_first(ctx, obs, &pod, &moves, s).await;
    }
    line.set(&format!(
        "evicting {} ({}) from {}",
        step.pod, step.why, step.node
    ));
    if step.action == Action::EvictLeader {
        // A PDB that refuses now sends the decision back to planning, before the election
        // is started and measured.
        let answer = evictor.dry_run(&pod).await;
        if answer.starts_with("refused now: ") {
            return Err(StepBlocked(format!(
                "cannot evict the leader {} yet: {}",
                step.pod,
                answer.trim_start_matches("refused now: ")
            ))
            .into());
        }
        // No transfer: the eviction starts an election; measure it as yield --allow-election does.
        let expect = Expect {
            old_leader: step.pod.clone(),
            target: None,
            old_leader_may_vanish: true,
        };
        let evicting = async {
            match evictor.evict(&pod, line).await {
                Ok(Evicted::AlreadyGone) => Ok(()),
                Ok(Evicted::Accepted) => evictor.wait_gone(&pod).await.map_err(|e| e.to_string()),
                Err(e) => Err(crate::errors::anyhow_chain(&e)),
            }
        };
        let wait = wait_options(args);
        // Observed with the cluster's credentials; without them (already said by the
        // survey) the replicas are still watched as far as they answer.
        let transport = surveyor
            .transport_for(&obs.target)
            .await
            .unwrap_or_else(|_| surveyor.transport.clone());
        let w = act_and_wait(&transport, &obs.target, report, expect, &wait, evicting).await;
        record_window(s, w.leaderless_window_ms);
        if let Some(e) = w.error {
            bail!("evicting the leader {}: {e}", step.pod);
        }
        if w.outcome != Outcome::Transferred {
            bail!(
                "no new leader within {} after evicting the leader {}",
                human_duration(args.timeout),
                step.pod
            );
        }
        s.evictions += 1;
        s.elections += 1;
        let msg = format!(
            "evicted the leader {} (election: {} leads, leaderless window {})",
            step.pod,
            w.new_leader.unwrap_or_default(),
            w.leaderless_window_ms
                .map_or("none observed".into(), |m| format!("{m:.0}ms"))
        );
        line.note(&msg);
        s.done.push(msg);
    } else {
        match evictor.attempt(&pod).await? {
            Attempt::Refused(why) => {
                return Err(StepBlocked(format!("cannot evict {} yet: {why}", step.pod)).into())
            }
            Attempt::Done(Evicted::AlreadyGone) => {
                line.note(&format!("{} had already gone; not evicted again", step.pod));
            }
            Attempt::Done(Evicted::Accepted) => {
                line.set(&format!("waiting for {} to stop", step.pod));
                evictor.wait_gone(&pod).await?;
                s.evictions += 1;
                let msg = format!("evicted {} from {}", step.pod, step.node);
                line.note(&msg);
                s.done.push(msg);
            }
        }
    }
    if let Some(why) = &step.degraded {
        let msg = format!(
            "{} runs a member short until node {} is back ({why}); its fault tolerance is reduced meanwhile",
            s.plan.cluster(),
            step.node
        );
        line.note(&msg);
        s.done.push(msg);
        return Ok(());
    }
    rejoin(surveyor, args, obs, &pod, line, s, &evictor.cancel).await
}

/// The leaders of the server's streams and consumers moved off it before its eviction, so
/// their groups are not left to elect when it stops. A failure is said and the drain goes
/// on: a stopping NATS server steps its leaders down itself (docs/systems/nats.md).
async fn move_groups_first(
    ctx: &Ctx<'_>,
    obs: &ClusterObservation,
    pod: &Pod,
    moves: &GroupMoves,
    s: &mut ClusterSummary,
) {
    let Ctx {
        surveyor,
        args,
        line,
        ..
    } = *ctx;
    line.set(&format!(
        "moving the stream and consumer leaders off {} before evicting it",
        pod.name_any()
    ));
    let transport = surveyor
        .transport_for(&obs.target)
        .await
        .unwrap_or_else(|_| surveyor.transport.clone());
    let m = move_off(&transport, &obs.target, pod, moves, args.timeout).await;
    s.group_leaders_moved += (m.moved.len() - m.still_led.len()) as u32;
    let msg = if m.succeeded() {
        m.summary()
    } else {
        format!(
            "{}; evicting it anyway (a stopping server steps down the leaders it still holds)",
            m.summary()
        )
    };
    line.note(&msg);
    s.done.push(msg);
}

/// Waits until the replacement is scheduled and Ready (a watch), then until its Raft answers
/// healthy, in the leader's term, knows the leader and has caught up (surveys).
async fn rejoin(
    surveyor: &Surveyor,
    args: &DrainArgs,
    obs: &ClusterObservation,
    old: &Pod,
    line: &Line,
    s: &mut ClusterSummary,
    cancel: &CancellationToken,
) -> Result<()> {
    let ns = old.namespace().unwrap_or_default();
    let name = old.name_any();
    let old_uid = old.uid().unwrap_or_default();
    let start = Instant::now();
    if obs.target.owner_kind == crate::model::OwnerKind::StatefulSet {
        line.set(&format!(
            "waiting for {name}'s replacement to be scheduled and Ready"
        ));
        let api: Api<Pod> = Api::namespaced(surveyor.conn.probe_client.clone(), &ns);
        let ready = await_condition(api.clone(), &name, |p: Option<&Pod>| {
            p.is_some_and(|p| p.uid().as_deref() != Some(old_uid.as_str()) && pod_ready(p))
        });
        let ready = async {
            tokio::select! {
                r = ready => Some(r),
                _ = cancel.cancelled() => None,
            }
        };
        match tokio::time::timeout(args.timeout, ready).await {
            Ok(None) => bail!("interrupted while waiting for {name}'s replacement to be Ready"),
            Ok(Some(Ok(_))) => {}
            Ok(Some(Err(e))) => bail!("watching {ns}/{name}'s replacement: {e}"),
            Err(_) => {
                let why = api
                    .get_opt(&name)
                    .await
                    .ok()
                    .flatten()
                    .map(|p| pod_state(&p))
                    .unwrap_or_else(|| "no pod of that name exists".into());
                bail!(
                    "{name}'s replacement was not Ready within {} ({why}); no further member was evicted",
                    human_duration(args.timeout)
                );
            }
        }
    }
    line.set(&format!(
        "waiting for {name} to rejoin: a member that knows the leader and has caught up"
    ));
    loop {
        let sel = Selection {
            name: Some(obs.target.name.clone()),
            ..Default::default()
        };
        let last = match surveyor.survey_in(Some(&ns), &sel).await {
            Ok(sv) => match sv.reports.into_iter().next() {
                Some(r) => {
                    let leader = r
                        .replicas
                        .iter()
                        .find(|x| r.summary.leader.as_deref() == Some(x.pod.as_str()));
                    match r.replicas.iter().find(|x| x.pod == name) {
                        Some(x) => match rejoined(x, leader, args.max_lag) {
                            Ok(()) if leader.is_some() => {
                                let msg = format!(
                                    "{name} rejoined on {} ({} after the eviction)",
                                    x.node.clone().unwrap_or_default(),
                                    human_duration(start.elapsed())
                                );
                                line.note(&msg);
                                s.done.push(msg);
                                return Ok(());
                            }
                            Ok(()) => "the cluster has no single leader".to_string(),
                            Err(why) => why,
                        },
                        None => format!("{name} is not a replica any more"),
                    }
                }
                None => "the cluster was not found".into(),
            },
            Err(e) => crate::errors::anyhow_chain(&e),
        };
        if start.elapsed() >= args.timeout {
            bail!(
                "{name}'s replacement did not rejoin within {}: {last}; no further member was evicted",
                human_duration(args.timeout)
            );
        }
        if sleep_or_cancel(cancel, RECHECK_EVERY / 2).await {
            bail!("interrupted while waiting for {name} to rejoin ({last})");
        }
    }
}

/// Whether a replacement has rejoined: a voter by the one definition of a healthy voter; a
/// learner or observer by its own role's test (Ready, healthy, and knowing the leader), so
/// that one on a drained node does not stall the drain.
fn rejoined(
    x: &crate::report::ReplicaReport,
    leader: Option<&crate::report::ReplicaReport>,
    max_lag: u64,
) -> Result<(), String> {
    if x.raft.learner || !x.raft.role.is_voter() {
        let p = &x.pod;
        if x.raft.health.state != crate::report::CheckState::Ok {
            return Err(format!(
                "{p}'s health check is {}",
                x.raft.health.state.as_str()
            ));
        }
        if !x.ready {
            return Err(format!("{p} is not Ready"));
        }
        if x.raft.has_leader == Some(false) {
            return Err(format!("{p} knows no leader"));
        }
        return Ok(());
    }
    healthy_voter(x, leader, max_lag)
}

/// Why a pod is not running, in a few words: phase, and the scheduler's or kubelet's reason.
fn pod_state(p: &Pod) -> String {
    let st = p.status.clone().unwrap_or_default();
    let mut parts = vec![st.phase.unwrap_or_else(|| "Unknown".into())];
    for c in st.conditions.iter().flatten() {
        if c.status != "True" {
            if let Some(m) = c.message.as_ref().or(c.reason.as_ref()) {
                parts.push(format!("{}: {m}", c.type_));
            }
        }
    }
    parts.join("; ")
}

/// `--dry-run`: the whole plan, blockers named, each PDB's answer; nothing changes.
#[allow(clippy::too_many_arguments)]
async fn dry_run(
    evictor: &Evictor,
    args: &DrainArgs,
    nodes: &[String],
    ordinary: &[(Pod, PodVerdict)],
    refused: &[String],
    found: &Found<'_>,
    opts: &DrainOptions,
    out: &mut dyn Write,
) -> Result<()> {
    let mut pods = vec![];
    for (p, v) in ordinary {
        let result = match v {
            PodVerdict::Evict(_) => evictor.dry_run(p).await,
            PodVerdict::Skip(_) => "stays".into(),
            PodVerdict::Refuse(_) => "blocks the drain".into(),
        };
        pods.push(PodReport {
            namespace: p.namespace().unwrap_or_default(),
            name: p.name_any(),
            verdict: v.clone(),
            result,
        });
    }
    // The first survey is fresh: the dry run plans from it.
    let first = found.first;
    let looked: Vec<(&ClusterObservation, ClusterInput)> = first
        .observations
        .iter()
        .zip(&first.reports)
        .filter(|(o, _)| {
            found
                .clusters
                .iter()
                .any(|(ns, name)| &o.target.namespace == ns && &o.target.name == name)
        })
        .map(|(o, r)| {
            let input = cluster_input(o, r.clone(), &first.snapshot, &found.pvs, &opts.nodes);
            (o, input)
        })
        .collect();
    let inputs: Vec<ClusterInput> = looked.iter().map(|(_, i)| i.clone()).collect();
    let mut summaries = vec![];
    for plan in plan_drain(&inputs, opts) {
        let (obs, input) = looked
            .iter()
            .find(|(_, i)| i.report.namespace == plan.namespace && i.report.name == plan.name)
            .expect("a plan per input");
        let mut pdb_answers = BTreeMap::new();
        let mut groups_to_move = BTreeMap::new();
        for step in &plan.steps {
            if let Some(p) = obs.target.pods.iter().find(|p| p.name_any() == step.pod) {
                pdb_answers.insert(step.pod.clone(), evictor.dry_run(p).await);
            }
            if let Some(moves) = moves_off(obs, &step.pod).filter(|m| !m.calls.is_empty()) {
                groups_to_move.insert(
                    step.pod.clone(),
                    moves.calls.into_iter().map(|c| c.group).collect(),
                );
            }
        }
        let blocked = plan.blocker.is_some();
        summaries.push(ClusterSummary {
            namespace: plan.namespace.clone(),
            name: plan.name.clone(),
            system: input.report.system.clone(),
            term_before: plan.term,
            term_after: None,
            plan,
            pdb_answers,
            groups_to_move,
            done: vec![],
            left: vec![],
            evictions: 0,
            transfers: 0,
            elections: 0,
            group_leaders_moved: 0,
            longest_leaderless_ms: None,
            duration_ms: 0.0,
            result: "planned".into(),
            message: if blocked {
                "blocked".into()
            } else {
                String::new()
            },
        });
    }
    let blockers: Vec<String> = refused
        .iter()
        .cloned()
        .chain(
            summaries
                .iter()
                .filter_map(|c| c.plan.blocker.as_ref().map(|b| b.message.clone())),
        )
        .collect();
    let succeeded = blockers.is_empty();
    let report = DrainReport {
        api_version: API_VERSION,
        kind: "DrainReport",
        nodes: nodes.to_vec(),
        dry_run: true,
        succeeded,
        pods,
        clusters: summaries,
        message: if succeeded {
            format!(
                "dry run: nothing blocks draining {}; nothing was changed",
                nodes.join(", ")
            )
        } else {
            format!(
                "dry run: {} blocker(s); nothing was changed",
                blockers.len()
            )
        },
    };
    print_summary(&report, args.output, out)?;
    if succeeded {
        Ok(())
    } else {
        Err(Reported.into())
    }
}

fn print_summary(r: &DrainReport, output: Output, out: &mut dyn Write) -> Result<()> {
    match output {
        Output::Json => {
            serde_json::to_writer_pretty(&mut *out, r)?;
            writeln!(out)?;
            return Ok(());
        }
        Output::Yaml => {
            write!(
                out,
                "{}",
                serde_saphyr::to_string(r).map_err(|e| anyhow!("{e}"))?
            )?;
            return Ok(());
        }
        Output::Table | Output::Wide => {}
    }
    if r.dry_run {
        for n in &r.nodes {
            writeln!(out, "node/{n} would be cordoned")?;
        }
        for p in &r.pods {
            let what = match &p.verdict {
                PodVerdict::Evict(None) => format!("evict ({})", p.result),
                PodVerdict::Evict(Some(w)) => format!("evict ({}); {w}", p.result),
                PodVerdict::Skip(why) => format!("skip: {why}"),
                PodVerdict::Refuse(why) => format!("BLOCKED: {why}"),
            };
            writeln!(out, "pod {}/{}: {what}", p.namespace, p.name)?;
        }
    }
    for c in &r.clusters {
        let p = &c.plan;
        writeln!(
            out,
            "{} ({}): {} voters, {} healthy, quorum {}, leader {}{}",
            p.cluster(),
            c.system,
            p.voters,
            p.healthy_voters,
            p.quorum,
            p.leader.as_deref().unwrap_or("none"),
            p.term.map_or(String::new(), |t| format!(" (term {t})"))
        )?;
        if r.dry_run {
            for (i, s) in p.steps.iter().enumerate() {
                let what = match s.action {
                    Action::Evict => format!("evict {}", s.pod),
                    Action::TransferThenEvict => format!(
                        "hand leadership to {}, then evict {}",
                        s.target.as_deref().unwrap_or("a replaced follower"),
                        s.pod
                    ),
                    Action::EvictLeader => format!("evict the leader {} (an election)", s.pod),
                };
                writeln!(
                    out,
                    "  {}. {what} on {}: {}; meanwhile {} healthy voter(s), {} needed, fault tolerance {}; PDB: {}",
                    i + 1,
                    s.node,
                    s.why,
                    s.healthy_voters_during,
                    s.quorum,
                    s.fault_tolerance_during,
                    c.pdb_answers.get(&s.pod).map_or("-", String::as_str)
                )?;
                if let Some(d) = &s.degraded {
                    writeln!(out, "     its replacement cannot start until {} is back ({d}): the cluster runs a member short", s.node)?;
                }
                if let Some(groups) = c.groups_to_move.get(&s.pod) {
                    writeln!(
                        out,
                        "     first, the leaders it holds move off it: {}",
                        groups.join(", ")
                    )?;
                }
            }
            if let Some(b) = &p.blocker {
                writeln!(out, "  BLOCKED: {}", b.message)?;
            }
            if p.steps.is_empty() && p.blocker.is_none() {
                writeln!(out, "  nothing to do")?;
            }
        } else {
            for d in &c.done {
                writeln!(out, "  {d}")?;
            }
            let window = c
                .longest_leaderless_ms
                .map_or("none observed".to_string(), |m| format!("{m:.0}ms"));
            writeln!(
                out,
                "  {}: {} eviction(s), {} transfer(s), {} election(s), longest leaderless window {window}, {}",
                c.result,
                c.evictions,
                c.transfers,
                c.elections,
                human_duration(Duration::from_secs_f64(c.duration_ms / 1000.0))
            )?;
        }
    }
    writeln!(out, "{}", r.message)?;
    Ok(())
}
