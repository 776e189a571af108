//! The executor against a scripted cluster: its answers change between steps as an
//! uncooperative cluster's would. Time is tokio's paused clock, so waits of minutes take no
//! time and no test depends on timing.

use std::cell::{Cell, RefCell};
use std::collections::BTreeSet;

use anyhow::anyhow;
use k8s_openapi::api::core::v1::Pod;

use super::*;
use crate::model::Role;
use crate::plan::tests::{cluster, M};
use crate::report::ClusterReport;
use crate::report::{CheckState, ReplicaReport};

/// What can happen to the cluster while the executor waits or acts.
type Change = Box<dyn Fn(&mut ClusterReport)>;

/// What can happen to one member as it is replaced.
type Replaced = Box<dyn Fn(&mut ReplicaReport)>;

/// A 3-member etcd (etcd-0 on n1, the leader etcd-1 on n2, etcd-2 on n3) whose state the
/// test scripts.
pub(super) struct Scripted {
    pub(super) report: RefCell<ClusterReport>,
    /// Evictions a PDB refuses before it allows one.
    pub(super) pdb_refusals: Cell<u32>,
    /// Reads of the StatefulSet just before an eviction that find its controller busy (a
    /// `kubectl rollout restart` after the look), before one finds it settled.
    pub(super) controller_busy_reads: Cell<u32>,
    /// Applied when a PDB refuses: what happens meanwhile.
    pub(super) while_refused: RefCell<Option<Change>>,
    /// A transfer's failure, instead of a transfer.
    pub(super) transfer_fails: RefCell<Option<String>>,
    /// Moving other Raft groups' leaders off a server fails (a NATS stream stepdown).
    pub(super) groups_fail: Cell<bool>,
    /// Lock checks that pass before the lock is found lost.
    pub(super) lock_checks_left: Cell<u32>,
    /// The evicted member's replacement comes back this far behind.
    pub(super) replacement_lag: Cell<u64>,
    /// Interrupted (Ctrl-C) after this many pauses.
    pub(super) interrupt_after_pauses: Cell<Option<u32>>,
    /// The lock found lost by its renewal after this many pauses.
    pub(super) lost_after_pauses: Cell<Option<u32>>,
    pub(super) pauses: Cell<u32>,
    /// A restart: every member is to be replaced once, wherever it runs.
    pub(super) restart: Cell<bool>,
    pub(super) restarted: RefCell<BTreeSet<String>>,
    /// Applied after the first eviction: what happens while its replacement starts.
    pub(super) after_first_eviction: RefCell<Option<Change>>,
    /// Everything done to the cluster, in order.
    pub(super) actions: RefCell<Vec<String>>,
    pub(super) next_node: Cell<u32>,
    /// Per member, how many times moving its other groups' leaders off it finds some (a
    /// NATS server that keeps being given stream leaders back).
    pub(super) groups_led: RefCell<std::collections::BTreeMap<String, u32>>,
    /// Applied while a server's groups are moved (they take long): what happens meanwhile.
    pub(super) while_moving: RefCell<Option<Change>>,
    /// How long one round of moving a server's groups takes.
    pub(super) group_move_takes: Cell<Duration>,
    /// Applied to each replacement as it comes back (a non-voter, on the drained node again).
    pub(super) replacement: RefCell<Option<Replaced>>,
    /// Waiting for an evicted pod to stop fails (the watch breaks).
    pub(super) gone_fails: Cell<bool>,
    /// How many looks a replacement shows as Pending, then Terminating-free but unhealthy,
    /// before it is healthy.
    pub(super) replacement_unready_looks: Cell<u32>,
    /// Looks left while the replacement is still coming up.
    unready_left: Cell<u32>,
    /// Applied at every look (the world moving on its own: a scale, a member list that fails).
    pub(super) every_look: RefCell<Option<Change>>,
    /// Applied once, just after the first look: what changes between a look and the eviction
    /// it leads to (leadership moving to the member about to go, an election elsewhere).
    pub(super) after_first_look: RefCell<Option<Change>>,
    /// From this look on (the first is 1) the cluster is not found any more (its StatefulSet
    /// deleted, its pods' labels changed).
    pub(super) vanishes_at_look: Cell<Option<u32>>,
    looks: Cell<u32>,
}

fn etcd3() -> ClusterReport {
    let m = |role| M {
        role,
        health: CheckState::Ok,
        lag: Some(0),
        cordoned: false,
        node: 0,
    };
    let mut r = cluster(&[m(Role::Follower), m(Role::Leader), m(Role::Follower)]);
    for (i, x) in r.replicas.iter_mut().enumerate() {
        x.node = Some(format!("n{}", i + 1));
    }
    r.summary.leader = Some("etcd-1".into());
    r
}

impl Scripted {
    pub(super) fn new() -> Self {
        Scripted {
            report: RefCell::new(etcd3()),
            pdb_refusals: Cell::new(0),
            controller_busy_reads: Cell::new(0),
            while_refused: RefCell::new(None),
            transfer_fails: RefCell::new(None),
            groups_fail: Cell::new(false),
            lock_checks_left: Cell::new(u32::MAX),
            replacement_lag: Cell::new(0),
            interrupt_after_pauses: Cell::new(None),
            lost_after_pauses: Cell::new(None),
            pauses: Cell::new(0),
            restart: Cell::new(false),
            restarted: RefCell::new(BTreeSet::new()),
            after_first_eviction: RefCell::new(None),
            actions: RefCell::new(vec![]),
            next_node: Cell::new(7),
            groups_led: RefCell::new(Default::default()),
            while_moving: RefCell::new(None),
            group_move_takes: Cell::new(Duration::from_secs(5)),
            replacement: RefCell::new(None),
            gone_fails: Cell::new(false),
            replacement_unready_looks: Cell::new(0),
            unready_left: Cell::new(0),
            every_look: RefCell::new(None),
            after_first_look: RefCell::new(None),
            vanishes_at_look: Cell::new(None),
            looks: Cell::new(0),
        }
    }

