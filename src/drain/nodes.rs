//! The node-level drain, as a library: what `kubectl raft drain NODE...` does around each
//! Raft cluster's executor ([`drain_cluster`]), in kubectl drain's order: look, check the
//! rights, lock every cluster, cordon, list the nodes' pods again, decide (kubectl drain's
//! filters for ordinary pods, `plan::drain` for members), act, and list once more at the end.
//!
//! As [`drain_cluster`], it decides nothing itself and touches nothing itself: the world is a
//! [`NodeOps`], what it says goes to a [`Sink`]. `commands::drain` implements both against a
//! real cluster; the tests implement them with a scripted one.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use anyhow::{bail, Result};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use tokio::time::Instant;

use super::{
    check_nothing_left, drain_cluster, verdict, Attempt, ClusterOps, ClusterResult, ClusterSummary,
    Events, Evicted, Look, Settings, RETRY_EVERY,
};
use crate::actions::{DrainReport, PodReport};
use crate::model::human_duration;
use crate::plan::drain::nodes::{arrived_member, ordinary_pods, Ordinary};
use crate::plan::drain::{plan_drain, ClusterInput, DrainOptions, PodRules, PodVerdict};
use crate::plan::groups::moves_off;
use crate::report::API_VERSION;

/// A node-level drain, as the command's flags resolved it.
#[derive(Debug, Clone)]
pub struct NodeDrain {
    /// The nodes, sorted, each once.
    pub nodes: Vec<String>,
    /// Plan and report; no lock, no cordon, no eviction.
    pub dry_run: bool,
    /// kubectl drain's rules for ordinary pods.
    pub rules: PodRules,
    /// The members' planner's options.
    pub opts: DrainOptions,
    pub settings: Settings,
    /// How many clusters are drained at once.
    pub parallel_clusters: usize,
}

/// The first look at the nodes: every Raft cluster with a member there.
#[derive(Debug, Clone, Default)]
pub struct FirstLook {
    pub clusters: Vec<Look>,
    /// Clusters that could not be recognised or surveyed: their pods are ordinary pods.
    pub skipped: Vec<String>,
}

/// Everything the node-level drain does to, or learns from, the world.
#[allow(async_fn_in_trait)]
pub trait NodeOps {
    /// A held drain lock.
    type Lock;
    /// One cluster's operations, for [`drain_cluster`].
    type Cluster<'a>: ClusterOps
    where
        Self: 'a;
    /// Every Raft cluster with a member on the nodes, surveyed now.
    async fn first_look(&self) -> Result<FirstLook>;
    /// The pods on the nodes now: only those the pod selector selects, or all.
    async fn pods_on(&self, selected_only: bool) -> Result<Vec<Pod>>;
    /// Every right the drain needs, before its first change; `members`: it has Raft
    /// members to move (leases, the replicas' ports, placement).
    async fn check_rights(&self, members: bool) -> Result<()>;
    /// What would stop the drain before its first change, beyond the rights: requests it
    /// would send (NATS's stepdowns) without the credentials they need, for each cluster and
    /// the members it takes off the nodes. Empty: nothing. The rights those requests need are
    /// checked with the others by `check_rights`.
    async fn requests_stop(&self, taking: &[(&Look, BTreeSet<String>)]) -> Result<Vec<String>>;
    /// Takes one cluster's drain lock; with the former holder when a stale one was taken over.
    async fn lock(&self, ns: &str, name: &str) -> Result<(Self::Lock, Option<String>)>;
    /// Gives a lock back (only if it is still this drain's).
    async fn release(&self, lock: Self::Lock);
    async fn cordon(&self, node: &str) -> Result<()>;
    /// One eviction request for an ordinary pod.
    async fn evict_pod(&self, pod: &Pod) -> Result<Attempt>;
    /// Until that pod (its UID) is gone.
    async fn wait_pod_gone(&self, pod: &Pod) -> Result<()>;
    /// What a PDB answers to this eviction now, in words (a server-side dry run).
    async fn pdb_answer(&self, pod: &Pod) -> String;
    /// One cluster's operations, checking `lock` before each action.
    fn cluster<'a>(
        &'a self,
        ns: &'a str,
        name: &'a str,
        lock: Option<&'a Self::Lock>,
    ) -> Self::Cluster<'a>;
    /// Sleep `d`, or less if interrupted; true when interrupted (Ctrl-C).
    async fn pause(&self, d: Duration) -> bool;
    /// Whether the user interrupted the drain (Ctrl-C).
    fn interrupted(&self) -> bool;
}

/// Where the node-level drain says what it does: a progress line per task (the ordinary
/// pods, each cluster), and lines kept on stderr.
pub trait Sink {
    type Line: Events;
    fn line(&self, label: &str) -> Self::Line;
    fn say(&self, msg: &str);
}

