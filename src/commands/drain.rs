//! `kubectl raft drain`: lock, cordon, decide (plan::drain), then act one step at a time,
//! surveying again before every step rather than trusting what was seen before.
//!
//! Ordinary pods go as `kubectl drain` sends them. Each Raft cluster with a replica on the
//! nodes goes member by member: followers first, the leader last after a verified transfer
//! (handover::act_and_wait, as `yield`), each eviction only while the others form a quorum
//! of healthy voters, each replacement Ready and rejoined before the next.

pub(crate) mod evict;
pub(crate) mod lock;
pub(crate) mod real;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, Pod};
use kube::api::{Api, ListParams};
use kube::ResourceExt;
use tokio_util::sync::CancellationToken;

use crate::actions::{DrainReport, PodReport};
use crate::cli::{DrainArgs, GlobalArgs, SelectArgs};
use crate::commands::progress::Progress;
use crate::drain::{drain_cluster, verdict, ClusterResult, ClusterSummary, Evicted, Settings};
use crate::errors::{api_context, is_forbidden, Reported};
use crate::model::{ClusterObservation, Selection};
use crate::plan::drain::nodes::{arrived_member, ordinary_pods, Ordinary};
use crate::plan::drain::{plan_drain, ClusterInput, DrainOptions, PodRules, PodVerdict};
use crate::plan::groups::moves_off;
use crate::preflight::{self, Need};
use crate::report::API_VERSION;
use crate::survey::Surveyor;
use evict::Evictor;
use real::{cluster_input, Real};

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
    let on_nodes = pods_on(client, &nodes, args.pod_selector.as_deref()).await?;
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
        grace_period: args.steps.grace_period,
        disable_eviction: args.steps.disable_eviction,
        timeout: args.steps.timeout,
        cancel: CancellationToken::new(),
    });

    // Every permission the way needs, before the first change.
    if !args.dry_run {
        let mut needs = vec![Need::new("patch", "nodes", "cordon the nodes")];
        needs.extend(preflight::member_steps(
            None,
            args.steps.disable_eviction,
            &args.steps.lock_namespace,
        ));
        if !args.allow_degraded {
            for resource in ["nodes", "persistentvolumes"] {
                needs.push(Need::new(
                    "list",
                    resource,
                    "check that a member's replacement can start elsewhere; or --allow-degraded",
                ));
            }
        }
        if clusters.is_empty() {
            // Only ordinary pods: no member to ask, no cluster to lock, no placement to check.
            let for_members = |n: &Need| {
                matches!(n.resource, "leases" | "pods/proxy" | "persistentvolumes")
                    || (n.verb == "list" && n.resource == "nodes")
            };
            needs.retain(|n| !for_members(n));
        }
        let say = |m: &str| eprintln!("Warning: {}", crate::render::clean(m));
        preflight::check(client, "the drain", &needs, &say).await?;
    }

    // Lock every cluster before changing anything.
    let mut locks: BTreeMap<(String, String), lock::Held> = BTreeMap::new();
    if !args.dry_run {
        let holder = lock::holder_identity(&format!("drain {}", nodes.join(" ")));
        let say = |m: &str| eprintln!("{}", crate::render::clean(m));
        for (ns, name) in &clusters {
            match lock::acquire(client, &args.steps.lock_namespace, ns, name, &holder, &say).await {
                Ok((held, took_over)) => {
                    if let Some(who) = took_over {
                        writeln!(
                            err,
                            "Warning: took over {ns}/{name}'s stale drain lock from {who}"
                        )?;
                    }
                    locks.insert((ns.clone(), name.clone()), held);
                }
                Err(e) => {
                    for l in locks.into_values() {
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
        locks: &locks,
    };
    let result = drain(
        &surveyor, &evictor, args, &nodes, &drained, &found, out, err,
    )
    .await;
    for l in locks.into_values() {
        l.release().await;
    }
    result
}

/// Every pod on the nodes (that `selector` selects), in any namespace.
async fn pods_on(
    client: &kube::Client,
    nodes: &[String],
    selector: Option<&str>,
) -> Result<Vec<Pod>> {
    let mut out = vec![];
    for n in nodes {
        let mut lp = ListParams::default().fields(&format!("spec.nodeName={n}"));
        if let Some(s) = selector {
            lp = lp.labels(s);
        }
        let pods = Api::<Pod>::all(client.clone())
            .list(&lp)
            .await
            .map_err(|e| api_context(e, "list", "pods", "in any namespace"))?;
        out.extend(pods.items);
    }
    Ok(out)
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
    /// None when they may not be listed: placement cannot be checked.
    pvs: Arc<Option<Vec<PersistentVolume>>>,
    /// Each cluster's drain lock (none in a dry run), checked before every action.
    locks: &'a BTreeMap<(String, String), lock::Held>,
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
    let mut relisted = None;
    if !args.dry_run {
        for n in nodes {
            node_api
                .cordon(n)
                .await
                .map_err(|e| api_context(e, "patch", "nodes", ""))
                .with_context(|| format!("cordoning node {n}"))?;
            writeln!(err, "node/{n} cordoned")?;
        }
        // Pods scheduled between the first look and the cordon: ordinary ones join the
        // drain; a StatefulSet's pod (a Raft member, perhaps) was not planned for: stop.
        let now = pods_on(&client, nodes, args.pod_selector.as_deref()).await?;
        if let Some(p) = arrived_member(on_nodes, &now) {
            bail!(
                "pod {}/{} (a StatefulSet's) was scheduled onto {} after this drain looked and before the cordon; the node(s) stay cordoned: run the same command again to plan with it",
                p.namespace().unwrap_or_default(),
                p.name_any(),
                p.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default()
            );
        }
        relisted = Some(now);
    }
    let on_nodes: &[Pod] = relisted.as_deref().unwrap_or(on_nodes);

    // Ordinary pods: kubectl drain's filters; any refusal stops everything before an eviction.
    let rules = PodRules {
        ignore_daemonsets: args.ignore_daemonsets,
        delete_emptydir_data: args.steps.delete_emptydir_data,
        force: args.force,
    };
    let ordinary = ordinary_pods(on_nodes, raft_pods, &rules);
    for w in &ordinary.warnings {
        writeln!(err, "Warning: {w}")?;
    }

    let opts = DrainOptions {
        nodes: drained.clone(),
        max_lag: args.steps.max_lag,
        allow_degraded: args.allow_degraded,
        delete_emptydir_data: args.steps.delete_emptydir_data,
        assume_voters_are_pods: args.steps.assume_voters_are_pods,
    };

    if args.dry_run {
        return dry_run(evictor, args, nodes, &ordinary, found, &opts, out).await;
    }
    if !ordinary.refused.is_empty() {
        writeln!(
            err,
            "error: cannot drain {}: these pods cannot be moved:",
            nodes.join(", ")
        )?;
        for r in &ordinary.refused {
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
        let results = futures::future::join_all(ordinary.to_evict().map(|(p, v)| {
            let line = &line;
            async move {
                let result = match evictor.evict(p, line).await {
                    Ok(Evicted::AlreadyGone) => Ok("already gone (not evicted again)".to_string()),
                    Ok(Evicted::Accepted) => {
                        evictor.wait_gone(p).await.map(|_| "evicted".to_string())
                    }
                    Err(e) => Err(e),
                };
                (p, v, result)
            }
        }))
        .await;
        line.finish();
        results
    };
    let raft_work = futures::stream::iter(clusters.iter().cloned())
        .map(|(ns, name)| {
            let surveyor = surveyor.clone();
            let evictor = evictor.clone();
            let progress = progress.clone();
            let opts = opts.clone();
            let pvs = found.pvs.clone();
            let lock = found.locks.get(&(ns.clone(), name.clone()));
            async move {
                let real = Real {
                    surveyor: &surveyor,
                    evictor: &evictor,
                    pvs: pvs.as_deref(),
                    timeout: args.steps.timeout,
                    probe_limit: args.probe.probe_timeout,
                    opts: &opts,
                    ns: &ns,
                    name: &name,
                    lock,
                    restart: None,
                };
                let line = progress.line(&format!("{ns}/{name}"));
                let settings = Settings {
                    timeout: args.steps.timeout,
                };
                let s = drain_cluster(&real, &line, &opts, &settings, &ns, &name).await;
                line.finish();
                s
            }
        })
        .buffer_unordered(args.parallel_clusters as usize)
        .collect::<Vec<ClusterSummary>>();
    let (pod_results, mut summaries) = tokio::join!(ordinary_work, raft_work);
    ctrl_c.abort();
    summaries.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    check_nothing_left(&client, nodes, found, &mut summaries).await?;

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
        if s.result == ClusterResult::Stopped {
            failures.push(s.message.clone());
        }
    }
    let (succeeded, message) = verdict(nodes, &failures);
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
    crate::render::drain_summary(&report, args.output, out)?;
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

/// The end of a drain, checked as a user would: the nodes' pods listed again
/// (`drain::check_nothing_left` decides).
async fn check_nothing_left(
    client: &kube::Client,
    nodes: &[String],
    found: &Found<'_>,
    summaries: &mut [ClusterSummary],
) -> Result<()> {
    if !summaries.iter().any(|s| s.result == ClusterResult::Drained) {
        return Ok(());
    }
    let still: Vec<(String, String, String)> = pods_on(client, nodes, None)
        .await?
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| {
            let node = p.spec.as_ref().and_then(|s| s.node_name.clone());
            (
                p.namespace().unwrap_or_default(),
                p.name_any(),
                node.unwrap_or_default(),
            )
        })
        .collect();
    let members = found
        .first
        .observations
        .iter()
        .map(|o| {
            (
                (o.target.namespace.clone(), o.target.name.clone()),
                o.target.pods.iter().map(|p| p.name_any()).collect(),
            )
        })
        .collect();
    crate::drain::check_nothing_left(summaries, &still, &members);
    Ok(())
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
async fn list_pvs(client: &kube::Client) -> Result<Option<Vec<PersistentVolume>>> {
    match Api::<PersistentVolume>::all(client.clone())
        .list(&ListParams::default())
        .await
    {
        Ok(l) => Ok(Some(l.items)),
        Err(e) if is_forbidden(&e) => Ok(None),
        Err(e) => Err(api_context(e, "list", "persistentvolumes", "")),
    }
}

/// `--dry-run`: the whole plan, blockers named, each PDB's answer; nothing changes.
#[allow(clippy::too_many_arguments)]
async fn dry_run(
    evictor: &Evictor,
    args: &DrainArgs,
    nodes: &[String],
    ordinary: &Ordinary,
    found: &Found<'_>,
    opts: &DrainOptions,
    out: &mut dyn Write,
) -> Result<()> {
    let mut pods = vec![];
    for (p, v) in &ordinary.pods {
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
            let input = cluster_input(
                o,
                r.clone(),
                &first.snapshot,
                found.pvs.as_deref(),
                &opts.nodes,
                BTreeSet::new(),
            );
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
        let mut c = ClusterSummary::new(&plan.namespace, &plan.name, ClusterResult::Planned);
        c.system = input.report.system.clone();
        c.term_before = plan.term;
        c.pdb_answers = pdb_answers;
        c.groups_to_move = groups_to_move;
        if plan.blocker.is_some() {
            c.message = "blocked".into();
        }
        c.plan = plan;
        summaries.push(c);
    }
    let blockers: Vec<String> = ordinary
        .refused
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
    crate::render::drain_summary(&report, args.output, out)?;
    if succeeded {
        Ok(())
    } else {
        Err(Reported.into())
    }
}
