//! `kubectl raft yield`: flags to the library's settings (`cli::yield_settings`), the yield
//! itself ([`crate::live::yield_::yield_cluster`], or the in-pod hook with `--local`), and
//! the report rendered.

use std::io::Write;

use anyhow::Result;
use tokio_util::sync::CancellationToken;

use crate::actions::YieldReport;
use crate::cli::{GlobalArgs, YieldArgs};
use crate::errors::Reported;
use crate::live::evict::stop_on_ctrl_c;
use crate::live::nodes::Stderr;
use crate::live::progress::Progress;
use crate::live::yield_::yield_cluster;
use crate::plan::ReplicaView;
use crate::render::Format;
use crate::survey::Surveyor;

pub async fn run(
    g: &GlobalArgs,
    args: &YieldArgs,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<()> {
    // Clap's flags stop here: what follows reads the library's own settings.
    let settings = &crate::cli::yield_settings(g, args);
    if let Some(local) = &settings.local {
        return crate::commands::local::run(settings, local, out, err).await;
    }
    let surveyor = Surveyor::new(&settings.survey).await?;
    let sink = Stderr(Progress::quiet());
    // Ctrl-C: stop before anything is sent (the lock given back), or report the handover in
    // flight; a second Ctrl-C gives the lock back and exits at once.
    let cancel = CancellationToken::new();
    let ctrl_c = stop_on_ctrl_c(cancel.clone());
    let y = yield_cluster(&surveyor, &sink, settings, &cancel).await;
    ctrl_c.abort();
    let y = y?;
    report_verdict(
        &y,
        args.output.into(),
        surveyor.transport.describe(),
        out,
        err,
    )
}

/// The report printed; exit 1 (already explained) unless it succeeded.
fn report_verdict(
    y: &YieldReport,
    output: Format,
    via: &str,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<()> {
    let printed = print(y, output, via, out);
    if y.succeeded {
        printed
    } else {
        // Said and exit 1 even when stdout is gone (a closed pipe is otherwise a quiet exit 0).
        writeln!(err, "error: {}", y.message)?;
        Err(Reported.into())
    }
}

fn print(y: &YieldReport, output: Format, via: &str, out: &mut dyn Write) -> Result<()> {
    if crate::render::structured(y, output, out)? {
        return Ok(());
    }
    // A refusal is said on stderr alone ("error: cannot yield: ..."): nothing was planned.
    if y.refusal.is_some() {
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
