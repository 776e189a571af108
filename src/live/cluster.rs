//! The drain executor's operations on a real cluster ([`ClusterOps`] for [`KubeCluster`]): surveys
//! through the Surveyor, evictions through the Evictor, transfers through the handover, the
//! lock through its Lease. `drain` and `restart` both run the executor on it; they differ in
//! which members must go (`drain`: those on the drained nodes; `restart`: those not yet
//! restarted, [`Following`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{PersistentVolume, Pod};
use kube::api::{Api, ListParams};
use kube::runtime::wait::await_condition;
use kube::ResourceExt;

use super::evict::{sleep_or_cancel, Evictor};
use super::lock;
use crate::actions::HandoverFailure;
use crate::drain::{Attempt, ClusterOps, Election, Events, Evicted, GroupsMoved, Handover, Look};
use crate::groups::move_off;
use crate::handover::{act_and_wait, transfer_and_wait, Outcome, WaitOptions};
use crate::live::progress::Line;
use crate::model::{human_duration, pod_ready, ClusterObservation, OwnerKind, Selection};
use crate::observe::poll_view;
use crate::plan::drain::{node_local_volumes, ClusterInput, DrainOptions, DrainStep};
use crate::plan::groups::moves_off;
use crate::plan::placement::stuck_members;
use crate::plan::restart::{comes_back_at, controller_busy, follow, pending, Followed, Restart};
use crate::plan::{plan_yield, Expect, ReplicaView, YieldOptions};
use crate::report::ClusterReport;
use crate::survey::Surveyor;

/// The planner's input for one surveyed cluster; `replace`: the members to replace wherever
/// they run (restart's).
pub(crate) fn cluster_input(
    obs: &ClusterObservation,
    report: ClusterReport,
    snapshot: &crate::model::Snapshot,
    pvs: Option<&[PersistentVolume]>,
    drained: &BTreeSet<String>,
    replace: BTreeSet<String>,
) -> ClusterInput {
    // Where a replacement can start matters only off a drained node: a restarted member
    // comes back wherever it may, its own node included.
    let placement_unknown = match (pvs.is_none(), snapshot.nodes.is_none()) {
        _ if drained.is_empty() => None,
        (false, false) => None,
        (true, false) => Some("persistentvolumes"),
        (false, true) => Some("nodes"),
        (true, true) => Some("persistentvolumes and nodes"),
    }
    .map(|what| {
        format!(
            "without the right to list {what}, where a replacement could start cannot be checked"
        )
    });
    let stuck = stuck_members(
        &obs.target.pods,
        report.summary.leader.as_deref(),
        pvs.unwrap_or_default(),
        snapshot.nodes.as_deref(),
        &snapshot.pods,
        drained,
    );
    let (mut empty_dirs, mut host_paths) = (BTreeMap::new(), BTreeMap::new());
    for p in &obs.target.pods {
        let (deleted, host) = node_local_volumes(p);
        if !deleted.is_empty() {
            empty_dirs.insert(p.name_any(), deleted);
        }
        if !host.is_empty() {
            host_paths.insert(p.name_any(), host);
        }
    }
    let sts = snapshot
        .statefulsets
        .iter()
        .find(|s| {
            s.metadata.namespace.as_deref() == Some(obs.target.namespace.as_str())
                && s.metadata.name.as_deref() == Some(obs.target.name.as_str())
        })
        .filter(|_| obs.target.owner_kind == OwnerKind::StatefulSet);
    // A drain's eviction of an OnDelete StatefulSet's member with a pending update rolls the
    // new template onto it (restart drives such updates on purpose: it is not said there).
    let comes_back_at = obs
        .target
        .pods
        .iter()
        .filter_map(|p| {
            let s = sts.filter(|_| !drained.is_empty())?;
            Some((p.name_any(), comes_back_at(s, p)?))
        })
        .collect();
    // The controller rolling it, or about to (a change it has not acted on yet): a drain's
    // and a restart's business alike, at every look. A restart's own switch to OnDelete is
    // such a change too, waited for as long as the controller takes to see it.
    let controller_rolling = sts.and_then(|s| controller_busy(s, &obs.target.pods));
    // What this look has: the leader's view only where the member list was read.
    let liveness = obs
        .target
        .profile
        .liveness_with(matches!(obs.members, Some(Ok(_))));
    ClusterInput {
        stuck,
        empty_dirs,
        host_paths,
        controller_rolling,
        placement_unknown,
        replace,
        comes_back_at,
        ..ClusterInput::new(
            report,
            obs.target.profile.transfer.is_some(),
            crate::plan::transfer_needs_member_id(&obs.target.profile, false),
            liveness,
        )
    }
}

