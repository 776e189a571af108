//! `yield --local` as a library: the in-pod handover of a preStop hook. This replica on
//! localhost, its peers at the URLs its member list gives; the Kubernetes API only to see
//! whether a peer's pod is itself terminating, where this pod may (its ServiceAccount). If
//! this replica leads, hand over and wait exactly as `yield` does (the one handover verdict);
//! otherwise end at once.
//!
//! [`hand_over_here`] takes the library's [`YieldSettings`] and [`LocalSettings`], says what it
//! waits for through a [`Sink`], and returns the hook's lines ([`HookReport`]) for the caller
//! to print: what it did on stdout, and why it failed.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};
use k8s_openapi::api::core::v1::{Container, ContainerPort, Pod, PodCondition, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::Api;

use crate::actions::HandoverFailure;
use crate::connect::ConnectOptions;
use crate::drain::nodes::Sink;
use crate::handover::{send_transfer, transfer_and_wait, WaitOptions};
use crate::live::yield_::{LocalSettings, YieldSettings};
use crate::model::{human_duration, ClusterTarget, OwnerKind, Role, Snapshot};
use crate::observe::{observe_cluster, observe_replica, poll_view};
use crate::plan::{plan_yield, self_yield_call, stepped_down, RefusalReason, YieldOptions};
use crate::profile::Profile;
use crate::survey::load_catalog;
use crate::transport::Transport;

const ME: &str = "kubectl-raft yield --local";

/// How long the hook may take: two thirds of the pod's grace period, leaving the process a
/// third of it to stop, and never more than --timeout.
pub fn hook_budget(timeout: Duration, grace_period: Duration) -> Duration {
    timeout.min(grace_period * 2 / 3)
}

/// What the hook did, as its log lines: `said` (stdout), and `failed` when it failed (why, for
/// stderr; the hook then exits 1).
#[derive(Debug, Default)]
pub struct HookReport {
    pub said: Vec<String>,
    pub failed: Option<String>,
}

impl HookReport {
    fn say(&mut self, line: String) {
        self.said.push(line);
    }

    fn fail(&mut self, why: String) {
        self.failed = Some(why);
    }
}

/// The in-pod handover, bounded by [`hook_budget`]: its lines, and an error where it could not
/// go on (a setting that cannot work, a member list that cannot be read, a refused plan); the
/// lines said before the error are kept.
pub async fn hand_over_here<S: Sink>(
    args: &YieldSettings,
    local: &LocalSettings,
    sink: &S,
) -> (HookReport, Result<()>) {
    let grace = Duration::from_secs(local.pod_grace_period.into());
    let budget = hook_budget(args.timeout, grace);
    let within = YieldSettings {
        timeout: budget,
        ..args.clone()
    };
    let mut report = HookReport::default();
    match tokio::time::timeout(budget, run_within(&within, local, sink, &mut report)).await {
        Ok(r) => (report, r),
        Err(_) => {
            report.fail(format!(
                "{ME}: gave up after {}, leaving the process the rest of the pod's {} grace period to stop (--pod-grace-period {}, --timeout {}); the handover may not have happened",
                human_duration(budget),
                human_duration(grace),
                local.pod_grace_period,
                human_duration(args.timeout),
            ));
            (report, Ok(()))
        }
    }
}

async fn run_within<S: Sink>(
    args: &YieldSettings,
    hook: &LocalSettings,
    sink: &S,
    r: &mut HookReport,
) -> Result<()> {
    let began = tokio::time::Instant::now();
    let survey = &args.survey;
    let (profile, port) = profile_and_port(args, hook)?;
    let limit = survey.probe_timeout;
    let transport = pod_transport(args)?;
    let local = synthetic_pod("localhost", "127.0.0.1", port, &profile);
    let me = observe_replica(&transport, &profile, &local, limit).await;
    let role = me.facts.role;
    if me.facts.role.is_none() && !me.errors.is_empty() {
        r.fail(format!(
            "{ME}: no answer from this replica on port {port} ({}); nothing handed over",
            me.errors.join("; ")
        ));
        return Ok(());
    }
    let follower_line = format!(
        "{ME}: this replica ({}) is {}, not the leader; nothing to hand over",
        me.facts.member_id.as_deref().unwrap_or("?"),
        role.unwrap_or(Role::Unknown).as_str()
    );
    if role != Some(Role::Leader) && !hook.wait_for_quorum {
        r.say(follower_line);
        return Ok(());
    }
    // The peers, from this replica's own member list.
    let Some(spec) = profile
        .membership
        .as_ref()
        .filter(|m| m.url.is_some() || m.address.is_some())
    else {
        if hook.wait_for_quorum {
            sink.say(&format!(
                "{ME}: --wait-for-quorum: the {} profile lists no member addresses, so the others cannot be asked; not waiting",
                profile.name
            ));
        }
        if role != Some(Role::Leader) {
            r.say(follower_line);
            return Ok(());
        }
        // No peers to watch (ClickHouse Keeper's HTTP says nothing of them): hand over
        // through this replica and wait until it follows a leader, as the seed's hook does.
        // What is left of the hook's time is the handover's.
        let left = (began + args.timeout).saturating_duration_since(tokio::time::Instant::now());
        let within = YieldSettings {
            timeout: left,
            ..args.clone()
        };
        return hand_over_alone(&transport, &profile, local, &within, args.timeout, r).await;
    };
    let my_id = me.facts.member_id.clone().unwrap_or_default();
    // The member list, read again every 500 ms while it cannot be read (a leader that has
    // just taken over, a loaded node), for at most half the hook's time. Without its own
    // entry this replica cannot tell itself from the others: another read does not change that.
    let read = || async {
        match members_as_pods(&transport, &profile, &local, spec, &my_id, port, limit).await {
            Ok((target, Some(mine), skipped)) => Ok((target, mine, skipped)),
            Ok((_, None, _)) => Err((
                false,
                anyhow!("this replica (member id {my_id:?}) is not in its own member list"),
            )),
            Err(e) => Err((true, e)),
        }
    };
    let first = |e: &anyhow::Error, left: Duration| {
        sink.say(&format!(
            "{ME}: cannot read the member list ({e:#}); looking again every {} for up to {}",
            human_duration(LOOK_AGAIN),
            human_duration(left)
        ))
    };
    let listed = look_again_until(began + args.timeout / 2, limit * 2, read, first).await;
    let (target, my_name, skipped) = match listed {
        Ok(listed) => listed,
        // A leader cannot hand over without its peers.
        Err(e) if role == Some(Role::Leader) => {
            return Err(e.context(format!("{ME}: nothing handed over")))
        }
        // Here only with --wait-for-quorum: a follower says why it does not wait.
        Err(e) => {
            sink.say(&format!("{ME}: --wait-for-quorum: {e:#}; not waiting"));
            r.say(follower_line);
            return Ok(());
        }
    };
    for line in skipped {
        sink.say(&line);
    }
    if hook.wait_for_quorum {
        // Half the hook's time at most: the rest is for the handover.
        let until = began + args.timeout / 2;
        let mine = my_name.clone();
        match wait_for_others(&transport, &target, &mine, args.max_lag, limit, until, sink).await {
            Ok((n, q)) => r.say(format!(
                "{ME}: the others are {n} healthy voter(s), {q} needed without this replica (waited {})",
                human_duration(began.elapsed())
            )),
            Err((Some((n, q)), why)) => sink.say(&format!(
                "{ME}: the others were still {n} healthy voter(s) where {q} are needed without this replica after {} ({why}); going ahead: the pod is stopping",
                human_duration(began.elapsed())
            )),
            Err((None, why)) => sink.say(&format!(
                "{ME}: the others could not be counted after {} ({why}); going ahead: the pod is stopping",
                human_duration(began.elapsed())
            )),
        }
    }
    if role != Some(Role::Leader) {
        r.say(follower_line);
        return Ok(());
    }
    // The pod is stopping whatever happens: a handover is better than none, so the refusals
    // that --force may override are overridden, and said.
    let opts = YieldOptions {
        to: args.to.clone(),
        avoid_nodes: vec![],
        avoid_pods: vec![],
        max_lag: args.max_lag,
        force: true,
    };
    // A plan on a fresh look, looked at again while what stops it may pass (every peer slower
    // than one probe timeout on a loaded node, or catching up; a named target that does not
    // answer yet; no leader claimed yet), until half the hook's time is gone: the rest is for
    // the handover. Each look reads again which peers' pods are terminating (the first within
    // a quarter of the hook's time, or one probe timeout if longer; the others within one probe
    // timeout); a peer once seen terminating stays so, whatever a later read says, and each
    // line is said once. A look is a read and an observation: the next one is taken only if
    // one as long as the last (at least two probe timeouts) ends in time.
    let until = began + args.timeout / 2;
    let looks = std::sync::atomic::AtomicUsize::new(0);
    let stopping: std::sync::Mutex<BTreeMap<String, Time>> = Default::default();
    let said: std::sync::Mutex<std::collections::BTreeSet<String>> = Default::default();
    let say_once = |line: String| {
        if said.lock().expect("said").insert(line.clone()) {
            sink.say(&line);
        }
    };
    let peers: Vec<String> = target
        .pods
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .filter(|n| *n != my_name)
        .collect();
    let (t, p, o, mine, connect, looks, stopping, say_once, peers) = (
        &transport,
        &profile,
        &opts,
        Some(my_name.as_str()),
        &survey.connect,
        &looks,
        &stopping,
        &say_once,
        &peers,
    );
    let look = move || {
        let target = target.clone();
        async move {
            let first = looks.fetch_add(1, std::sync::atomic::Ordering::Relaxed) == 0;
            let within = if first {
                (args.timeout / 4).max(limit)
            } else {
                limit
            };
            match terminating_peers(connect, peers, within).await {
                Ok(now) => stopping.lock().expect("stopping").extend(now),
                Err(why) => say_once(format!(
                    "{ME}: cannot see whether the peers' pods are terminating ({why}); a peer that is itself stopping may be chosen"
                )),
            }
            let marked = stopping.lock().expect("stopping").clone();
            let (target, lines) = mark_terminating(target, &marked);
            lines.into_iter().for_each(say_once);
            let obs = observe_cluster(t, target, limit).await;
            let report = crate::assess::assess(&obs, &Snapshot::default());
            if let Err(claimants) = sole_claimant(&report, mine) {
                if no_longer_leads(&report, &claimants, mine) {
                    return Err((false, Stop::Follows(claimants)));
                }
                return Err((mine.is_some(), Stop::NotSole(claimants)));
            }
            match plan_yield(&report, p, o) {
                // A target that does not answer as a follower with a passing health check is
                // never sent a transfer, even named and forced (it would stall the cluster for
                // an election timeout and fail); a later look may hear it.
                Ok(plan) if !answers_as_follower(&report, &plan.target) => {
                    Err((true, Stop::Silent(plan.target)))
                }
                Ok(plan) => Ok((obs, report, plan)),
                Err(no) => {
                    // A member list that cannot be read now may be read at the next look.
                    let again = no.reason == RefusalReason::VotersUnknown
                        || (no.reason == RefusalReason::NoCandidate
                            && a_peer_may_recover(&report, mine, o.max_lag));
                    Err((again, Stop::Refused(no)))
                }
            }
        }
    };
    let first = |stop: &Stop, left: Duration| {
        sink.say(&format!(
            "{ME}: {}; looking again every {} for up to {}",
            stop.reason(),
            human_duration(LOOK_AGAIN),
            human_duration(left)
        ))
    };
    let (obs, report, plan) = match look_again_until(until, limit * 2, look, first).await {
        Ok(chosen) => chosen,
        Err(Stop::Follows(claimants)) => {
            r.say(format!(
                "{ME}: this replica no longer leads ({} does); nothing to hand over",
                claimants.join(", ")
            ));
            return Ok(());
        }
        Err(stop @ Stop::NotSole(_)) => {
            r.fail(format!("{ME}: {}; nothing handed over", stop.reason()));
            return Ok(());
        }
        Err(stop @ Stop::Silent(_)) => {
            r.fail(format!("{ME}: {}; nothing handed over", stop.reason()));
            return Ok(());
        }
        Err(Stop::Refused(no)) => return Err(anyhow!("{ME}: {no}")),
    };
    // What is left of the hook's time is the handover's.
    let left = (began + args.timeout).saturating_duration_since(tokio::time::Instant::now());
    let wait = WaitOptions::new(left, limit);
    let waited = transfer_and_wait(&transport, &obs.target, &report, &plan, &wait, left).await;
    let total = human_duration(Duration::from_secs_f64(waited.total_ms / 1000.0));
    let forced: Vec<String> = plan.overridden.iter().map(|r| r.message.clone()).collect();
    let note = if forced.is_empty() {
        String::new()
    } else {
        format!(" (despite: {})", forced.join("; "))
    };
    // The one verdict (yield's and drain's). What the hook is for is this replica no longer
    // leading: an election besides the transfer (a term that jumped, another member) still
    // lets the pod stop without taking leadership with it, so it is said, not failed.
    match waited.verdict(plan.term, plan.targeted) {
        Ok(()) => r.say(format!(
            "{ME}: {} handed leadership to {} in {total} (term {} → {}){note}",
            plan.leader,
            waited.new_leader.as_deref().unwrap_or("?"),
            plan.term.map_or("?".into(), |t| t.to_string()),
            waited.term_after.map_or("?".into(), |t| t.to_string()),
        )),
        Err(f @ (HandoverFailure::TermJumped { .. } | HandoverFailure::WentElsewhere { .. })) => r
            .say(format!(
                "{ME}: {} no longer leads after {total}, but not by this transfer alone: {f}{note}",
                plan.leader,
            )),
        Err(failure) => r.fail(format!(
            "{ME}: {} could not hand leadership over in the {} left of the hook's {} (after {total}): {failure}; leader now {}",
            plan.leader,
            human_duration(left),
            human_duration(args.timeout),
            waited.new_leader.as_deref().unwrap_or("unknown"),
        )),
    }
    Ok(())
}

/// The profile `--system` names, and this replica's port on localhost (`--port`, else the
/// profile's first port number).
fn profile_and_port(args: &YieldSettings, hook: &LocalSettings) -> Result<(Profile, u16)> {
    let survey = &args.survey;
    let catalog = load_catalog(survey.profiles.as_deref())?;
    let system = survey.system.as_deref().expect("clap requires --system");
    // The pod's own TLS files say its replica is served over HTTPS, on the profile's TLS
    // port where it has one (the hook reads no StatefulSet: no annotation, no pod spec).
    let https = survey.credentials.tls.gives_tls();
    let profile = crate::profile::served(
        catalog.require(system)?.clone(),
        None,
        https.then_some(crate::profile::Scheme::Https),
    );
    let first = profile
        .port
        .numbers
        .first()
        .and_then(|n| u16::try_from(*n).ok());
    match hook.port.or(first) {
        Some(p) => Ok((profile, p)),
        None => anyhow::bail!(
            "the {} profile names no port number; pass --port",
            profile.name
        ),
    }
}

/// The replicas reached directly, with the pod's own environment for credentials (a mounted
/// file's values first). A Secret is refused: the hook runs with the pod's rights, which need
/// none.
fn pod_transport(args: &YieldSettings) -> Result<Transport> {
    let survey = &args.survey;
    if survey.credentials.secret.is_some() {
        anyhow::bail!("--local reads no Secrets (it runs with the pod's own rights, which need none): mount the Secret and pass --credentials-file");
    }
    let vars = match &survey.credentials.file {
        Some(path) => crate::credentials::read_file(path)?.with_env(true),
        None => crate::credentials::Vars::environment(),
    };
    let tls_settings = &survey.credentials.tls;
    if tls_settings.secret.is_some() {
        anyhow::bail!("--local reads no Secrets (it runs with the pod's own rights, which need none): mount the TLS Secret and pass --tls-ca, --tls-cert and --tls-key with its files' paths");
    }
    // The pod's own files: this pod's cluster is the one it serves.
    let material = tls_settings.read_files()?;
    let tls =
        crate::tls::Tls::new(material.as_ref(), &tls_settings.choices).map_err(|e| anyhow!(e))?;
    Ok(Transport::direct(survey.max_inflight)
        .with_vars(std::sync::Arc::new(vars))
        .with_tls(std::sync::Arc::new(tls)))
}

/// The cluster as this replica's member list gives it: each member a pod at its URL (this
/// replica on localhost), this replica's name among them, and a line for each member that
/// gives no place to reach it.
async fn members_as_pods(
    transport: &Transport,
    profile: &Profile,
    local: &Pod,
    spec: &crate::model::profile::MembershipSpec,
    my_id: &str,
    port: u16,
    limit: Duration,
) -> Result<(ClusterTarget, Option<String>, Vec<String>)> {
    let ep = crate::observe::endpoint(profile, local, None).map_err(|e| anyhow!("{e}"))?;
    let ans = transport
        .call(&ep, &spec.request, limit)
        .await
        .map_err(|e| anyhow!("{}: {e}", spec.request.path))?;
    let members = crate::profile::extract::parse_membership(spec, &ans).map_err(|e| anyhow!(e))?;
    let mut pods = vec![];
    let mut skipped = vec![];
    let mut my_name = None;
    for m in &members {
        let name = m
            .name
            .clone()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| m.id.clone());
        if m.id == my_id {
            pods.push(synthetic_pod(&name, "127.0.0.1", port, profile));
            my_name = Some(name);
            continue;
        }
        match peer_at(m) {
            Ok((host, p)) => pods.push(synthetic_pod(&name, &host, p.unwrap_or(port), profile)),
            // Not asked, so never a target; the list still counts it among the voters.
            Err(e) => skipped.push(format!(
                "{ME}: member {name}: {e:#}; it is not asked (never a target)"
            )),
        }
    }
    let target = ClusterTarget {
        namespace: "local".into(),
        name: profile.name.clone(),
        owner_kind: OwnerKind::Selector,
        profile: profile.clone(),
        desired_replicas: pods.len() as u32,
        pods,
        credentials_secret: None,
        tls_secret: None,
        gate_assume: None,
        named: true,
    };
    Ok((target, my_name, skipped))
}

