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

use anyhow::{anyhow, bail, Context, Result};
use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetUpdateStrategy};
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::ResourceExt;
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::actions::RestartReport;
use crate::cli::{GlobalArgs, Output, RestartArgs, SelectArgs};
use crate::drain::{drain_cluster, ClusterResult, ClusterSummary, Settings};
use crate::errors::{api_context, Reported};
use crate::live::cluster::{cluster_input, Following, KubeCluster};
use crate::live::evict::{stop_on_ctrl_c, Evictor};
use crate::live::lock;
use crate::live::progress::Progress;
use crate::model::Selection;
use crate::plan::drain::{plan_cluster, Assume, DrainOptions};
use crate::plan::restart::{
    from_annotation, mode, pending, restart_all, saved_strategy, to_annotation, Mode, Restart,
    RESTART_PENDING, SAVED_STRATEGY,
};
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

/// One StatefulSet's restart, start to end: its report (printed by the caller), or a line
/// when there was nothing to do.
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
    // A staged update an earlier run drove under OnDelete: the user's strategy to put back.
    let saved = saved_strategy(&sts);
    let on_lock = lock::peek(&client, &args.steps.lock_namespace, &ns, &name)
        .await?
        .remove(RESTART_PENDING);
    let mut driven = None;
    let restart = match mode(&sts, &pods) {
        Mode::ControllerRolling { current, update } => bail!(
            "{ns}/{name} is being rolled by its controller (RollingUpdate from revision {current} to {update}): it replaces members in reverse ordinal order whichever leads. Let it finish; next time stage the update (spec.updateStrategy.rollingUpdate.partition at the number of replicas before changing the template, or type OnDelete) and kubectl raft restart drives it in the safe order"
        ),
        Mode::Staged { revision, strategy } => {
            driven = Some(Driven {
                strategy,
                switch_now: true,
            });
            Restart::Update { revision }
        }
        Mode::Update { revision } => {
            driven = saved.clone().map(|strategy| Driven {
                strategy,
                switch_now: false,
            });
            if driven.is_some() {
                writeln!(
                    err,
                    "resuming the staged update that {SAVED_STRATEGY} on the StatefulSet records; its update strategy is put back when every member is updated"
                )?;
            }
            Restart::Update { revision }
        }
        Mode::Restart if saved.is_some() && !args.dry_run => {
            // Every member was updated but the run that drove it stopped before it put the
            // user's strategy back.
            let strategy = saved.expect("checked");
            restore_strategy(&sts_api, &name, &strategy).await?;
            return Ok(Done::Line(format!(
                "{ns}/{name}: every member is at the update revision; its update strategy ({}) is restored",
                describe_strategy(&strategy)
            )));
        }
        Mode::Restart => {
            // The record of a restart that stopped is on the cluster's lock (older versions
            // kept it on the StatefulSet: read there too).
            let on_lock = on_lock.clone();
            let on_sts = sts
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(RESTART_PENDING))
                .cloned();
            let marked = on_lock
                .or(on_sts)
                .map(|v| from_annotation(&v))
                .filter(|r| !pending(&pods, r).is_empty());
            match marked {
                // A restart that stopped: resume it (members replaced since are done).
                Some(r) => {
                    writeln!(
                        err,
                        "resuming the restart that {RESTART_PENDING} on its lock records: {} member(s) still to restart; those already replaced are not restarted again",
                        pending(&pods, &r).len()
                    )?;
                    r
                }
                None => restart_all(&pods),
            }
        }
    };
    let opts = DrainOptions {
        nodes: BTreeSet::new(),
        max_lag: args.steps.max_lag,
        allow_degraded: false,
        delete_emptydir_data: args.steps.delete_emptydir_data,
        allow_hostpath_data: args.steps.allow_hostpath_data,
        assume_voters_are_pods: Assume::from_flag(args.steps.assume_voters_are_pods.as_deref()),
        assume_followers_current: Assume::from_flag(args.steps.assume_followers_current.as_deref()),
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
        let plan = plan_cluster(&input, &opts);
        let mut c = ClusterSummary::new(&ns, &name, ClusterResult::Planned);
        c.system = input.report.system.clone();
        c.left = crate::drain::left_on(&input, &opts.nodes);
        let blocked = plan.blocker.clone();
        c.plan = plan;
        let succeeded = blocked.is_none();
        let message = match &blocked {
            None => format!(
                "dry run: {} member(s) would be restarted; nothing was changed",
                c.plan.steps.len()
            ),
            Some(b) => format!("dry run: the restart would stop: {}", b.message),
        };
        let message = match &driven {
            Some(d) if d.switch_now => format!(
                "{message}. The staged update would be driven with the StatefulSet's update strategy set to OnDelete, and {} put back at the end",
                describe_strategy(&d.strategy)
            ),
            _ => message,
        };
        c.message = message.clone();
        return Ok(Done::Report(Box::new(RestartReport {
            api_version: API_VERSION,
            kind: "RestartReport",
            dry_run: true,
            restart,
            succeeded,
            cluster: c,
            message,
            followed: vec![],
        })));
    }

    if pending(&pods, &restart).is_empty() {
        return Ok(Done::Line(format!(
            "{ns}/{name}: every member is already restarted; nothing to do"
        )));
    }
    // Only a staged update driven under OnDelete changes the StatefulSet (its strategy, and
    // back): the role for that is an optional one (docs/rbac.yaml).
    let mut needs = vec![];
    if driven.is_some() {
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
    let holder = lock::holder_identity(&format!("restart {ns}/{name}"));
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
        writeln!(
            err,
            "Warning: took over {ns}/{name}'s stale lock from {who}"
        )?;
    }
    // Decided on the record read before the lock was taken: it must be the one the lock
    // holds now (another restart may have run in between).
    if held.record(RESTART_PENDING) != on_lock {
        held.release().await;
        bail!("{ns}/{name}'s restart record changed while this restart started (another restart ran meanwhile); run the same command again");
    }
    let following = Following::new(
        restart,
        sts.status.as_ref().and_then(|s| s.update_revision.clone()),
    );
    let result = restart_locked(
        surveyor,
        args,
        &sts_api,
        &ns,
        &name,
        &following,
        driven.as_ref(),
        &opts,
        &held,
        err,
    )
    .await;
    held.release().await;
    result
}