/// Why the look's StatefulSet's controller makes an eviction unsafe now
/// (`plan::restart::controller_busy`), on the StatefulSet read afresh: what the drain's and
/// restart's executor (`ClusterOps::controller_busy_now`) and the gate ask just before an
/// eviction. A StatefulSet that cannot be read, or is gone, is Some: nothing is evicted on an
/// old read.
pub(crate) async fn controller_busy_now(client: &kube::Client, look: &Look) -> Option<String> {
    let t = &look.obs.target;
    if t.owner_kind != OwnerKind::StatefulSet {
        return None;
    }
    // A list by name: the right every verb's role and the gate's have (the survey lists
    // StatefulSets).
    let api: Api<StatefulSet> = Api::namespaced(client.clone(), &t.namespace);
    let by_name = ListParams::default().fields(&format!("metadata.name={}", t.name));
    match api.list(&by_name).await {
        Ok(list) => match list.items.first() {
            Some(sts) => controller_busy(sts, &t.pods),
            None => Some(format!("its StatefulSet {} is gone", t.name)),
        },
        Err(e) => Some(format!(
            "its StatefulSet could not be read again just before the eviction ({e})"
        )),
    }
}

/// The member's own answer now (role, term, the leader it names), as `drain`, `restart` and
/// the gate ask it just before an eviction (`plan::drain::still_as_looked` judges it): one
/// request round of the profile's facts, read as the survey reads them (the cluster's
/// credentials, or none where they cannot be read), its leader named by the look's members.
pub(crate) async fn member_now(
    surveyor: &Surveyor,
    look: &Look,
    pod: &str,
    limit: Duration,
) -> ReplicaView {
    let t = &look.obs.target;
    let Some(p) = t.pods.iter().find(|p| p.name_any() == pod) else {
        return ReplicaView::silent(pod.to_string());
    };
    let transport = surveyor.reading_transport(t).await;
    let pods = look.input.report.pod_of_member();
    poll_view(&transport, &t.profile, p, &pods, limit).await
}

/// What a restart replaces, followed between steps (`plan::restart::follow`): a newer template
/// during a driven update becomes the revision it drives, with a note of it.
pub struct Following {
    restart: Mutex<Restart>,
    /// The StatefulSet's update revision when the run began.
    started_at: Option<String>,
    notes: Mutex<Vec<String>>,
}

impl Following {
    pub(crate) fn new(restart: Restart, started_at: Option<String>) -> Self {
        Following {
            restart: Mutex::new(restart),
            started_at,
            notes: Mutex::new(vec![]),
        }
    }

    /// What it replaces now.
    pub(crate) fn now(&self) -> Restart {
        self.restart.lock().expect("not poisoned").clone()
    }

    /// What changed under it, in order.
    pub(crate) fn notes(&self) -> Vec<String> {
        self.notes.lock().expect("not poisoned").clone()
    }

    /// The members to replace now, and why none may be (a conflict), from the StatefulSet and
    /// its pods as this look found them.
    fn replace(
        &self,
        sts: Option<&StatefulSet>,
        pods: &[Pod],
    ) -> (BTreeSet<String>, Option<String>) {
        let mut restart = self.restart.lock().expect("not poisoned");
        let mut conflict = None;
        if let Some(sts) = sts {
            match follow(&restart, self.started_at.as_deref(), sts, pods) {
                Followed::Same => {}
                Followed::Revision { from, to } => {
                    self.notes.lock().expect("not poisoned").push(format!(
                        "the pod template changed during the run (revision {from} to {to}): following it; members at {from} are updated too, and leadership goes only to members at {to}"
                    ));
                    *restart = restart.following(to);
                }
                Followed::Conflict(why) => conflict = Some(why),
            }
        }
        (pending(pods, &restart), conflict)
    }
}