/// A peer whose own pod is stopping never takes over: each peer in `stopping` (its pod's
/// deletion, as this pod could see it) is marked terminating (not a healthy voter, so never a
/// target). The lines say which.
fn mark_terminating(
    mut target: ClusterTarget,
    stopping: &BTreeMap<String, Time>,
) -> (ClusterTarget, Vec<String>) {
    let mut said = vec![];
    for p in target.pods.iter_mut() {
        let name = p.metadata.name.clone().unwrap_or_default();
        if let Some(at) = stopping.get(&name) {
            said.push(format!(
                "{ME}: {name}'s pod is terminating: it is not a target"
            ));
            p.metadata.deletion_timestamp = Some(at.clone());
        }
    }
    (target, said)
}

/// Why a look gave no plan: another member alone leads and this replica answered that it does
/// not (its name); this replica is not the sole claimant otherwise (the claimants); or the
/// plan's refusal.
enum Stop {
    Follows(Vec<String>),
    NotSole(Vec<String>),
    /// The plan's target (named with --to) does not answer as a follower with a passing
    /// health check.
    Silent(String),
    Refused(crate::plan::Refusal),
}

impl Stop {
    fn reason(&self) -> String {
        match self {
            Stop::Follows(claimants) => format!(
                "this replica no longer leads ({} does)",
                claimants.join(", ")
            ),
            Stop::NotSole(claimants) => format!(
                "this replica is not the only one that claims leadership (claimants: {})",
                if claimants.is_empty() {
                    "none".to_string()
                } else {
                    claimants.join(", ")
                }
            ),
            Stop::Silent(target) => format!(
                "{target} does not answer as a follower with a passing health check, and a transfer is never sent to a member that does not (--force included)"
            ),
            Stop::Refused(no) => no.message.clone(),
        }
    }
}

