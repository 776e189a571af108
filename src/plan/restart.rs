//! What `kubectl raft restart` still has to restart: pure, from the pods and the StatefulSet
//! as the survey found them. The order, the transfers and the quorum checks are the drain
//! planner's (`plan::drain::plan_cluster`, with these members as `ClusterInput::replace`).

use std::collections::BTreeSet;

use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetUpdateStrategy};
use k8s_openapi::api::core::v1::Pod;
use serde::Serialize;

/// The StatefulSet annotation that records which pods a restart replaces: the UIDs of its
/// members when it was asked for, comma-separated; a member whose pod has another UID was
/// restarted. Set on the StatefulSet's own metadata (not its pod template, which would start
/// the controller's own rollout); a rerun finds it and resumes. (UIDs, not a time: a pod's
/// creationTimestamp has whole seconds and another machine's clock.)
pub const RESTART_PENDING: &str = "raft.kubectl.io/restart-pending";

/// Which members a restart replaces.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "mode")]
pub enum Restart {
    /// A restart of the current revision: every member whose pod is one of these (UIDs).
    Restart { uids: BTreeSet<String> },
    /// A pending update of an `OnDelete` StatefulSet: every member not at its update revision
    /// (a deleted member comes back at it); and, where it follows a template changed during a
    /// restart, every member still of that restart (`uids`) whatever its revision: a template
    /// changed and changed back (r1 to r2 to r1) leaves them at the revision, not restarted.
    Update {
        revision: String,
        #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
        uids: BTreeSet<String>,
    },
}

impl Restart {
    /// An update to `revision`.
    pub fn update(revision: impl Into<String>) -> Restart {
        Restart::Update {
            revision: revision.into(),
            uids: BTreeSet::new(),
        }
    }

    /// This restart after its template changed to `to` (`Followed::Revision`): an update to
    /// `to` that still replaces every member this one had still to replace.
    pub fn following(&self, to: String) -> Restart {
        let uids = match self {
            Restart::Restart { uids } | Restart::Update { uids, .. } => uids.clone(),
        };
        Restart::Update { revision: to, uids }
    }
}

/// How the StatefulSet can be restarted, or why `restart` must not drive it.
#[derive(Debug, Clone, PartialEq)]
pub enum Mode {
    /// Its pods are at its update revision: a restart of that revision.
    Restart,
    /// `OnDelete` with members at an older revision: their deletion updates them.
    Update { revision: String },
    /// `RollingUpdate` whose partition holds every member still behind (a staged rollout:
    /// `partition` at or above their ordinals). A partition only releases ordinals at or
    /// above it, so stepping it down would update in reverse ordinal order whichever member
    /// leads; restart instead makes the StatefulSet `OnDelete` while it deletes members in its
    /// own order, and puts `strategy` (the user's, partition included) back at the end.
    Staged {
        revision: String,
        strategy: StatefulSetUpdateStrategy,
    },
    /// `RollingUpdate` with an update under way: the controller rolls it itself, in reverse
    /// ordinal order whichever member leads.
    ControllerRolling { current: String, update: String },
}

/// The StatefulSet annotation that keeps the user's `spec.updateStrategy` (JSON) while a
/// staged update is driven under `OnDelete`; restart puts it back and removes this when the
/// last member is updated, or when run again after an interruption.
pub const SAVED_STRATEGY: &str = "raft.kubectl.io/update-strategy";

fn is_on_delete(sts: &StatefulSet) -> bool {
    sts.spec
        .as_ref()
        .and_then(|s| s.update_strategy.as_ref())
        .and_then(|u| u.type_.as_deref())
        == Some("OnDelete")
}

/// Whether the user's strategy may be put back over this OnDelete StatefulSet: its controller
/// has acted on its latest change and every member is at its update revision. A template
/// that arrived after the run's last look (a GitOps sync at the end) would otherwise be
/// rolled by the controller the moment RollingUpdate is back, whichever member leads.
pub fn settled_for_restore(sts: &StatefulSet) -> Result<(), String> {
    if let Some((generation, observed)) = unobserved(sts) {
        return Err(format!(
            "its controller has not yet acted on its latest change (generation {generation}, observed {observed})"
        ));
    }
    let want = sts.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let status = sts.status.clone().unwrap_or_default();
    let updated = status.updated_replicas.unwrap_or(0);
    if updated < want {
        return Err(format!(
            "{updated} of {want} member(s) are at its update revision {}: its template changed after the last member was restarted",
            status.update_revision.unwrap_or_default()
        ));
    }
    Ok(())
}

/// The user's update strategy a driven update saved, if one is saved (and readable).
pub fn saved_strategy(sts: &StatefulSet) -> Option<StatefulSetUpdateStrategy> {
    let raw = sts.metadata.annotations.as_ref()?.get(SAVED_STRATEGY)?;
    serde_json::from_str(raw).ok()
}

/// The ordinal a StatefulSet pod's name ends in (`etcd-2` -> 2).
fn ordinal(p: &Pod) -> Option<i32> {
    p.metadata.name.as_deref()?.rsplit_once('-')?.1.parse().ok()
}

/// The label a StatefulSet's controller puts on each pod: the revision it was made from.
pub const REVISION_LABEL: &str = "controller-revision-hash";

fn revision(p: &Pod) -> Option<&str> {
    p.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(REVISION_LABEL))
        .map(String::as_str)
}