    pub(super) fn did(&self, what: String) {
        self.actions.borrow_mut().push(what);
    }

    pub(super) fn actions(&self) -> Vec<String> {
        self.actions.borrow().clone()
    }

    /// A restart's members not yet replaced.
    fn replace(&self) -> BTreeSet<String> {
        if !self.restart.get() {
            return BTreeSet::new();
        }
        let done = self.restarted.borrow();
        self.report
            .borrow()
            .replicas
            .iter()
            .map(|x| x.pod.clone())
            .filter(|p| !done.contains(p))
            .collect()
    }

    fn replica<'a>(r: &'a mut ClusterReport, pod: &str) -> &'a mut ReplicaReport {
        r.replicas
            .iter_mut()
            .find(|x| x.pod == pod)
            .expect("a member")
    }
}

fn pod(name: &str) -> Pod {
    super::fixtures::pod(name, None)
}

impl ClusterOps for Scripted {
    async fn look(&self) -> Result<Option<Look>> {
        self.looks.set(self.looks.get() + 1);
        if self
            .vanishes_at_look
            .get()
            .is_some_and(|n| self.looks.get() >= n)
        {
            return Ok(None);
        }
        if let Some(change) = self.every_look.borrow().as_ref() {
            change(&mut self.report.borrow_mut());
        }
        let mut report = self.report.borrow().clone();
        // A replacement still coming up: Pending (no node, not Ready, no answer).
        if self.unready_left.get() > 0 {
            self.unready_left.set(self.unready_left.get() - 1);
            if let Some(last) = self
                .actions
                .borrow()
                .iter()
                .rev()
                .find_map(|a| a.strip_prefix("evict "))
            {
                if let Some(x) = report.replicas.iter_mut().find(|x| x.pod == last) {
                    x.ready = false;
                    x.phase = "Pending".into();
                    x.raft.health.state = CheckState::Unreachable;
                    x.raft.role = Role::Unknown;
                }
            }
        }
        let pods = report.replicas.iter().map(|x| pod(&x.pod)).collect();
        let mut look = super::fixtures::look(report, pods, true);
        look.obs.target.desired_replicas = 3;
        look.input.replace = self.replace();
        if let Some(change) = self.after_first_look.borrow_mut().take() {
            change(&mut self.report.borrow_mut());
        }
        Ok(Some(look))
    }

    async fn check_lock(&self) -> Result<()> {
        match self.lock_checks_left.get() {
            0 => Err(anyhow!(
                "the drain lock of db/etcd is now held by bob; this drain stopped before its next action"
            )),
            n => {
                self.lock_checks_left.set(n - 1);
                Ok(())
            }
        }
    }

    fn lock_lost(&self) -> Option<String> {
        self.lost_after_pauses
            .get()
            .filter(|n| self.pauses.get() >= *n)
            .map(|_| "the drain lock kubectl-raft-drain.etcd is now held by bob".to_string())
    }

    async fn transfer(&self, _: &Look, step: &DrainStep) -> Result<Handover> {
        self.did(format!(
            "transfer from {} to {}",
            step.pod,
            step.target.as_deref().unwrap_or("?")
        ));
        if let Some(why) = self.transfer_fails.borrow().clone() {
            return Err(anyhow!(why));
        }
        let to = step.target.clone().expect("a target");
        let mut r = self.report.borrow_mut();
        for x in r.replicas.iter_mut() {
            x.raft.role = if x.pod == to {
                Role::Leader
            } else {
                Role::Follower
            };
            x.raft.term = x.raft.term.map(|t| t + 1);
        }
        r.summary.leader = Some(to.clone());
        Ok(Handover {
            from: step.pod.clone(),
            to,
            term_before: Some(5),
            term_after: Some(6),
            window_ms: Some(12.0),
        })
    }

    async fn move_groups_off(
        &self,
        _: &Look,
        pod: &str,
        _: Duration,
    ) -> Result<Option<GroupsMoved>> {
        if self.groups_fail.get() {
            self.did(format!("move groups off {pod} (failed)"));
            return Err(anyhow!(
                "streams APP/ORDERS: no reply; {pod} was not evicted: its streams' and consumers' leaders would have to be elected while it stops"
            ));
        }
        let left = self.groups_led.borrow().get(pod).copied().unwrap_or(0);
        match left {
            n if n > 0 => {
                self.groups_led.borrow_mut().insert(pod.to_string(), n - 1);
                self.did(format!("move groups off {pod}"));
                // Moving them takes a while; the cluster does not wait.
                tokio::time::sleep(self.group_move_takes.get()).await;
                if let Some(change) = self.while_moving.borrow().as_ref() {
                    change(&mut self.report.borrow_mut());
                }
                Ok(Some(GroupsMoved {
                    moved: 1,
                    summary: format!("moved 1 stream leader off {pod}"),
                }))
            }
            _ => Ok(None),
        }
    }

    async fn refused_now(&self, _: &Look, _: &str) -> Option<String> {
        None
    }