/// How often the hook looks again.
const LOOK_AGAIN: Duration = Duration::from_millis(500);

/// `look` until it gives a value, a failure no later look may change (its flag false), or no
/// further look (taking as long as the last one, and at least `look_takes`) would end by
/// `until` (then its last failure);
/// asked again every [`LOOK_AGAIN`]. `first` hears the first failure that is looked at again,
/// and how long is left.
async fn look_again_until<T, E, F, Fut>(
    until: tokio::time::Instant,
    look_takes: Duration,
    mut look: F,
    first: impl FnOnce(&E, Duration),
) -> Result<T, E>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, (bool, E)>>,
{
    let mut first = Some(first);
    loop {
        let asked = tokio::time::Instant::now();
        match look().await {
            Ok(t) => return Ok(t),
            Err((again, e)) => {
                let now = tokio::time::Instant::now();
                let next_takes = (now - asked).max(look_takes);
                if !again || now + LOOK_AGAIN + next_takes > until {
                    return Err(e);
                }
                if let Some(say) = first.take() {
                    say(&e, until - now);
                }
            }
        }
        tokio::time::sleep(LOOK_AGAIN).await;
    }
}

/// This replica no longer leads, by its own answer in this look (a role it knows, not
/// leader) beside another member's sole claim: another look does not change that. A replica
/// that did not answer, or that does not know its name, is looked at again (a stale claimant
/// may stand beside a leader that is merely slow to answer).
fn no_longer_leads(
    report: &crate::report::ClusterReport,
    claimants: &[String],
    mine: Option<&str>,
) -> bool {
    let Some(me) = mine else { return false };
    let answered = report
        .replicas
        .iter()
        .find(|x| x.pod == me)
        .is_some_and(|x| !matches!(x.raft.role, Role::Leader | Role::Unknown));
    answered && claimants.len() == 1 && claimants[0] != me
}