/// The revision a deleted `pod` of `sts` comes back at, when that is not the one it runs: an
/// OnDelete StatefulSet with a pending update recreates every deleted pod from its update
/// revision, so a drain that evicts the member rolls the new template onto it.
pub fn comes_back_at(sts: &StatefulSet, pod: &Pod) -> Option<String> {
    let on_delete = is_on_delete(sts);
    let update = sts.status.as_ref()?.update_revision.clone()?;
    (on_delete && !update.is_empty() && revision(pod) != Some(update.as_str())).then_some(update)
}

pub fn mode(sts: &StatefulSet, pods: &[Pod]) -> Mode {
    let status = sts.status.clone().unwrap_or_default();
    let update = status.update_revision.unwrap_or_default();
    let current = status.current_revision.unwrap_or_default();
    let strategy = sts
        .spec
        .as_ref()
        .and_then(|s| s.update_strategy.clone())
        .unwrap_or_default();
    let behind = |p: &&Pod| revision(p) != Some(update.as_str());
    if update.is_empty() || !pods.iter().any(|p| behind(&p)) {
        return Mode::Restart;
    }
    if strategy.type_.as_deref() == Some("OnDelete") {
        return Mode::Update { revision: update };
    }
    // RollingUpdate (the default): members at or above the partition are the controller's.
    let partition = strategy
        .rolling_update
        .as_ref()
        .and_then(|r| r.partition)
        .unwrap_or(0);
    let held = pods
        .iter()
        .filter(behind)
        .all(|p| ordinal(p).is_some_and(|o| o < partition));
    if held {
        Mode::Staged {
            revision: update,
            strategy,
        }
    } else {
        Mode::ControllerRolling { current, update }
    }
}

/// `(generation, observedGeneration)` when the StatefulSet's controller has not yet acted on
/// its latest change: what it will replace, and in which order, is not known yet.
pub fn unobserved(sts: &StatefulSet) -> Option<(i64, i64)> {
    let generation = sts.metadata.generation.unwrap_or(0);
    let observed = sts
        .status
        .as_ref()
        .and_then(|s| s.observed_generation)
        .unwrap_or(0);
    (generation > observed).then_some((generation, observed))
}

/// Why a drain must wait for the StatefulSet's controller before it evicts a member: it is
/// rolling the members (`Mode::ControllerRolling`), or it has not yet acted on the latest
/// change of the StatefulSet (`metadata.generation` ahead of `status.observedGeneration`: a
/// `kubectl rollout restart` a moment ago, whose first deletion may come at any moment while
/// the revisions still read as before).
pub fn controller_busy(sts: &StatefulSet, pods: &[Pod]) -> Option<String> {
    if let Some((generation, observed)) = unobserved(sts) {
        return Some(format!(
            "its StatefulSet's controller has not yet acted on its latest change (generation {generation}, observed {observed}), which may roll it; if this lasts, the StatefulSet controller (kube-controller-manager) is not processing it"
        ));
    }
    // A scale-down the controller acts on in the same pass that marks it observed: members
    // above the new count are deleted by it, whatever a PDB or this plugin says.
    if let Some(replicas) = sts.spec.as_ref().and_then(|s| s.replicas) {
        if pods.len() > replicas.max(0) as usize {
            return Some(format!(
                "its StatefulSet is being scaled down to {replicas} member(s) ({} pods now): its controller deletes the highest ordinals",
                pods.len()
            ));
        }
    }
    match mode(sts, pods) {
        Mode::ControllerRolling { current, update } => Some(format!(
            "its StatefulSet's controller is rolling it from revision {current} to {update}"
        )),
        _ => None,
    }
}

/// The members still to restart, by pod name.
pub fn pending(pods: &[Pod], restart: &Restart) -> BTreeSet<String> {
    pods.iter()
        .filter(|p| match restart {
            Restart::Restart { uids } => p.metadata.uid.as_ref().is_some_and(|u| uids.contains(u)),
            Restart::Update { revision: r, uids } => {
                revision(p) != Some(r.as_str())
                    || p.metadata.uid.as_ref().is_some_and(|u| uids.contains(u))
            }
        })
        .filter_map(|p| p.metadata.name.clone())
        .collect()
}

/// What the StatefulSet, as it is now, means for a restart under way (checked at every look).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Followed {
    /// Nothing changed what the restart replaces.
    Same,
    /// The template changed again during a driven update: the restart now drives the newest
    /// revision (members at the one it started with are behind too, and leadership goes only
    /// to members at the newest).
    Revision { from: String, to: String },
    /// Going on would interleave with another actor; stop before the next step, saying why.
    Conflict(String),
}