fn key(p: &Pod) -> (String, String) {
    (p.namespace().unwrap_or_default(), p.name_any())
}

/// Drains the nodes: every lock taken is given back, whatever happens. An error is a stop
/// before the first eviction (a right missing, a lock held, a pod that arrived unplanned);
/// after it, every outcome is in the report.
pub async fn drain_nodes<O: NodeOps, S: Sink>(
    ops: &O,
    sink: &S,
    d: &NodeDrain,
) -> Result<DrainReport> {
    let first = ops.first_look().await?;
    for why in &first.skipped {
        sink.say(&format!(
            "Warning: {why}: its pods on the node(s) are treated as ordinary pods"
        ));
    }
    let raft_pods: BTreeSet<(String, String)> = first
        .clusters
        .iter()
        .flat_map(|l| l.obs.target.pods.iter().map(key))
        .collect();
    // The clusters to drain: those with a pod on the nodes that the pod selector selects.
    let on_nodes = ops.pods_on(true).await?;
    let selected: BTreeSet<(String, String)> = on_nodes.iter().map(key).collect();
    let clusters: Vec<&Look> = first
        .clusters
        .iter()
        .filter(|l| l.obs.target.pods.iter().any(|p| selected.contains(&key(p))))
        .collect();
    // The members each cluster gives up: its replicas on the nodes, as its planner sees them.
    let taking: Vec<(&Look, BTreeSet<String>)> = clusters
        .iter()
        .map(|l| {
            let on: BTreeSet<String> = l
                .input
                .report
                .replicas
                .iter()
                .filter(|x| x.node.as_ref().is_some_and(|n| d.opts.nodes.contains(n)))
                .map(|x| x.pod.clone())
                .collect();
            (*l, on)
        })
        .collect();
    let stops = ops.requests_stop(&taking).await?;
    if d.dry_run {
        let ordinary = decide_ordinary(sink, d, &on_nodes, &raft_pods);
        let mut report = dry_run(ops, d, &ordinary, &clusters).await;
        if !stops.is_empty() {
            // Said beside the blockers, never instead of them.
            let before = if report.succeeded {
                "dry run".to_string()
            } else {
                format!("{}; and", report.message)
            };
            report.succeeded = false;
            report.message = format!(
                "{before}: the drain would stop before changing anything: {}",
                stops.join("; ")
            );
        }
        return Ok(report);
    }
    if !stops.is_empty() {
        bail!(
            "the drain stopped before changing anything: {}",
            stops.join("; ")
        );
    }
    ops.check_rights(!clusters.is_empty()).await?;

    // Ctrl-C during the first look: nothing was changed, and no lock is asked for.
    if ops.interrupted() {
        bail!("interrupted before the cordon: nothing was changed");
    }
    // Lock every cluster before changing anything.
    let mut locks: BTreeMap<(String, String), O::Lock> = BTreeMap::new();
    for l in &clusters {
        let (ns, name) = (&l.obs.target.namespace, &l.obs.target.name);
        match ops.lock(ns, name).await {
            Ok((held, took_over)) => {
                if let Some(who) = took_over {
                    sink.say(&format!(
                        "Warning: took over {ns}/{name}'s stale drain lock from {who}"
                    ));
                }
                locks.insert((ns.clone(), name.clone()), held);
            }
            Err(e) => {
                for l in locks.into_values() {
                    ops.release(l).await;
                }
                return Err(e);
            }
        }
    }
    let looked = Looked {
        first: &first,
        raft_pods: &raft_pods,
        on_nodes: &on_nodes,
        clusters: &clusters,
    };
    let result = act(ops, sink, d, &looked, &locks).await;
    for l in locks.into_values() {
        ops.release(l).await;
    }
    result
}

/// kubectl drain's filters over the pods on the nodes that are not members; its warnings said.
fn decide_ordinary<S: Sink>(
    sink: &S,
    d: &NodeDrain,
    on_nodes: &[Pod],
    raft_pods: &BTreeSet<(String, String)>,
) -> Ordinary {
    let ordinary = ordinary_pods(on_nodes, raft_pods, &d.rules);
    for w in &ordinary.warnings {
        sink.say(&format!("Warning: {w}"));
    }
    ordinary
}

/// What the first look at the nodes found.
struct Looked<'a> {
    first: &'a FirstLook,
    /// Every member of those clusters, by namespace and name: not ordinary pods.
    raft_pods: &'a BTreeSet<(String, String)>,
    /// The pods on the nodes that the pod selector selects, when the clusters were chosen.
    on_nodes: &'a [Pod],
    /// The clusters to drain.
    clusters: &'a [&'a Look],
}