/// One cluster now: its survey, and the planner's input; None when it no longer exists.
/// `named`: the user typed this cluster's name (`restart NAME`), so it gets the user's own
/// credentials; a cluster the verb found itself (drain's, `restart -l`'s) does not.
pub(crate) async fn look(
    surveyor: &Surveyor,
    pvs: Option<&[PersistentVolume]>,
    ns: &str,
    name: &str,
    named: bool,
    drained: &BTreeSet<String>,
    restart: Option<&Following>,
) -> Result<Option<(ClusterObservation, ClusterInput)>> {
    let sel = Selection {
        name: Some(name.to_string()),
        named,
        ..Default::default()
    };
    let survey = match surveyor.survey_in(Some(ns), &sel).await {
        Ok(s) => s,
        // Its namespace or StatefulSet was deleted meanwhile: nothing left to drain.
        Err(e) if e.is::<crate::errors::NotFound>() => return Ok(None),
        Err(e) => return Err(e),
    };
    let Some((obs, report)) = survey.observations.into_iter().zip(survey.reports).next() else {
        // Skipped now (its annotations turned bad): say why, never "gone".
        if let Some(why) = survey.skipped.first() {
            bail!("{why}");
        }
        return Ok(None);
    };
    let sts = survey
        .snapshot
        .statefulsets
        .iter()
        .find(|s| s.metadata.name.as_deref() == Some(name));
    let (replace, conflict) = match restart {
        Some(f) => f.replace(sts, &obs.target.pods),
        None => Default::default(),
    };
    let mut input = cluster_input(&obs, report, &survey.snapshot, pvs, drained, replace);
    input.conflict = conflict;
    Ok(Some((obs, input)))
}

/// The executor's view of one real cluster: surveys through the Surveyor, evictions through
/// the Evictor, transfers through the handover, the lock through its Lease.
pub struct KubeCluster<'a> {
    pub surveyor: &'a Surveyor,
    pub evictor: &'a Evictor,
    pub pvs: Option<&'a [PersistentVolume]>,
    /// The longest wait for any one thing (--timeout).
    pub timeout: Duration,
    /// The longest wait for one replica's answer while a handover is watched.
    pub probe_limit: Duration,
    pub opts: &'a DrainOptions,
    pub ns: &'a str,
    pub name: &'a str,
    /// The user typed this cluster's name (`look`'s `named`).
    pub named: bool,
    pub lock: Option<&'a lock::Held>,
    /// restart's members: those it still has to replace (None: drain's, by node).
    pub restart: Option<&'a Following>,
}

impl KubeCluster<'_> {
    fn pod<'l>(&self, look: &'l Look, name: &str) -> Result<&'l Pod> {
        look.obs
            .target
            .pods
            .iter()
            .find(|p| p.name_any() == name)
            .ok_or_else(|| anyhow!("pod {name} is no longer part of the cluster"))
    }

    fn wait_options(&self) -> WaitOptions {
        WaitOptions::new(self.timeout, self.probe_limit)
    }

    /// The cluster's transport (its credentials); without them (already said by the
    /// survey) the replicas are still watched as far as they answer.
    async fn transport(&self, look: &Look) -> crate::transport::Transport {
        self.surveyor.reading_transport(&look.obs.target).await
    }
}