/// Follows the StatefulSet between steps: a driven update follows a newer template (as the
/// controller itself would), but stops once the StatefulSet is no longer `OnDelete` (its
/// controller would replace members itself); a restart of the current revision stops once
/// the controller rolls a new one: one under way, or one finished since the restart began at
/// `started_at` (the update revision then; a rollout can end between two looks).
pub fn follow(
    restart: &Restart,
    started_at: Option<&str>,
    sts: &StatefulSet,
    pods: &[Pod],
) -> Followed {
    let status = sts.status.clone().unwrap_or_default();
    let update = status.update_revision.unwrap_or_default();
    let strategy = sts
        .spec
        .as_ref()
        .and_then(|s| s.update_strategy.as_ref())
        .and_then(|s| s.type_.clone())
        .unwrap_or_else(|| "RollingUpdate".into());
    match restart {
        Restart::Update { revision, .. } => {
            if strategy != "OnDelete" {
                return Followed::Conflict(format!(
                    "the StatefulSet's update strategy was changed to {strategy} during the update: its controller now replaces members itself, in reverse ordinal order whichever leads. Stopped so that two rollouts do not interleave; set it back to OnDelete (or stage the update) and run the same command again"
                ));
            }
            if !update.is_empty() && &update != revision {
                return Followed::Revision {
                    from: revision.clone(),
                    to: update,
                };
            }
            Followed::Same
        }
        Restart::Restart { .. } => {
            let rolled = |from: &str, to: &str| {
                Followed::Conflict(format!(
                    "the StatefulSet's controller started rolling it (revision {from} to {to}) during the restart: it replaces members in reverse ordinal order whichever leads. Stopped so that two rollouts do not interleave; let the controller finish, or stage the change (partition, or OnDelete) and run kubectl raft restart to drive it"
                ))
            };
            match (mode(sts, pods), started_at) {
                (Mode::ControllerRolling { current, update }, _) => rolled(&current, &update),
                (_, Some(start))
                    if strategy != "OnDelete" && !update.is_empty() && update != start =>
                {
                    rolled(start, &update)
                }
                // Under OnDelete a new template rolls nothing by itself: the restart follows
                // it as a driven update (members already restarted are behind it too), so
                // that the user's strategy is never put back over members left behind.
                (_, Some(start)) if !update.is_empty() && update != start => Followed::Revision {
                    from: start.to_string(),
                    to: update,
                },
                // Every restart runs under OnDelete: one that is not any more (a GitOps sync
                // put the manifest's strategy back) leaves the controller free to delete
                // members beside the restart at the next template change.
                _ if strategy != "OnDelete" => Followed::Conflict(format!(
                    "the StatefulSet's update strategy was changed to {strategy} during the restart (a GitOps sync of the manifest?): its controller would delete members beside the restart at the next template change. Stopped; run the same command again to resume under OnDelete, or keep updateStrategy OnDelete in the manifest"
                )),
                _ => Followed::Same,
            }
        }
    }
}

/// A restart of every member as they are now.
pub fn restart_all(pods: &[Pod]) -> Restart {
    Restart::Restart {
        uids: pods.iter().filter_map(|p| p.metadata.uid.clone()).collect(),
    }
}

/// The annotation's value for a restart, and back.
pub fn to_annotation(uids: &BTreeSet<String>) -> String {
    uids.iter().cloned().collect::<Vec<_>>().join(",")
}

pub fn from_annotation(value: &str) -> Restart {
    Restart::Restart {
        uids: value
            .split(',')
            .map(str::trim)
            .filter(|u| !u.is_empty())
            .map(String::from)
            .collect(),
    }
}

/// A staged RollingUpdate driven under OnDelete: the user's strategy, and whether this run
/// switches to OnDelete (false: an earlier, interrupted run did).
#[derive(Debug, Clone, PartialEq)]
pub struct Driven {
    pub strategy: StatefulSetUpdateStrategy,
    pub switch_now: bool,
}

/// "RollingUpdate, partition 3" (what the user set, to be put back).
pub fn describe_strategy(s: &StatefulSetUpdateStrategy) -> String {
    let kind = s.type_.as_deref().unwrap_or("RollingUpdate");
    match s.rolling_update.as_ref().and_then(|r| r.partition) {
        Some(p) => format!("{kind}, partition {p}"),
        None => kind.to_string(),
    }
}

/// The merge patch that puts `s` back and removes the record of it.
pub fn restore_patch(s: &StatefulSetUpdateStrategy) -> serde_json::Value {
    serde_json::json!({
        "metadata": {"annotations": {SAVED_STRATEGY: null}},
        "spec": {"updateStrategy": s},
    })
}

/// What a restart of one StatefulSet does, decided from the StatefulSet, its pods and the
/// record on its lock, before anything is changed.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Every member is at the update revision, but the run that drove it stopped before it
    /// put the user's strategy back: put it back, nothing else.
    RestoreOnly(StatefulSetUpdateStrategy),
    /// Replace these members, driving a staged update under OnDelete if `driven`; `note`
    /// tells the user first that an earlier run is resumed.
    Run {
        restart: Restart,
        driven: Option<Driven>,
        note: Option<String>,
    },
}