/// Cordon, then list (kubectl's order), decide, and act; the locks are held throughout.
async fn act<O: NodeOps, S: Sink>(
    ops: &O,
    sink: &S,
    d: &NodeDrain,
    looked: &Looked<'_>,
    locks: &BTreeMap<(String, String), O::Lock>,
) -> Result<DrainReport> {
    let Looked {
        first,
        raft_pods,
        clusters,
        ..
    } = *looked;
    // Ctrl-C during the first look or a stale lock's wait: nothing has changed yet, and
    // nothing does.
    if ops.interrupted() {
        bail!("interrupted before the cordon: nothing was changed");
    }
    for n in &d.nodes {
        ops.cordon(n).await?;
        sink.say(&format!("node/{n} cordoned"));
    }
    // Pods scheduled between the first look and the cordon: ordinary ones join the drain; a
    // StatefulSet's pod (a Raft member, perhaps) was not planned for: stop.
    let on_nodes = ops.pods_on(true).await?;
    if let Some(p) = arrived_member(looked.on_nodes, &on_nodes) {
        bail!(
            "pod {}/{} (a StatefulSet's) was scheduled onto {} after this drain looked and before the cordon; the node(s) stay cordoned: run the same command again to plan with it",
            p.namespace().unwrap_or_default(),
            p.name_any(),
            p.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default()
        );
    }
    let ordinary = decide_ordinary(sink, d, &on_nodes, raft_pods);
    if !ordinary.refused.is_empty() {
        return Ok(refused(d, &ordinary));
    }

    let ordinary_work = async {
        let line = sink.line("pods");
        let results = futures::future::join_all(ordinary.to_evict().map(|(p, v)| {
            let line = &line;
            async move { (p, v, evict_ordinary(ops, line, p, d.settings.timeout).await) }
        }))
        .await;
        line.finish();
        results
    };
    let raft_work = futures::stream::iter(clusters.iter())
        .map(|l| {
            let (ns, name) = (&l.obs.target.namespace, &l.obs.target.name);
            let lock = locks.get(&(ns.clone(), name.clone()));
            async move {
                let cluster = ops.cluster(ns, name, lock);
                let line = sink.line(&format!("{ns}/{name}"));
                let s = drain_cluster(&cluster, &line, &d.opts, &d.settings, ns, name).await;
                line.finish();
                s
            }
        })
        .buffer_unordered(d.parallel_clusters.max(1))
        .collect::<Vec<ClusterSummary>>();
    let (pod_results, mut summaries) = tokio::join!(ordinary_work, raft_work);
    summaries.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));

    // The end, checked as a user would: the nodes' pods listed again.
    if summaries.iter().any(|s| s.result == ClusterResult::Drained) {
        let still: Vec<(String, String, String)> = ops
            .pods_on(false)
            .await?
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .map(|p| {
                let node = p.spec.as_ref().and_then(|s| s.node_name.clone());
                let (ns, name) = key(p);
                (ns, name, node.unwrap_or_default())
            })
            .collect();
        let members = first
            .clusters
            .iter()
            .map(|l| {
                (
                    (l.obs.target.namespace.clone(), l.obs.target.name.clone()),
                    l.obs.target.pods.iter().map(|p| p.name_any()).collect(),
                )
            })
            .collect();
        check_nothing_left(&mut summaries, &still, &members);
    }

    let mut failures: Vec<String> = vec![];
    let mut pods = vec![];
    for (p, v, r) in pod_results {
        let (namespace, name) = key(p);
        let result = match r {
            Ok(s) => {
                sink.say(&format!("pod/{name} {s}"));
                s
            }
            Err(e) => {
                let m = crate::errors::anyhow_chain(&e);
                failures.push(m.clone());
                m
            }
        };
        pods.push(PodReport {
            namespace,
            name,
            verdict: v.clone(),
            result,
        });
    }
    failures.extend(
        summaries
            .iter()
            .filter(|s| s.result == ClusterResult::Stopped)
            .map(|s| s.message.clone()),
    );
    let (succeeded, message) = verdict(&d.nodes, &failures);
    Ok(DrainReport {
        api_version: API_VERSION,
        kind: "DrainReport",
        nodes: d.nodes.clone(),
        dry_run: false,
        succeeded,
        pods,
        clusters: summaries,
        message,
    })
}