    async fn controller_busy_now(&self, _: &Look) -> Option<String> {
        let left = self.controller_busy_reads.get();
        if left == 0 {
            return None;
        }
        self.controller_busy_reads.set(left - 1);
        self.did("controller busy at the eviction".into());
        Some("its StatefulSet's controller has not yet acted on its latest change (generation 3, observed 2)".into())
    }

    async fn member_now(&self, _: &Look, pod: &str) -> crate::plan::ReplicaView {
        super::fixtures::view_now(&self.report.borrow(), pod)
    }

    async fn evict(&self, _: &Look, pod: &str) -> Result<Attempt> {
        if self.pdb_refusals.get() > 0 {
            self.pdb_refusals.set(self.pdb_refusals.get() - 1);
            self.did(format!("eviction of {pod} refused"));
            if let Some(change) = self.while_refused.borrow().as_ref() {
                change(&mut self.report.borrow_mut());
            }
            return Ok(Attempt::Refused(
                "PodDisruptionBudget etcd allows 0 disruption(s)".into(),
            ));
        }
        self.did(format!("evict {pod}"));
        let first = self.restarted.borrow_mut().insert(pod.to_string())
            && self.restarted.borrow().len() == 1;
        if first {
            if let Some(change) = self.after_first_eviction.borrow().as_ref() {
                change(&mut self.report.borrow_mut());
            }
        }
        // The replacement starts on another node; it may come back behind.
        let n = self.next_node.get();
        self.next_node.set(n + 1);
        let lag = self.replacement_lag.get();
        let mut r = self.report.borrow_mut();
        let x = Scripted::replica(&mut r, pod);
        x.node = Some(format!("n{n}"));
        x.raft.lag = Some(lag);
        if let Some(change) = self.replacement.borrow().as_ref() {
            change(x);
        }
        self.unready_left.set(self.replacement_unready_looks.get());
        let evictions = self
            .actions
            .borrow()
            .iter()
            .filter(|a| a.starts_with("evict "))
            .count();
        assert!(
            evictions < 20,
            "the executor keeps evicting: {:?}",
            self.actions.borrow()
        );
        Ok(Attempt::Done(Evicted::Accepted))
    }

    async fn wait_gone(&self, _: &Look, pod: &str) -> Result<()> {
        if self.gone_fails.get() {
            return Err(anyhow!("watching {pod}: the watch broke"));
        }
        Ok(())
    }

    async fn evict_leader(&self, _: &Look, step: &DrainStep) -> Result<Election> {
        self.did(format!("evict the leader {}", step.pod));
        Ok(Election {
            new_leader: "etcd-0".into(),
            window_ms: None,
        })
    }

    async fn wait_replacement_ready(&self, _: &Look, _: &str) -> Result<()> {
        Ok(())
    }

    async fn pause(&self, d: Duration) -> bool {
        self.pauses.set(self.pauses.get() + 1);
        tokio::time::sleep(d).await;
        self.interrupted()
    }

    fn interrupted(&self) -> bool {
        self.interrupt_after_pauses
            .get()
            .is_some_and(|n| self.pauses.get() >= n)
    }
}

/// The node-level drain's handle on the scripted cluster.
impl ClusterOps for &Scripted {
    async fn look(&self) -> Result<Option<Look>> {
        (**self).look().await
    }
    async fn check_lock(&self) -> Result<()> {
        (**self).check_lock().await
    }
    fn lock_lost(&self) -> Option<String> {
        (**self).lock_lost()
    }
    async fn transfer(&self, look: &Look, step: &DrainStep) -> Result<Handover> {
        (**self).transfer(look, step).await
    }
    async fn move_groups_off(
        &self,
        look: &Look,
        pod: &str,
        within: Duration,
    ) -> Result<Option<GroupsMoved>> {
        (**self).move_groups_off(look, pod, within).await
    }
    async fn refused_now(&self, look: &Look, pod: &str) -> Option<String> {
        (**self).refused_now(look, pod).await
    }
    async fn controller_busy_now(&self, look: &Look) -> Option<String> {
        (**self).controller_busy_now(look).await
    }
    async fn member_now(&self, look: &Look, pod: &str) -> crate::plan::ReplicaView {
        (**self).member_now(look, pod).await
    }
    async fn evict(&self, look: &Look, pod: &str) -> Result<Attempt> {
        (**self).evict(look, pod).await
    }
    async fn wait_gone(&self, look: &Look, pod: &str) -> Result<()> {
        (**self).wait_gone(look, pod).await
    }
    async fn evict_leader(&self, look: &Look, step: &DrainStep) -> Result<Election> {
        (**self).evict_leader(look, step).await
    }
    async fn wait_replacement_ready(&self, look: &Look, pod: &str) -> Result<()> {
        (**self).wait_replacement_ready(look, pod).await
    }
    async fn pause(&self, d: Duration) -> bool {
        (**self).pause(d).await
    }
    fn interrupted(&self) -> bool {
        (**self).interrupted()
    }
}

/// Events as a test reads them.
#[derive(Default)]
pub(super) struct Said(pub(super) RefCell<Vec<String>>);

impl Events for Said {
    fn doing(&self, msg: &str) {
        self.0.borrow_mut().push(format!("doing: {msg}"));
    }
    fn did(&self, msg: &str) {
        self.0.borrow_mut().push(format!("did: {msg}"));
    }
}

pub(super) fn opts(nodes: &[&str]) -> DrainOptions {
    DrainOptions {
        nodes: nodes.iter().map(|n| n.to_string()).collect::<BTreeSet<_>>(),
        max_lag: 100,
        ..Default::default()
    }
}

