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

use std::collections::BTreeSet;
use std::io::Write;

use anyhow::{anyhow, bail, Result};
use k8s_openapi::api::apps::v1::StatefulSet;
use kube::api::{Api, ListParams};
use kube::ResourceExt;
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::actions::RestartReport;
use crate::cli::{GlobalArgs, Output, RestartArgs, SelectArgs};
use crate::drain::rollout::{self, roll, Rollout};
use crate::drain::Settings;
use crate::errors::{api_context, Reported};
use crate::live::cluster::{cluster_input, Following, KubeCluster};
use crate::live::evict::{stop_on_ctrl_c, Evictor};
use crate::live::lock;
use crate::live::progress::Progress;
use crate::live::statefulset::{restore_strategy, KubeRollout};
use crate::model::Selection;
use crate::plan::restart::{decide, describe_strategy, pending, Decision, RESTART_PENDING};
use crate::preflight::{self, Need};
use crate::report::API_VERSION;
use crate::select::NotRecognised;
use crate::survey::Surveyor;

/// How one StatefulSet's restart ended.
enum Done {
    Report(Box<RestartReport>),
    /// Nothing to do (said in this line).
    Line(String),
}

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
    let (targets, selector) = match (&args.name, &args.selector) {
        (Some(n), _) => (vec![(surveyor.namespace.clone(), sts_name(n)?)], None),
        (None, Some(sel)) => (selected(&surveyor, args, sel).await?, Some(sel.clone())),
        (None, None) => bail!("restart needs a StatefulSet: NAME, sts/NAME or -l SELECTOR"),
    };
    let Some(selector) = selector else {
        let (ns, name) = &targets[0];
        return match restart_one(&surveyor, args, ns, name, err).await? {
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
        match restart_one(&surveyor, args, ns, name, err).await {
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

/// How long a restart waits for the StatefulSet's controller to act on its latest change
/// before it decides (it acts within a second when it runs).
const OBSERVED_WITHIN: std::time::Duration = std::time::Duration::from_secs(30);

/// One StatefulSet's restart, start to end: its report (printed by the caller), or a line
/// when there was nothing to do. Decided (`plan::restart::decide`) on what was read before the
/// lock; run (`drain::rollout::roll`) on the lock, after the record was checked unchanged.
async fn restart_one(
    surveyor: &Surveyor,
    args: &RestartArgs,
    ns: &str,
    name: &str,
    err: &mut dyn Write,
) -> Result<Done> {
    let (ns, name) = (ns.to_string(), name.to_string());
    let client = surveyor.conn.client.clone();
    let sts_api: Api<StatefulSet> = Api::namespaced(client.clone(), &ns);
    let sts = sts_api
        .get_opt(&name)
        .await
        .map_err(|e| api_context(e, "get", "statefulsets", &format!("in namespace {ns:?}")))?
        .ok_or_else(|| {
            anyhow!("statefulset {name:?} not found in namespace {ns:?} (-n NAMESPACE?)")
        })?;
    // A change the controller has not acted on yet (`kubectl rollout restart` a moment ago)
    // is waited for: decided before it, a restart could run beside the controller's rollout.
    let sts = crate::live::statefulset::once_observed(&sts_api, sts, OBSERVED_WITHIN).await?;
    // Named when the user typed it; a -l match is a StatefulSet the command found.
    let sel = Selection {
        name: Some(name.clone()),
        named: args.name.is_some(),
        ..Default::default()
    };
    let survey = surveyor.survey_in(Some(&ns), &sel).await?;
    let Some((obs, report)) = survey.observations.into_iter().zip(survey.reports).next() else {
        // A StatefulSet -l matched whose annotations are bad is skipped with the reason, as
        // one it does not recognise: it stops nobody else's restart.
        if let Some(why) = survey.skipped.first() {
            return Err(NotRecognised(why.clone()).into());
        }
        return Err(NotRecognised(format!(
            "{ns}/{name} is not a Raft cluster kubectl raft recognises (`kubectl raft systems`; --system or --profiles to say what it runs)"
        ))
        .into());
    };
    let pods = obs.target.pods.clone();
    let on_lock = lock::peek(&client, &args.steps.lock_namespace, &ns, &name)
        .await?
        .remove(RESTART_PENDING);
    let cluster = format!("{ns}/{name}");
    let (restart, driven) = match decide(&cluster, &sts, &pods, on_lock.as_deref(), args.dry_run)
        .map_err(|e| anyhow!(e))?
    {
        Decision::RestoreOnly(strategy) => {
            restore_strategy(&sts_api, &name, &strategy).await?;
            return Ok(Done::Line(format!(
                    "{cluster}: every member is at the update revision; its update strategy ({}) is restored",
                    describe_strategy(&strategy)
                )));
        }
        Decision::Run {
            restart,
            driven,
            note,
        } => {
            if let Some(note) = note {
                writeln!(err, "{note}")?;
            }
            (restart, driven)
        }
    };
    let rollout = Rollout {
        namespace: ns.clone(),
        name: name.clone(),
        driven,
        opts: crate::cli::step_options(&args.steps, BTreeSet::new(), false),
        settings: Settings {
            timeout: args.steps.timeout,
        },
    };
    if args.dry_run {
        let replace = pending(&pods, &restart);
        let input = cluster_input(
            &obs,
            report,
            &survey.snapshot,
            None,
            &BTreeSet::new(),
            replace,
        );
        return Ok(Done::Report(Box::new(rollout::dry_run(
            &rollout, restart, &input,
        ))));
    }
    if pending(&pods, &restart).is_empty() {
        return Ok(Done::Line(format!(
            "{cluster}: every member is already restarted; nothing to do"
        )));
    }
    // Only a staged update driven under OnDelete changes the StatefulSet (its strategy, and
    // back): the role for that is an optional one (docs/rbac.yaml).
    let mut needs = vec![];
    if rollout.driven.is_some() {
        needs.push(
            Need::new(
                "patch",
                "statefulsets",
                "drive the staged update under OnDelete and put its strategy back (kubectl-raft-restart-staged)",
            )
            .group("apps")
            .in_namespace(&ns),
        );
    }
    needs.extend(preflight::member_steps(
        Some(&ns),
        args.steps.disable_eviction,
        &args.steps.lock_namespace,
    ));
    let warn = |m: &str| eprintln!("Warning: {}", crate::render::clean(m));
    preflight::check(&client, "the restart", &needs, &warn).await?;
    let holder = lock::holder_identity(&format!("restart {cluster}"));
    let say = |m: &str| eprintln!("{}", crate::render::clean(m));
    let (held, took_over) = lock::acquire(
        &client,
        &args.steps.lock_namespace,
        &ns,
        &name,
        &holder,
        &say,
    )
    .await?;
    if let Some(who) = took_over {
        writeln!(err, "Warning: took over {cluster}'s stale lock from {who}")?;
    }
    // Decided on the record read before the lock was taken: it must be the one the lock
    // holds now (another restart may have run in between).
    if held.record(RESTART_PENDING) != on_lock {
        held.release().await;
        bail!("{cluster}'s restart record changed while this restart started (another restart ran meanwhile); run the same command again");
    }
    let following = Following::new(
        restart,
        sts.status.as_ref().and_then(|s| s.update_revision.clone()),
    );
    let evictor = Evictor {
        client: surveyor.conn.probe_client.clone(),
        grace_period: None,
        disable_eviction: args.steps.disable_eviction,
        timeout: args.steps.timeout,
        cancel: CancellationToken::new(),
        lock_holder: Some(holder.clone()),
    };
    let ctrl_c = stop_on_ctrl_c(evictor.cancel.clone());
    let ops = KubeRollout::new(KubeCluster {
        surveyor,
        evictor: &evictor,
        pvs: None,
        timeout: args.steps.timeout,
        probe_limit: surveyor.probe_timeout,
        opts: &rollout.opts,
        ns: &ns,
        name: &name,
        named: args.name.is_some(),
        lock: Some(&held),
        restart: Some(&following),
    })
    .expect("built with its lock and the members it follows");
    let progress = Progress::new();
    let line = progress.line(&cluster);
    let result = roll(&ops, &line, &rollout).await;
    ctrl_c.abort();
    held.release().await;
    Ok(Done::Report(Box::new(result?)))
}