/// Whether `target` answered in this look as a follower whose health check passes.
fn answers_as_follower(report: &crate::report::ClusterReport, target: &str) -> bool {
    report.replicas.iter().any(|x| {
        x.pod == target
            && x.raft.role == Role::Follower
            && x.raft.health.state == crate::report::CheckState::Ok
    })
}

/// A peer that is a voter, not terminating and not yet healthy (unanswered within one probe
/// timeout, catching up, between terms): another look may find it able to take over. Learners
/// and terminating peers stay what they are.
fn a_peer_may_recover(
    report: &crate::report::ClusterReport,
    mine: Option<&str>,
    max_lag: u64,
) -> bool {
    use crate::assess::voter::{voter_health, Unhealthy};
    let leader = report.leader_replica();
    report
        .replicas
        .iter()
        .filter(|x| Some(x.pod.as_str()) != mine)
        .any(|x| {
            matches!(
                voter_health(x, leader, max_lag),
                Err((u, _)) if !matches!(u, Unhealthy::NotVoter | Unhealthy::Terminating)
            )
        })
}

/// Only the sole claimant hands over: with two replicas claiming leadership, a transfer from
/// here could as well depose the real leader's successor (--force overrides much, never this).
/// Err: the claimants.
fn sole_claimant(
    report: &crate::report::ClusterReport,
    mine: Option<&str>,
) -> Result<(), Vec<String>> {
    let claimants: Vec<String> = report
        .replicas
        .iter()
        .filter(|r| r.raft.role == Role::Leader)
        .map(|r| r.pod.clone())
        .collect();
    if claimants.len() == 1 && mine == Some(claimants[0].as_str()) {
        return Ok(());
    }
    Err(claimants)
}

