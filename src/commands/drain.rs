//! `kubectl raft drain`: the flags resolved into a [`NodeDrain`], the node-level executor
//! (`drain::nodes::drain_nodes`) run on the real cluster, its report rendered.
//!
//! The executor locks, cordons, decides and acts one step at a time, surveying again before
//! every step; see `src/drain/`. Ordinary pods go as `kubectl drain` sends them. Each Raft
//! cluster with a replica on the nodes goes member by member: followers first, the leader last
//! after a verified transfer, each eviction only while the others form a quorum of healthy
//! voters, each replacement Ready and rejoined before the next.

use std::io::Write;
use std::sync::Arc;

use anyhow::{bail, Result};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams};
use kube::ResourceExt;
use tokio_util::sync::CancellationToken;

use crate::cli::{DrainArgs, GlobalArgs, SelectArgs};
use crate::drain::nodes::{drain_nodes, NodeDrain};
use crate::drain::Settings;
use crate::errors::{api_context, Reported};
use crate::live::evict::{stop_on_ctrl_c, Evictor};
use crate::live::nodes::{KubeNodes, Stderr};
use crate::live::progress::Progress;
use crate::plan::drain::PodRules;
use crate::survey::Surveyor;

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
    let surveyor =
        Arc::new(Surveyor::new(&crate::cli::survey_settings(g, &select, &args.probe)).await?);
    let nodes = resolve_nodes(&surveyor.conn.client, args).await?;
    let d = NodeDrain {
        nodes: nodes.clone(),
        dry_run: args.dry_run,
        rules: PodRules {
            ignore_daemonsets: args.ignore_daemonsets,
            delete_emptydir_data: args.steps.delete_emptydir_data,
            force: args.force,
        },
        opts: crate::cli::step_options(
            &args.steps,
            nodes.iter().cloned().collect(),
            args.allow_degraded,
        ),
        settings: Settings {
            timeout: args.steps.timeout,
        },
        parallel_clusters: args.parallel_clusters.into(),
    };
    let evictor = Evictor {
        client: surveyor.conn.probe_client.clone(),
        grace_period: args.grace_period,
        disable_eviction: args.steps.disable_eviction,
        timeout: args.steps.timeout,
        cancel: CancellationToken::new(),
        lock_holder: None,
    };
    let ctrl_c = stop_on_ctrl_c(evictor.cancel.clone());
    let real = KubeNodes::new(
        surveyor.clone(),
        evictor,
        d.opts.clone(),
        args.pod_selector.clone(),
        args.steps.lock_namespace.clone(),
        surveyor.probe_timeout,
    );
    let report = drain_nodes(&real, &Stderr(Progress::new()), &d).await;
    ctrl_c.abort();
    let report = report?;
    crate::render::drain_summary(&report, args.output.into(), out)?;
    if !report.succeeded {
        if !report.dry_run {
            writeln!(err, "error: {}", report.message)?;
        }
        return Err(Reported.into());
    }
    if !report.dry_run {
        for n in &nodes {
            writeln!(err, "node/{n} drained")?;
        }
    }
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
        let mut names: Vec<String> = list.items.iter().map(|n| n.name_any()).collect();
        if names.is_empty() {
            bail!("no node matches the selector {sel:?} (list them with `kubectl get nodes --show-labels`)");
        }
        names.sort();
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
