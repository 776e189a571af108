//! `kubectl raft restart`: a Raft-aware rollout of one StatefulSet on the drain executor.
//! Every member is replaced once (evicted, so PodDisruptionBudgets are honoured, and
//! recreated by its controller): those that count for nothing first, then followers, the
//! leader last after a verified transfer to a member already replaced; each replacement
//! Ready and rejoined, and the others a quorum of healthy voters, before the next step.
//!
//! What "not yet replaced" means comes from the StatefulSet (`plan::restart`): a restart of
//! the current revision marks the moment it was asked for on the StatefulSet (a rerun resumes
//! from it), and a pending update of an `OnDelete` StatefulSet is driven member by member; a
//! staged `RollingUpdate` (its partition holding every member behind) is driven the same way
//! with the StatefulSet `OnDelete` meanwhile, its own strategy put back at the end.

use std::io::Write;

use anyhow::{bail, Result};
use k8s_openapi::api::apps::v1::StatefulSet;
use kube::api::{Api, ListParams};
use kube::ResourceExt;
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::actions::RestartReport;
use crate::cli::{GlobalArgs, Output, RestartArgs, SelectArgs};
use crate::errors::{api_context, Reported};
use crate::live::evict::stop_on_ctrl_c;
use crate::live::nodes::Stderr;
use crate::live::progress::Progress;
use crate::live::restart::{restart_statefulset, Done, RestartSettings};
use crate::report::API_VERSION;
use crate::select::NotRecognised;
use crate::survey::Surveyor;

/// `-o json|yaml` with `-l`: one document for every StatefulSet, as kubectl lists objects.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct RestartReportList<'a> {
    api_version: &'static str,
    kind: &'static str,
    items: &'a [RestartReport],
}

/// The StatefulSet NAME (or sts/NAME) names.
fn sts_name(arg: &str) -> Result<String> {
    let name = arg
        .strip_prefix("sts/")
        .or_else(|| arg.strip_prefix("statefulset/"))
        .or_else(|| arg.strip_prefix("statefulsets/"))
        .unwrap_or(arg)
        .to_string();
    if name.contains('/') || name.is_empty() {
        bail!("{arg}: restart takes a StatefulSet (NAME or sts/NAME)");
    }
    Ok(name)
}

/// The StatefulSets `-l` (with `-A`: in every namespace) selects, by namespace and name.
async fn selected(
    surveyor: &Surveyor,
    args: &RestartArgs,
    selector: &str,
) -> Result<Vec<(String, String)>> {
    let client = surveyor.conn.client.clone();
    let (api, where_): (Api<StatefulSet>, String) = if args.all_namespaces {
        (Api::all(client), "in any namespace".into())
    } else {
        (
            Api::namespaced(client, &surveyor.namespace),
            format!("in namespace {:?}", surveyor.namespace),
        )
    };
    let list = api
        .list(&ListParams::default().labels(selector))
        .await
        .map_err(|e| api_context(e, "list", "statefulsets", &where_))?;
    let mut found: Vec<(String, String)> = list
        .items
        .iter()
        .map(|s| (s.namespace().unwrap_or_default(), s.name_any()))
        .collect();
    found.sort();
    if found.is_empty() {
        bail!("no StatefulSet matches -l {selector} {where_} (-n NAMESPACE, or -A for every namespace?)");
    }
    Ok(found)
}