impl ClusterOps for KubeCluster<'_> {
    async fn look(&self) -> Result<Option<Look>> {
        Ok(look(
            self.surveyor,
            self.pvs,
            self.ns,
            self.name,
            self.named,
            &self.opts.nodes,
            self.restart,
        )
        .await?
        .map(|(obs, input)| Look { obs, input }))
    }

    async fn check_lock(&self) -> Result<()> {
        match self.lock {
            Some(l) => l.verify().await,
            None => Ok(()),
        }
    }

    fn lock_lost(&self) -> Option<String> {
        self.lock.and_then(lock::Held::lost)
    }

    async fn transfer(&self, look: &Look, step: &DrainStep) -> Result<Handover> {
        let obs = &look.obs;
        let report = &look.input.report;
        let yopts = YieldOptions {
            to: None,
            avoid_nodes: self.opts.nodes.iter().cloned().collect(),
            avoid_pods: look.input.replace.iter().cloned().collect(),
            max_lag: self.opts.max_lag,
            force: false,
        };
        let plan = plan_yield(report, &obs.target.profile, &yopts).map_err(|r| {
            anyhow!(
                "cannot hand {}'s leadership over before evicting it: {r}",
                step.pod
            )
        })?;
        let transport = self
            .surveyor
            .transport_for(&obs.target)
            .await
            .with_context(|| {
                format!(
                    "cannot hand {}'s leadership over before evicting it",
                    step.pod
                )
            })?;
        let w = transfer_and_wait(
            &transport,
            &obs.target,
            report,
            &plan,
            &self.wait_options(),
            self.timeout,
        )
        .await;
        let new = w.new_leader.clone().unwrap_or_else(|| "?".into());
        // The one verdict (yield's): a term that jumped is an election, not this transfer.
        match w.verdict(plan.term, plan.targeted) {
            Ok(()) => Ok(Handover {
                from: plan.leader.clone(),
                to: new,
                term_before: plan.term,
                term_after: w.term_after,
                window_ms: w.leaderless_window_ms,
            }),
            Err(HandoverFailure::WentElsewhere { to }) => bail!("leadership went from {} to {to}, not to {}: an election, not the transfer; nothing was evicted", plan.leader, plan.target),
            Err(HandoverFailure::TermJumped { to, by }) => bail!("leadership went from {} to {to}, but the term moved by {by} where a transfer moves it by 1: an election happened besides the transfer; nothing was evicted", plan.leader),
            Err(HandoverFailure::Returned) => bail!("{} stepped down and was chosen again: leadership did not move; nothing was evicted", plan.leader),
            Err(HandoverFailure::Failed(e)) => bail!("the transfer from {} failed: {e}; nothing was evicted", plan.leader),
            Err(HandoverFailure::TimedOut) => bail!("no completed handover from {} within {}; nothing was evicted", plan.leader, human_duration(self.timeout)),
        }
    }

    async fn move_groups_off(
        &self,
        look: &Look,
        pod: &str,
        within: Duration,
    ) -> Result<Option<GroupsMoved>> {
        let Some(moves) = moves_off(&look.obs, pod).filter(|m| !m.is_empty()) else {
            return Ok(None);
        };
        let p = self.pod(look, pod)?;
        let transport = self.transport(look).await;
        let m = tokio::select! {
            m = move_off(&transport, &look.obs.target, p, &moves, within) => m,
            _ = self.evictor.cancel.cancelled() => bail!(
                "interrupted while moving {pod}'s streams' and consumers' leaders off it; {pod} was not evicted"
            ),
        };
        let moved = m.moved.len().saturating_sub(m.still_led.len()) as u32;
        if !m.succeeded() {
            bail!(
                "{}; {pod} was not evicted: its streams' and consumers' leaders would have to be elected while it stops",
                m.summary()
            );
        }
        Ok(Some(GroupsMoved {
            moved,
            summary: m.summary(),
        }))
    }

    async fn refused_now(&self, look: &Look, pod: &str) -> Option<String> {
        let p = self.pod(look, pod).ok()?;
        self.evictor.answer_now(p).await.ok().flatten()
    }

    async fn controller_busy_now(&self, look: &Look) -> Option<String> {
        controller_busy_now(&self.surveyor.conn.client, look).await
    }

    async fn member_now(&self, look: &Look, pod: &str) -> ReplicaView {
        member_now(self.surveyor, look, pod, self.probe_limit).await
    }

    async fn evict(&self, look: &Look, pod: &str) -> Result<Attempt> {
        self.evictor.attempt(self.pod(look, pod)?).await
    }

    async fn wait_gone(&self, look: &Look, pod: &str) -> Result<()> {
        self.evictor.wait_gone(self.pod(look, pod)?).await
    }

    async fn evict_leader(&self, look: &Look, step: &DrainStep) -> Result<Election> {
        let p = self.pod(look, &step.pod)?;
        // No transfer: the eviction starts an election; measured as yield --allow-election.
        let expect = Expect {
            old_leader: step.pod.clone(),
            target: None,
            old_leader_may_vanish: true,
        };
        let evictor = self.evictor;
        // A refusal (a PDB, or the eviction gate between the dry run and this request) changed
        // nothing: the step goes back to planning, as a follower's refused eviction does.
        let refused = std::sync::Mutex::new(None);
        let evicting = async {
            match evictor.attempt(p).await {
                Ok(Attempt::Done(Evicted::AlreadyGone)) => Ok(()),
                Ok(Attempt::Done(Evicted::Accepted)) => {
                    evictor.wait_gone(p).await.map_err(|e| e.to_string())
                }
                Ok(Attempt::Refused(why)) => {
                    *refused.lock().expect("not poisoned") = Some(why.clone());
                    Err(format!("refused: {why}"))
                }
                Err(e) => Err(crate::errors::anyhow_chain(&e)),
            }
        };
        let transport = self.transport(look).await;
        let w = act_and_wait(
            &transport,
            &look.obs.target,
            &look.input.report,
            expect,
            &self.wait_options(),
            evicting,
        )
        .await;
        if let Some(why) = refused.lock().expect("not poisoned").take() {
            return Err(crate::drain::StepBlocked(format!(
                "cannot evict the leader {} yet: {why}",
                step.pod
            ))
            .into());
        }
        if let Some(e) = w.error {
            bail!("evicting the leader {}: {e}", step.pod);
        }
        if w.outcome != Outcome::Transferred {
            bail!(
                "no new leader within {} after evicting the leader {}",
                human_duration(self.timeout),
                step.pod
            );
        }
        Ok(Election {
            new_leader: w.new_leader.unwrap_or_default(),
            window_ms: w.leaderless_window_ms,
        })
    }

    async fn wait_replacement_ready(&self, look: &Look, pod: &str) -> Result<()> {
        let old = self.pod(look, pod)?;
        let ns = self.ns;
        let old_uid = old.uid().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(self.surveyor.conn.probe_client.clone(), ns);
        let ready = await_condition(api.clone(), pod, |p: Option<&Pod>| {
            p.is_some_and(|p| p.uid().as_deref() != Some(old_uid.as_str()) && pod_ready(p))
        });
        let cancel = &self.evictor.cancel;
        let ready = async {
            tokio::select! {
                r = ready => Some(r),
                _ = cancel.cancelled() => None,
            }
        };
        match tokio::time::timeout(self.timeout, ready).await {
            Ok(None) => bail!("interrupted while waiting for {pod}'s replacement to be Ready"),
            Ok(Some(Ok(_))) => Ok(()),
            Ok(Some(Err(e))) => bail!("watching {ns}/{pod}'s replacement: {e}"),
            Err(_) => {
                let why = api
                    .get_opt(pod)
                    .await
                    .ok()
                    .flatten()
                    .map(|p| pod_state(&p))
                    .unwrap_or_else(|| "no pod of that name exists".into());
                bail!(
                    "{pod}'s replacement was not Ready within {} ({why}); no further member was evicted",
                    human_duration(self.timeout)
                );
            }
        }
    }

    async fn pause(&self, d: Duration) -> bool {
        sleep_or_cancel(&self.evictor.cancel, d).await
    }

    fn interrupted(&self) -> bool {
        self.evictor.cancel.is_cancelled()
    }
}