/// Which of `peers` (members named as their pods) have pods that are terminating, read through
/// the Kubernetes API as this pod may: in a pod, with its ServiceAccount's token (it needs
/// `get` on `pods` in its namespace); or as --kubeconfig says. Each peer's pod by name in the
/// namespace (-n, or the pod's own); a name no pod has is not terminating. Err: why it could
/// not look within `limit`.
async fn terminating_peers(
    connect: &ConnectOptions,
    peers: &[String],
    limit: Duration,
) -> Result<BTreeMap<String, Time>, String> {
    let look = async {
        // One client: the hook makes a handful of reads, not a survey.
        let config = crate::connect::config(connect, false)
            .await
            .map_err(|e| crate::errors::anyhow_chain(&e))?;
        let ns = connect
            .namespace
            .clone()
            .unwrap_or_else(|| config.default_namespace.clone());
        let client = kube::Client::try_from(config).map_err(|e| e.to_string())?;
        let api: Api<Pod> = Api::namespaced(client, &ns);
        let got = futures::future::join_all(peers.iter().map(|p| api.get_opt(p))).await;
        let mut stopping = BTreeMap::new();
        for (name, r) in peers.iter().zip(got) {
            let pod = r.map_err(|e| {
                crate::errors::anyhow_chain(&crate::errors::api_context(
                    e,
                    "get",
                    "pods",
                    &format!("in namespace {ns}"),
                ))
            })?;
            if let Some(at) = pod.and_then(|p| p.metadata.deletion_timestamp) {
                stopping.insert(name.clone(), at);
            }
        }
        Ok(stopping)
    };
    match tokio::time::timeout(limit, look).await {
        Ok(r) => r,
        Err(_) => Err(format!(
            "the API server did not answer within {}",
            human_duration(limit)
        )),
    }
}

/// Until the others (all but `mine`) form a quorum of healthy, caught-up voters (the one
/// definition drain uses), asked every [`LOOK_AGAIN`] until `until`: Ok((healthy, quorum)),
/// or Err((healthy, quorum, the last reason)) when the time is up.
/// The others' healthy voters and the quorum needed without this replica, where the member
/// list could be read.
type Counted = Option<(usize, u32)>;

async fn wait_for_others<S: Sink>(
    transport: &Transport,
    target: &ClusterTarget,
    mine: &str,
    max_lag: u64,
    limit: Duration,
    until: tokio::time::Instant,
    sink: &S,
) -> Result<(usize, u32), (Counted, String)> {
    let look = || async {
        let obs = observe_cluster(transport, target.clone(), limit).await;
        let report = crate::assess::assess(&obs, &Snapshot::default());
        let quorum = report.summary.quorum;
        // A count of pods never stands in for the list (non-voters answer as followers).
        if report.summary.voters_from == crate::report::VotersFrom::Unreadable {
            let why = "the member list cannot be read now".to_string();
            return Err((true, (None, why)));
        }
        let leader = report.leader_replica();
        let mut why = vec![];
        let healthy = report
            .replicas
            .iter()
            .filter(|x| x.pod != mine)
            .filter(
                |x| match crate::assess::voter::voter_health(x, leader, max_lag) {
                    Ok(()) => true,
                    Err((_, w)) => {
                        why.push(w);
                        false
                    }
                },
            )
            .count();
        if healthy as u32 >= quorum {
            Ok((healthy, quorum))
        } else {
            Err((true, (Some((healthy, quorum)), why.join("; "))))
        }
    };
    // Said once, when the wait begins: the hook's log shows why the pod is held.
    let first = |(counted, why): &(Counted, String), left: Duration| {
        let are = match counted {
            Some((healthy, quorum)) => {
                format!(
                    "are {healthy} healthy voter(s) where {quorum} are needed without this replica"
                )
            }
            None => "cannot be counted".to_string(),
        };
        sink.say(&format!(
            "{ME}: the others {are} ({why}); waiting up to {}",
            human_duration(left)
        ))
    };
    look_again_until(until, limit * 2, look, first).await
}

