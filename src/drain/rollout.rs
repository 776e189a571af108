//! A rollout of one StatefulSet, as a library beside the drain: every member replaced once
//! (evicted, so PodDisruptionBudgets are honoured, and recreated by its controller), in the
//! drain planner's order, by the same cluster loop ([`drain_cluster`]) with the members to
//! replace as its `ClusterInput::replace`.
//!
//! What to replace is decided before (`plan::restart::decide`); what the rollout changes
//! besides the members goes through [`RolloutOps`]: the record a rerun resumes from (on the
//! cluster's lock), and a staged update's strategy (OnDelete while it is driven, the user's put
//! back at the end). The promise, held by [`roll`]'s shape and its scripted tests: the record
//! is cleared and the strategy put back **only when every member was replaced**; a stop
//! leaves both, and says how to resume or put the strategy back by hand.

use anyhow::{bail, Result};
use k8s_openapi::api::apps::v1::StatefulSetUpdateStrategy;

use super::{drain_cluster, left_on, ClusterOps, ClusterResult, ClusterSummary, Events, Settings};
use crate::actions::RestartReport;
use crate::plan::drain::{plan_cluster, ClusterInput, DrainOptions};
use crate::plan::restart::{
    describe_strategy, restore_patch, to_annotation, Driven, Restart, SAVED_STRATEGY,
};
use crate::report::API_VERSION;

/// What a rollout changes besides its members, and the cluster it replaces them in.
#[allow(async_fn_in_trait)]
pub trait RolloutOps {
    type Cluster: ClusterOps;
    /// The cluster loop's operations (look, transfer, evict, wait, the lock).
    fn cluster(&self) -> &Self::Cluster;
    /// Writes (Some) or clears (None) the record a rerun resumes from.
    async fn set_record(&self, value: Option<&str>) -> Result<()>;
    /// Saves the user's strategy on the StatefulSet and makes it OnDelete, only if its
    /// strategy is still `s`.
    async fn switch_to_on_delete(&self, s: &StatefulSetUpdateStrategy) -> Result<()>;
    /// Puts `s` back, only over the OnDelete this rollout set.
    async fn restore_strategy(&self, s: &StatefulSetUpdateStrategy) -> Result<()>;
    /// What the rollout replaces now (a newer template during a driven update is followed).
    fn restart_now(&self) -> Restart;
    /// What changed under it and how it followed, in order.
    fn followed(&self) -> Vec<String>;
}

/// One StatefulSet's rollout, as decided.
#[derive(Debug, Clone)]
pub struct Rollout {
    pub namespace: String,
    pub name: String,
    /// A staged update driven under OnDelete.
    pub driven: Option<Driven>,
    pub opts: DrainOptions,
    pub settings: Settings,
}