async fn run(c: &Scripted, nodes: &[&str]) -> ClusterSummary {
    let settings = Settings {
        timeout: Duration::from_secs(60),
    };
    drain_cluster(c, &Said::default(), &opts(nodes), &settings, "db", "etcd").await
}

#[tokio::test(start_paused = true)]
async fn a_cooperating_cluster_goes_followers_first_and_the_leader_after_its_transfer() {
    let c = Scripted::new();
    let s = run(&c, &["n1", "n2"]).await;
    assert_eq!(s.result, ClusterResult::Drained, "{}", s.message);
    assert_eq!(
        c.actions(),
        [
            "evict etcd-0",
            "transfer from etcd-1 to etcd-0",
            "evict etcd-1"
        ]
    );
    assert_eq!((s.evictions, s.transfers, s.elections), (2, 1, 0));
}

/// The leader's transfer goes to another member than the first plan named (the plan
/// `--dry-run` shows): drained with etcd-0's node, the first plan could hand over only to
/// etcd-2; by the transfer etcd-0's replacement runs on a node that stays, and etcd-2 lags.
/// The handover says so, and why, in the line the user reads and in the report.
#[tokio::test(start_paused = true)]
async fn a_transfer_to_another_target_than_first_planned_says_why() {
    let c = Scripted::new();
    *c.after_first_look.borrow_mut() = Some(Box::new(|r: &mut ClusterReport| {
        Scripted::replica(r, "etcd-2").raft.lag = Some(40);
    }));
    let said = Said::default();
    let settings = Settings {
        timeout: Duration::from_secs(60),
    };
    let s = drain_cluster(&c, &said, &opts(&["n1", "n2"]), &settings, "db", "etcd").await;
    assert_eq!(s.result, ClusterResult::Drained, "{}", s.message);
    let first = s.plan.steps.iter().find(|p| p.pod == "etcd-1").unwrap();
    assert_eq!(first.target.as_deref(), Some("etcd-2"), "{:?}", s.plan);
    assert!(
        c.actions()
            .contains(&"transfer from etcd-1 to etcd-0".to_string()),
        "{:?}",
        c.actions()
    );
    let handover = s
        .done
        .iter()
        .find(|m| m.starts_with("leadership etcd-1 → etcd-0"))
        .expect("the handover reported");
    assert!(
        handover.ends_with("; not etcd-2 as first planned: etcd-2 lags by 40, etcd-0 by 0"),
        "{handover}"
    );
    let said = said.0.borrow();
    assert!(
        said.iter().any(
            |m| m.starts_with("doing: handing leadership etcd-1 → etcd-0")
                && m.contains("not etcd-2 as first planned")
        ),
        "{said:?}"
    );
}

/// A transfer to the target the first plan named says nothing more.
#[tokio::test(start_paused = true)]
async fn a_transfer_to_the_first_planned_target_says_nothing_more() {
    let c = Scripted::new();
    let s = run(&c, &["n2"]).await;
    assert_eq!(s.result, ClusterResult::Drained, "{}", s.message);
    let handover = s
        .done
        .iter()
        .find(|m| m.starts_with("leadership etcd-1 → etcd-0"))
        .expect("the handover reported");
    assert!(!handover.contains("first planned"), "{handover}");
}

/// The leader's eviction, planned afresh once it has handed over (it follows then), says that
/// it handed over, not that followers go first.
#[tokio::test(start_paused = true)]
async fn the_leaders_eviction_after_its_transfer_says_it_handed_over() {
    let c = Scripted::new();
    let said = Said::default();
    let settings = Settings {
        timeout: Duration::from_secs(60),
    };
    let s = drain_cluster(&c, &said, &opts(&["n2"]), &settings, "db", "etcd").await;
    assert_eq!(s.result, ClusterResult::Drained, "{}", s.message);
    let said = said.0.borrow();
    let eviction = said
        .iter()
        .find(|m| m.starts_with("doing: evicting etcd-1 "))
        .expect("etcd-1 evicted");
    assert!(
        eviction.contains("it handed leadership over to etcd-")
            && !eviction.contains("followers go first"),
        "{eviction}"
    );
}

/// `restart` on the same executor: every member replaced once, followers first, the leader
/// last after a transfer to a member already restarted.
#[tokio::test(start_paused = true)]
async fn a_restart_hands_leadership_only_to_a_member_already_restarted() {
    let c = Scripted::new();
    c.restart.set(true);
    let s = run(&c, &[]).await;
    assert_eq!(s.result, ClusterResult::Drained, "{}", s.message);
    assert_eq!(
        c.actions(),
        [
            "evict etcd-0",
            "evict etcd-2",
            "transfer from etcd-1 to etcd-0",
            "evict etcd-1"
        ]
    );
    assert_eq!((s.evictions, s.transfers, s.elections), (3, 1, 0));
    assert!(s.left.is_empty(), "{:?}", s.left);
}

/// etcd-2 hangs while etcd-0 is being restarted: restarting etcd-2 itself costs no quorum
/// (it counts for nothing), but it comes back hung, and the leader is never touched.
#[tokio::test(start_paused = true)]
async fn a_member_that_hangs_mid_restart_stops_it_before_the_leader() {
    let c = Scripted::new();
    c.restart.set(true);
    *c.after_first_eviction.borrow_mut() = Some(Box::new(|r: &mut ClusterReport| {
        Scripted::replica(r, "etcd-2").raft.health.state = CheckState::Unreachable;
    }));
    let s = run(&c, &[]).await;
    assert_eq!(s.result, ClusterResult::Stopped, "{}", s.message);
    assert_eq!(c.actions(), ["evict etcd-0", "evict etcd-2"]);
    assert_eq!(s.transfers, 0);
    assert!(
        s.left.contains(&"etcd-1 (not yet restarted)".to_string()),
        "{:?}",
        s.left
    );
}