/// The report of a drain that ordinary pods stop before any eviction (kubectl drain's
/// refusals: a DaemonSet's pod, data on an emptyDir, a pod no controller brings back).
fn refused(d: &NodeDrain, ordinary: &Ordinary) -> DrainReport {
    DrainReport {
        api_version: API_VERSION,
        kind: "DrainReport",
        nodes: d.nodes.clone(),
        dry_run: false,
        succeeded: false,
        pods: ordinary
            .pods
            .iter()
            .map(|(p, v)| {
                let (namespace, name) = key(p);
                let result = match v {
                    PodVerdict::Refuse(_) => "blocks the drain",
                    _ => "not evicted",
                };
                PodReport {
                    namespace,
                    name,
                    verdict: v.clone(),
                    result: result.into(),
                }
            })
            .collect(),
        clusters: vec![],
        message: format!(
            "cannot drain {}: these pods cannot be moved: {}. Nothing was evicted; the node(s) stay cordoned (`kubectl uncordon {}` to undo)",
            d.nodes.join(", "),
            ordinary.refused.join("; "),
            d.nodes.join(" ")
        ),
    }
}

/// Evicts an ordinary pod as kubectl drain does: a PDB's refusal retried every 5 s until the
/// timeout or an interrupt, then waited for until it is gone.
async fn evict_ordinary<O: NodeOps, L: Events>(
    ops: &O,
    line: &L,
    p: &Pod,
    timeout: Duration,
) -> Result<String> {
    let (ns, name) = key(p);
    let start = Instant::now();
    loop {
        let why = match ops.evict_pod(p).await? {
            Attempt::Done(Evicted::AlreadyGone) => {
                return Ok("already gone (not evicted again)".into())
            }
            Attempt::Done(Evicted::Accepted) => {
                ops.wait_pod_gone(p).await?;
                return Ok("evicted".into());
            }
            Attempt::Refused(why) => why,
        };
        if start.elapsed() >= timeout {
            bail!(
                "cannot evict pod {ns}/{name} within {}: {why}",
                human_duration(timeout)
            );
        }
        line.doing(&format!(
            "cannot evict {name} yet: {why}; retrying every {}s",
            RETRY_EVERY.as_secs()
        ));
        if ops.pause(RETRY_EVERY).await {
            bail!("interrupted before pod {ns}/{name} could be evicted ({why})");
        }
    }
}

/// `--dry-run`: the whole plan from the first look, blockers named, each PDB's answer now;
/// nothing changes.
async fn dry_run<O: NodeOps>(
    ops: &O,
    d: &NodeDrain,
    ordinary: &Ordinary,
    clusters: &[&Look],
) -> DrainReport {
    let mut pods = vec![];
    for (p, v) in &ordinary.pods {
        let (namespace, name) = key(p);
        let result = match v {
            PodVerdict::Evict(_) => ops.pdb_answer(p).await,
            PodVerdict::Skip(_) => "stays".into(),
            PodVerdict::Refuse(_) => "blocks the drain".into(),
        };
        pods.push(PodReport {
            namespace,
            name,
            verdict: v.clone(),
            result,
        });
    }
    let inputs: Vec<ClusterInput> = clusters.iter().map(|l| l.input.clone()).collect();
    let mut summaries = vec![];
    for plan in plan_drain(&inputs, &d.opts) {
        let look = clusters
            .iter()
            .find(|l| {
                l.input.report.namespace == plan.namespace && l.input.report.name == plan.name
            })
            .expect("a plan per input");
        let mut pdb_answers = BTreeMap::new();
        let mut groups_to_move = BTreeMap::new();
        for step in &plan.steps {
            if let Some(p) = look
                .obs
                .target
                .pods
                .iter()
                .find(|p| p.name_any() == step.pod)
            {
                pdb_answers.insert(step.pod.clone(), ops.pdb_answer(p).await);
            }
            if let Some(moves) = moves_off(&look.obs, &step.pod).filter(|m| !m.calls.is_empty()) {
                groups_to_move.insert(
                    step.pod.clone(),
                    moves.calls.into_iter().map(|c| c.group).collect(),
                );
            }
        }
        let mut c = ClusterSummary::new(&plan.namespace, &plan.name, ClusterResult::Planned);
        c.system = look.input.report.system.clone();
        c.term_before = plan.term;
        c.pdb_answers = pdb_answers;
        c.groups_to_move = groups_to_move;
        if plan.blocker.is_some() {
            c.message = "blocked".into();
        }
        c.plan = plan;
        summaries.push(c);
    }
    let blockers = ordinary.refused.len()
        + summaries
            .iter()
            .filter(|c| c.plan.blocker.is_some())
            .count();
    let succeeded = blockers == 0;
    DrainReport {
        api_version: API_VERSION,
        kind: "DrainReport",
        nodes: d.nodes.clone(),
        dry_run: true,
        succeeded,
        pods,
        clusters: summaries,
        message: if succeeded {
            format!(
                "dry run: nothing blocks draining {}; nothing was changed",
                d.nodes.join(", ")
            )
        } else {
            format!("dry run: {blockers} blocker(s); nothing was changed")
        },
    }
}

#[cfg(test)]
mod tests;