/// The handover as the leader alone sees it: the system's untargeted transfer sent to this
/// replica, then its own answers polled every 50 ms until it no longer leads and knows a
/// leader, within `args.timeout` (what is left of the hook's `budget`). The successor is
/// whoever the system picked.
async fn hand_over_alone(
    transport: &Transport,
    profile: &Profile,
    local: Pod,
    args: &YieldSettings,
    budget: Duration,
    r: &mut HookReport,
) -> Result<()> {
    let name = local.metadata.name.clone().unwrap_or_default();
    let call = self_yield_call(profile, &name).map_err(|refused| anyhow!("{ME}: {refused}"))?;
    let target = ClusterTarget {
        namespace: "local".into(),
        name: profile.name.clone(),
        owner_kind: OwnerKind::Selector,
        profile: profile.clone(),
        desired_replicas: 1,
        pods: vec![local.clone()],
        credentials_secret: None,
        tls_secret: None,
        gate_assume: None,
        named: true,
    };
    let limit = WaitOptions::new(args.timeout, args.survey.probe_timeout).probe_limit;
    let start = Instant::now();
    if let Err(e) = send_transfer(transport, &target, &call, args.timeout).await {
        r.fail(format!(
            "{ME}: this replica leads but could not hand over: {e}"
        ));
        return Ok(());
    }
    let mut last;
    loop {
        last = poll_view(transport, profile, &local, &BTreeMap::new(), limit).await;
        if stepped_down(&last) {
            let total = human_duration(start.elapsed());
            r.say(format!(
                "{ME}: this replica handed leadership over in {total} ({} picks the successor and does not name it; this replica now follows a leader)",
                profile.name
            ));
            return Ok(());
        }
        if start.elapsed() >= args.timeout {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    r.fail(format!(
        "{ME}: no completed handover in the {} left of the hook's {}: this replica still reports {} ({})",
        human_duration(args.timeout),
        human_duration(budget),
        last.role.unwrap_or(Role::Unknown).as_str(),
        match (last.has_leader, &last.error) {
            (_, Some(e)) => e.clone(),
            (Some(false), None) => "no leader".into(),
            _ => "a leader".into(),
        }
    ));
    Ok(())
}

/// A pod as the probing code knows one: a name, an address and the profile's port.
fn synthetic_pod(name: &str, host: &str, port: u16, profile: &Profile) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some("local".into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "raft".into(),
                ports: Some(vec![ContainerPort {
                    container_port: port as i32,
                    name: profile.port.names.first().cloned(),
                    ..Default::default()
                }]),
                ..Default::default()
            }],
            ..Default::default()
        }),
        // Inside a pod there is no Kubernetes view of the peers: their own health checks
        // are what counts, so they are taken as Ready (running, not terminating).
        status: Some(PodStatus {
            pod_ip: Some(host.to_string()),
            phase: Some("Running".into()),
            conditions: Some(vec![PodCondition {
                type_: "Ready".into(),
                status: "True".into(),
                ..Default::default()
            }]),
            ..Default::default()
        }),
    }
}

/// Where a peer serves the profile's port: its URL's host and port (etcd's clientURLs), else
/// its Raft address's host, on this replica's own port (Consul's `Address` names the Raft
/// port, 8300, and the server's HTTP API is on the same host).
fn peer_at(m: &crate::model::Member) -> Result<(String, Option<u16>)> {
    match (&m.url, &m.address) {
        (Some(url), _) => host_port(url).with_context(|| format!("its URL {url:?}")),
        (None, Some(a)) => host_port(a)
            .map(|(host, _raft_port)| (host, None))
            .with_context(|| format!("its address {a:?}")),
        (None, None) => Err(anyhow!(
            "the member list gives neither its URL nor its address"
        )),
    }
}

