//! One StatefulSet's restart, start to end, as a library beside the drain's
//! [`crate::drain::nodes::drain_nodes`]: read the StatefulSet (waiting for its controller to
//! act on its latest change), survey it, decide ([`crate::plan::restart::decide`]), check the
//! rights, take the cluster's lock, check the record it decided on is still the one on the
//! lock, run [`crate::drain::rollout::roll`] over [`KubeRollout`], give the lock back.
//!
//! It takes settings of its own ([`RestartSettings`], converted from flags in `cli.rs`) and
//! speaks only through a [`Sink`]; Ctrl-C reaches it as `cancel` (the caller owns the signal,
//! for every StatefulSet of its run). `commands::restart` maps flags, picks the StatefulSets
//! and renders. As kubectl's drain, it decides first (`look`: nothing to do, a dry run's plan,
//! or a run) and then acts on that decision (`run`), the lock's record checked to be the one
//! decided on.

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::{anyhow, bail, Result};
use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetUpdateStrategy};
use kube::api::Api;
use tokio_util::sync::CancellationToken;

use crate::actions::RestartReport;
use crate::drain::nodes::Sink;
use crate::drain::rollout::{self, roll, Rollout};
use crate::drain::Settings;
use crate::errors::api_context;
use crate::live::cluster::{cluster_input, Following, KubeCluster};
use crate::live::evict::Evictor;
use crate::live::statefulset::{once_observed, restore_strategy, Interrupted, KubeRollout};
use crate::live::{lock, needs};
use crate::model::Selection;
use crate::plan::drain::DrainOptions;
use crate::plan::restart::{decide, describe_strategy, pending, Decision, RESTART_PENDING};
use crate::preflight::{self, Need};
use crate::select::NotRecognised;
use crate::survey::Surveyor;

/// How long a restart waits for the StatefulSet's controller to act on its latest change
/// before it decides (it acts within a second when it runs).
pub const OBSERVED_WITHIN: Duration = Duration::from_secs(30);

/// What a restart of one StatefulSet is asked to do (the library's own settings).
#[derive(Debug, Clone)]
pub struct RestartSettings {
    /// Plan only: nothing is changed, no lock is taken.
    pub dry_run: bool,
    /// The user named the StatefulSet (rather than `-l` finding it).
    pub named: bool,
    /// The drain's checks for each step (the quorum, the data, the assumptions).
    pub opts: DrainOptions,
    /// How long any one wait lasts.
    pub settings: Settings,
    /// Where the per-cluster locks live.
    pub lock_namespace: String,
    /// Delete members instead of evicting them (no PodDisruptionBudget consulted).
    pub disable_eviction: bool,
    /// How long to wait for the controller to act on the StatefulSet's latest change.
    pub observed_within: Duration,
}

/// How one StatefulSet's restart ended.
pub enum Done {
    /// The run's report (a dry run's plan included).
    Report(Box<RestartReport>),
    /// Nothing to do (said in this line).
    Line(String),
}

/// One StatefulSet's restart: its report (for the caller to render), or a line when there was
/// nothing to do. Decided on what was read before the lock; run on the lock, after the record
/// was checked unchanged. An error is a stop before the first eviction; a StatefulSet the
/// plugin does not recognise is [`NotRecognised`].
pub async fn restart_statefulset<S: Sink + Sync>(
    surveyor: &Surveyor,
    sink: &S,
    r: &RestartSettings,
    cancel: &CancellationToken,
    ns: &str,
    name: &str,
) -> Result<Done> {
    match look(surveyor, sink, r, cancel, ns, name).await? {
        Looked::Done(done) => Ok(done),
        Looked::Restore { strategy, on_lock } => {
            restore_on_lock(surveyor, sink, r, cancel, ns, name, &strategy, on_lock).await
        }
        Looked::Run(planned) => run(surveyor, sink, r, cancel, *planned).await,
    }
}

/// Puts back the strategy a finished run left (every member replaced, the strategy not yet
/// restored), on the cluster's lock as every change restart makes: a restart running
/// meanwhile (the record on the lock changed) is left to put it back itself.
#[allow(clippy::too_many_arguments)]
async fn restore_on_lock<S: Sink + Sync>(
    surveyor: &Surveyor,
    sink: &S,
    r: &RestartSettings,
    cancel: &CancellationToken,
    ns: &str,
    name: &str,
    strategy: &StatefulSetUpdateStrategy,
    on_lock: Option<String>,
) -> Result<Done> {
    let client = surveyor.conn.client.clone();
    let cluster = format!("{ns}/{name}");
    let mut needs = vec![patch_statefulsets(ns, "put the update strategy back")];
    needs.extend(preflight::lock_steps(&r.lock_namespace));
    preflight::check(
        &client,
        "putting the update strategy back",
        &needs,
        &|m: &str| sink.say(&format!("Warning: {m}")),
    )
    .await?;
    let (held, _) = lock_as_decided(&client, sink, r, cancel, ns, name, on_lock).await?;
    let sts_api: Api<StatefulSet> = Api::namespaced(client, ns);
    let restored = restore_strategy(&sts_api, name, strategy).await;
    held.release().await;
    restored?;
    Ok(Done::Line(format!(
        "{cluster}: every member is at the update revision; its update strategy ({}) is restored",
        describe_strategy(strategy)
    )))
}