/// The executor's events on one progress line.
impl Events for Line {
    fn doing(&self, msg: &str) {
        self.set(msg);
    }

    fn did(&self, msg: &str) {
        self.note(msg);
    }

    fn finish(&self) {
        Line::finish(self);
    }
}

/// Why a pod is not running, in a few words: phase, and the scheduler's or kubelet's reason.
pub(crate) fn pod_state(p: &Pod) -> String {
    let st = p.status.clone().unwrap_or_default();
    let mut parts = vec![st.phase.unwrap_or_else(|| "Unknown".into())];
    for c in st.conditions.iter().flatten() {
        if c.status != "True" {
            if let Some(m) = c.message.as_ref().or(c.reason.as_ref()) {
                parts.push(format!("{}: {m}", c.type_));
            }
        }
    }
    parts.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drain::fixtures::{etcd_statefulset, look, pod};
    use crate::model::Role;
    use crate::plan::tests::{cluster, m};

    /// db/etcd at `generation`, its controller having acted on `observed`, at revision r1.
    fn etcd_sts(generation: i64, observed: i64) -> StatefulSet {
        let mut s = etcd_statefulset(generation, observed);
        let status = s.status.as_mut().expect("a status");
        status.current_revision = Some("r1".into());
        status.update_revision = Some("r1".into());
        s
    }

    fn restart_input(sts: StatefulSet) -> ClusterInput {
        let report = cluster(&[m(Role::Follower), m(Role::Leader), m(Role::Follower)]);
        // Each member at the StatefulSet's revision: nothing for its controller to roll.
        let pods = ["etcd-0", "etcd-1", "etcd-2"].map(|n| {
            let mut p = pod(n, Some(n));
            p.metadata.labels = Some(
                [(
                    crate::plan::restart::REVISION_LABEL.to_string(),
                    "r1".to_string(),
                )]
                .into(),
            );
            p
        });
        let l = look(report.clone(), pods.to_vec(), false);
        let snapshot = crate::model::Snapshot {
            statefulsets: vec![sts],
            ..Default::default()
        };
        // A restart's look: no node drained, members to replace.
        cluster_input(
            &l.obs,
            report,
            &snapshot,
            None,
            &BTreeSet::new(),
            ["etcd-0".to_string()].into(),
        )
    }

    /// A `kubectl rollout restart` during a restart, which the controller has not acted on yet
    /// (its revisions still read as before): the restart's next look sees it and waits, as a
    /// drain's does, instead of evicting beside the controller's coming deletions. (Before,
    /// only a drain's look asked; this failed there.)
    #[test]
    fn a_restarts_look_sees_a_change_the_controller_has_not_acted_on() {
        let input = restart_input(etcd_sts(3, 2));
        let why = input.controller_rolling.expect("the controller is busy");
        assert!(why.contains("generation 3, observed 2"), "{why}");
    }

    #[test]
    fn a_restarts_look_at_a_settled_statefulset_has_nothing_to_wait_for() {
        assert_eq!(restart_input(etcd_sts(3, 3)).controller_rolling, None);
    }
}