/// Decides a restart: a controller's rollout is refused (the message says why and what to do
/// instead), a staged update is driven, an interrupted run is resumed from its record
/// (`on_lock`, or the StatefulSet's annotation older versions wrote), otherwise every member
/// is restarted. A dry run never puts a strategy back.
pub fn decide(
    cluster: &str,
    sts: &StatefulSet,
    pods: &[Pod],
    on_lock: Option<&str>,
    dry_run: bool,
) -> Result<Decision, String> {
    if let Some((generation, observed)) = unobserved(sts) {
        return Err(format!(
            "{cluster}: its StatefulSet's controller has not yet acted on its latest change (generation {generation}, observed {observed}), so what it will replace is not known; nothing was restarted. If this lasts, the StatefulSet controller (kube-controller-manager) is not processing it; run again once .status.observedGeneration reaches .metadata.generation"
        ));
    }
    // A saved strategy on a StatefulSet that is no longer OnDelete is stale: someone (a GitOps
    // sync) set theirs since, and it is theirs that is kept and put back.
    let saved = saved_strategy(sts).filter(|_| is_on_delete(sts));
    // The record of a restart that stopped is on the cluster's lock (older versions kept it on
    // the StatefulSet: read there too): the members it had still to restart, by UID.
    let on_sts = sts
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(RESTART_PENDING))
        .map(String::as_str);
    let marked = on_lock
        .or(on_sts)
        .map(from_annotation)
        .filter(|r| !pending(pods, r).is_empty());
    // An update that a stopped restart had followed (a template changed during it, and maybe
    // changed back) still restarts the members that restart never reached, whatever their
    // revision; the record is cleared when the update ends.
    let update = |revision: String| {
        match &marked {
        Some(r) => (
            r.following(revision),
            Some(format!(
                "resuming the restart that {RESTART_PENDING} on its lock records, as an update to its newest template: the {} member(s) it never reached are restarted whatever revision they run",
                pending(pods, r).len()
            )),
        ),
        None => (Restart::update(revision), None),
    }
    };
    Ok(match mode(sts, pods) {
        Mode::ControllerRolling { current, update } => return Err(format!(
            "{cluster} is being rolled by its controller (RollingUpdate from revision {current} to {update}): it replaces members in reverse ordinal order whichever leads. Let it finish; next time stage the update (spec.updateStrategy.rollingUpdate.partition at the number of replicas before changing the template, or type OnDelete) and kubectl raft restart drives it in the safe order"
        )),
        Mode::Staged { revision, strategy } => {
            let (restart, note) = update(revision);
            Decision::Run {
                restart,
                driven: Some(Driven {
                    strategy,
                    switch_now: true,
                }),
                note,
            }
        }
        Mode::Update { revision } => {
            let driven = saved.map(|strategy| Driven {
                strategy,
                switch_now: false,
            });
            let (restart, resumed) = update(revision);
            let kept = driven.is_some().then(|| format!(
                "resuming the staged update that {SAVED_STRATEGY} on the StatefulSet records; its update strategy is put back when every member is updated"
            ));
            let note = match (resumed, kept) {
                (Some(a), Some(b)) => Some(format!("{a}; {b}")),
                (a, b) => a.or(b),
            };
            Decision::Run {
                restart,
                driven,
                note,
            }
        }
        Mode::Restart => {
            match (marked, saved) {
                // A restart that stopped: resume it (members replaced since are done), under
                // OnDelete: the one it set, or set now (it stopped before its switch, or an
                // older version ran it).
                (Some(r), saved) => Decision::Run {
                    note: Some(format!(
                        "resuming the restart that {RESTART_PENDING} on its lock records: {} member(s) still to restart; those already replaced are not restarted again",
                        pending(pods, &r).len()
                    )),
                    restart: r,
                    driven: under_on_delete(sts, saved),
                },
                // Every member restarted or updated, the strategy not yet put back.
                (None, Some(saved)) if !dry_run => Decision::RestoreOnly(saved),
                (None, saved) => Decision::Run {
                    restart: restart_all(pods),
                    driven: under_on_delete(sts, saved),
                    note: None,
                },
            }
        }
    })
}