#[tokio::test(start_paused = true)]
async fn a_member_that_hangs_while_a_pdb_refuses_stops_the_eviction_it_waited_for() {
    let c = Scripted::new();
    c.pdb_refusals.set(1);
    *c.while_refused.borrow_mut() = Some(Box::new(|r: &mut ClusterReport| {
        Scripted::replica(r, "etcd-2").raft.health.state = CheckState::Unreachable;
    }));
    let s = run(&c, &["n1"]).await;
    assert_eq!(s.result, ClusterResult::Stopped);
    assert_eq!(c.actions(), ["eviction of etcd-0 refused"], "never retried");
    assert_eq!(s.evictions, 0);
    assert!(
        s.message
            .contains("evicting etcd-0 would leave 1 healthy voter(s) where 2 are needed"),
        "{}",
        s.message
    );
}

/// A `kubectl rollout restart` lands after the look (its probes take seconds) and before the
/// eviction: the StatefulSet read again just before it holds the member back, for as long as
/// the controller is busy, and the step is planned again. (Before, the eviction went on the
/// look's old read, beside the controller's coming deletion; this failed there.)
#[tokio::test(start_paused = true)]
async fn a_rollout_begun_after_the_look_holds_the_eviction_back() {
    let c = Scripted::new();
    c.controller_busy_reads.set(u32::MAX);
    let s = run(&c, &["n1"]).await;
    assert_eq!(s.result, ClusterResult::Stopped, "{}", s.message);
    assert_eq!(s.evictions, 0);
    assert!(
        !c.actions().iter().any(|a| a.starts_with("evict ")),
        "{:?}",
        c.actions()
    );
    assert!(
        s.message.contains("still blocked after 60s")
            && s.message.contains("has not yet acted on its latest change"),
        "{}",
        s.message
    );
}

#[tokio::test(start_paused = true)]
async fn a_controller_that_settles_lets_the_eviction_through_on_a_fresh_plan() {
    let c = Scripted::new();
    c.controller_busy_reads.set(2);
    let s = run(&c, &["n1"]).await;
    assert_eq!(s.result, ClusterResult::Drained, "{}", s.message);
    assert_eq!(
        c.actions(),
        [
            "controller busy at the eviction",
            "controller busy at the eviction",
            "evict etcd-0"
        ]
    );
}

/// etcd-0, on the drained node, is cut off and stuck standing for election (etcd and ZooKeeper
/// read "knows no leader" as a candidate), its own term climbing: the plan counts it out, and
/// asked again before its eviction it is still the candidate the look found, so it goes (its
/// eviction is its repair). The re-read refused it for ever in its first version (found by
/// reading the change adversarially).
#[tokio::test(start_paused = true)]
async fn a_member_stuck_as_a_candidate_at_the_look_is_evicted() {
    let c = Scripted::new();
    {
        let mut r = c.report.borrow_mut();
        let x = Scripted::replica(&mut r, "etcd-0");
        x.raft.role = Role::Candidate;
        x.raft.health.state = CheckState::Failing;
        x.raft.term = Some(8);
    }
    // Its term climbs between the look and the eviction (no pre-vote).
    *c.after_first_look.borrow_mut() = Some(Box::new(|r: &mut ClusterReport| {
        Scripted::replica(r, "etcd-0").raft.term = Some(11);
    }));
    // Its replacement rejoins the cluster as a healthy follower.
    *c.after_first_eviction.borrow_mut() = Some(Box::new(|r: &mut ClusterReport| {
        let x = Scripted::replica(r, "etcd-0");
        x.raft.role = Role::Follower;
        x.raft.health.state = CheckState::Ok;
        x.raft.term = Some(5);
    }));
    let s = run(&c, &["n1"]).await;
    assert_eq!(s.result, ClusterResult::Drained, "{}", s.message);
    assert_eq!(c.actions(), ["evict etcd-0"]);
}

/// Leadership moves to the member about to go between the look and its eviction (its leader
/// paused; a hashicorp/raft follower that timed out): asked again just before the eviction, it
/// leads, so it is not evicted as a follower; the fresh plan hands its leadership over first.
/// (Before, drain evicted it on the look: an election instead of a transfer; this failed there.)
#[tokio::test(start_paused = true)]
async fn a_member_that_leads_since_the_look_is_handed_over_before_it_goes() {
    let c = Scripted::new();
    *c.after_first_look.borrow_mut() = Some(Box::new(|r: &mut ClusterReport| {
        crate::drain::fixtures::elected(r, "etcd-0", 6);
    }));
    let s = run(&c, &["n1"]).await;
    assert_eq!(s.result, ClusterResult::Drained, "{}", s.message);
    let actions = c.actions();
    assert!(
        actions
            .first()
            .is_some_and(|a| a.starts_with("transfer from etcd-0 ")),
        "{actions:?}"
    );
    assert_eq!(actions.last().map(String::as_str), Some("evict etcd-0"));
    assert_eq!(s.transfers, 1, "{actions:?}");
}

