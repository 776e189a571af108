use std::io::{IsTerminal, Write};

use anyhow::{bail, Result};
use indicatif::{ProgressBar, ProgressStyle};

use crate::cli::{GlobalArgs, StatusArgs, Via};
use crate::connect::connect;
use crate::discovery::{fetch, select_clusters, Selection};
use crate::observe::observe_all;
use crate::profile::Catalog;
use crate::report::{StatusReport, API_VERSION};
use crate::transport::{ProbeError, Transport};
use crate::{assess, render};

pub async fn run(g: &GlobalArgs, args: &StatusArgs, out: &mut dyn Write) -> Result<()> {
    let catalog = Catalog::load(args.select.profiles.as_deref())?;
    if args.name.is_some() && args.select.selector.is_some() {
        bail!("give a StatefulSet NAME or a -l SELECTOR, not both");
    }
    if args.name.is_some() && g.all_namespaces {
        bail!("a StatefulSet NAME needs one namespace: use -n NAMESPACE instead of -A");
    }
    let conn = connect(g).await?;
    let namespace = g
        .namespace
        .clone()
        .unwrap_or_else(|| conn.default_namespace.clone());
    let scope = (!g.all_namespaces).then_some(namespace.as_str());
    let selection = Selection {
        name: args.name.clone(),
        node: args.select.node.clone(),
        selector: args.select.selector.clone(),
        system: args.select.system.clone(),
    };
    let snapshot = fetch(&conn.client, scope, &selection).await?;
    let targets = select_clusters(&snapshot, &catalog, &selection, &namespace)?;
    if targets.is_empty() {
        let place = if g.all_namespaces {
            "any namespace".to_string()
        } else {
            format!("namespace {namespace:?}")
        };
        match &selection.node {
            Some(n) => eprintln!("No Raft cluster in {place} has a replica on node {n:?}."),
            None => eprintln!("No Raft clusters found in {place} (known systems: {}; see `kubectl raft systems`).", catalog.names().join(", ")),
        }
        return Ok(());
    }
    let transport = match args.probe.via {
        Via::Proxy => Transport::proxy(conn.client.clone()),
        Via::Direct => Transport::direct(),
    };
    let replicas: usize = targets.iter().map(|t| t.pods.len()).sum();
    let spinner = std::io::stderr().is_terminal().then(|| {
        let s = ProgressBar::new_spinner().with_message(format!(
            "asking {replicas} replicas of {} clusters through {}",
            targets.len(),
            transport.describe()
        ));
        s.set_style(ProgressStyle::with_template("{spinner} {msg}").expect("valid template"));
        s.enable_steady_tick(std::time::Duration::from_millis(100));
        s
    });
    let observations = observe_all(&transport, targets, args.probe.probe_timeout).await;
    if let Some(s) = spinner {
        s.finish_and_clear();
    }
    // Without pods/proxy rights nothing can be observed: that is an error, not a report.
    let all: Vec<_> = observations.iter().flat_map(|o| &o.replicas).collect();
    if !all.is_empty()
        && all
            .iter()
            .all(|r| matches!(r.health, Err(ProbeError::Forbidden(_))))
    {
        let Err(e) = &all[0].health else {
            unreachable!()
        };
        bail!("{e}");
    }
    let report = StatusReport {
        api_version: API_VERSION,
        kind: "StatusReport",
        clusters: observations
            .iter()
            .map(|o| assess::assess(o, &snapshot))
            .collect(),
    };
    render::status(&report, args.output, out)
}