/// How a restart of the current revision keeps the StatefulSet's controller from deleting
/// members beside it: under `OnDelete` (the user's, kept; or set for the run and the user's
/// strategy put back at the end). Under `RollingUpdate` a template change mid-run (one that
/// leaves `updateStrategy` alone) would have the controller delete the highest member still
/// behind at once, whichever leads, while the restart waits for a replacement: two members
/// down (with `Parallel` it does not even wait for the restart's pod to be Ready).
fn under_on_delete(sts: &StatefulSet, saved: Option<StatefulSetUpdateStrategy>) -> Option<Driven> {
    if let Some(strategy) = saved {
        // OnDelete already, set by an earlier run (resumed, or a dry run over one that did
        // not put the strategy back): the user's is the one it saved.
        return Some(Driven {
            strategy,
            switch_now: false,
        });
    }
    let strategy = sts
        .spec
        .as_ref()
        .and_then(|s| s.update_strategy.clone())
        .unwrap_or_default();
    (!is_on_delete(sts)).then_some(Driven {
        strategy,
        switch_now: true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::{
        RollingUpdateStatefulSetStrategy, StatefulSetSpec, StatefulSetStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn pod(name: &str, revision: &str, uid: &str) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: Some([(REVISION_LABEL.to_string(), revision.to_string())].into()),
                uid: Some(uid.into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn sts(strategy: &str, current: &str, update: &str) -> StatefulSet {
        StatefulSet {
            spec: Some(StatefulSetSpec {
                update_strategy: Some(StatefulSetUpdateStrategy {
                    type_: Some(strategy.into()),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            status: Some(StatefulSetStatus {
                current_revision: Some(current.into()),
                update_revision: Some(update.into()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// A RollingUpdate StatefulSet from `current` to `update` at `generation`, its controller
    /// having seen `observed`; and two members at the revisions given.
    fn rolling_at(
        current: &str,
        update: &str,
        (generation, observed): (i64, i64),
        revisions: [&str; 2],
    ) -> (StatefulSet, [Pod; 2]) {
        let mut s = sts("RollingUpdate", current, update);
        s.metadata.generation = Some(generation);
        s.status.as_mut().unwrap().observed_generation = Some(observed);
        let pods = [
            pod("etcd-0", revisions[0], "u0"),
            pod("etcd-1", revisions[1], "u1"),
        ];
        (s, pods)
    }

    /// A `kubectl rollout restart` the controller has not acted on yet: the revisions read as
    /// before, so the mode alone says nothing is rolling; the generation says a change is due.
    #[test]
    fn a_change_the_controller_has_not_seen_keeps_a_drain_waiting() {
        let (s, pods) = rolling_at("r1", "r1", (3, 2), ["r1", "r1"]);
        assert_eq!(mode(&s, &pods), Mode::Restart);
        let why = controller_busy(&s, &pods).expect("busy");
        assert!(why.contains("generation 3, observed 2"), "{why}");
    }

    #[test]
    fn a_controller_rolling_its_members_keeps_a_drain_waiting() {
        let (s, pods) = rolling_at("r1", "r2", (2, 2), ["r1", "r2"]);
        let why = controller_busy(&s, &pods).expect("busy");
        assert!(why.contains("from revision r1 to r2"), "{why}");
    }

    /// `kubectl rollout restart` then at once `kubectl raft restart`: the revisions still read
    /// as before, so without the generation this was a plain restart beside the controller's.
    #[test]
    fn a_restart_is_not_decided_on_a_change_the_controller_has_not_seen() {
        let (s, pods) = rolling_at("r1", "r1", (3, 2), ["r1", "r1"]);
        let Err(why) = decide("ns/etcd", &s, &pods, None, false) else {
            panic!("decided on an unobserved change");
        };
        assert!(why.contains("generation 3, observed 2"), "{why}");
        assert!(why.contains("nothing was restarted"), "{why}");
    }

    /// `kubectl scale sts etcd --replicas=1` after the look: the controller marks the change
    /// observed in the pass that deletes the highest ordinal, so the generation alone can say
    /// "settled" while it deletes a member. (Before, a settled generation and equal revisions
    /// were "not busy" and the eviction went beside the deletion; this failed there.)
    #[test]
    fn a_scale_down_keeps_a_drain_waiting() {
        let (mut s, pods) = rolling_at("r2", "r2", (3, 3), ["r2", "r2"]);
        s.spec.as_mut().unwrap().replicas = Some(1);
        let why = controller_busy(&s, &pods).expect("busy");
        assert!(
            why.contains("scaled down to 1 member(s) (2 pods now)"),
            "{why}"
        );
    }

    #[test]
    fn as_many_pods_as_replicas_keep_no_drain_waiting() {
        let (mut s, pods) = rolling_at("r2", "r2", (3, 3), ["r2", "r2"]);
        s.spec.as_mut().unwrap().replicas = Some(2);
        assert_eq!(controller_busy(&s, &pods), None);
    }

    #[test]
    fn a_settled_statefulset_keeps_no_drain_waiting() {
        let (s, pods) = rolling_at("r2", "r2", (2, 2), ["r2", "r2"]);
        assert_eq!(controller_busy(&s, &pods), None);
    }

    #[test]
    fn a_member_behind_an_on_delete_update_comes_back_at_the_update_revision() {
        let s = sts("OnDelete", "r1", "r2");
        assert_eq!(
            comes_back_at(&s, &pod("etcd-0", "r1", T0)).as_deref(),
            Some("r2")
        );
        assert_eq!(comes_back_at(&s, &pod("etcd-1", "r2", T1)), None);
    }

    #[test]
    fn a_rolling_update_member_comes_back_as_the_controller_decides_not_said() {
        let s = sts("RollingUpdate", "r1", "r2");
        assert_eq!(comes_back_at(&s, &pod("etcd-0", "r1", T0)), None);
    }

    const T0: &str = "uid-a";
    const T1: &str = "uid-b";

    fn update(revision: &str) -> Restart {
        Restart::update(revision)
    }

    #[test]
    fn a_driven_update_follows_a_newer_template() {
        let pods = [pod("a-0", "r2", T1), pod("a-1", "r1", T0)];
        assert_eq!(
            follow(&update("r2"), None, &sts("OnDelete", "r1", "r3"), &pods),
            Followed::Revision {
                from: "r2".into(),
                to: "r3".into()
            }
        );
        assert_eq!(
            follow(&update("r2"), None, &sts("OnDelete", "r1", "r2"), &pods),
            Followed::Same
        );
    }

    #[test]
    fn a_driven_update_stops_once_the_strategy_is_no_longer_on_delete() {
        let pods = [pod("a-0", "r2", T1), pod("a-1", "r1", T0)];
        let f = follow(
            &update("r2"),
            None,
            &sts("RollingUpdate", "r1", "r2"),
            &pods,
        );
        assert!(
            matches!(&f, Followed::Conflict(m) if m.contains("changed to RollingUpdate")),
            "{f:?}"
        );
    }

    #[test]
    fn a_restart_stops_once_the_controller_rolls_a_new_revision() {
        let restart = restart_all(&[pod("a-0", "r1", T0), pod("a-1", "r1", T1)]);
        let now = [pod("a-0", "r1", T0), pod("a-1", "r2", "uid-c")];
        let f = follow(
            &restart,
            Some("r1"),
            &sts("RollingUpdate", "r1", "r2"),
            &now,
        );
        assert!(
            matches!(&f, Followed::Conflict(m) if m.contains("started rolling it")),
            "{f:?}"
        );
    }

    /// Under OnDelete (the user's, or the run's) a new template rolls nothing by itself: the
    /// restart follows it as a driven update, so nobody's strategy is put back over members
    /// left at the old template.
    #[test]
    fn a_restart_under_on_delete_follows_a_new_template() {
        let restart = restart_all(&[pod("a-0", "r1", T0), pod("a-1", "r1", T1)]);
        let now = [pod("a-0", "r1", T0), pod("a-1", "r2", "uid-c")];
        assert_eq!(
            follow(&restart, Some("r1"), &sts("OnDelete", "r1", "r2"), &now),
            Followed::Revision {
                from: "r1".into(),
                to: "r2".into()
            }
        );
    }

    /// A template changed during a restart and changed back (r1 to r2 to r1, a GitOps revert):
    /// the members the restart never reached run r1 again, the update revision, and are
    /// still to restart. (Before, the restart followed each change as a plain update to its
    /// revision, and ended with them never restarted.)
    #[test]
    fn a_template_changed_and_changed_back_leaves_no_member_unrestarted() {
        let started = [
            pod("a-0", "r1", T0),
            pod("a-1", "r1", T1),
            pod("a-2", "r1", "uid-c"),
        ];
        let restart = restart_all(&started);
        // a-2 restarted at r1; then the template went to r2, and a-1 was updated to it.
        let to_r2 = restart.following("r2".into());
        let now = [
            pod("a-0", "r1", T0),
            pod("a-1", "r2", "uid-d"),
            pod("a-2", "r1", "uid-e"),
        ];
        assert_eq!(
            pending(&now, &to_r2),
            ["a-0".to_string(), "a-2".to_string()].into()
        );
        // Back to r1: a-1 is behind it, and a-0 was never restarted.
        let back = to_r2.following("r1".into());
        assert_eq!(
            pending(&now, &back),
            ["a-0".to_string(), "a-1".to_string()].into()
        );
    }

    /// The same, stopped after the template went back (r1 to r2 to r1) and run again: the
    /// StatefulSet is an update to r1 (a member is at r2), and the restart's record on the
    /// lock still names a member it never reached, at r1: the rerun restarts it too. (Before,
    /// the rerun drove a plain update and left it, and its record, behind.)
    #[test]
    fn a_rerun_after_a_template_changed_back_restarts_what_the_record_names() {
        let now = [
            pod("a-0", "r1", T0),
            pod("a-1", "r2", "uid-d"),
            pod("a-2", "r1", "uid-e"),
        ];
        let record = to_annotation(&[T0.into(), T1.into(), "uid-c".into()].into());
        let Ok(Decision::Run { restart, note, .. }) = decide(
            "ns/a",
            &sts("OnDelete", "r1", "r1"),
            &now,
            Some(&record),
            false,
        ) else {
            panic!("a run")
        };
        assert_eq!(
            pending(&now, &restart),
            ["a-0".to_string(), "a-1".to_string()].into()
        );
        assert!(note.is_some_and(|n| n.contains("never reached")));
    }

    #[test]
    fn a_controller_rollout_that_ended_between_two_looks_stops_the_restart_too() {
        let restart = restart_all(&[pod("a-0", "r1", T0), pod("a-1", "r1", T1)]);
        // Every member already at r2, rolled by the controller: nothing is behind now.
        let now = [pod("a-0", "r2", "uid-c"), pod("a-1", "r2", "uid-d")];
        let f = follow(
            &restart,
            Some("r1"),
            &sts("RollingUpdate", "r2", "r2"),
            &now,
        );
        assert!(
            matches!(&f, Followed::Conflict(m) if m.contains("revision r1 to r2")),
            "{f:?}"
        );
    }

    #[test]
    fn pods_at_the_update_revision_are_restarted() {
        let pods = [pod("a-0", "r1", T0), pod("a-1", "r1", T0)];
        assert_eq!(
            mode(&sts("RollingUpdate", "r1", "r1"), &pods),
            Mode::Restart
        );
        assert_eq!(mode(&sts("OnDelete", "r1", "r1"), &pods), Mode::Restart);
    }

    #[test]
    fn an_on_delete_update_is_driven_member_by_member() {
        let pods = [pod("a-0", "r2", T1), pod("a-1", "r1", T0)];
        let m = mode(&sts("OnDelete", "r1", "r2"), &pods);
        assert_eq!(
            m,
            Mode::Update {
                revision: "r2".into()
            }
        );
        let left = pending(&pods, &Restart::update("r2"));
        assert_eq!(left, ["a-1".to_string()].into());
    }

    #[test]
    fn a_rolling_update_under_way_is_the_controllers() {
        let pods = [pod("a-0", "r1", T0), pod("a-1", "r2", T1)];
        assert!(matches!(
            mode(&sts("RollingUpdate", "r1", "r2"), &pods),
            Mode::ControllerRolling { .. }
        ));
    }

    fn staged(partition: i32) -> StatefulSet {
        let mut s = sts("RollingUpdate", "r1", "r2");
        s.spec.as_mut().unwrap().update_strategy = Some(StatefulSetUpdateStrategy {
            type_: Some("RollingUpdate".into()),
            rolling_update: Some(RollingUpdateStatefulSetStrategy {
                partition: Some(partition),
                ..Default::default()
            }),
        });
        s
    }

    #[test]
    fn a_staged_rolling_update_is_driven_and_its_strategy_kept_to_restore() {
        // partition 3 holds every member of three: nothing is the controller's.
        let pods = [
            pod("a-0", "r1", T0),
            pod("a-1", "r1", T0),
            pod("a-2", "r1", T0),
        ];
        let Mode::Staged { revision, strategy } = mode(&staged(3), &pods) else {
            panic!("a staged update")
        };
        assert_eq!(revision, "r2");
        assert_eq!(strategy.rolling_update.unwrap().partition, Some(3));
    }

    #[test]
    fn a_partition_that_releases_a_member_behind_leaves_the_update_to_the_controller() {
        // partition 2: a-2 is the controller's to update now.
        let pods = [
            pod("a-0", "r1", T0),
            pod("a-1", "r1", T0),
            pod("a-2", "r1", T0),
        ];
        assert!(matches!(
            mode(&staged(2), &pods),
            Mode::ControllerRolling { .. }
        ));
        // ... unless the controller already updated it.
        let pods = [
            pod("a-0", "r1", T0),
            pod("a-1", "r1", T0),
            pod("a-2", "r2", T1),
        ];
        assert!(matches!(mode(&staged(2), &pods), Mode::Staged { .. }));
    }

    #[test]
    fn a_saved_strategy_is_read_back() {
        let mut s = staged(3);
        let strategy = s.spec.as_ref().unwrap().update_strategy.clone().unwrap();
        s.metadata.annotations = Some(
            [(
                SAVED_STRATEGY.to_string(),
                serde_json::to_string(&strategy).unwrap(),
            )]
            .into(),
        );
        assert_eq!(saved_strategy(&s), Some(strategy));
        s.metadata.annotations = Some([(SAVED_STRATEGY.to_string(), "{not json".into())].into());
        assert_eq!(saved_strategy(&s), None);
    }

    #[test]
    fn members_whose_pod_was_replaced_are_done() {
        let before = [pod("a-0", "r1", "u0"), pod("a-1", "r1", "u1")];
        let r = restart_all(&before);
        let now = [pod("a-0", "r1", "u9"), pod("a-1", "r1", "u1")];
        assert_eq!(pending(&now, &r), ["a-1".to_string()].into());
    }

    #[test]
    fn the_annotation_round_trips() {
        let r = restart_all(&[pod("a-0", "r1", "u0"), pod("a-1", "r1", "u1")]);
        let Restart::Restart { uids } = &r else {
            panic!("a restart")
        };
        assert_eq!(from_annotation(&to_annotation(uids)), r);
        assert_eq!(from_annotation(" u0, ,u1 "), r);
    }

    fn annotated(mut s: StatefulSet, key: &str, value: &str) -> StatefulSet {
        s.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(key.into(), value.into());
        s
    }

    fn three_at(revision: &str) -> [Pod; 3] {
        [
            pod("a-0", revision, "u0"),
            pod("a-1", revision, "u1"),
            pod("a-2", revision, "u2"),
        ]
    }

    #[test]
    fn a_controllers_rollout_is_refused_with_what_to_do_instead() {
        let pods = [pod("a-0", "r1", T0), pod("a-1", "r2", T1)];
        let e = decide(
            "ns/a",
            &sts("RollingUpdate", "r1", "r2"),
            &pods,
            None,
            false,
        )
        .unwrap_err();
        assert!(e.contains("being rolled by its controller"), "{e}");
        assert!(e.contains("partition"), "{e}");
    }

    #[test]
    fn a_staged_update_is_driven_under_on_delete_switched_by_this_run() {
        let d = decide("ns/a", &staged(3), &three_at("r1"), None, false).unwrap();
        let Decision::Run {
            driven: Some(d), ..
        } = d
        else {
            panic!("driven: {d:?}")
        };
        assert!(d.switch_now);
        assert_eq!(describe_strategy(&d.strategy), "RollingUpdate, partition 3");
    }

    #[test]
    fn an_update_an_earlier_run_drove_is_resumed_without_switching_again() {
        let saved = serde_json::to_string(&staged(3).spec.unwrap().update_strategy).unwrap();
        let s = annotated(sts("OnDelete", "r1", "r2"), SAVED_STRATEGY, &saved);
        let Decision::Run {
            driven: Some(d),
            note: Some(note),
            ..
        } = decide("ns/a", &s, &three_at("r1"), None, false).unwrap()
        else {
            panic!("a resumed driven update")
        };
        assert!(!d.switch_now);
        assert!(note.contains("resuming the staged update"), "{note}");
    }

    #[test]
    fn a_finished_update_whose_strategy_was_not_put_back_is_only_put_back() {
        let saved = serde_json::to_string(&staged(3).spec.unwrap().update_strategy).unwrap();
        let s = annotated(sts("OnDelete", "r2", "r2"), SAVED_STRATEGY, &saved);
        assert!(matches!(
            decide("ns/a", &s, &three_at("r2"), None, false).unwrap(),
            Decision::RestoreOnly(_)
        ));
        // A dry run changes nothing: it plans a restart instead.
        assert!(matches!(
            decide("ns/a", &s, &three_at("r2"), None, true).unwrap(),
            Decision::Run { .. }
        ));
    }

    #[test]
    fn a_restart_recorded_on_the_lock_resumes_with_the_members_not_yet_replaced() {
        // u0 was replaced since (a-0 has a new UID); u1 and u2 are still to go.
        let pods = [
            pod("a-0", "r1", "new"),
            pod("a-1", "r1", "u1"),
            pod("a-2", "r1", "u2"),
        ];
        let Decision::Run { restart, note, .. } = decide(
            "ns/a",
            &sts("RollingUpdate", "r1", "r1"),
            &pods,
            Some("u0,u1,u2"),
            false,
        )
        .unwrap() else {
            panic!("a run")
        };
        assert_eq!(
            pending(&pods, &restart),
            BTreeSet::from(["a-1".to_string(), "a-2".to_string()])
        );
        assert!(note.unwrap().contains("2 member(s) still to restart"));
    }

    #[test]
    fn a_restart_recorded_on_the_statefulset_by_an_older_version_resumes_too() {
        let pods = [pod("a-0", "r1", "new"), pod("a-1", "r1", "u1")];
        let s = annotated(sts("RollingUpdate", "r1", "r1"), RESTART_PENDING, "u0,u1");
        let Decision::Run { restart, .. } = decide("ns/a", &s, &pods, None, false).unwrap() else {
            panic!("a run")
        };
        assert_eq!(
            pending(&pods, &restart),
            BTreeSet::from(["a-1".to_string()])
        );
    }

    #[test]
    fn a_record_whose_members_are_all_replaced_starts_a_new_restart_of_every_member() {
        let pods = three_at("r1");
        let Decision::Run { restart, note, .. } = decide(
            "ns/a",
            &sts("RollingUpdate", "r1", "r1"),
            &pods,
            Some("old0,old1"),
            false,
        )
        .unwrap() else {
            panic!("a run")
        };
        assert_eq!(pending(&pods, &restart).len(), 3);
        assert_eq!(note, None);
    }

    /// A plain restart of a RollingUpdate StatefulSet runs under OnDelete: no template change
    /// mid-run (Argo CD, `helm upgrade`) has the controller delete a member beside it.
    #[test]
    fn a_restart_of_a_rolling_update_runs_under_on_delete() {
        let Decision::Run {
            driven: Some(d), ..
        } = decide(
            "ns/a",
            &sts("RollingUpdate", "r1", "r1"),
            &three_at("r1"),
            None,
            false,
        )
        .unwrap()
        else {
            panic!("a driven restart")
        };
        assert!(d.switch_now);
        assert_eq!(d.strategy.type_.as_deref(), Some("RollingUpdate"));
    }

    #[test]
    fn a_restart_of_an_on_delete_statefulset_changes_no_strategy() {
        let d = decide(
            "ns/a",
            &sts("OnDelete", "r1", "r1"),
            &three_at("r1"),
            None,
            false,
        )
        .unwrap();
        assert!(matches!(d, Decision::Run { driven: None, .. }), "{d:?}");
    }

    /// A restart that stopped under the OnDelete it set resumes under it (no second switch)
    /// and puts the user's strategy back at its end, not at once.
    #[test]
    fn a_stopped_restart_under_on_delete_resumes_under_it() {
        let rolling = sts("RollingUpdate", "r1", "r1")
            .spec
            .unwrap()
            .update_strategy;
        let saved = serde_json::to_string(&rolling).unwrap();
        let s = annotated(sts("OnDelete", "r1", "r1"), SAVED_STRATEGY, &saved);
        let pods = [
            pod("a-0", "r1", "new"),
            pod("a-1", "r1", "u1"),
            pod("a-2", "r1", "u2"),
        ];
        let Decision::Run {
            driven: Some(d),
            restart,
            ..
        } = decide("ns/a", &s, &pods, Some("u0,u1,u2"), false).unwrap()
        else {
            panic!("a resumed driven restart")
        };
        assert!(!d.switch_now);
        assert_eq!(Some(d.strategy), rolling);
        assert_eq!(pending(&pods, &restart).len(), 2);
    }

    /// A restart whose record was written but whose switch to OnDelete never happened (Ctrl-C
    /// between them, a refused patch, an older version's run) resumes under OnDelete too.
    #[test]
    fn a_restart_resumed_before_its_switch_switches_now() {
        let pods = [
            pod("a-0", "r1", "new"),
            pod("a-1", "r1", "u1"),
            pod("a-2", "r1", "u2"),
        ];
        let Decision::Run {
            driven: Some(d), ..
        } = decide(
            "ns/a",
            &sts("RollingUpdate", "r1", "r1"),
            &pods,
            Some("u0,u1,u2"),
            false,
        )
        .unwrap()
        else {
            panic!("a resumed restart under OnDelete")
        };
        assert!(d.switch_now);
    }

    /// A GitOps sync put the manifest's RollingUpdate back over the OnDelete a run set: the
    /// saved strategy is stale, the next restart switches again from theirs (never "only put
    /// back", which would fail for ever on a StatefulSet that is not OnDelete).
    #[test]
    fn a_saved_strategy_on_a_statefulset_no_longer_on_delete_is_stale() {
        let saved = serde_json::to_string(&staged(3).spec.unwrap().update_strategy).unwrap();
        let s = annotated(sts("RollingUpdate", "r1", "r1"), SAVED_STRATEGY, &saved);
        let Decision::Run {
            driven: Some(d), ..
        } = decide("ns/a", &s, &three_at("r1"), None, false).unwrap()
        else {
            panic!("a restart that switches again")
        };
        assert!(d.switch_now);
        assert_eq!(describe_strategy(&d.strategy), "RollingUpdate");
    }

    /// The strategy put back mid-run (a GitOps sync): the restart is unprotected, and stops.
    #[test]
    fn a_restart_stops_once_its_statefulset_is_no_longer_on_delete() {
        let restart = restart_all(&three_at("r1"));
        let f = follow(
            &restart,
            Some("r1"),
            &sts("RollingUpdate", "r1", "r1"),
            &three_at("r1"),
        );
        assert!(
            matches!(&f, Followed::Conflict(m) if m.contains("changed to RollingUpdate during the restart")),
            "{f:?}"
        );
    }

    fn settled(replicas: i32, updated: i32, (generation, observed): (i64, i64)) -> StatefulSet {
        let mut s = sts("OnDelete", "r1", "r2");
        s.spec.as_mut().unwrap().replicas = Some(replicas);
        s.metadata.generation = Some(generation);
        let st = s.status.as_mut().unwrap();
        st.observed_generation = Some(observed);
        st.updated_replicas = Some(updated);
        s
    }

    #[test]
    fn the_strategy_goes_back_once_every_member_is_at_the_update_revision() {
        assert_eq!(settled_for_restore(&settled(3, 3, (4, 4))), Ok(()));
    }

    /// A template that arrived after the last member was restarted: putting RollingUpdate
    /// back would have the controller roll it, whichever member leads.
    #[test]
    fn the_strategy_stays_on_delete_over_members_behind_a_new_template() {
        let why = settled_for_restore(&settled(3, 0, (5, 5))).unwrap_err();
        assert!(why.contains("0 of 3 member(s)"), "{why}");
    }

    #[test]
    fn the_strategy_stays_on_delete_until_the_controller_saw_the_latest_change() {
        let why = settled_for_restore(&settled(3, 3, (5, 4))).unwrap_err();
        assert!(why.contains("generation 5, observed 4"), "{why}");
    }
}