#[allow(clippy::too_many_arguments)]
async fn restart_locked(
    surveyor: &Surveyor,
    args: &RestartArgs,
    sts_api: &Api<StatefulSet>,
    ns: &str,
    name: &str,
    following: &Following,
    driven: Option<&Driven>,
    opts: &DrainOptions,
    held: &lock::Held,
    err: &mut dyn Write,
) -> Result<Done> {
    if let Restart::Restart { uids } = following.now() {
        // The record a rerun resumes from, on the cluster's lock (kept when this run stops).
        held.set_record(RESTART_PENDING, Some(&to_annotation(&uids)))
            .await?;
    }
    if let Some(d) = driven.filter(|d| d.switch_now) {
        switch_to_on_delete(sts_api, name, &d.strategy).await?;
        writeln!(
            err,
            "{ns}/{name}: update strategy set to OnDelete while the staged update is driven ({} is put back at the end; {SAVED_STRATEGY} on the StatefulSet keeps it)",
            describe_strategy(&d.strategy)
        )?;
    }
    let evictor = Evictor {
        client: surveyor.conn.probe_client.clone(),
        grace_period: None,
        disable_eviction: args.steps.disable_eviction,
        timeout: args.steps.timeout,
        cancel: CancellationToken::new(),
    };
    let ctrl_c = stop_on_ctrl_c(evictor.cancel.clone());
    let real = KubeCluster {
        surveyor,
        evictor: &evictor,
        pvs: None,
        timeout: args.steps.timeout,
        probe_limit: surveyor.probe_timeout,
        opts,
        ns,
        name,
        named: args.name.is_some(),
        lock: Some(held),
        restart: Some(following),
    };
    let progress = Progress::new();
    let line = progress.line(&format!("{ns}/{name}"));
    let settings = Settings {
        timeout: args.steps.timeout,
    };
    let mut summary = drain_cluster(&real, &line, opts, &settings, ns, name).await;
    line.finish();
    ctrl_c.abort();
    // A newer template it followed: the report names the revision it drove in the end.
    let restart = &following.now();
    let followed = following.notes();
    for note in &followed {
        writeln!(err, "{ns}/{name}: {note}")?;
    }
    let succeeded = summary.result != ClusterResult::Stopped;
    let message = if succeeded {
        if let Restart::Restart { .. } = restart {
            held.set_record(RESTART_PENDING, None).await?;
        }
        match driven {
            Some(d) => {
                restore_strategy(sts_api, name, &d.strategy).await?;
                format!(
                    "restarted {ns}/{name}; its update strategy ({}) is restored",
                    describe_strategy(&d.strategy)
                )
            }
            None => format!("restarted {ns}/{name}"),
        }
    } else {
        let strategy = match driven {
            Some(d) => format!(
                " The StatefulSet stays OnDelete until then (the same command puts {} back when it finishes; to put it back by hand: kubectl patch sts {name} -n {ns} --type=merge -p '{}')",
                describe_strategy(&d.strategy),
                restore_patch(&d.strategy)
            ),
            None => String::new(),
        };
        format!(
            "the restart stopped: {}. Fix what is named and run the same command again to resume (members already restarted are not restarted again).{strategy}",
            summary.message,
        )
    };
    summary.message = message.clone();
    Ok(Done::Report(Box::new(RestartReport {
        api_version: API_VERSION,
        kind: "RestartReport",
        dry_run: false,
        restart: restart.clone(),
        succeeded,
        cluster: summary,
        message,
        followed,
    })))
}