impl Rollout {
    fn cluster(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    fn report(
        &self,
        dry_run: bool,
        restart: Restart,
        cluster: ClusterSummary,
        followed: Vec<String>,
    ) -> RestartReport {
        RestartReport {
            api_version: API_VERSION,
            kind: "RestartReport",
            dry_run,
            restart,
            succeeded: cluster.result != ClusterResult::Stopped,
            message: cluster.message.clone(),
            cluster,
            followed,
        }
    }
}

/// The dry run: the plan made from this look, and what would stop it; nothing is changed.
pub fn dry_run(r: &Rollout, restart: Restart, input: &ClusterInput) -> RestartReport {
    let plan = plan_cluster(input, &r.opts);
    let mut c = ClusterSummary::new(&r.namespace, &r.name, ClusterResult::Planned);
    c.system = input.report.system.clone();
    c.left = left_on(input, &r.opts.nodes);
    let message = match &plan.blocker {
        None => format!(
            "dry run: {} member(s) would be restarted; nothing was changed",
            plan.steps.len()
        ),
        Some(b) => format!("dry run: the restart would stop: {}", b.message),
    };
    let what = match &restart {
        Restart::Restart { .. } => "The restart would run",
        Restart::Update { .. } => "The staged update would be driven",
    };
    c.message = match &r.driven {
        Some(d) if d.switch_now => format!(
            "{message}. {what} with the StatefulSet's update strategy set to OnDelete, and {} put back at the end",
            describe_strategy(&d.strategy)
        ),
        _ => message,
    };
    let succeeded = plan.blocker.is_none();
    c.plan = plan;
    let mut report = r.report(true, restart, c, vec![]);
    report.succeeded = succeeded;
    report
}

/// Replaces every member `ops.restart_now()` names, on the lock the caller holds. An error
/// before the first action (the record, the switch to OnDelete) changed no member; one after
/// the loop (clearing the record, putting the strategy back) names what is left to do.
pub async fn roll<O: RolloutOps, E: Events>(
    ops: &O,
    events: &E,
    r: &Rollout,
) -> Result<RestartReport> {
    // The record is written for a restart of the current revision; cleared when the run
    // completes, even if it followed a new template meanwhile (it is then an update), and
    // when it ends an update that resumed a stopped restart's record (`uids`).
    let wrote_record = matches!(ops.restart_now(), Restart::Restart { .. });
    let holds_record = match ops.restart_now() {
        Restart::Restart { .. } => true,
        Restart::Update { uids, .. } => !uids.is_empty(),
    };
    if let Err(e) = begin(ops, events, r).await {
        events.finish();
        return Err(e);
    }
    let mut summary = drain_cluster(
        ops.cluster(),
        events,
        &r.opts,
        &r.settings,
        &r.namespace,
        &r.name,
    )
    .await;
    events.finish();
    let restart = ops.restart_now();
    let followed = ops.followed();
    for note in &followed {
        events.did(note);
    }
    let (ns, name) = (&r.namespace, &r.name);
    // Done only when a look found the cluster and the last found no member left to replace:
    // a cluster not found (its StatefulSet deleted, its pods relabelled) ends the loop
    // without a stop, but its members were not all replaced.
    if summary.result != ClusterResult::Stopped
        && (summary.system.is_empty() || !summary.left.is_empty())
    {
        summary.result = ClusterResult::Stopped;
        if !summary.left.is_empty() {
            summary.message = format!(
                "{}; not restarted: {}",
                summary.message,
                summary.left.join(", ")
            );
        }
    }
    // The record and the strategy are the lock holder's: a run whose lock was taken over
    // (it paused past the Lease) leaves them to the run that holds it now.
    let lock_lost = match ops.cluster().check_lock().await {
        Ok(()) => false,
        Err(e) => {
            if summary.result != ClusterResult::Stopped {
                summary.result = ClusterResult::Stopped;
                summary.message = crate::errors::anyhow_chain(&e);
            }
            true
        }
    };
    summary.message = if summary.result != ClusterResult::Stopped {
        if holds_record {
            ops.set_record(None).await?;
        }
        match &r.driven {
            // Every member was replaced: a put-back that cannot be made now (a template that
            // arrived at the end, a strategy someone set) is said in the report, not lost.
            Some(d) => match ops.restore_strategy(&d.strategy).await {
                Ok(()) => format!(
                    "restarted {}; its update strategy ({}) is restored",
                    r.cluster(),
                    describe_strategy(&d.strategy)
                ),
                Err(e) => {
                    summary.result = ClusterResult::Stopped;
                    format!(
                        "restarted every member of {}, but its update strategy ({}) was not put back: {}",
                        r.cluster(),
                        describe_strategy(&d.strategy),
                        crate::errors::anyhow_chain(&e)
                    )
                }
            },
            None => format!("restarted {}", r.cluster()),
        }
    } else if let Some(d) = r
        .driven
        .as_ref()
        .filter(|d| d.switch_now && wrote_record && !summary.eviction_sent && !lock_lost)
    {
        // A restart stopped before any eviction was sent: the StatefulSet is put back as it
        // was. (Not a staged update: its members are behind by design, and the rerun drives
        // it under the OnDelete kept.)
        match ops.restore_strategy(&d.strategy).await {
            Ok(()) => format!(
                "the restart stopped before any member was restarted: {}. Its update strategy ({}) is put back; fix what is named and run the same command again",
                summary.message,
                describe_strategy(&d.strategy)
            ),
            Err(e) => format!(
                "the restart stopped before any member was restarted: {}. The StatefulSet stays OnDelete: {}",
                summary.message,
                crate::errors::anyhow_chain(&e)
            ),
        }
    } else {
        let strategy = match &r.driven {
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
    Ok(r.report(false, restart, summary, followed))
}

/// Before the first member: the record a rerun resumes from, then a staged update's switch
/// to OnDelete; nothing of either after an interrupt.
async fn begin<O: RolloutOps, E: Events>(ops: &O, events: &E, r: &Rollout) -> Result<()> {
    let interrupted = || {
        if ops.cluster().interrupted() {
            bail!("interrupted before any member was restarted or the StatefulSet changed");
        }
        Ok(())
    };
    interrupted()?;
    let what = match ops.restart_now() {
        Restart::Restart { uids } => {
            // The record a rerun resumes from (kept when this run stops).
            ops.set_record(Some(&to_annotation(&uids))).await?;
            "the restart runs, so that its controller deletes no member beside it"
        }
        Restart::Update { .. } => "the staged update is driven",
    };
    if let Some(d) = r.driven.as_ref().filter(|d| d.switch_now) {
        interrupted()?;
        ops.switch_to_on_delete(&d.strategy).await?;
        events.did(&format!(
            "update strategy set to OnDelete while {what} ({} is put back at the end; {SAVED_STRATEGY} on the StatefulSet keeps it)",
            describe_strategy(&d.strategy)
        ));
    }
    Ok(())
}

/// The rollout against a scripted cluster and StatefulSet on tokio's paused clock: the record
/// and the strategy as a StatefulSet and a Lease would keep them, the cluster unkind (a member
/// hangs, the lock is taken over, Ctrl-C, the template changes, the cluster vanishes).
#[cfg(test)]
mod tests {
    use std::cell::{Cell, RefCell};
    use std::collections::BTreeSet;
    use std::time::Duration;

    use anyhow::anyhow;
    use k8s_openapi::api::apps::v1::RollingUpdateStatefulSetStrategy;

    use super::*;
    use crate::drain::tests::{Said, Scripted};
    use crate::report::{CheckState, ClusterReport};

    /// The user's strategy of a staged update.
    fn partition_3() -> StatefulSetUpdateStrategy {
        StatefulSetUpdateStrategy {
            type_: Some("RollingUpdate".into()),
            rolling_update: Some(RollingUpdateStatefulSetStrategy {
                partition: Some(3),
                ..Default::default()
            }),
        }
    }

    fn on_delete() -> StatefulSetUpdateStrategy {
        StatefulSetUpdateStrategy {
            type_: Some("OnDelete".into()),
            rolling_update: None,
        }
    }

    struct World {
        cluster: Scripted,
        /// The StatefulSet's update strategy now.
        strategy: RefCell<StatefulSetUpdateStrategy>,
        /// The record on the lock.
        record: RefCell<Option<String>>,
        restart: Restart,
        /// After the first eviction, the pod template changes (revision r3).
        template_changes: Cell<bool>,
        /// Someone changes the strategy before the switch (the switch's condition fails).
        strategy_changed_by_someone: Cell<bool>,
        /// Putting the strategy back fails (the API server refuses).
        restore_fails: Cell<bool>,
        writes: RefCell<Vec<String>>,
    }

    impl World {
        fn new(restart: Restart, strategy: StatefulSetUpdateStrategy) -> Self {
            let cluster = Scripted::new();
            cluster.restart.set(true);
            World {
                cluster,
                strategy: RefCell::new(strategy),
                record: RefCell::new(None),
                restart,
                template_changes: Cell::new(false),
                strategy_changed_by_someone: Cell::new(false),
                restore_fails: Cell::new(false),
                writes: RefCell::new(vec![]),
            }
        }

        fn changed(&self) -> bool {
            self.template_changes.get() && !self.cluster.restarted.borrow().is_empty()
        }
    }

    impl RolloutOps for World {
        type Cluster = Scripted;

        fn cluster(&self) -> &Scripted {
            &self.cluster
        }

        async fn set_record(&self, value: Option<&str>) -> Result<()> {
            self.writes
                .borrow_mut()
                .push(format!("record {}", value.unwrap_or("cleared")));
            *self.record.borrow_mut() = value.map(String::from);
            Ok(())
        }

        async fn switch_to_on_delete(&self, s: &StatefulSetUpdateStrategy) -> Result<()> {
            if self.strategy_changed_by_someone.get() || &*self.strategy.borrow() != s {
                return Err(anyhow!(
                    "statefulset etcd's update strategy changed since this restart read it"
                ));
            }
            self.writes.borrow_mut().push("switch to OnDelete".into());
            *self.strategy.borrow_mut() = on_delete();
            Ok(())
        }

        async fn restore_strategy(&self, s: &StatefulSetUpdateStrategy) -> Result<()> {
            if self.restore_fails.get() {
                return Err(anyhow!("patch statefulsets: the server refused"));
            }
            self.writes
                .borrow_mut()
                .push(format!("restore {}", describe_strategy(s)));
            *self.strategy.borrow_mut() = s.clone();
            Ok(())
        }

        fn restart_now(&self) -> Restart {
            if self.changed() {
                return Restart::update("r3");
            }
            self.restart.clone()
        }

        fn followed(&self) -> Vec<String> {
            if self.changed() {
                return vec![
                    "the pod template changed during the run (revision r2 to r3): following it"
                        .into(),
                ];
            }
            vec![]
        }
    }

    fn uids() -> Restart {
        Restart::Restart {
            uids: BTreeSet::from(["u0".into(), "u1".into(), "u2".into()]),
        }
    }

    fn update() -> Restart {
        Restart::update("r2")
    }

    fn rollout(driven: Option<Driven>) -> Rollout {
        Rollout {
            namespace: "db".into(),
            name: "etcd".into(),
            driven,
            opts: DrainOptions {
                max_lag: 100,
                ..Default::default()
            },
            settings: Settings {
                timeout: Duration::from_secs(60),
            },
        }
    }

    fn staged(switch_now: bool) -> Option<Driven> {
        Some(Driven {
            strategy: partition_3(),
            switch_now,
        })
    }

    /// etcd-2 hangs while etcd-0 is replaced: the rollout stops before the leader.
    fn hang_after_first(w: &World) {
        *w.cluster.after_first_eviction.borrow_mut() = Some(Box::new(|r: &mut ClusterReport| {
            let x = r.replicas.iter_mut().find(|x| x.pod == "etcd-2").unwrap();
            x.raft.health.state = CheckState::Unreachable;
        }));
    }

    #[tokio::test(start_paused = true)]
    async fn a_finished_restart_clears_the_record_it_wrote_first() {
        let w = World::new(uids(), partition_3());
        let r = roll(&w, &Said::default(), &rollout(None)).await.unwrap();
        assert!(r.succeeded, "{}", r.message);
        assert_eq!(
            *w.writes.borrow(),
            ["record u0,u1,u2", "record cleared"],
            "written before any eviction, cleared after the last"
        );
        assert_eq!(*w.record.borrow(), None);
    }

    /// A restart of a RollingUpdate StatefulSet: switched to OnDelete by this run.
    fn switched_from_rolling() -> Option<Driven> {
        Some(Driven {
            strategy: rolling(),
            switch_now: true,
        })
    }

    fn rolling() -> StatefulSetUpdateStrategy {
        StatefulSetUpdateStrategy {
            type_: Some("RollingUpdate".into()),
            rolling_update: None,
        }
    }

    /// A restart of a RollingUpdate StatefulSet switches it to OnDelete before its first
    /// eviction and puts RollingUpdate back after its last.
    #[tokio::test(start_paused = true)]
    async fn a_restart_runs_under_on_delete_and_puts_the_strategy_back() {
        let w = World::new(uids(), rolling());
        let driven = switched_from_rolling();
        let said = Said::default();
        let r = roll(&w, &said, &rollout(driven)).await.unwrap();
        assert!(r.succeeded, "{}", r.message);
        assert_eq!(
            *w.writes.borrow(),
            [
                "record u0,u1,u2",
                "switch to OnDelete",
                "record cleared",
                "restore RollingUpdate"
            ]
        );
        assert_eq!(*w.strategy.borrow(), rolling());
    }

    #[tokio::test(start_paused = true)]
    async fn a_stopped_restart_under_on_delete_stays_on_delete_for_the_rerun() {
        let w = World::new(uids(), rolling());
        hang_after_first(&w);
        let driven = switched_from_rolling();
        let r = roll(&w, &Said::default(), &rollout(driven)).await.unwrap();
        assert!(!r.succeeded);
        assert_eq!(*w.strategy.borrow(), on_delete());
        assert!(r.message.contains("stays OnDelete"), "{}", r.message);
    }

    /// Stopped before its first eviction (the first plan blocked): the StatefulSet is put
    /// back as it was, not left OnDelete for a run nobody may resume.
    #[tokio::test(start_paused = true)]
    async fn a_restart_stopped_before_any_eviction_puts_the_strategy_back() {
        let w = World::new(uids(), rolling());
        *w.cluster.every_look.borrow_mut() = Some(Box::new(|r: &mut ClusterReport| {
            for x in &mut r.replicas {
                x.raft.role = crate::model::Role::Follower;
            }
            r.summary.leader = None;
        }));
        let driven = switched_from_rolling();
        let r = roll(&w, &Said::default(), &rollout(driven)).await.unwrap();
        assert!(!r.succeeded, "{}", r.message);
        assert_eq!(r.cluster.evictions, 0, "{}", r.message);
        assert_eq!(*w.strategy.borrow(), rolling(), "{}", r.message);
        assert!(r.message.contains("is put back"), "{}", r.message);
    }

    /// A restart that followed a new template (it is an update by its end) still clears the
    /// record it wrote first.
    #[tokio::test(start_paused = true)]
    async fn a_restart_that_followed_a_new_template_clears_its_record() {
        let w = World::new(uids(), on_delete());
        w.template_changes.set(true);
        let r = roll(&w, &Said::default(), &rollout(None)).await.unwrap();
        assert!(r.succeeded, "{}", r.message);
        assert_eq!(*w.record.borrow(), None, "{:?}", w.writes.borrow());
    }

    /// A rerun of a restart that had followed a new template resumes as an update that still
    /// carries the restart's record (the members it never reached): the record is cleared
    /// when the update ends, not left to make a later, unrelated restart "resume" it.
    #[tokio::test(start_paused = true)]
    async fn an_update_that_resumed_a_restarts_record_clears_it() {
        let resumed = uids().following("r2".into());
        let w = World::new(resumed, on_delete());
        *w.record.borrow_mut() = Some("u0,u1,u2".into());
        let r = roll(&w, &Said::default(), &rollout(None)).await.unwrap();
        assert!(r.succeeded, "{}", r.message);
        assert_eq!(*w.record.borrow(), None, "{:?}", w.writes.borrow());
    }

    /// The same update, stopped again: the record stays for the next rerun, and is not written
    /// again (it is the earlier run's).
    #[tokio::test(start_paused = true)]
    async fn a_stopped_update_that_resumed_a_restarts_record_keeps_it() {
        let resumed = uids().following("r2".into());
        let w = World::new(resumed, on_delete());
        *w.record.borrow_mut() = Some("u0,u1,u2".into());
        hang_after_first(&w);
        let r = roll(&w, &Said::default(), &rollout(None)).await.unwrap();
        assert!(!r.succeeded, "{}", r.message);
        assert_eq!(w.record.borrow().as_deref(), Some("u0,u1,u2"));
        assert!(
            !w.writes.borrow().iter().any(|x| x.starts_with("record")),
            "{:?}",
            w.writes.borrow()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_stopped_restart_keeps_its_record_for_the_rerun() {
        let w = World::new(uids(), partition_3());
        hang_after_first(&w);
        let r = roll(&w, &Said::default(), &rollout(None)).await.unwrap();
        assert!(!r.succeeded);
        assert_eq!(w.record.borrow().as_deref(), Some("u0,u1,u2"));
        assert!(
            r.message.contains("run the same command again to resume"),
            "{}",
            r.message
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_interrupted_restart_keeps_its_record() {
        let w = World::new(uids(), partition_3());
        hang_after_first(&w);
        w.cluster.interrupt_after_pauses.set(Some(1));
        let r = roll(&w, &Said::default(), &rollout(None)).await.unwrap();
        assert!(!r.succeeded);
        assert!(r.message.contains("interrupted"), "{}", r.message);
        assert_eq!(w.record.borrow().as_deref(), Some("u0,u1,u2"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_restart_whose_lock_is_taken_over_keeps_its_record_and_acts_no_more() {
        let w = World::new(uids(), partition_3());
        w.cluster.lock_checks_left.set(1);
        let r = roll(&w, &Said::default(), &rollout(None)).await.unwrap();
        assert!(!r.succeeded);
        assert_eq!(w.cluster.actions(), ["evict etcd-0"]);
        assert_eq!(w.record.borrow().as_deref(), Some("u0,u1,u2"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_finished_staged_update_puts_the_users_strategy_back() {
        let w = World::new(update(), partition_3());
        let r = roll(&w, &Said::default(), &rollout(staged(true)))
            .await
            .unwrap();
        assert!(r.succeeded, "{}", r.message);
        assert_eq!(
            *w.writes.borrow(),
            ["switch to OnDelete", "restore RollingUpdate, partition 3"]
        );
        assert_eq!(*w.strategy.borrow(), partition_3());
        assert!(r.message.contains("is restored"), "{}", r.message);
    }

    #[tokio::test(start_paused = true)]
    async fn a_stopped_staged_update_stays_on_delete_and_says_how_to_put_it_back() {
        let w = World::new(update(), partition_3());
        hang_after_first(&w);
        let r = roll(&w, &Said::default(), &rollout(staged(true)))
            .await
            .unwrap();
        assert!(!r.succeeded);
        assert_eq!(
            *w.strategy.borrow(),
            on_delete(),
            "OnDelete until a rerun finishes"
        );
        assert!(
            r.message
                .contains("kubectl patch sts etcd -n db --type=merge"),
            "{}",
            r.message
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_resumed_staged_update_does_not_switch_again_and_puts_the_strategy_back() {
        let w = World::new(update(), on_delete());
        let r = roll(&w, &Said::default(), &rollout(staged(false)))
            .await
            .unwrap();
        assert!(r.succeeded, "{}", r.message);
        assert_eq!(*w.writes.borrow(), ["restore RollingUpdate, partition 3"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_strategy_someone_changed_before_the_switch_stops_before_any_eviction() {
        let w = World::new(update(), partition_3());
        w.strategy_changed_by_someone.set(true);
        let e = roll(&w, &Said::default(), &rollout(staged(true)))
            .await
            .unwrap_err();
        assert!(e.to_string().contains("changed since"), "{e}");
        assert!(w.cluster.actions().is_empty(), "{:?}", w.cluster.actions());
    }

    #[tokio::test(start_paused = true)]
    async fn a_strategy_that_cannot_be_put_back_is_not_reported_a_success() {
        let w = World::new(update(), partition_3());
        w.restore_fails.set(true);
        let r = roll(&w, &Said::default(), &rollout(staged(true)))
            .await
            .unwrap();
        assert!(!r.succeeded, "{}", r.message);
        assert!(r.message.contains("was not put back"), "{}", r.message);
        assert_eq!(r.cluster.evictions, 3, "the report keeps what was done");
    }

    /// A staged update stopped before its first eviction keeps the OnDelete it set: its
    /// members are behind by design, so RollingUpdate could not be put back safely; the rerun
    /// drives it.
    #[tokio::test(start_paused = true)]
    async fn a_staged_update_stopped_before_any_eviction_stays_on_delete() {
        let w = World::new(update(), partition_3());
        *w.cluster.every_look.borrow_mut() = Some(Box::new(|r: &mut ClusterReport| {
            for x in &mut r.replicas {
                x.raft.role = crate::model::Role::Follower;
            }
            r.summary.leader = None;
        }));
        let r = roll(&w, &Said::default(), &rollout(staged(true)))
            .await
            .unwrap();
        assert!(!r.succeeded, "{}", r.message);
        assert_eq!(*w.strategy.borrow(), on_delete(), "{}", r.message);
    }

    #[tokio::test(start_paused = true)]
    async fn a_template_changed_mid_run_is_followed_and_reported() {
        let w = World::new(update(), on_delete());
        w.template_changes.set(true);
        let said = Said::default();
        let r = roll(&w, &said, &rollout(None)).await.unwrap();
        assert_eq!(r.restart, Restart::update("r3"));
        assert_eq!(r.followed.len(), 1);
        assert!(
            said.0
                .borrow()
                .iter()
                .any(|l| l.contains("revision r2 to r3")),
            "the user is told: {:?}",
            said.0.borrow()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_cluster_that_vanishes_mid_restart_is_not_reported_restarted() {
        let w = World::new(uids(), partition_3());
        // Look 1 plans etcd-0's restart, look 2 sees it rejoin, look 3 finds no cluster.
        w.cluster.vanishes_at_look.set(Some(3));
        let r = roll(&w, &Said::default(), &rollout(None)).await.unwrap();
        assert!(!r.succeeded, "{}", r.message);
        assert_eq!(
            w.record.borrow().as_deref(),
            Some("u0,u1,u2"),
            "the record stays for the rerun"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_dry_run_that_would_stop_says_so_and_changes_nothing() {
        let w = World::new(uids(), partition_3());
        let mut input = w.cluster.look().await.unwrap().unwrap().input;
        // Two of three members hung: no quorum to restart anything with.
        input.report.replicas[0].raft.health.state = CheckState::Unreachable;
        input.report.replicas[2].raft.health.state = CheckState::Unreachable;
        let r = dry_run(&rollout(None), uids(), &input);
        assert!(r.dry_run && !r.succeeded);
        assert!(
            r.message.starts_with("dry run: the restart would stop"),
            "{}",
            r.message
        );
        assert!(w.writes.borrow().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn an_interrupt_before_the_rollout_begins_changes_nothing() {
        let w = World::new(update(), partition_3());
        w.cluster.interrupt_after_pauses.set(Some(0));
        let r = roll(&w, &Said::default(), &rollout(staged(true))).await;
        assert!(w.writes.borrow().is_empty(), "{:?}", w.writes.borrow());
        assert_eq!(*w.strategy.borrow(), partition_3());
        assert!(r.is_err() || !r.unwrap().succeeded);
    }

    #[tokio::test(start_paused = true)]
    async fn a_cluster_gone_before_the_first_look_is_not_reported_restarted() {
        let w = World::new(uids(), partition_3());
        w.cluster.vanishes_at_look.set(Some(1));
        let r = roll(&w, &Said::default(), &rollout(None)).await.unwrap();
        assert!(!r.succeeded, "{}", r.message);
        assert_eq!(w.record.borrow().as_deref(), Some("u0,u1,u2"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_lock_taken_over_after_the_last_member_puts_no_strategy_back() {
        // Every action passes its lock check; the lock is another run's (which resumes the
        // update under OnDelete) by the time this one would put the strategy back.
        let w = World::new(update(), partition_3());
        w.cluster.lock_checks_left.set(4);
        let r = roll(&w, &Said::default(), &rollout(staged(true))).await;
        assert_eq!(w.cluster.actions().len(), 4, "{:?}", w.cluster.actions());
        assert_eq!(*w.strategy.borrow(), on_delete(), "{:?}", w.writes.borrow());
        assert!(r.is_err() || !r.unwrap().succeeded);
    }
}