/// What the look decided.
enum Looked {
    /// Nothing to do, or a dry run's plan.
    Done(Done),
    /// Every member replaced by a run that did not put the user's strategy back: put it back
    /// (on the lock, whose record must still be `on_lock`).
    Restore {
        strategy: StatefulSetUpdateStrategy,
        on_lock: Option<String>,
    },
    /// A run to make, on the lock.
    Run(Box<Planned>),
}

/// A run decided on before the lock was taken.
struct Planned {
    /// The StatefulSet's update revision when the run was decided (what it follows from).
    started_at: Option<String>,
    restart: crate::plan::restart::Restart,
    rollout: Rollout,
    /// The restart record the decision read on the lock (it must still be there).
    on_lock: Option<String>,
    /// The rights its NATS requests need (a port-forward off the direct route).
    nats_rights: Vec<Need>,
}

/// Reads the StatefulSet (once its controller has acted on its latest change), surveys its
/// members and decides.
async fn look<S: Sink + Sync>(
    surveyor: &Surveyor,
    sink: &S,
    r: &RestartSettings,
    cancel: &CancellationToken,
    ns: &str,
    name: &str,
) -> Result<Looked> {
    let client = surveyor.conn.client.clone();
    let sts_api: Api<StatefulSet> = Api::namespaced(client.clone(), ns);
    let sts = sts_api
        .get_opt(name)
        .await
        .map_err(|e| api_context(e, "get", "statefulsets", &format!("in namespace {ns:?}")))?
        .ok_or_else(|| {
            anyhow!("statefulset {name:?} not found in namespace {ns:?} (-n NAMESPACE?)")
        })?;
    // A change the controller has not acted on yet (`kubectl rollout restart` a moment ago)
    // is waited for: decided before it, a restart could run beside the controller's rollout.
    let sts = once_observed(&sts_api, sts, r.observed_within, cancel, &|m: &str| {
        sink.say(m)
    })
    .await?;
    // Named when the user typed it; a -l match is a StatefulSet the command found.
    let sel = Selection {
        name: Some(name.to_string()),
        named: r.named,
        ..Default::default()
    };
    let survey = surveyor.survey_in(Some(ns), &sel).await?;
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
    // Ctrl-C during the read or the survey: nothing decided, nothing changed.
    interrupted(cancel, &format!("surveying {ns}/{name}"))?;
    let pods = obs.target.pods.clone();
    let on_lock = lock::peek(&client, &r.lock_namespace, ns, name)
        .await?
        .remove(RESTART_PENDING);
    let cluster = format!("{ns}/{name}");
    let (restart, driven) = match decide(&cluster, &sts, &pods, on_lock.as_deref(), r.dry_run)
        .map_err(|e| anyhow!(e))?
    {
        Decision::RestoreOnly(strategy) => return Ok(Looked::Restore { strategy, on_lock }),
        Decision::Run {
            restart,
            driven,
            note,
        } => {
            if let Some(note) = note {
                sink.say(&note);
            }
            (restart, driven)
        }
    };
    let rollout = Rollout {
        namespace: ns.to_string(),
        name: name.to_string(),
        driven,
        opts: r.opts.clone(),
        settings: r.settings.clone(),
    };
    let replace = pending(&pods, &restart);
    // The NATS requests the run will send (the meta leader's stepdown, its streams'), each
    // checked to have a user before the first eviction: found missing at the leader, a
    // restart would stop with the followers already replaced.
    let nats = needs::requests_needs(surveyor, &obs, &replace).await?;
    if r.dry_run {
        let input = cluster_input(
            &obs,
            report,
            &survey.snapshot,
            None,
            &BTreeSet::new(),
            replace,
        );
        let mut plan = rollout::dry_run(&rollout, restart, &input);
        if let Some(stop) = nats.stop("the restart", &cluster) {
            // Said beside what else would stop it, never instead of it.
            let before = if plan.succeeded {
                "dry run".to_string()
            } else {
                format!("{}; and", plan.message)
            };
            plan.succeeded = false;
            plan.message =
                format!("{before}: the restart would stop before changing anything: {stop}");
            plan.cluster.message = plan.message.clone();
        }
        return Ok(Looked::Done(Done::Report(Box::new(plan))));
    }
    if replace.is_empty() {
        return Ok(Looked::Done(Done::Line(format!(
            "{cluster}: every member is already restarted; nothing to do"
        ))));
    }
    if let Some(stop) = nats.stop("the restart", &cluster) {
        bail!("{stop}. The restart stopped before changing anything");
    }
    Ok(Looked::Run(Box::new(Planned {
        started_at: sts.status.as_ref().and_then(|s| s.update_revision.clone()),
        restart,
        rollout,
        on_lock,
        nats_rights: nats.rights,
    })))
}