pub async fn run(
    g: &GlobalArgs,
    args: &RestartArgs,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<()> {
    let select = SelectArgs {
        system: args.system.clone(),
        profiles: args.profiles.clone(),
        ..Default::default()
    };
    let surveyor = Surveyor::new(&crate::cli::survey_settings(g, &select, &args.probe)).await?;
    let restart = crate::cli::restart_settings(args);
    let sink = Stderr(Progress::new());
    // One Ctrl-C handler for the whole run: a Ctrl-C while a StatefulSet is read, waited for
    // or restarted stops it, and the run with it.
    let cancel = CancellationToken::new();
    let ctrl_c = stop_on_ctrl_c(cancel.clone());
    let result = restart_all(&surveyor, &sink, &restart, &cancel, args, out, err).await;
    ctrl_c.abort();
    result
}

/// Restarts the named StatefulSet, or those `-l` selects one after another.
async fn restart_all(
    surveyor: &Surveyor,
    sink: &Stderr,
    restart: &RestartSettings,
    cancel: &CancellationToken,
    args: &RestartArgs,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<()> {
    let (targets, selector) = match (&args.name, &args.selector) {
        (Some(n), _) => (vec![(surveyor.namespace.clone(), sts_name(n)?)], None),
        (None, Some(sel)) => (selected(surveyor, args, sel).await?, Some(sel.clone())),
        (None, None) => bail!("restart needs a StatefulSet: NAME, sts/NAME or -l SELECTOR"),
    };
    let Some(selector) = selector else {
        let (ns, name) = &targets[0];
        return match restart_statefulset(surveyor, sink, restart, cancel, ns, name).await? {
            Done::Line(l) => Ok(writeln!(out, "{l}")?),
            Done::Report(r) => {
                crate::render::restart_summary(&r, args.output.into(), out)?;
                finish(&r, err)
            }
        };
    };
    // One StatefulSet after another, in namespace and name order; the first that stops stops
    // the rest.
    writeln!(
        err,
        "restarting {} StatefulSet(s) matching -l {selector}, one at a time: {}",
        targets.len(),
        targets
            .iter()
            .map(|(n, s)| format!("{n}/{s}"))
            .collect::<Vec<_>>()
            .join(", ")
    )?;
    let structured = matches!(args.output, Output::Json | Output::Yaml);
    let mut reports = vec![];
    let mut done: Vec<String> = vec![];
    let mut stopped: Option<(usize, String)> = None;
    let mut blocked = false;
    for (i, (ns, name)) in targets.iter().enumerate() {
        if cancel.is_cancelled() {
            stopped = Some((i, format!("interrupted before {ns}/{name}")));
            break;
        }
        match restart_statefulset(surveyor, sink, restart, cancel, ns, name).await {
            Ok(Done::Line(l)) => {
                writeln!(err, "{l}")?;
                done.push(format!("{ns}/{name}"));
            }
            Ok(Done::Report(r)) => {
                if !structured {
                    crate::render::restart_summary(&r, args.output.into(), out)?;
                }
                let ok = r.succeeded;
                let message = r.message.clone();
                reports.push(*r);
                if args.dry_run {
                    // A dry run changes nothing: every plan is shown, blocked or not.
                    blocked |= !ok;
                    continue;
                }
                if !ok {
                    stopped = Some((i, message));
                    break;
                }
                done.push(format!("{ns}/{name}"));
            }
            Err(e) if e.is::<NotRecognised>() => {
                writeln!(err, "skipped: {}", crate::errors::anyhow_chain(&e))?
            }
            Err(e) => {
                stopped = Some((
                    i,
                    format!("{ns}/{name}: {}", crate::errors::anyhow_chain(&e)),
                ));
                break;
            }
        }
    }
    if structured {
        let list = RestartReportList {
            api_version: API_VERSION,
            kind: "List",
            items: &reports,
        };
        crate::render::structured(&list, args.output.into(), out)?;
    }
    let Some((at, why)) = stopped else {
        return if blocked {
            Err(Reported.into())
        } else {
            Ok(())
        };
    };
    let (ns, name) = &targets[at];
    let rest: Vec<String> = targets[at + 1..]
        .iter()
        .map(|(n, s)| format!("kubectl raft restart {s} -n {n}"))
        .collect();
    writeln!(
        err,
        "error: {why}\nstopped at {ns}/{name}; done before it: {}. To go on: kubectl raft restart {name} -n {ns} (resumes it){}. Running the same -l command again would restart the ones done again.",
        if done.is_empty() { "none".to_string() } else { done.join(", ") },
        if rest.is_empty() { String::new() } else { format!(", then {}", rest.join("; ")) }
    )?;
    Err(Reported.into())
}

/// A single StatefulSet's ending: its message on stderr and exit 1 when it did not succeed.
fn finish(r: &RestartReport, err: &mut dyn Write) -> Result<()> {
    if r.succeeded {
        return Ok(());
    }
    if !r.dry_run {
        writeln!(err, "error: {}", r.message)?;
    }
    Err(Reported.into())
}
