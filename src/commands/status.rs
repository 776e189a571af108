use std::io::{IsTerminal, Write};

use anyhow::Result;
use indicatif::{ProgressBar, ProgressStyle};

use crate::cli::{GlobalArgs, StatusArgs};
use crate::model::Selection;
use crate::render;
use crate::report::{StatusReport, API_VERSION};
use crate::survey::Surveyor;

pub fn selection(name: Option<&str>, select: &crate::cli::SelectArgs) -> Selection {
    Selection {
        name: name.map(str::to_string),
        named: name.is_some(),
        nodes: select.node.iter().cloned().collect(),
        selector: select.selector.clone(),
        system: select.system.clone(),
    }
}

/// How long `--watch` waits for its watches' first lists before it lists every round instead.
const WATCH_SYNC: std::time::Duration = std::time::Duration::from_secs(10);

pub async fn run(
    g: &GlobalArgs,
    args: &StatusArgs,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<()> {
    let mut surveyor =
        Surveyor::new(&crate::cli::survey_settings(g, &args.select, &args.probe)).await?;
    let sel = selection(args.name.as_deref(), &args.select);
    if args.watch {
        // Objects are watched, not listed every round; replicas are still asked each round.
        if let Some(why) = surveyor.watch_objects(&sel, WATCH_SYNC).await? {
            writeln!(
                err,
                "Warning: {}; listing them every round instead",
                crate::render::clean(&why)
            )?;
        }
        return crate::commands::watch::run(&surveyor, &sel, args, out, err).await;
    }
    let spinner = std::io::stderr().is_terminal().then(|| {
        let s = ProgressBar::new_spinner().with_message(format!(
            "asking the Raft clusters in {} through {}",
            surveyor.place(),
            surveyor.transport.describe()
        ));
        s.set_style(ProgressStyle::with_template("{spinner} {msg}").expect("valid template"));
        s.enable_steady_tick(std::time::Duration::from_millis(100));
        s
    });
    let survey = surveyor.survey(&sel).await;
    if let Some(s) = spinner {
        s.finish_and_clear();
    }
    let survey = survey?;
    for why in &survey.skipped {
        writeln!(err, "Warning: {}", crate::render::clean(why))?;
    }
    // -l: say which pods were taken, and why they form a cluster.
    for o in survey
        .observations
        .iter()
        .filter(|o| o.target.owner_kind == crate::model::OwnerKind::Selector)
    {
        let names: Vec<String> = o
            .target
            .pods
            .iter()
            .filter_map(|p| p.metadata.name.clone())
            .collect();
        writeln!(
            err,
            "-l {} in namespace {}: {} pod(s) taken as one {} cluster by their labels, not by a StatefulSet's ownership: {}",
            o.target.name,
            o.target.namespace,
            names.len(),
            o.target.profile.name,
            crate::render::clean(&names.join(", "))
        )?;
    }
    if survey.reports.is_empty() {
        let place = surveyor.place();
        match sel.nodes.first() {
            Some(n) => writeln!(err, "No Raft cluster in {place} has a replica on node {n:?}.")?,
            None => writeln!(
                err,
                "No Raft clusters found in {place} (known systems: {}; see `kubectl raft systems`).",
                surveyor.catalog.names().join(", ")
            )?,
        }
        return Ok(());
    }
    // Whether the gate decides their evictions, and what it last refused.
    let namespaces = survey.reports.iter().map(|r| r.namespace.clone()).collect();
    let view = surveyor.gate_view(&namespaces).await;
    let mut clusters = survey.reports;
    for (c, o) in clusters.iter_mut().zip(&survey.observations) {
        let pods: Vec<String> = o
            .target
            .pods
            .iter()
            .filter_map(|p| p.metadata.name.clone())
            .collect();
        c.gate = Some(crate::assess::gated::gate_report(
            &c.namespace,
            &pods,
            &view,
        ));
    }
    let report = StatusReport {
        api_version: API_VERSION,
        kind: "StatusReport",
        clusters,
    };
    render::status(&report, args.output.into(), out)
}