/// Acts on a decided run: the rights checked, the lock taken and its record checked to be the
/// one decided on, the rollout run, the lock given back whatever happened.
async fn run<S: Sink + Sync>(
    surveyor: &Surveyor,
    sink: &S,
    r: &RestartSettings,
    cancel: &CancellationToken,
    p: Planned,
) -> Result<Done> {
    let Planned {
        started_at,
        restart,
        rollout,
        on_lock,
        nats_rights,
    } = p;
    let (ns, name) = (&rollout.namespace, &rollout.name);
    let cluster = format!("{ns}/{name}");
    let client = surveyor.conn.client.clone();
    interrupted(cancel, &format!("deciding {cluster}'s restart"))?;
    preflight::check(
        &client,
        "the restart",
        &[needs(ns, r, rollout.driven.is_some()), nats_rights].concat(),
        &|m: &str| sink.say(&format!("Warning: {m}")),
    )
    .await?;
    interrupted(
        cancel,
        &format!("checking the rights for {cluster}'s restart"),
    )?;
    let (held, holder) = lock_as_decided(&client, sink, r, cancel, ns, name, on_lock).await?;
    let following = Following::new(restart, started_at);
    let evictor = Evictor {
        client: surveyor.conn.probe_client.clone(),
        grace_period: None,
        disable_eviction: r.disable_eviction,
        timeout: r.settings.timeout,
        cancel: cancel.clone(),
        lock_holder: Some(holder.clone()),
    };
    let ops = KubeRollout::new(KubeCluster {
        surveyor,
        evictor: &evictor,
        pvs: None,
        timeout: r.settings.timeout,
        probe_limit: surveyor.probe_timeout,
        opts: &rollout.opts,
        ns,
        name,
        named: r.named,
        lock: Some(&held),
        restart: Some(&following),
    })
    .expect("built with its lock and the members it follows");
    let line = sink.line(&cluster);
    let result = roll(&ops, &line, &rollout).await;
    held.release().await;
    Ok(Done::Report(Box::new(result?)))
}

/// Takes the cluster's lock for a restart decided on the record `on_lock` read before it: the
/// record must be the one the lock holds now (another restart may have run in between).
/// Returns the lock and its holder's identity.
async fn lock_as_decided<S: Sink + Sync>(
    client: &kube::Client,
    sink: &S,
    r: &RestartSettings,
    cancel: &CancellationToken,
    ns: &str,
    name: &str,
    on_lock: Option<String>,
) -> Result<(lock::Held, String)> {
    let cluster = format!("{ns}/{name}");
    let holder = lock::holder_identity(&format!("restart {cluster}"));
    let (held, took_over) = lock::acquire(
        client,
        &r.lock_namespace,
        ns,
        name,
        &holder,
        &|m: &str| sink.say(m),
        cancel,
    )
    .await?;
    if let Some(who) = took_over {
        sink.say(&format!(
            "Warning: took over {cluster}'s stale lock from {who}"
        ));
    }
    if held.record(RESTART_PENDING) != on_lock {
        held.release().await;
        bail!("{cluster}'s restart record changed while this restart started (another restart ran meanwhile); run the same command again");
    }
    Ok((held, holder))
}

/// An [`Interrupted`] error when Ctrl-C came (`cancel`) while `doing`: nothing was changed.
fn interrupted(cancel: &CancellationToken, doing: &str) -> Result<()> {
    if cancel.is_cancelled() {
        bail!(Interrupted(doing.to_string()));
    }
    Ok(())
}

fn patch_statefulsets(ns: &str, why: &'static str) -> Need {
    Need::new("patch", "statefulsets", why)
        .group("apps")
        .in_namespace(ns)
}

/// The rights a restart of a StatefulSet in `ns` needs: the members' steps and the lock, and,
/// when a staged update is driven under OnDelete, patching the StatefulSet (its strategy, and
/// back: an optional role, docs/rbac.yaml).
fn needs(ns: &str, r: &RestartSettings, driven: bool) -> Vec<Need> {
    let mut needs = vec![];
    if driven {
        needs.push(patch_statefulsets(
            ns,
            "set the StatefulSet OnDelete while the restart runs (so that its controller deletes no member beside it) and put the strategy back (kubectl-raft-restart-staged)",
        ));
    }
    needs.extend(preflight::member_steps(
        Some(ns),
        r.disable_eviction,
        &r.lock_namespace,
    ));
    needs
}