#[tokio::test(start_paused = true)]
async fn a_pdb_that_relents_lets_the_eviction_through_on_a_fresh_plan() {
    let c = Scripted::new();
    c.pdb_refusals.set(3);
    let s = run(&c, &["n1"]).await;
    assert_eq!(s.result, ClusterResult::Drained, "{}", s.message);
    assert_eq!(s.evictions, 1);
    assert_eq!(c.actions().len(), 4, "{:?}", c.actions());
}

/// Every retry of a refused eviction is a fresh plan, but the wait they add up to is one:
/// a PDB that never allows stops the drain at --timeout.
#[tokio::test(start_paused = true)]
async fn a_pdb_that_never_allows_stops_the_drain_after_the_timeout() {
    let c = Scripted::new();
    c.pdb_refusals.set(u32::MAX);
    let s = run(&c, &["n1"]).await;
    assert_eq!(s.result, ClusterResult::Stopped, "{}", s.message);
    assert_eq!(s.evictions, 0);
    assert!(
        s.message.contains("still blocked after 60s") && s.message.contains("PodDisruptionBudget"),
        "{}",
        s.message
    );
}

#[tokio::test(start_paused = true)]
async fn a_transfer_that_flips_back_evicts_nothing() {
    let c = Scripted::new();
    *c.transfer_fails.borrow_mut() = Some(
        "etcd-1 stepped down and was chosen again: leadership did not move; nothing was evicted"
            .into(),
    );
    let s = run(&c, &["n2"]).await;
    assert_eq!(s.result, ClusterResult::Stopped);
    assert_eq!(c.actions(), ["transfer from etcd-1 to etcd-0"]);
    assert_eq!((s.evictions, s.transfers), (0, 0));
    assert!(s.message.contains("chosen again"), "{}", s.message);
}

#[tokio::test(start_paused = true)]
async fn a_lock_overtaken_between_steps_stops_before_the_next_action() {
    let c = Scripted::new();
    c.lock_checks_left.set(1);
    let s = run(&c, &["n1", "n2"]).await;
    assert_eq!(s.result, ClusterResult::Stopped);
    assert_eq!(
        c.actions(),
        ["evict etcd-0"],
        "nothing after the lock was lost"
    );
    assert!(
        s.message.contains("stopped before its next action")
            && s.message.contains("left: etcd-1 on n2"),
        "{}",
        s.message
    );
}

#[tokio::test(start_paused = true)]
async fn a_replacement_that_returns_empty_stops_the_drain_before_the_next_member() {
    let c = Scripted::new();
    c.replacement_lag.set(1_000_000);
    let s = run(&c, &["n1", "n2"]).await;
    assert_eq!(s.result, ClusterResult::Stopped);
    assert_eq!(c.actions(), ["evict etcd-0"]);
    assert!(
        s.message.contains("etcd-0's replacement did not rejoin")
            && s.message.contains("lags 1000000 entries"),
        "{}",
        s.message
    );
}

#[tokio::test(start_paused = true)]
async fn an_interrupt_during_a_wait_stops_at_once_and_says_what_is_left() {
    let c = Scripted::new();
    Scripted::replica(&mut c.report.borrow_mut(), "etcd-2")
        .raft
        .health
        .state = CheckState::Unreachable;
    c.interrupt_after_pauses.set(Some(1));
    let s = run(&c, &["n1"]).await;
    assert_eq!(s.result, ClusterResult::Stopped);
    assert!(c.actions().is_empty());
    assert!(
        s.message.contains("interrupted") && s.message.contains("left: etcd-0 on n1"),
        "{}",
        s.message
    );
}

#[tokio::test(start_paused = true)]
async fn a_blocker_that_never_clears_stops_after_the_timeout() {
    let c = Scripted::new();
    Scripted::replica(&mut c.report.borrow_mut(), "etcd-2")
        .raft
        .term = Some(4);
    let s = run(&c, &["n1"]).await;
    assert_eq!(s.result, ClusterResult::Stopped);
    assert!(c.actions().is_empty());
    assert!(
        s.message.contains("still blocked after 60s") && s.message.contains("in term 4"),
        "{}",
        s.message
    );
}

/// A 1-member cluster: no wait can make its eviction safe, so it stops at once instead of
/// waiting the whole timeout for members that cannot exist.
#[tokio::test(start_paused = true)]
async fn a_cluster_too_small_to_lose_a_member_stops_without_waiting() {
    let c = Scripted::new();
    {
        let mut r = c.report.borrow_mut();
        r.replicas.retain(|x| x.pod == "etcd-1");
        r.summary.voters = 1;
        r.summary.quorum = 1;
    }
    let s = run(&c, &["n2"]).await;
    assert_eq!(s.result, ClusterResult::Stopped);
    assert!(c.actions().is_empty());
    assert_eq!(c.pauses.get(), 0, "it waited: {}", s.message);
    assert!(
        s.message.contains("however long this waits"),
        "{}",
        s.message
    );
}

/// A learner on the drained node rejoins by a learner's test (healthy, Ready, knowing the
/// leader), not a voter's: its drain does not stall waiting for it to vote.
#[tokio::test(start_paused = true)]
async fn a_learner_on_the_node_rejoins_as_a_learner_and_the_drain_goes_on() {
    let c = Scripted::new();
    {
        let mut r = c.report.borrow_mut();
        let x = Scripted::replica(&mut r, "etcd-0");
        x.raft.role = Role::Learner;
        x.raft.learner = true;
    }
    let s = run(&c, &["n1"]).await;
    assert_eq!(s.result, ClusterResult::Drained, "{}", s.message);
    assert_eq!(c.actions(), ["evict etcd-0"]);
    assert!(
        s.done.iter().any(|d| d.starts_with("etcd-0 rejoined")),
        "{:?}",
        s.done
    );
}