/// A staged RollingUpdate driven under OnDelete: the user's strategy, and whether this run
/// switches to OnDelete (false: an earlier, interrupted run did).
struct Driven {
    strategy: StatefulSetUpdateStrategy,
    switch_now: bool,
}

/// "RollingUpdate, partition 3" (what the user set, to be put back).
fn describe_strategy(s: &StatefulSetUpdateStrategy) -> String {
    let kind = s.type_.as_deref().unwrap_or("RollingUpdate");
    match s.rolling_update.as_ref().and_then(|r| r.partition) {
        Some(p) => format!("{kind}, partition {p}"),
        None => kind.to_string(),
    }
}

/// The merge patch that puts `s` back and removes the record of it.
fn restore_patch(s: &StatefulSetUpdateStrategy) -> serde_json::Value {
    serde_json::json!({
        "metadata": {"annotations": {SAVED_STRATEGY: null}},
        "spec": {"updateStrategy": s},
    })
}

/// Records the user's strategy on the StatefulSet and makes it OnDelete (one patch): from
/// here its controller replaces no member by itself; each member deleted comes back at the
/// update revision.
async fn switch_to_on_delete(
    api: &Api<StatefulSet>,
    name: &str,
    s: &StatefulSetUpdateStrategy,
) -> Result<()> {
    let saved = serde_json::to_string(s).expect("a strategy serialises");
    // Conditioned on the StatefulSet as read with the strategy this run decided on: a
    // strategy someone changed since is not overwritten.
    let current = read_sts(api, name).await?;
    let theirs = current
        .spec
        .as_ref()
        .and_then(|x| x.update_strategy.clone())
        .unwrap_or_default();
    if &theirs != s {
        bail!(
            "statefulset {name}'s update strategy changed since this restart read it (now {}); nothing was changed: run the same command again",
            describe_strategy(&theirs)
        );
    }
    let patch = serde_json::json!({
        "metadata": {"annotations": {SAVED_STRATEGY: saved}, "resourceVersion": current.metadata.resource_version},
        "spec": {"updateStrategy": {"type": "OnDelete", "rollingUpdate": null}},
    });
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|e| api_context(e, "patch", "statefulsets", ""))
        .with_context(|| format!("setting statefulset {name}'s update strategy to OnDelete"))?;
    Ok(())
}

async fn read_sts(api: &Api<StatefulSet>, name: &str) -> Result<StatefulSet> {
    api.get(name)
        .await
        .map_err(|e| api_context(e, "get", "statefulsets", ""))
        .with_context(|| format!("reading statefulset {name}"))
}

async fn restore_strategy(
    api: &Api<StatefulSet>,
    name: &str,
    s: &StatefulSetUpdateStrategy,
) -> Result<()> {
    // Only over the OnDelete this restart set, as read now (a resourceVersion precondition):
    // a strategy someone set meanwhile is theirs, and kept. The controller writes the
    // StatefulSet's status often: a conflict is read again, a few times.
    for attempt in 1..=3 {
        let current = read_sts(api, name).await?;
        let theirs = current
            .spec
            .as_ref()
            .and_then(|x| x.update_strategy.clone())
            .unwrap_or_default();
        if theirs.type_.as_deref() != Some("OnDelete") {
            bail!(
                "statefulset {name}'s update strategy was changed meanwhile (now {}); it is left as it is, and {} is not put back",
                describe_strategy(&theirs),
                describe_strategy(s)
            );
        }
        let mut patch = restore_patch(s);
        patch["metadata"]["resourceVersion"] = serde_json::json!(current.metadata.resource_version);
        match api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => return Ok(()),
            Err(e) if attempt < 3 && crate::errors::status_of(&e).is_some_and(|x| x.code == 409) => {}
            Err(e) => {
                return Err(api_context(e, "patch", "statefulsets", "")).with_context(|| {
                    format!(
                        "putting statefulset {name}'s update strategy back to {} (by hand: kubectl patch sts {name} --type=merge -p '{}')",
                        describe_strategy(s),
                        restore_patch(s)
                    )
                })
            }
        }
    }
    unreachable!("the last attempt returns")
}
