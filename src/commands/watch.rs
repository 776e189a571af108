//! `kubectl raft status --watch`: the same survey as `status`, every `--interval`, compared
//! round to round (`crate::watch`, pure) and printed as kubectl's `get -w` does: on a terminal
//! the table redrawn with what changed and a running line per cluster; otherwise one line (or
//! one JSON event) per change. Ctrl-C ends it with what was seen.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{IsTerminal, Write};
use std::time::Duration;

use anyhow::{bail, Result};
use k8s_openapi::jiff::Timestamp;
use tokio::time::Instant;

use crate::cli::{Output, StatusArgs};
use crate::model::Selection;
use crate::render;
use crate::report::{ClusterReport, StatusReport, API_VERSION};
use crate::survey::Surveyor;
use crate::watch::{diff, Change, Event, Tally};

/// The shortest --interval: each round asks every replica.
const MIN_INTERVAL: Duration = Duration::from_millis(500);

pub async fn run(
    surveyor: &Surveyor,
    sel: &Selection,
    args: &StatusArgs,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<()> {
    if args.interval < MIN_INTERVAL {
        bail!(
            "--interval {:?} is shorter than {:?}: every round asks every replica; choose a longer one",
            args.interval,
            MIN_INTERVAL
        );
    }
    let redraw =
        matches!(args.output, Output::Table | Output::Wide) && std::io::stdout().is_terminal();
    let start = Instant::now();
    let mut prev: BTreeMap<String, ClusterReport> = BTreeMap::new();
    let mut tallies: BTreeMap<String, Tally> = BTreeMap::new();
    // Ctrl-C from the first moment (a survey in flight included) ends it with the summary.
    let stop = tokio_util::sync::CancellationToken::new();
    let ctrl_c = {
        let stop = stop.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                stop.cancel();
            }
        })
    };
    loop {
        let round = Instant::now();
        let time = Timestamp::now().to_string();
        let at_ms = start.elapsed().as_millis() as u64;
        let surveyed = tokio::select! {
            s = surveyor.survey(sel) => s,
            _ = stop.cancelled() => break,
        };
        let next: BTreeMap<String, ClusterReport> = match surveyed {
            Ok(s) => s
                .reports
                .into_iter()
                .map(|r| (format!("{}/{}", r.namespace, r.name), r))
                .collect(),
            Err(e) => {
                // A failed round (the API server restarting) is said and the watch goes on.
                writeln!(err, "{time} error: {}", crate::errors::anyhow_chain(&e))?;
                prev.clone()
            }
        };
        let keys: BTreeSet<&String> = prev.keys().chain(next.keys()).collect();
        let mut changes: Vec<Change> = vec![];
        for k in keys {
            changes.extend(diff(prev.get(k), next.get(k)));
            if let Some(r) = next.get(k) {
                tallies
                    .entry(k.clone())
                    .or_insert_with(|| Tally::new(k))
                    .observe(r, at_ms);
            }
        }
        match args.output {
            Output::Json => {
                for c in &changes {
                    serde_json::to_writer(&mut *out, &Event::new(time.clone(), c))?;
                    writeln!(out)?;
                }
            }
            Output::Yaml => {
                for c in &changes {
                    let text = serde_saphyr::to_string(&Event::new(time.clone(), c))
                        .map_err(|e| anyhow::anyhow!("{e}"))?;
                    write!(out, "---\n{text}")?;
                }
            }
            Output::Table | Output::Wide if redraw => {
                out.flush()?;
                // Home and clear, on the raw terminal: the cleaning writer lets no control
                // sequence through, and none of this comes from a replica.
                let mut raw = std::io::stdout();
                raw.write_all(b"\x1b[H\x1b[2J")?;
                raw.flush()?;
                let report = StatusReport {
                    api_version: API_VERSION,
                    kind: "StatusReport",
                    clusters: next.values().cloned().collect(),
                };
                writeln!(
                    out,
                    "Every {}: kubectl raft status --watch    {time}\n",
                    humantime::format_duration(args.interval)
                )?;
                // Each changed cell is marked in place; the list below says from what.
                let marks: render::Marks = changes
                    .iter()
                    .filter_map(|c| Some((c.cluster.clone(), c.pod.clone()?, c.column()?)))
                    .collect();
                render::status_marked(&report, args.output.into(), &marks, out)?;
                writeln!(out)?;
                for t in tallies.values() {
                    writeln!(out, "{}", t.line(at_ms))?;
                }
                if !changes.is_empty() {
                    writeln!(out, "\nChanged since the last round (marked * above):")?;
                    for c in &changes {
                        writeln!(out, "  * {}", c.line())?;
                    }
                }
            }
            Output::Table | Output::Wide => {
                for c in &changes {
                    writeln!(out, "{time} {}", c.line())?;
                }
            }
        }
        out.flush()?;
        if tallies.values().all(|t| t.rounds == 1) && !redraw {
            writeln!(
                err,
                "watching {} cluster(s) in {} every {}; Ctrl-C ends it",
                next.len(),
                surveyor.place(),
                humantime::format_duration(args.interval)
            )?;
        }
        prev = next;
        let wait = args.interval.saturating_sub(round.elapsed());
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stop.cancelled() => break,
        }
    }
    ctrl_c.abort();
    // What was seen: on stdout with the table, on stderr beside a JSON or YAML stream.
    let at_ms = start.elapsed().as_millis() as u64;
    let summary: &mut dyn Write = match args.output {
        Output::Table | Output::Wide => out,
        Output::Json | Output::Yaml => err,
    };
    writeln!(
        summary,
        "watched for {}:",
        humantime::format_duration(Duration::from_secs(start.elapsed().as_secs()))
    )?;
    for t in tallies.values() {
        writeln!(summary, "  {}", t.line(at_ms))?;
    }
    Ok(())
}