#[tokio::test(start_paused = true)]
async fn a_lock_lost_while_waiting_stops_the_wait_and_acts_no_more() {
    let c = Scripted::new();
    // Blocked (a member hung), then overtaken while waiting, then the member recovers.
    Scripted::replica(&mut c.report.borrow_mut(), "etcd-2")
        .raft
        .health
        .state = CheckState::Unreachable;
    c.lost_after_pauses.set(Some(2));
    let s = run(&c, &["n1"]).await;
    assert_eq!(s.result, ClusterResult::Stopped);
    assert!(c.actions().is_empty(), "{:?}", c.actions());
    assert!(
        s.message
            .contains("now held by bob; this drain stopped before its next action"),
        "{}",
        s.message
    );
}

#[tokio::test(start_paused = true)]
async fn a_group_leader_that_cannot_be_moved_keeps_its_server_from_being_evicted() {
    let c = Scripted::new();
    c.groups_fail.set(true);
    let s = run(&c, &["n1"]).await;
    assert_eq!(s.result, ClusterResult::Stopped);
    assert_eq!(
        c.actions(),
        ["move groups off etcd-0 (failed)"],
        "nothing evicted"
    );
    assert_eq!(s.evictions, 0);
    assert!(
        s.message.contains("etcd-0 was not evicted"),
        "{}",
        s.message
    );
}

// --- the cluster does not cooperate: issue #26 ------------------------------------------------

/// Moving a NATS server's stream leaders takes long; a member hangs meanwhile. The eviction
/// is decided again on a fresh look, and the hung member stops it.
#[tokio::test(start_paused = true)]
async fn a_member_that_hangs_while_the_groups_move_stops_the_eviction() {
    let c = Scripted::new();
    c.groups_led.borrow_mut().insert("etcd-0".into(), 1);
    *c.while_moving.borrow_mut() = Some(Box::new(|r: &mut ClusterReport| {
        Scripted::replica(r, "etcd-2").raft.health.state = CheckState::Unreachable;
    }));
    let s = run(&c, &["n1"]).await;
    assert_eq!(s.result, ClusterResult::Stopped, "{}", s.message);
    assert_eq!(c.actions(), ["move groups off etcd-0"], "nothing evicted");
    assert!(s.message.contains("etcd-2"), "{}", s.message);
}

/// The groups' move is a step: the lock is checked again before the eviction that follows.
#[tokio::test(start_paused = true)]
async fn the_lock_is_checked_again_between_the_groups_move_and_the_eviction() {
    let c = Scripted::new();
    c.groups_led.borrow_mut().insert("etcd-0".into(), 1);
    c.lock_checks_left.set(1);
    let s = run(&c, &["n1"]).await;
    assert_eq!(s.result, ClusterResult::Stopped, "{}", s.message);
    assert_eq!(c.actions(), ["move groups off etcd-0"]);
    assert!(s.message.contains("now held by bob"), "{}", s.message);
}

/// Moving a server's groups, all rounds together, gets one --timeout: a server whose moves
/// take long (a fake server that answers each stepdown slowly) stops the drain at it.
#[tokio::test(start_paused = true)]
async fn moving_a_servers_groups_has_one_deadline_for_all_its_rounds() {
    let c = Scripted::new();
    c.groups_led.borrow_mut().insert("etcd-0".into(), 100);
    c.group_move_takes.set(Duration::from_secs(40));
    let s = run(&c, &["n1"]).await;
    assert_eq!(s.result, ClusterResult::Stopped, "{}", s.message);
    assert_eq!(c.actions().len(), 2, "{:?}", c.actions());
    assert!(s.message.contains("ran out"), "{}", s.message);
}

#[tokio::test(start_paused = true)]
async fn a_server_given_leaders_back_again_and_again_is_not_chased_for_ever() {
    let c = Scripted::new();
    c.groups_led.borrow_mut().insert("etcd-0".into(), 100);
    let s = run(&c, &["n1"]).await;
    assert_eq!(s.result, ClusterResult::Stopped, "{}", s.message);
    assert_eq!(c.actions().len(), 4, "{:?}", c.actions());
    assert!(!c.actions().iter().any(|a| a.starts_with("evict")));
    assert!(s.message.contains("after 3 rounds"), "{}", s.message);
}

/// A replacement that comes back as a non-voter (a server autopilot keeps out of the voters
/// after it rejoined) has not rejoined: the drain goes no further.
#[tokio::test(start_paused = true)]
async fn a_replacement_that_comes_back_a_non_voter_has_not_rejoined() {
    let c = Scripted::new();
    *c.replacement.borrow_mut() = Some(Box::new(|x: &mut ReplicaReport| {
        x.raft.configured = crate::report::Configured::NonVoter;
    }));
    let s = run(&c, &["n1", "n3"]).await;
    assert_eq!(s.result, ClusterResult::Stopped, "{}", s.message);
    assert_eq!(c.actions(), ["evict etcd-0"], "etcd-2 is not evicted");
    assert!(
        s.message.contains("did not rejoin") && s.message.contains("non-voter"),
        "{}",
        s.message
    );
}

/// A member that tolerates the unschedulable taint and prefers its node comes back there:
/// it is evicted once, never again in the same run.
#[tokio::test(start_paused = true)]
async fn a_member_scheduled_back_onto_the_drained_node_is_not_evicted_twice() {
    let c = Scripted::new();
    *c.replacement.borrow_mut() = Some(Box::new(|x: &mut ReplicaReport| {
        x.node = Some("n1".into());
    }));
    let s = run(&c, &["n1"]).await;
    assert_eq!(s.result, ClusterResult::Stopped, "{}", s.message);
    assert_eq!(c.actions(), ["evict etcd-0"]);
    assert!(s.message.contains("not evicted twice"), "{}", s.message);
}