/// `http://etcd-0.etcd.db.svc.cluster.local:2379` -> ("etcd-0.etcd.db.svc.cluster.local", Some(2379))
fn host_port(url: &str) -> Result<(String, Option<u16>)> {
    let uri: http::Uri = url.parse().map_err(|e| anyhow!("not a URL: {e}"))?;
    let host = uri.host().ok_or_else(|| anyhow!("no host"))?;
    Ok((host.trim_matches(['[', ']']).to_string(), uri.port_u16()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::tests::{cluster, m, M};
    use crate::report::CheckState;

    #[test]
    fn the_sole_claimant_may_hand_over() {
        let r = cluster(&[m(Role::Leader), m(Role::Follower), m(Role::Follower)]);
        assert_eq!(sole_claimant(&r, Some("etcd-0")), Ok(()));
    }

    #[test]
    fn a_second_claimant_stops_the_hook_naming_both() {
        let r = cluster(&[m(Role::Leader), m(Role::Leader), m(Role::Follower)]);
        let why = Stop::NotSole(sole_claimant(&r, Some("etcd-0")).unwrap_err()).reason();
        assert!(why.contains("claimants: etcd-0, etcd-1"), "{why}");
    }

    #[test]
    fn another_members_claim_stops_the_hook() {
        let r = cluster(&[m(Role::Follower), m(Role::Leader), m(Role::Follower)]);
        let why = Stop::NotSole(sole_claimant(&r, Some("etcd-0")).unwrap_err()).reason();
        assert!(why.contains("claimants: etcd-1"), "{why}");
    }

    #[test]
    fn no_claimant_at_all_stops_the_hook() {
        let r = cluster(&[m(Role::Follower), m(Role::Follower), m(Role::Follower)]);
        let why = Stop::NotSole(sole_claimant(&r, Some("etcd-0")).unwrap_err()).reason();
        assert!(why.contains("claimants: none"), "{why}");
    }

    fn claims(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn a_follower_beside_another_members_sole_claim_no_longer_leads() {
        let r = cluster(&[m(Role::Follower), m(Role::Leader), m(Role::Follower)]);
        assert!(no_longer_leads(&r, &claims(&["etcd-1"]), Some("etcd-0")));
    }

    #[test]
    fn a_replica_that_did_not_answer_is_looked_at_again_beside_another_claim() {
        let r = cluster(&[m(Role::Unknown), m(Role::Leader), m(Role::Follower)]);
        assert!(!no_longer_leads(&r, &claims(&["etcd-1"]), Some("etcd-0")));
    }

    #[test]
    fn no_claim_at_all_is_looked_at_again() {
        let r = cluster(&[m(Role::Follower), m(Role::Follower), m(Role::Follower)]);
        assert!(!no_longer_leads(&r, &claims(&[]), Some("etcd-0")));
    }

    #[test]
    fn a_replica_that_does_not_know_its_name_never_ends_as_no_longer_leading() {
        let r = cluster(&[m(Role::Follower), m(Role::Leader), m(Role::Follower)]);
        assert!(!no_longer_leads(&r, &claims(&["etcd-1"]), None));
    }

    fn target_of(names: &[&str]) -> ClusterTarget {
        let profile = crate::profile::Catalog::builtin()
            .get("etcd")
            .unwrap()
            .clone();
        ClusterTarget {
            namespace: "local".into(),
            name: "etcd".into(),
            owner_kind: OwnerKind::Selector,
            pods: names
                .iter()
                .map(|n| synthetic_pod(n, "10.0.0.1", 2379, &profile))
                .collect(),
            profile,
            desired_replicas: names.len() as u32,
            credentials_secret: None,
            tls_secret: None,
            gate_assume: None,
            named: true,
        }
    }

    #[test]
    fn a_peer_seen_terminating_is_marked_and_said() {
        let at = Time(k8s_openapi::jiff::Timestamp::now());
        let stopping = BTreeMap::from([("etcd-2".to_string(), at)]);
        let (t, said) = mark_terminating(target_of(&["etcd-0", "etcd-1", "etcd-2"]), &stopping);
        let marked: Vec<bool> = t
            .pods
            .iter()
            .map(|p| p.metadata.deletion_timestamp.is_some())
            .collect();
        assert_eq!(marked, vec![false, false, true]);
        assert_eq!(said.len(), 1, "{said:?}");
    }

    #[test]
    fn a_healthy_follower_answers_as_one() {
        let r = cluster(&[m(Role::Leader), m(Role::Follower)]);
        assert!(answers_as_follower(&r, "etcd-1"));
    }

    #[test]
    fn a_member_whose_status_did_not_answer_is_no_target_though_its_health_passes() {
        let r = cluster(&[m(Role::Leader), m(Role::Unknown)]);
        assert!(!answers_as_follower(&r, "etcd-1"));
    }

    #[test]
    fn a_follower_whose_health_check_fails_is_no_target() {
        let sick = M {
            health: CheckState::Failing,
            ..m(Role::Follower)
        };
        let r = cluster(&[m(Role::Leader), sick]);
        assert!(!answers_as_follower(&r, "etcd-1"));
    }

    #[test]
    fn an_unanswering_voter_may_recover() {
        let down = M {
            health: CheckState::Unreachable,
            ..m(Role::Follower)
        };
        let r = cluster(&[m(Role::Leader), down]);
        assert!(a_peer_may_recover(&r, Some("etcd-0"), 100));
    }

    #[test]
    fn a_lagging_voter_may_recover() {
        let behind = M {
            lag: Some(5000),
            ..m(Role::Follower)
        };
        let r = cluster(&[m(Role::Leader), behind]);
        assert!(a_peer_may_recover(&r, Some("etcd-0"), 100));
    }

    #[test]
    fn a_learner_does_not_become_a_voter_by_looking_again() {
        let r = cluster(&[m(Role::Leader), m(Role::Learner)]);
        assert!(!a_peer_may_recover(&r, Some("etcd-0"), 100));
    }

    #[test]
    fn a_terminating_peer_does_not_recover_by_looking_again() {
        let mut r = cluster(&[m(Role::Leader), m(Role::Follower)]);
        r.replicas[1].terminating = true;
        assert!(!a_peer_may_recover(&r, Some("etcd-0"), 100));
    }

    #[test]
    fn a_replica_alone_has_no_peer_to_recover() {
        let r = cluster(&[m(Role::Leader)]);
        assert!(!a_peer_may_recover(&r, Some("etcd-0"), 100));
    }

    /// Looks that each take `takes` seconds and fail `fails` times (each to be looked at
    /// again when `again`) before they pass, until `until` seconds from now: what
    /// `look_again_until` returned, how many looks it took, how many failures `first` heard,
    /// and when it ended.
    async fn looked(
        until: u64,
        takes: u64,
        fails: usize,
        again: bool,
    ) -> (Result<u32, String>, usize, usize, Duration) {
        let start = tokio::time::Instant::now();
        let looks = std::cell::Cell::new(0usize);
        let heard = std::cell::Cell::new(0usize);
        let got = look_again_until(
            start + Duration::from_secs(until),
            Duration::from_secs(takes),
            || {
                looks.set(looks.get() + 1);
                let n = looks.get();
                async move {
                    tokio::time::sleep(Duration::from_secs(takes)).await;
                    if n <= fails {
                        Err((again, format!("look {n}")))
                    } else {
                        Ok(7)
                    }
                }
            },
            |_: &String, _| heard.set(heard.get() + 1),
        )
        .await;
        (got, looks.get(), heard.get(), start.elapsed())
    }

    #[tokio::test(start_paused = true)]
    async fn a_look_that_fails_for_a_moment_is_taken_when_it_passes() {
        let (got, looks, heard, _) = looked(3, 0, 2, true).await;
        assert_eq!((got, looks, heard), (Ok(7), 3, 1));
    }

    #[tokio::test(start_paused = true)]
    async fn a_failure_no_look_changes_ends_at_the_first_look() {
        let (got, looks, heard, _) = looked(3, 0, 5, false).await;
        assert_eq!((got, looks, heard), (Err("look 1".into()), 1, 0));
    }

    #[tokio::test(start_paused = true)]
    async fn a_failure_that_lasts_ends_with_the_last_look_that_fits() {
        let (got, looks, _, _) = looked(3, 0, 100, true).await;
        assert_eq!((got, looks), (Err("look 7".into()), 7));
    }

    #[tokio::test(start_paused = true)]
    async fn a_look_slower_than_its_floor_counts_as_long_as_it_took() {
        let start = tokio::time::Instant::now();
        let looks = std::cell::Cell::new(0usize);
        let got: Result<(), &str> = look_again_until(
            start + Duration::from_secs(3),
            Duration::ZERO,
            || {
                looks.set(looks.get() + 1);
                async {
                    tokio::time::sleep(Duration::from_secs(2)).await;
                    Err((true, "slow"))
                }
            },
            |_, _| {},
        )
        .await;
        assert_eq!((got, looks.get()), (Err("slow"), 1));
    }

    #[tokio::test(start_paused = true)]
    async fn slow_looks_never_run_past_the_time_given() {
        let (_, looks, _, took) = looked(3, 1, 100, true).await;
        assert_eq!(looks, 2);
        assert!(took <= Duration::from_secs(3), "{took:?}");
    }

    #[test]
    fn the_hook_leaves_the_process_a_third_of_its_grace_period() {
        let s = Duration::from_secs;
        assert_eq!(hook_budget(s(30), s(30)), s(20));
        assert_eq!(
            hook_budget(s(30), s(10)),
            Duration::from_nanos(6_666_666_666)
        );
    }

    #[test]
    fn a_shorter_timeout_bounds_the_hook() {
        let s = Duration::from_secs;
        assert_eq!(hook_budget(s(5), s(30)), s(5));
    }

    #[test]
    fn member_urls_give_host_and_port() {
        assert_eq!(
            host_port("http://etcd-0.etcd.db.svc.cluster.local:2379").unwrap(),
            ("etcd-0.etcd.db.svc.cluster.local".into(), Some(2379))
        );
        assert_eq!(
            host_port("http://[fd00::1]:2379").unwrap(),
            ("fd00::1".into(), Some(2379))
        );
        assert!(host_port("not a url").is_err());
    }

    fn member(url: Option<&str>, address: Option<&str>) -> crate::model::Member {
        crate::model::Member {
            id: "a1b2".into(),
            name: Some("hraft-1".into()),
            learner: false,
            url: url.map(String::from),
            address: address.map(String::from),
            counted: false,
            live: Some(true),
        }
    }

    #[test]
    fn a_peer_known_by_its_raft_address_is_reached_on_this_replicas_port() {
        // Consul's autopilot lists `Address` 10.0.0.7:8300 (Raft); its API is on 8500.
        assert_eq!(
            peer_at(&member(None, Some("10.0.0.7:8300"))).unwrap(),
            ("10.0.0.7".into(), None)
        );
        assert_eq!(
            peer_at(&member(None, Some("[fd00::7]:8300"))).unwrap(),
            ("fd00::7".into(), None)
        );
    }

    #[test]
    fn a_peers_url_wins_over_its_address() {
        assert_eq!(
            peer_at(&member(
                Some("http://hraft-1.x:8500"),
                Some("10.0.0.7:8300")
            ))
            .unwrap(),
            ("hraft-1.x".into(), Some(8500))
        );
    }

    #[test]
    fn a_peer_with_neither_url_nor_address_is_an_error_naming_what_is_missing() {
        let e = format!("{:#}", peer_at(&member(None, None)).unwrap_err());
        assert!(e.contains("neither its URL nor its address"), "{e}");
    }
}