/// The member list stops answering for a while after the first eviction. The run waits for
/// it (a count of pods does not replace a configuration it has read), and goes on once it
/// answers again.
#[tokio::test(start_paused = true)]
async fn a_member_list_that_stops_answering_for_a_while_is_waited_for() {
    let c = Scripted::new();
    let unreadable_looks = std::rc::Rc::new(Cell::new(0u32));
    let left = unreadable_looks.clone();
    *c.replacement.borrow_mut() = Some(Box::new(move |_| left.set(4)));
    let left = unreadable_looks.clone();
    *c.every_look.borrow_mut() = Some(Box::new(move |r: &mut ClusterReport| {
        r.summary.voters_from = if left.get() > 0 {
            left.set(left.get() - 1);
            VotersFrom::Unreadable
        } else {
            VotersFrom::Configuration
        };
    }));
    let said = Said::default();
    let settings = Settings {
        timeout: Duration::from_secs(60),
    };
    let s = drain_cluster(&c, &said, &opts(&["n1", "n3"]), &settings, "db", "etcd").await;
    assert_eq!(s.result, ClusterResult::Drained, "{}", s.message);
    assert_eq!(c.actions(), ["evict etcd-0", "evict etcd-2"]);
    assert!(
        said.0
            .borrow()
            .iter()
            .any(|m| m.contains("member list, read earlier in this run, cannot be read now")),
        "{:?}",
        said.0.borrow()
    );
}

/// Five pods counted as five voters (no member list; assumed); a `kubectl scale` to 3 during
/// the drain takes two pods away, but not their places in the configuration. The quorum stays
/// what the run has seen (3 of 5), so the leader's node is not drained down to 2.
#[tokio::test(start_paused = true)]
async fn a_scale_down_mid_run_does_not_shrink_the_quorum() {
    let c = Scripted::new();
    {
        let mut r = c.report.borrow_mut();
        for i in 3..5 {
            let mut x = r.replicas[2].clone();
            x.pod = format!("etcd-{i}");
            x.node = Some(format!("n{}", i + 1));
            x.raft.member_id = Some(format!("{}", 100 + i));
            r.replicas.push(x);
        }
        r.summary.voters = 5;
        r.summary.quorum = 3;
        r.summary.voters_from = VotersFrom::Pods;
    }
    *c.every_look.borrow_mut() = Some(Box::new(|r: &mut ClusterReport| {
        if r.replicas.iter().any(|x| x.node.as_deref() == Some("n7")) {
            // After the first eviction: scaled to 3.
            r.replicas
                .retain(|x| x.pod != "etcd-3" && x.pod != "etcd-4");
            r.summary.voters = 3;
            r.summary.quorum = 2;
        }
    }));
    let o = DrainOptions {
        assume_voters_are_pods: crate::plan::drain::Assume::Every,
        ..opts(&["n1", "n2", "n3"])
    };
    let settings = Settings {
        timeout: Duration::from_secs(60),
    };
    let s = drain_cluster(&c, &Said::default(), &o, &settings, "db", "etcd").await;
    assert_eq!(s.result, ClusterResult::Stopped, "{}", s.message);
    assert_eq!(c.actions(), ["evict etcd-0"], "no second member goes");
    assert!(s.message.contains("where 3 are needed"), "{}", s.message);
}

/// The wait for an evicted pod to stop fails: the eviction happened, and the report says so.
#[tokio::test(start_paused = true)]
async fn an_eviction_whose_wait_failed_is_in_the_report() {
    let c = Scripted::new();
    c.gone_fails.set(true);
    let s = run(&c, &["n1"]).await;
    assert_eq!(s.result, ClusterResult::Stopped, "{}", s.message);
    assert_eq!(s.evictions, 1, "{s:?}");
    assert!(
        s.done.iter().any(|d| d == "evicted etcd-0 from n1"),
        "{:?}",
        s.done
    );
}

/// A follower that says "follower" but has not heard from its leader does not count.
#[tokio::test(start_paused = true)]
async fn a_follower_cut_off_from_its_leader_does_not_count() {
    let c = Scripted::new();
    {
        let mut r = c.report.borrow_mut();
        let x = Scripted::replica(&mut r, "etcd-2");
        x.raft.current = Some(false);
        x.raft.last_contact_ms = Some(9000);
    }
    let s = run(&c, &["n1"]).await;
    assert_eq!(s.result, ClusterResult::Stopped, "{}", s.message);
    assert!(c.actions().is_empty(), "{:?}", c.actions());
    assert!(
        s.message
            .contains("etcd-2 is not live: it last heard from its leader 9s ago"),
        "{}",
        s.message
    );
}

/// A replacement passes through Pending and an unanswering start before it is healthy: the
/// drain waits for it, and goes on once it has rejoined.
#[tokio::test(start_paused = true)]
async fn a_replacement_that_is_pending_for_a_while_is_waited_for() {
    let c = Scripted::new();
    c.replacement_unready_looks.set(3);
    let s = run(&c, &["n1", "n3"]).await;
    assert_eq!(s.result, ClusterResult::Drained, "{}", s.message);
    assert_eq!(c.actions(), ["evict etcd-0", "evict etcd-2"]);
}
