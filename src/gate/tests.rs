//! The gate against a scripted cluster that is not kind: a second evictor at the same moment,
//! a look that hangs, a member that hangs, a lock someone else holds, a leader that will not
//! let go.

use std::sync::Mutex;

use anyhow::anyhow;
use k8s_openapi::api::core::v1::Pod;

use super::*;
use crate::model::Role;
use crate::plan::drain::BlockReason;
use crate::plan::tests::{cluster, m};
use crate::report::{CheckState, ClusterReport};

struct Scripted {
    report: Mutex<ClusterReport>,
    /// Each pod's UID now (a replacement gets a new one).
    uids: Mutex<BTreeMap<String, String>>,
    lock: Mutex<Option<String>>,
    /// A lock someone takes from this call of `lock_holder` on (the first is 1).
    lock_taken_at_call: Mutex<Option<(u32, String)>>,
    lock_calls: Mutex<u32>,
    /// The lock is released from this call of `lock_holder` on.
    lock_released_at_call: Option<u32>,
    /// How long a look takes (a slow replica).
    look_takes: Duration,
    /// How long finding the pod's member takes (a slow API server).
    member_takes: Duration,
    /// How long a record write's answer takes after the API applied it.
    write_takes: Duration,
    look_fails: bool,
    /// What the StatefulSet, read again just before an admission, says of its controller (a
    /// `kubectl rollout restart` after the look).
    controller_busy: Mutex<Option<String>>,
    /// The StatefulSet's kubectl-raft.io/gate-assume annotation.
    assume: Option<String>,
    /// Why the cluster's credentials could not be read (the look is made without them).
    credentials_error: Option<String>,
    /// The namespace is not one the gate's webhook selects.
    not_sent: Option<String>,
    transfers: Mutex<Vec<(String, Option<String>, TransferSlot)>>,
    /// Applied once, just after a look: what changes between the look and the admission
    /// (leadership moving to the member being evicted, an election elsewhere).
    after_look: Mutex<Option<fn(&mut ClusterReport)>>,
    /// The shared record as the API keeps it, its version counted up on each write.
    record: Mutex<Record>,
    clock: Mutex<f64>,
    /// Nodes nobody drains (every other node is cordoned, as `kubectl drain` leaves it).
    undrained: Mutex<BTreeSet<String>>,
    /// The StatefulSet is one no profile recognises (a database, a cache).
    not_raft: bool,
    /// Nodes deleted from the API.
    gone: Mutex<BTreeSet<String>>,
}

fn etcd(n: usize) -> ClusterReport {
    let mut roles = vec![m(Role::Follower); n];
    roles[1] = m(Role::Leader);
    let mut r = cluster(&roles);
    for (i, x) in r.replicas.iter_mut().enumerate() {
        x.node = Some(format!("n{}", i + 1));
    }
    r.summary.leader = Some("etcd-1".into());
    r
}

impl Scripted {
    fn new() -> Self {
        Self::of(3)
    }

    /// An etcd of `n` members, etcd-1 leading, each on a node of its own.
    fn of(n: usize) -> Self {
        Scripted {
            report: Mutex::new(etcd(n)),
            uids: Mutex::new(
                (0..n)
                    .map(|i| (format!("etcd-{i}"), format!("uid-{i}")))
                    .collect(),
            ),
            lock: Mutex::new(None),
            lock_taken_at_call: Mutex::new(None),
            lock_calls: Mutex::new(0),
            lock_released_at_call: None,
            look_takes: Duration::ZERO,
            member_takes: Duration::ZERO,
            write_takes: Duration::ZERO,
            look_fails: false,
            controller_busy: Mutex::new(None),
            assume: None,
            credentials_error: None,
            not_sent: None,
            transfers: Mutex::new(vec![]),
            after_look: Mutex::new(None),
            record: Mutex::new(Record::default()),
            clock: Mutex::new(1_000_000.0),
            undrained: Mutex::new(BTreeSet::new()),
            not_raft: false,
            gone: Mutex::new(BTreeSet::new()),
        }
    }

    /// The member's pod is replaced: a new UID, answering as before.
    fn replaced(&self, pod: &str) {
        self.uids
            .lock()
            .unwrap()
            .insert(pod.into(), format!("{pod}-new"));
    }

    /// The member's pod is replaced: a new UID, and not (yet) a healthy voter.
    fn replaced_unready(&self, pod: &str) {
        self.replaced(pod);
        self.hang(pod);
    }

    fn tick(&self, secs: f64) {
        *self.clock.lock().unwrap() += secs;
    }

    fn hang(&self, pod: &str) {
        let mut r = self.report.lock().unwrap();
        let x = r.replicas.iter_mut().find(|x| x.pod == pod).unwrap();
        x.raft.health.state = CheckState::Unreachable;
        x.raft.role = Role::Unknown;
    }

    /// `pod` leads, the others follow.
    fn leads(&self, pod: &str) {
        let mut r = self.report.lock().unwrap();
        for x in &mut r.replicas {
            x.raft.role = if x.pod == pod {
                Role::Leader
            } else {
                Role::Follower
            };
        }
        r.summary.leader = Some(pod.into());
    }

    /// The transfer started last ends: leadership moved to its target (or not).
    fn finish_transfer(&self, moved: bool) {
        let (from, to, slot) = self
            .transfers
            .lock()
            .unwrap()
            .last()
            .cloned()
            .expect("a transfer");
        let to = to.expect("a target");
        if moved {
            self.leads(&to);
        }
        let ended = if moved {
            Ok(Handover {
                from,
                to,
                term_before: Some(5),
                term_after: Some(6),
                window_ms: Some(20.0),
            })
        } else {
            Err("the transfer failed".into())
        };
        slot.lock().unwrap().as_mut().unwrap().ended = Some(ended);
    }
}

impl GateOps for &Scripted {
    async fn not_sent_here(&self, _: &str) -> Result<Option<String>> {
        Ok(self.not_sent.clone())
    }

    async fn member(&self, namespace: &str, pod: &str) -> Result<Option<Member>> {
        tokio::time::sleep(self.member_takes).await;
        if !pod.starts_with("etcd-") {
            return Ok(None);
        }
        let r = self.report.lock().unwrap().clone();
        let x = r.replicas.iter().find(|x| x.pod == pod);
        Ok(x.map(|x| Member {
            namespace: namespace.into(),
            name: "etcd".into(),
            pod: pod.into(),
            uid: self.uids.lock().unwrap().get(pod).cloned(),
            node: x.node.clone(),
        }))
    }

    async fn lock_holder(&self, _: &Member) -> Result<Option<String>> {
        let mut calls = self.lock_calls.lock().unwrap();
        *calls += 1;
        if self
            .lock_released_at_call
            .is_some_and(|from| *calls >= from)
        {
            return Ok(None);
        }
        if let Some((from, h)) = self.lock_taken_at_call.lock().unwrap().clone() {
            if *calls >= from {
                return Ok(Some(h));
            }
        }
        Ok(self.lock.lock().unwrap().clone())
    }

    async fn node(&self, name: &str) -> Result<Option<Node>> {
        if self.gone.lock().unwrap().contains(name) {
            return Ok(None);
        }
        let cordoned = !self.undrained.lock().unwrap().contains(name);
        Ok(Some(a_node(name, cordoned, &[])))
    }

    async fn look(&self, _: &Member, _: &DrainOptions) -> Result<Option<Look>> {
        tokio::time::sleep(self.look_takes).await;
        if self.look_fails {
            return Err(anyhow!("replica etcd-2 did not answer: connection refused"));
        }
        if self.not_raft {
            return Ok(None);
        }
        let report = self.report.lock().unwrap().clone();
        let uids = self.uids.lock().unwrap().clone();
        let pods = report
            .replicas
            .iter()
            .map(|x| crate::drain::fixtures::pod(&x.pod, Some(&uids[&x.pod])))
            .collect();
        let mut look = crate::drain::fixtures::look(report, pods, true);
        look.obs.target.gate_assume = self.assume.clone();
        look.obs.credentials_error = self.credentials_error.clone();
        if let Some(change) = self.after_look.lock().unwrap().take() {
            change(&mut self.report.lock().unwrap());
        }
        Ok(Some(look))
    }

    async fn controller_busy_now(&self, _: &Look) -> Option<String> {
        self.controller_busy.lock().unwrap().clone()
    }

    async fn member_now(&self, _: &Look, pod: &str) -> crate::plan::ReplicaView {
        crate::drain::fixtures::view_now(&self.report.lock().unwrap(), pod)
    }

    fn start_transfer(&self, _: Look, step: DrainStep, _: DrainOptions, slot: TransferSlot) {
        self.transfers
            .lock()
            .unwrap()
            .push((step.pod, step.target, slot));
    }

    async fn record(&self, _: &Member) -> Result<Record> {
        Ok(self.record.lock().unwrap().clone())
    }

    async fn write_record(&self, _: &Member, r: &Record) -> Result<Written> {
        let written = write_on_version(&mut self.record.lock().unwrap(), r);
        tokio::time::sleep(self.write_takes).await;
        Ok(written)
    }

    fn now(&self) -> f64 {
        *self.clock.lock().unwrap()
    }
}

/// Node `name`, cordoned or not, with taints of these keys (NoSchedule).
pub(super) fn a_node(name: &str, cordoned: bool, taints: &[&str]) -> Node {
    use k8s_openapi::api::core::v1::{NodeSpec, Taint};
    Node {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            unschedulable: cordoned.then_some(true),
            taints: Some(
                taints
                    .iter()
                    .map(|k| Taint {
                        key: k.to_string(),
                        effect: "NoSchedule".into(),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        }),
        status: None,
    }
}

/// A conditioned write as the API keeps a record: only on the version read, through its text
/// (what a gate cannot read whole it refuses), the version counted up.
pub(super) fn write_on_version(stored: &mut Record, r: &Record) -> Written {
    if stored.version != r.version {
        return Written::Conflict;
    }
    let next = stored
        .version
        .as_deref()
        .map_or(1, |v| v.parse::<u64>().unwrap() + 1);
    let mut back = Record::parse(&r.to_text()).unwrap();
    back.version = Some(next.to_string());
    *stored = back;
    Written::Done
}

fn evict(pod: &str) -> Request {
    Request {
        namespace: "db".into(),
        pod: pod.into(),
        ..Default::default()
    }
}

/// `d` passes on the paused clock and on the cluster's wall clock alike.
async fn pass(s: &Scripted, d: Duration) {
    tokio::time::advance(d).await;
    s.tick(d.as_secs_f64());
}

fn gate(s: &Scripted) -> Gate<&Scripted> {
    let mut settings = Settings::default();
    settings.opts.max_lag = 100;
    Gate::new(s, settings)
}

#[tokio::test(start_paused = true)]
async fn a_follower_goes_when_the_others_keep_a_quorum() {
    let s = Scripted::new();
    let v = gate(&s).review(&evict("etcd-0")).await;
    assert!(v.allowed(), "{v:?}");
}

/// A `kubectl rollout restart` lands after the gate's look (its probes take seconds): the
/// StatefulSet read again just before the admission refuses it (429, retried), and nothing is
/// recorded as admitted. (Before, the gate admitted on the look's old read, beside the
/// controller's coming deletion; this failed there.)
#[tokio::test(start_paused = true)]
async fn a_rollout_begun_after_the_look_refuses_the_eviction() {
    let s = Scripted::new();
    *s.controller_busy.lock().unwrap() = Some(
        "its StatefulSet's controller has not yet acted on its latest change (generation 3, observed 2)".into(),
    );
    let v = gate(&s).review(&evict("etcd-0")).await;
    assert_eq!(
        v,
        Verdict::Refuse(
            Code::Blocked(BlockReason::RolloutInProgress),
            v.message().into()
        )
    );
    assert!(v.message().contains("generation 3, observed 2"), "{v:?}");
    assert!(
        s.record.lock().unwrap().version.is_none(),
        "nothing admitted, nothing written"
    );
}

/// The member whose eviction is decided wins an election between the gate's look and its
/// admission (its leader paused; `decide_within` is seconds): asked again, it leads, and the
/// eviction is refused, to be decided again, not admitted as a follower's. (Before, the gate
/// admitted on the look: an election instead of a transfer; this failed there.)
#[tokio::test(start_paused = true)]
async fn a_member_that_leads_since_the_look_is_not_admitted_as_a_follower() {
    let s = Scripted::new();
    *s.after_look.lock().unwrap() = Some(|r| {
        crate::drain::fixtures::elected(r, "etcd-0", 6);
    });
    let v = gate(&s).review(&evict("etcd-0")).await;
    assert_eq!(v.reason(), "ChangedSinceLook", "{v:?}");
    assert!(v.message().contains("etcd-0 leads now"), "{v:?}");
    assert!(
        s.record.lock().unwrap().version.is_none(),
        "nothing admitted, nothing written"
    );
}

/// An election elsewhere between the look and the admission (the old leader paused, etcd-2
/// took over): the term the member answers now has moved, and the look's leader and quorum
/// are those of before it.
#[tokio::test(start_paused = true)]
async fn an_election_since_the_look_refuses_the_eviction() {
    let s = Scripted::new();
    *s.after_look.lock().unwrap() = Some(|r| {
        for x in &mut r.replicas {
            x.raft.term = Some(6);
        }
    });
    let v = gate(&s).review(&evict("etcd-0")).await;
    assert_eq!(v.reason(), "ChangedSinceLook", "{v:?}");
    assert!(
        v.message()
            .contains("reads term 6 where the cluster was looked at in term 5"),
        "{v:?}"
    );
}

/// The member answered the look and does not answer just before its admission: what it is
/// now cannot be told, so the eviction waits for a fresh look.
#[tokio::test(start_paused = true)]
async fn a_member_silent_since_the_look_is_decided_again() {
    let s = Scripted::new();
    *s.after_look.lock().unwrap() = Some(|r| {
        r.replicas[0].raft.health.state = CheckState::Unreachable;
    });
    let v = gate(&s).review(&evict("etcd-0")).await;
    assert_eq!(v.reason(), "ChangedSinceLook", "{v:?}");
}

/// The lock holder's eviction is asked again too: its own look and the gate's are both older
/// than the member's answer now.
#[tokio::test(start_paused = true)]
async fn the_lock_holders_eviction_of_a_member_that_leads_since_the_look_is_held() {
    let s = Scripted::new();
    let req = holding(&s, "etcd-0");
    *s.after_look.lock().unwrap() = Some(|r| {
        crate::drain::fixtures::elected(r, "etcd-0", 6);
    });
    let v = gate(&s).review(&req).await;
    assert_eq!(v.reason(), "ChangedSinceLook", "{v:?}");
}

/// Once the cluster has settled after the election, the retry is decided on a fresh look: a
/// follower again, admitted.
#[tokio::test(start_paused = true)]
async fn after_an_election_since_the_look_the_retry_is_decided_afresh() {
    let s = Scripted::new();
    let g = gate(&s);
    *s.after_look.lock().unwrap() = Some(|r| {
        for x in &mut r.replicas {
            x.raft.term = Some(6);
        }
    });
    assert!(!g.review(&evict("etcd-0")).await.allowed());
    let v = g.review(&evict("etcd-0")).await;
    assert!(v.allowed(), "{v:?}");
}

#[tokio::test(start_paused = true)]
async fn once_the_controller_settles_the_retried_eviction_passes() {
    let s = Scripted::new();
    let g = gate(&s);
    *s.controller_busy.lock().unwrap() = Some("its StatefulSet's controller is rolling it".into());
    assert!(!g.review(&evict("etcd-0")).await.allowed());
    *s.controller_busy.lock().unwrap() = None;
    let v = g.review(&evict("etcd-0")).await;
    assert!(v.allowed(), "{v:?}");
}

#[tokio::test(start_paused = true)]
async fn a_pod_of_no_raft_cluster_is_never_refused() {
    let s = Scripted::new();
    assert!(gate(&s).review(&evict("web-0")).await.allowed());
}

#[tokio::test(start_paused = true)]
async fn the_leader_is_held_with_429_while_a_transfer_starts() {
    let s = Scripted::new();
    let v = gate(&s).review(&evict("etcd-1")).await;
    assert_eq!(v.reason(), "TransferStarted", "{v:?}");
    let started = s.transfers.lock().unwrap().clone();
    assert_eq!(started.len(), 1);
    assert_eq!(started[0].0, "etcd-1");
    assert!(started[0].1.as_deref().is_some_and(|t| t != "etcd-1"));
}

#[tokio::test(start_paused = true)]
async fn the_leaders_retried_eviction_passes_once_it_follows() {
    let s = Scripted::new();
    let g = gate(&s);
    g.review(&evict("etcd-1")).await;
    s.finish_transfer(true);
    let v = g.review(&evict("etcd-1")).await;
    assert!(v.allowed(), "{v:?}");
}

#[tokio::test(start_paused = true)]
async fn a_retry_during_the_transfer_starts_no_second_one() {
    let s = Scripted::new();
    let g = gate(&s);
    g.review(&evict("etcd-1")).await;
    let v = g.review(&evict("etcd-1")).await;
    assert_eq!(v.reason(), "TransferInProgress", "{v:?}");
    assert_eq!(s.transfers.lock().unwrap().len(), 1);
}

/// A node-pool upgrade: a transfer, its leader admitted once it follows, another member
/// admitted past the transfer's timeout and backoff; two quiet hours later, that member leads
/// again, and a replica that never saw the transfer (the evictor's reviews went to the other)
/// starts the next one at once. (Before, the transfer stayed in the record, new to that
/// replica, which held the leader's eviction `TransferInProgress` for the whole
/// `transfer_timeout`.)
#[tokio::test(start_paused = true)]
async fn a_transfer_that_ended_hours_ago_does_not_hold_a_replica_that_first_sees_it() {
    let s = Scripted::new();
    let (one, two) = (gate(&s), gate(&s));
    assert_eq!(
        one.review(&evict("etcd-1")).await.reason(),
        "TransferStarted"
    );
    s.finish_transfer(true);
    assert!(one.review(&evict("etcd-1")).await.allowed());
    s.replaced("etcd-1");
    pass(&s, one.settings.transfer_timeout + Duration::from_secs(1)).await;
    let other = follower_besides(&s, "etcd-1");
    assert!(one.review(&evict(&other)).await.allowed());
    s.replaced(&other);
    pass(&s, Duration::from_secs(2 * 3600)).await;
    s.leads("etcd-1");
    let v = two.review(&evict("etcd-1")).await;
    assert_eq!(v.reason(), "TransferStarted", "{v:?}");
    assert_eq!(s.transfers.lock().unwrap().len(), 2);
}

/// A follower of the cluster that is not `besides`.
fn follower_besides(s: &Scripted, besides: &str) -> String {
    let r = s.report.lock().unwrap();
    r.replicas
        .iter()
        .find(|x| x.pod != besides && x.raft.role == Role::Follower)
        .map(|x| x.pod.clone())
        .expect("a follower")
}

/// A transfer that failed (its member still leads) leaves the record with the next write past
/// its timeout and its backoff.
#[tokio::test(start_paused = true)]
async fn a_failed_transfer_past_its_timeout_and_backoff_leaves_the_record() {
    let s = Scripted::new();
    let g = gate(&s);
    assert_eq!(g.review(&evict("etcd-1")).await.reason(), "TransferStarted");
    s.finish_transfer(false);
    pass(&s, g.settings.transfer_timeout + Duration::from_secs(1)).await;
    assert!(g.review(&evict("etcd-0")).await.allowed());
    let record = s.record.lock().unwrap().clone();
    assert_eq!(record.transfer, None, "{record:?}");
    assert_eq!(record.admitted.len(), 1, "{record:?}");
}

/// A transfer that did its work stays in the record through its backoff: its member's
/// admission, written moments after, keeps it (the next transfer, from whoever leads then,
/// waits for it).
#[tokio::test(start_paused = true)]
async fn a_transfer_stays_recorded_through_its_backoff() {
    let s = Scripted::new();
    let g = gate(&s);
    assert_eq!(g.review(&evict("etcd-1")).await.reason(), "TransferStarted");
    s.finish_transfer(true);
    assert!(g.review(&evict("etcd-1")).await.allowed());
    let record = s.record.lock().unwrap().clone();
    assert!(record.transfer.is_some(), "{record:?}");
}

fn evict_in(namespace: &str, pod: &str) -> Request {
    Request {
        namespace: namespace.into(),
        ..evict(pod)
    }
}

fn remembered(g: &Gate<&Scripted>) -> Vec<String> {
    g.clusters.lock().unwrap().keys().cloned().collect()
}

/// A gate runs for months while StatefulSets come and go: a cluster's memory with nothing in
/// it goes when another cluster comes. (Before, every cluster ever decided stayed.)
#[tokio::test(start_paused = true)]
async fn a_clusters_memory_with_nothing_to_remember_is_forgotten_when_another_comes() {
    let s = Scripted::new();
    let g = gate(&s);
    assert!(g.review(&evict("etcd-0")).await.allowed());
    g.review(&evict_in("other", "etcd-0")).await;
    assert_eq!(remembered(&g), ["other/etcd"]);
}

/// A cluster whose decision is under way keeps its memory when another comes meanwhile: a
/// second eviction of it is still told another is being decided (`Busy`), never decided beside
/// the first on a memory of its own.
#[tokio::test(start_paused = true)]
async fn a_clusters_memory_in_use_is_not_forgotten_when_another_comes() {
    let mut s = Scripted::new();
    s.look_takes = Duration::from_millis(500);
    let g = gate(&s);
    let (first, second) = (evict("etcd-0"), evict("etcd-2"));
    let other = evict_in("other", "etcd-0");
    let meanwhile = async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        g.review(&other).await
    };
    let later = async {
        tokio::time::sleep(Duration::from_millis(150)).await;
        g.review(&second).await
    };
    let (a, _, b) = tokio::join!(g.review(&first), meanwhile, later);
    assert!(a.allowed(), "{a:?}");
    // This replica's own guard, not the record's conflict that stops two replicas ("decided at
    // the same moment", as a second memory of the cluster would meet).
    assert!(format!("{b:?}").contains("is being decided"), "{b:?}");
}

/// The memory of a transfer this replica started stays for `FORGET_AFTER` (it says whether
/// the record's transfer ended here, and backs a failed one off), then goes.
#[tokio::test(start_paused = true)]
async fn a_clusters_memory_of_a_transfer_stays_for_an_hour() {
    let s = Scripted::new();
    let g = gate(&s);
    g.review(&evict("etcd-1")).await;
    assert_eq!(s.transfers.lock().unwrap().len(), 1);
    g.review(&evict_in("other", "etcd-0")).await;
    assert_eq!(remembered(&g), ["db/etcd", "other/etcd"]);
    pass(&s, FORGET_AFTER).await;
    g.review(&evict_in("third", "etcd-0")).await;
    assert_eq!(remembered(&g), ["third/etcd"]);
}

#[tokio::test(start_paused = true)]
async fn a_hung_follower_stops_the_eviction_of_another_member() {
    let s = Scripted::new();
    s.hang("etcd-2");
    let v = gate(&s).review(&evict("etcd-0")).await;
    assert_eq!(
        v,
        Verdict::Refuse(Code::Blocked(BlockReason::QuorumAtRisk), v.message().into())
    );
    assert!(
        v.message().contains("etcd-2"),
        "names the member that hangs: {}",
        v.message()
    );
}

/// The race a PDB loses: two evictors ask at the same moment, each for another follower, and
/// a look takes a while. Without one decision per cluster and the memory of what was
/// admitted, both see three healthy voters and both pass.
#[tokio::test(start_paused = true)]
async fn two_evictors_at_the_same_moment_never_both_pass() {
    let mut s = Scripted::new();
    s.look_takes = Duration::from_millis(500);
    let g = gate(&s);
    let (first, second) = (evict("etcd-0"), evict("etcd-2"));
    let (a, b) = tokio::join!(g.review(&first), g.review(&second));
    assert_eq!(
        [a.allowed(), b.allowed()].iter().filter(|x| **x).count(),
        1,
        "{a:?} / {b:?}"
    );
}

/// The same race across the gate's two replicas: each has its own memory, and the evictors
/// reach one each. Only the record in the API, written on the version read, stops the second.
#[tokio::test(start_paused = true)]
async fn two_gate_replicas_at_the_same_moment_never_both_pass() {
    let mut s = Scripted::new();
    s.look_takes = Duration::from_millis(500);
    let (one, two) = (gate(&s), gate(&s));
    let (first, second) = (evict("etcd-0"), evict("etcd-2"));
    let (a, b) = tokio::join!(one.review(&first), two.review(&second));
    assert_eq!(
        [a.allowed(), b.allowed()].iter().filter(|x| **x).count(),
        1,
        "{a:?} / {b:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_replica_sees_the_transfer_another_started() {
    let s = Scripted::new();
    let (one, two) = (gate(&s), gate(&s));
    assert_eq!(
        one.review(&evict("etcd-1")).await.reason(),
        "TransferStarted"
    );
    let v = two.review(&evict("etcd-1")).await;
    assert_eq!(v.reason(), "TransferInProgress", "{v:?}");
    assert_eq!(
        s.transfers.lock().unwrap().len(),
        1,
        "one transfer, not one per replica"
    );
}

#[tokio::test(start_paused = true)]
async fn an_admission_that_never_took_effect_holds_back_others_only_for_a_while() {
    let s = Scripted::new();
    let g = gate(&s);
    // Admitted, then refused further down the chain (a PDB): the pod stays as it was.
    assert!(g.review(&evict("etcd-0")).await.allowed());
    assert!(!g.review(&evict("etcd-2")).await.allowed());
    tokio::time::advance(g.settings.admitted_for + Duration::from_secs(1)).await;
    assert!(g.review(&evict("etcd-2")).await.allowed());
}

#[tokio::test(start_paused = true)]
async fn an_admitted_member_replaced_meanwhile_is_judged_by_its_replacements_health() {
    let s = Scripted::new();
    let g = gate(&s);
    assert!(g.review(&evict("etcd-0")).await.allowed());
    // The replacement is up (a new UID) and healthy: the next member may go.
    s.uids
        .lock()
        .unwrap()
        .insert("etcd-0".into(), "uid-0b".into());
    let v = g.review(&evict("etcd-2")).await;
    assert!(v.allowed(), "{v:?}");
}

#[tokio::test(start_paused = true)]
async fn a_dry_run_of_the_leaders_eviction_starts_no_transfer() {
    let s = Scripted::new();
    let mut req = evict("etcd-1");
    req.dry_run = true;
    let v = gate(&s).review(&req).await;
    assert_eq!(v.reason(), "WouldTransfer", "{v:?}");
    assert!(s.transfers.lock().unwrap().is_empty());
}

/// `kubectl drain --dry-run=server` of the leader's node ends: the dry run is allowed, with a
/// warning that says what a real eviction would start. (Before, it was refused, and kubectl
/// retried the dry run for ever.)
#[tokio::test(start_paused = true)]
async fn a_dry_run_of_the_leaders_eviction_is_allowed_with_a_warning() {
    let s = Scripted::new();
    let mut req = evict("etcd-1");
    req.dry_run = true;
    let v = gate(&s).review(&req).await;
    assert!(v.allowed(), "{v:?}");
    let answer = review::answer("u", &v);
    assert!(
        answer["response"]["warnings"][0]
            .as_str()
            .is_some_and(|w| w.contains("would start a transfer to")),
        "{answer}"
    );
    assert!(
        s.record.lock().unwrap().version.is_none(),
        "nothing admitted"
    )
}

#[tokio::test(start_paused = true)]
async fn a_dry_run_admits_nothing_that_holds_back_a_real_eviction() {
    let s = Scripted::new();
    let g = gate(&s);
    let mut dry = evict("etcd-0");
    dry.dry_run = true;
    assert!(g.review(&dry).await.allowed());
    assert!(g.review(&evict("etcd-2")).await.allowed());
}

#[tokio::test(start_paused = true)]
async fn someone_elses_lock_holds_the_eviction() {
    let s = Scripted::new();
    *s.lock.lock().unwrap() =
        Some("alice@laptop pid 7 started 1764633600123 (kubectl raft drain n1)".into());
    let v = gate(&s).review(&evict("etcd-0")).await;
    assert_eq!(v.reason(), "LockHeld", "{v:?}");
    assert!(
        v.message().contains("alice@laptop (kubectl raft drain n1)"),
        "{}",
        v.message()
    );
}

/// The identity that lets an eviction through is never in a refusal: an evictor refused
/// cannot copy it onto its next eviction.
#[tokio::test(start_paused = true)]
async fn a_refusal_does_not_tell_the_lock_holders_pass() {
    let s = Scripted::new();
    let holder = "alice@laptop pid 7 started 1764633600123 (kubectl raft drain n1)";
    *s.lock.lock().unwrap() = Some(holder.into());
    let v = gate(&s).review(&evict("etcd-0")).await;
    assert!(!v.message().contains("pid 7"), "{}", v.message());
    assert!(!v.message().contains("1764633600123"), "{}", v.message());
}

fn holding(s: &Scripted, pod: &str) -> Request {
    let holder = "alice@laptop pid 7 started 1 (kubectl raft drain n1 --allow-degraded)";
    *s.lock.lock().unwrap() = Some(holder.into());
    let mut req = evict(pod);
    req.lock_holder = Some(holder.into());
    req
}

#[tokio::test(start_paused = true)]
async fn the_lock_holders_own_eviction_passes() {
    let s = Scripted::new();
    let req = holding(&s, "etcd-0");
    assert!(gate(&s).review(&req).await.allowed());
}

/// The holder decided on a look of its own; a member that hung since is seen here: what no
/// flag overrides (a quorum of healthy voters) still holds for its evictions.
#[tokio::test(start_paused = true)]
async fn the_lock_holders_eviction_keeps_a_quorum_a_hang_since_its_look_would_break() {
    let s = Scripted::new();
    let req = holding(&s, "etcd-0");
    s.hang("etcd-2");
    let v = gate(&s).review(&req).await;
    assert_eq!(v.reason(), "QuorumAtRisk", "{v:?}");
}

/// The leader changed since the holder's look (an election, a transfer that ended): the
/// member it evicts leads now, and goes only after its own transfer.
#[tokio::test(start_paused = true)]
async fn the_lock_holders_eviction_of_a_member_that_leads_now_is_held() {
    let s = Scripted::new();
    let req = holding(&s, "etcd-1");
    let v = gate(&s).review(&req).await;
    assert!(!v.allowed(), "{v:?}");
    assert!(
        s.transfers.lock().unwrap().is_empty(),
        "the holder transfers itself"
    );
}

/// A replica whose wall clock is 40 s behind writes an admission that looks old to the others;
/// ages are judged by each replica's own clock, so it still holds the next eviction back.
#[tokio::test(start_paused = true)]
async fn an_admission_by_a_replica_whose_clock_is_behind_still_holds_the_others() {
    let s = Scripted::new();
    let (one, two) = (gate(&s), gate(&s));
    s.tick(-40.0);
    assert!(one.review(&evict("etcd-0")).await.allowed());
    s.tick(40.0);
    assert!(!two.review(&evict("etcd-2")).await.allowed());
}

/// A PDB refused the eviction the gate admitted: the evictor's retry of the same member is not
/// held back by its own admission.
#[tokio::test(start_paused = true)]
async fn the_retry_of_an_admitted_eviction_is_not_held_by_it() {
    let s = Scripted::new();
    let g = gate(&s);
    assert!(g.review(&evict("etcd-0")).await.allowed());
    tokio::time::advance(Duration::from_secs(5)).await;
    let v = g.review(&evict("etcd-0")).await;
    assert!(v.allowed(), "{v:?}");
}

/// The reviews of a follower that never goes (a PDB refuses its eviction each time, or a
/// forger replays it from a node being drained), repeated every `every`, by the gate replicas
/// `gates` in turn, beside another member's evictor retrying each 5 s: when the other is first
/// admitted, and when the follower was last admitted before it.
async fn replayed_beside_another(
    s: &Scripted,
    gates: &[&Gate<&Scripted>],
    every: Duration,
) -> Option<(Duration, Option<Duration>)> {
    let tick = Duration::from_secs(5);
    let (mut now, mut next_replay, mut turn) = (Duration::ZERO, Duration::ZERO, 0);
    let mut last_admitted = None;
    while now < Duration::from_secs(900) {
        if now >= next_replay {
            let g = gates[turn % gates.len()];
            turn += 1;
            if g.review(&evict("etcd-0")).await.allowed() {
                last_admitted = Some(now);
            }
            next_replay = now + every;
        }
        let g = gates[turn % gates.len()];
        if g.review(&evict("etcd-2")).await.allowed() {
            return Some((now, last_admitted));
        }
        pass(s, tick).await;
        now += tick;
    }
    None
}

/// Repeated every 20 s: the other member is decided within `pending_at_most` and two
/// `admitted_for`s, and only once the follower's last admission is `admitted_for` old (it may
/// take effect until then). (Before, each repeat restarted the 30 s hold, and this failed:
/// etcd-2 was refused for the whole fifteen minutes.)
#[tokio::test(start_paused = true)]
async fn a_member_admitted_again_and_again_without_effect_does_not_hold_the_others_for_ever() {
    let s = Scripted::new();
    let g = gate(&s);
    let got = replayed_beside_another(&s, &[&g], Duration::from_secs(20)).await;
    let (other, last) = got.expect("etcd-2 admitted at last");
    assert!(
        other <= g.settings.pending_at_most + 2 * g.settings.admitted_for,
        "etcd-2 admitted after {other:?}"
    );
    let last = last.expect("etcd-0 admitted before");
    assert!(
        other >= last + g.settings.admitted_for,
        "etcd-2 admitted at {other:?}, {last:?} after etcd-0's last admission"
    );
}

/// Repeated every 31 s, just past `admitted_for`, and the other member's evictor unlucky: it
/// retries each time 1 s after a repeat. Each repeat finds the last admission expired and
/// still carries the first one's time on, so the bound holds. (With each repeat starting
/// afresh, the other was refused for the whole fifteen minutes.)
#[tokio::test(start_paused = true)]
async fn repeats_just_slower_than_a_hold_do_not_hold_the_others_for_ever() {
    let s = Scripted::new();
    let g = gate(&s);
    let mut last = None;
    let mut other = None;
    for k in 0..30u64 {
        let at = Duration::from_secs(31 * k);
        if g.review(&evict("etcd-0")).await.allowed() {
            last = Some(at);
        }
        tokio::time::advance(Duration::from_secs(1)).await;
        s.tick(1.0);
        if g.review(&evict("etcd-2")).await.allowed() {
            other = Some(at + Duration::from_secs(1));
            break;
        }
        tokio::time::advance(Duration::from_secs(30)).await;
        s.tick(30.0);
    }
    let other = other.expect("etcd-2 admitted within fifteen minutes");
    let last = last.expect("etcd-0 admitted before");
    assert!(
        other >= last + g.settings.admitted_for,
        "{other:?} {last:?}"
    );
}

/// Two gate replicas whose clocks first saw the entry at different times (the second started
/// late: its memory of ages is empty), the repeats alternating between them: the first to
/// refuse marks the entry in the record, and the other refuses too, so the other member's
/// window is not shrunk to nothing by the second replica's later clock.
#[tokio::test(start_paused = true)]
async fn two_replicas_with_different_clocks_both_bound_the_repeats() {
    let s = Scripted::new();
    let one = gate(&s);
    assert!(one.review(&evict("etcd-0")).await.allowed());
    tokio::time::advance(Duration::from_secs(60)).await;
    s.tick(60.0);
    let two = gate(&s);
    let got = replayed_beside_another(&s, &[&one, &two], Duration::from_secs(10)).await;
    let (other, last) = got.expect("etcd-2 admitted at last");
    let last = last.expect("etcd-0 admitted before");
    assert!(
        other >= last + one.settings.admitted_for,
        "{other:?} {last:?}"
    );
    assert!(
        other <= one.settings.pending_at_most + 2 * one.settings.admitted_for,
        "etcd-2 admitted after {other:?} (60 s after the first admission)"
    );
}

/// Past `pending_at_most`, the member whose admissions never took effect is the one refused,
/// and says why.
#[tokio::test(start_paused = true)]
async fn a_member_admitted_for_too_long_without_effect_is_refused_no_effect() {
    let s = Scripted::new();
    let g = gate(&s);
    let step = Duration::from_secs(20);
    assert!(g.review(&evict("etcd-0")).await.allowed());
    let mut last = None;
    for _ in 0..(g.settings.pending_at_most.as_secs() / 20 + 1) {
        pass(&s, step).await;
        last = Some(g.review(&evict("etcd-0")).await);
    }
    let v = last.unwrap();
    assert_eq!(v.reason(), "NoEffect", "{v:?}");
    assert!(v.message().contains("none took effect"), "{v:?}");
}

/// The refusal ends: once the others had their time, the member's eviction is decided afresh
/// and admitted again, with a new bound.
#[tokio::test(start_paused = true)]
async fn a_member_refused_no_effect_is_admitted_again_afterwards() {
    let s = Scripted::new();
    let g = gate(&s);
    let step = Duration::from_secs(10);
    let end = g.settings.pending_at_most + 2 * g.settings.admitted_for + step;
    let mut waited = Duration::ZERO;
    let mut refused = false;
    while waited <= end {
        let v = g.review(&evict("etcd-0")).await;
        refused |= v.reason() == "NoEffect";
        pass(&s, step).await;
        waited += step;
    }
    assert!(refused, "refused NoEffect on the way");
    let v = g.review(&evict("etcd-0")).await;
    assert!(v.allowed(), "{v:?}");
}

/// While the member's own admission is fresh, the others are still held: the bound never lets
/// a second member go beside an admission that may take effect any moment.
#[tokio::test(start_paused = true)]
async fn a_fresh_admission_still_holds_the_others_after_the_bound() {
    let s = Scripted::new();
    let g = gate(&s);
    let step = Duration::from_secs(20);
    let mut waited = Duration::ZERO;
    // Admitted every 20 s until just before the bound: the last one is fresh.
    while waited + step < g.settings.pending_at_most {
        assert!(g.review(&evict("etcd-0")).await.allowed());
        pass(&s, step).await;
        waited += step;
    }
    assert!(g.review(&evict("etcd-0")).await.allowed());
    pass(&s, step).await;
    let v = g.review(&evict("etcd-2")).await;
    assert!(!v.allowed(), "{v:?}");
}

/// A replacement that has not rejoined after ten minutes is still waited for: the gate does
/// not fall back to counting the quorum alone, which on 5 members would let a second go.
#[tokio::test(start_paused = true)]
async fn a_replacement_that_never_rejoins_is_waited_for_however_long() {
    let s = Scripted::of(5);
    let g = gate(&s);
    assert!(g.review(&evict("etcd-0")).await.allowed());
    s.replaced_unready("etcd-0");
    assert_eq!(g.review(&evict("etcd-3")).await.reason(), "Rejoining");
    tokio::time::advance(g.settings.rejoin_within + Duration::from_secs(1)).await;
    assert_eq!(g.review(&evict("etcd-3")).await.reason(), "Rejoining");
}

#[tokio::test(start_paused = true)]
async fn a_look_that_hangs_is_refused_before_the_webhooks_deadline() {
    let mut s = Scripted::new();
    s.look_takes = Duration::from_secs(3600);
    let g = gate(&s);
    let started = Instant::now();
    let v = g.review(&evict("etcd-0")).await;
    assert_eq!(v.reason(), "CannotDecide", "{v:?}");
    assert!(started.elapsed() <= g.settings.decide_within);
}

/// The webhook's budget counts from the review's arrival, its body's time included: a
/// review whose body took 1.5 s of a 2 s budget to arrive is answered within the 0.5 s left,
/// not a whole budget after the body came.
#[tokio::test(start_paused = true)]
async fn a_review_is_answered_within_the_budget_counted_from_its_arrival() {
    let mut s = Scripted::new();
    s.look_takes = Duration::from_secs(3600);
    let g = gate(&s);
    let arrived = Instant::now();
    tokio::time::advance(Duration::from_millis(1500)).await;
    let v = g
        .review_by(&evict("etcd-0"), arrived, Duration::from_secs(2))
        .await
        .verdict;
    assert_eq!(v.reason(), "CannotDecide", "{v:?}");
    assert!(
        arrived.elapsed() <= Duration::from_secs(2),
        "answered {:?} after the review arrived with 2 s to answer",
        arrived.elapsed()
    );
}

/// A review not decided before the gate knew whether it acts on it (its node being drained)
/// leaves no trace beyond the log: anyone can send one too slowly, or with a short
/// `?timeout=`, for any pod.
#[tokio::test(start_paused = true)]
async fn a_review_out_of_time_before_its_node_was_checked_is_not_acted_on() {
    let mut s = Scripted::new();
    s.member_takes = Duration::from_secs(3600);
    let g = gate(&s);
    let a = g
        .review_by(&evict("etcd-0"), Instant::now(), Duration::from_secs(2))
        .await;
    assert_eq!(a.verdict.reason(), "CannotDecide", "{a:?}");
    assert!(!a.acted_on, "{a:?}");
}

/// A review out of time while its cluster was looked at is one the gate acts on: its refusal
/// is an Event on the pod, and its clock of how long the eviction was held runs.
#[tokio::test(start_paused = true)]
async fn a_review_out_of_time_during_its_look_is_acted_on() {
    let mut s = Scripted::new();
    s.look_takes = Duration::from_secs(3600);
    let g = gate(&s);
    let a = g
        .review_by(&evict("etcd-0"), Instant::now(), Duration::from_secs(2))
        .await;
    assert_eq!(a.verdict.reason(), "CannotDecide", "{a:?}");
    assert!(a.acted_on, "{a:?}");
}

/// A member's eviction from a node nobody drains is answered without a trace (anyone can post
/// one).
#[tokio::test(start_paused = true)]
async fn an_eviction_from_a_node_not_drained_is_not_acted_on() {
    let s = Scripted::new();
    s.undrained.lock().unwrap().insert("n1".into());
    let g = gate(&s);
    let a = g
        .review_by(&evict("etcd-0"), Instant::now(), Duration::from_secs(8))
        .await;
    assert_eq!(a.verdict.reason(), "NotDraining", "{a:?}");
    assert!(!a.acted_on, "{a:?}");
}

/// An entry still in a record is asked about at every decision of its cluster: its age keeps
/// counting past an hour (were it to start again at 0, a finished transfer would read as
/// running again, and an expired admission as fresh).
#[tokio::test(start_paused = true)]
async fn an_entry_asked_about_keeps_its_age_past_an_hour() {
    let s = Scripted::new();
    let g = gate(&s);
    g.age("db/etcd", "transfer/etcd-1/1".into());
    for _ in 0..7 {
        tokio::time::advance(Duration::from_secs(600)).await;
        g.age("db/etcd", "transfer/etcd-1/1".into());
    }
    assert_eq!(
        g.age("db/etcd", "transfer/etcd-1/1".into()),
        Duration::from_secs(4200)
    );
}

/// What no decision asked about for an hour is forgotten (the memory stays bounded): seen
/// again, it is new, as it is to a replica that has just started.
#[tokio::test(start_paused = true)]
async fn an_entry_not_asked_about_for_an_hour_is_forgotten() {
    let s = Scripted::new();
    let g = gate(&s);
    g.age("db/etcd", "transfer/etcd-1/1".into());
    tokio::time::advance(Duration::from_secs(3600)).await;
    assert_eq!(g.age("db/etcd", "transfer/etcd-1/1".into()), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn a_look_that_fails_is_a_refusal_to_retry_not_an_error() {
    let mut s = Scripted::new();
    s.look_fails = true;
    let v = gate(&s).review(&evict("etcd-0")).await;
    assert_eq!(v.reason(), "CannotDecide", "{v:?}");
    assert!(
        v.message().contains("connection refused"),
        "{}",
        v.message()
    );
}

/// kubectl raft drain waits for a replacement to rejoin before the next member: so does the
/// gate. On 5 members the quorum arithmetic alone would let a second one go while the first
/// replacement still catches up, leaving no fault tolerance.
#[tokio::test(start_paused = true)]
async fn a_second_member_waits_until_the_first_ones_replacement_has_rejoined() {
    let s = Scripted::of(5);
    let g = gate(&s);
    assert!(g.review(&evict("etcd-0")).await.allowed());
    s.replaced_unready("etcd-0");
    let v = g.review(&evict("etcd-3")).await;
    assert_eq!(v.reason(), "Rejoining", "{v:?}");
}

#[tokio::test(start_paused = true)]
async fn a_rejoined_replacement_lets_the_next_member_go() {
    let s = Scripted::of(5);
    let g = gate(&s);
    assert!(g.review(&evict("etcd-0")).await.allowed());
    s.replaced("etcd-0");
    assert!(g.review(&evict("etcd-3")).await.allowed());
}

/// The lock holder decided on a look of its own, which may predate the gate's last admission:
/// its eviction waits while another member is on its way out.
#[tokio::test(start_paused = true)]
async fn the_lock_holders_eviction_waits_for_one_the_gate_just_admitted() {
    let s = Scripted::new();
    let g = gate(&s);
    assert!(g.review(&evict("etcd-0")).await.allowed());
    let holder = "alice@laptop pid 7 started 1 (kubectl raft drain n3)";
    *s.lock.lock().unwrap() = Some(holder.into());
    let mut req = evict("etcd-2");
    req.lock_holder = Some(holder.into());
    let v = g.review(&req).await;
    assert!(!v.allowed(), "{v:?}");
}

#[tokio::test(start_paused = true)]
async fn the_lock_holders_eviction_is_recorded_for_the_gates_next_decision() {
    let s = Scripted::new();
    let g = gate(&s);
    let holder = "alice@laptop pid 7 started 1 (kubectl raft drain n1)";
    *s.lock.lock().unwrap() = Some(holder.into());
    let mut req = evict("etcd-0");
    req.lock_holder = Some(holder.into());
    assert!(g.review(&req).await.allowed());
    *s.lock.lock().unwrap() = None;
    assert!(!g.review(&evict("etcd-2")).await.allowed());
}

#[tokio::test(start_paused = true)]
async fn a_failed_transfer_is_not_tried_again_on_every_retry() {
    let s = Scripted::new();
    let g = gate(&s);
    g.review(&evict("etcd-1")).await;
    s.finish_transfer(false);
    let v = g.review(&evict("etcd-1")).await;
    assert_eq!(v.reason(), "TransferBackoff", "{v:?}");
    assert_eq!(s.transfers.lock().unwrap().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_failed_transfer_is_tried_again_after_the_backoff() {
    let s = Scripted::new();
    let g = gate(&s);
    g.review(&evict("etcd-1")).await;
    s.finish_transfer(false);
    let wait = g.settings.transfer_backoff + Duration::from_secs(1);
    pass(&s, wait).await;
    let v = g.review(&evict("etcd-1")).await;
    assert_eq!(v.reason(), "TransferStarted", "{v:?}");
    assert_eq!(s.transfers.lock().unwrap().len(), 2);
}

/// Whoever asks (a forged review too), a cluster's leadership moves at most once per backoff:
/// a transfer that ended is not followed at once by another.
#[tokio::test(start_paused = true)]
async fn leadership_is_not_moved_again_moments_after_a_transfer() {
    let s = Scripted::new();
    let g = gate(&s);
    g.review(&evict("etcd-1")).await;
    s.finish_transfer(true);
    let new = s.transfers.lock().unwrap()[0].1.clone().unwrap();
    let v = g.review(&evict(&new)).await;
    assert_eq!(v.reason(), "TransferBackoff", "{v:?}");
    assert_eq!(s.transfers.lock().unwrap().len(), 1);
}

/// A `kubectl raft drain` takes the lock while the gate decides (after its first look at the
/// lock): the drain's look may predate this admission, so the gate does not admit beside it.
#[tokio::test(start_paused = true)]
async fn a_lock_taken_while_the_gate_decides_refuses_the_eviction() {
    let s = Scripted::new();
    *s.lock_taken_at_call.lock().unwrap() =
        Some((2, "bob@desk pid 9 started 2 (kubectl raft drain n3)".into()));
    let v = gate(&s).review(&evict("etcd-0")).await;
    assert_eq!(v.reason(), "LockHeld", "{v:?}");
}

/// A system whose voters can only be counted from its pods (spurctld, a Keeper whose
/// configuration was not read): the gate refuses, as `drain` does without its flag.
fn counted_from_pods() -> Scripted {
    let s = Scripted::new();
    s.report.lock().unwrap().summary.voters_from = crate::report::VotersFrom::Pods;
    s
}

#[tokio::test(start_paused = true)]
async fn voters_counted_from_pods_are_refused_without_the_owners_assumption() {
    let s = counted_from_pods();
    let v = gate(&s).review(&evict("etcd-0")).await;
    assert_eq!(v.reason(), "MembershipUnknown", "{v:?}");
    assert!(
        v.message()
            .contains("annotates the StatefulSet kubectl-raft.io/gate-assume=voters-are-pods"),
        "{v:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn the_owners_assumption_lets_a_follower_of_a_pod_counted_cluster_go() {
    let mut s = counted_from_pods();
    s.assume = Some("voters-are-pods".into());
    let v = gate(&s).review(&evict("etcd-0")).await;
    assert!(v.allowed(), "{v:?}");
}

/// The assumption lifts only what it names: a hung member still stops the eviction.
#[tokio::test(start_paused = true)]
async fn the_owners_assumption_does_not_lift_the_quorum() {
    let mut s = counted_from_pods();
    s.assume = Some("voters-are-pods, followers-current".into());
    s.hang("etcd-2");
    let v = gate(&s).review(&evict("etcd-0")).await;
    assert!(!v.allowed(), "{v:?}");
    assert!(v.message().contains("healthy voter"), "{v:?}");
}

#[tokio::test(start_paused = true)]
async fn an_assumption_the_gate_does_not_know_is_refused_and_named() {
    let mut s = counted_from_pods();
    s.assume = Some("voters-are-pods,everything".into());
    let v = gate(&s).review(&evict("etcd-0")).await;
    assert_eq!(v.reason(), "CannotDecide", "{v:?}");
    assert!(v.message().contains("\"everything\""), "{v:?}");
}

/// A member list that exists but could not be read this time is not replaced by the owner's
/// standing assumption: it would outlive the failure.
#[tokio::test(start_paused = true)]
async fn the_owners_assumption_does_not_cover_an_unreadable_member_list() {
    let mut s = counted_from_pods();
    s.report.lock().unwrap().summary.voters_from = crate::report::VotersFrom::Unreadable;
    s.assume = Some("voters-are-pods".into());
    let v = gate(&s).review(&evict("etcd-0")).await;
    assert_eq!(v.reason(), "MembershipUnknown", "{v:?}");
    assert!(!v.message().contains("gate-assume"), "{v:?}");
}

/// A tenant's mistyped annotation never holds back the lock holder's own evictions (an
/// admin's `kubectl raft drain`).
#[tokio::test(start_paused = true)]
async fn a_mistyped_assumption_does_not_hold_back_the_lock_holders_eviction() {
    let mut s = Scripted::new();
    s.assume = Some("voters-are-pod".into());
    let req = holding(&s, "etcd-0");
    let v = gate(&s).review(&req).await;
    assert!(v.allowed(), "{v:?}");
}

// The fourth pass (#38): each of these failed on the code before it.

/// Moves a member onto a node (two members of one cluster on the drained node).
fn place(s: &Scripted, pod: &str, node: &str) {
    let mut r = s.report.lock().unwrap();
    r.replicas.iter_mut().find(|x| x.pod == pod).unwrap().node = Some(node.into());
}

/// Two members on the drained node, the other one hangs after the holder's look: the holder's
/// eviction is not its plan's first step (the hung one is), and a later step assumes the one
/// before it came back healthy. Admitting it left the leader alone (#38, item 1).
#[tokio::test(start_paused = true)]
async fn the_lock_holders_eviction_is_admitted_only_as_the_plans_first_step() {
    let s = Scripted::new();
    place(&s, "etcd-2", "n1");
    let req = holding(&s, "etcd-0");
    s.hang("etcd-2");
    let v = gate(&s).review(&req).await;
    assert!(!v.allowed(), "{v:?}");
    assert!(
        s.record.lock().unwrap().admitted.is_empty(),
        "nothing admitted"
    );
}

/// Marks a member's own readiness check (NATS's full /healthz: every stream current) failing.
fn not_ready_yet(s: &Scripted, pod: &str) {
    let mut r = s.report.lock().unwrap();
    let x = r.replicas.iter_mut().find(|x| x.pod == pod).unwrap();
    x.raft.readiness = Some(crate::report::Check {
        state: CheckState::Failing,
        detail: "JetStream stream ORDERS is not current".into(),
    });
}

/// A replacement that is a healthy voter but whose system's readiness check still fails (its
/// streams catching up) has not rejoined, as `drain` judges it (#38, item 2).
#[tokio::test(start_paused = true)]
async fn a_replacement_whose_readiness_check_fails_has_not_rejoined() {
    let s = Scripted::of(5);
    let g = gate(&s);
    assert!(g.review(&evict("etcd-0")).await.allowed());
    s.replaced("etcd-0");
    not_ready_yet(&s, "etcd-0");
    let v = g.review(&evict("etcd-3")).await;
    assert_eq!(v.reason(), "Rejoining", "{v:?}");
}

/// An etcd of five, etcd-1 leading, etcd-4 a learner (a Consul read replica, a ZooKeeper
/// observer).
fn with_a_learner() -> Scripted {
    let s = Scripted::of(5);
    {
        let mut r = s.report.lock().unwrap();
        let x = &mut r.replicas[4];
        x.raft.role = Role::Learner;
        x.raft.learner = true;
        r.summary.voters = 4;
        r.summary.healthy_voters = 4;
        r.summary.quorum = 3;
        r.summary.fault_tolerance = 1;
    }
    s
}

/// A non-voter's replacement rejoins as a non-voter: the next member's eviction goes. Before,
/// only a healthy voter counted as rejoined, and every later eviction of the cluster was
/// refused until someone deleted the record (#38, item 2, the Consul stand-in's case).
#[tokio::test(start_paused = true)]
async fn a_non_voters_replacement_rejoins_as_a_non_voter() {
    let s = with_a_learner();
    let g = gate(&s);
    assert!(g.review(&evict("etcd-4")).await.allowed());
    s.replaced("etcd-4");
    let v = g.review(&evict("etcd-0")).await;
    assert!(v.allowed(), "{v:?}");
}

/// Positive control of the case above: a non-voter whose replacement is not healthy yet is
/// still waited for.
#[tokio::test(start_paused = true)]
async fn a_non_voters_replacement_that_is_not_healthy_is_waited_for() {
    let s = with_a_learner();
    let g = gate(&s);
    assert!(g.review(&evict("etcd-4")).await.allowed());
    s.replaced_unready("etcd-4");
    let v = g.review(&evict("etcd-0")).await;
    assert_eq!(v.reason(), "Rejoining", "{v:?}");
}

/// A voter that comes back a non-voter has not rejoined.
#[tokio::test(start_paused = true)]
async fn a_voters_replacement_back_as_a_non_voter_has_not_rejoined() {
    let s = Scripted::of(5);
    let g = gate(&s);
    assert!(g.review(&evict("etcd-0")).await.allowed());
    s.replaced("etcd-0");
    {
        let mut r = s.report.lock().unwrap();
        r.replicas[0].raft.role = Role::Learner;
        r.replicas[0].raft.learner = true;
    }
    let v = g.review(&evict("etcd-3")).await;
    assert_eq!(v.reason(), "Rejoining", "{v:?}");
}

/// The replacement that has not rejoined is itself evicted, and that eviction never takes
/// effect (a PDB refused it, or a replayed review): its obligation to rejoin stays; before,
/// the admission replaced it with a 30-second pending entry, and on five members the next one
/// went while the first replacement still caught up (#38, item 3).
#[tokio::test(start_paused = true)]
async fn a_replacements_own_eviction_does_not_lift_its_obligation_to_rejoin() {
    let s = Scripted::of(5);
    let g = gate(&s);
    assert!(g.review(&evict("etcd-0")).await.allowed());
    s.replaced_unready("etcd-0");
    let _ = g.review(&evict("etcd-0")).await;
    tokio::time::advance(g.settings.admitted_for + Duration::from_secs(1)).await;
    s.tick(g.settings.admitted_for.as_secs_f64() + 1.0);
    let v = g.review(&evict("etcd-3")).await;
    assert_eq!(v.reason(), "Rejoining", "{v:?}");
}

/// A record written by a newer gate (a field this one does not know, or a higher format) is
/// refused, never read as what this one understands and written back without it.
#[test]
fn a_record_of_a_newer_gate_is_not_read() {
    let newer = r#"{"format":1,"admitted":[],"holds":[{"pod":"etcd-0"}]}"#;
    assert!(Record::parse(newer).is_err());
    let higher = r#"{"format":2,"admitted":[]}"#;
    assert!(Record::parse(higher).unwrap_err().contains("format 2"));
    let older = r#"{"admitted":[{"pod":"etcd-0","uid":"u","at":1.5}]}"#;
    let r = Record::parse(older).unwrap();
    assert_eq!(r.admitted[0].voter, None, "judged by what it is now");
}

/// What a gate writes it reads back whole.
#[test]
fn a_record_reads_back_as_written() {
    let r = Record {
        admitted: vec![Admitted {
            pod: "etcd-4".into(),
            uid: Some("u".into()),
            at: 2.0,
            voter: Some(false),
            since: Some(1.0),
            stalled: true,
        }],
        ..Default::default()
    };
    let back = Record::parse(&r.to_text()).unwrap();
    assert_eq!(back.admitted, r.admitted);
    assert_eq!(back.format, RECORD_FORMAT);
}

/// The record's own rule for a retry: the same pod under the same UID is one entry, and it
/// keeps the time of its first admission (`since`), so that retries and replays do not start
/// again the bound on how long they hold the others.
#[test]
fn a_retried_admission_is_one_entry_that_keeps_its_first_time() {
    let uid = Some("u1".to_string());
    let mut r = Record::default();
    r.admit("etcd-1", uid.as_ref(), 10.0, true, false);
    let again = r.admit("etcd-1", uid.as_ref(), 40.0, true, false);
    assert_eq!(r.admitted.len(), 1, "{:?}", r.admitted);
    assert_eq!((again.at, again.since), (40.0, Some(10.0)));
    // The lock holder's own retries are its command's: they carry no `since`.
    let holders = r.admit("etcd-1", uid.as_ref(), 70.0, true, true);
    assert_eq!(holders.since, None);
}

/// The record's own rule for a replacement evicted in turn: its predecessor's obligation to
/// rejoin stays (the earliest, as a voter if any was one), beside the new admission.
#[test]
fn a_replacements_admission_keeps_its_predecessors_obligation() {
    let mut r = Record::default();
    r.admit("etcd-1", Some(&"u1".to_string()), 10.0, true, false);
    r.admit("etcd-1", Some(&"u2".to_string()), 20.0, false, false);
    r.admit("etcd-1", Some(&"u3".to_string()), 30.0, false, false);
    let kept: Vec<_> = r
        .admitted
        .iter()
        .map(|a| (a.uid.clone().unwrap(), a.at, a.voter))
        .collect();
    assert_eq!(
        kept,
        [
            ("u1".to_string(), 10.0, Some(true)),
            ("u3".to_string(), 30.0, Some(false))
        ]
    );
}

/// Found by mutation testing (#40): the merged obligation is held as a voter when any of the
/// merged ones was, though the earliest (whose time it keeps) was a non-voter's.
#[test]
fn merged_obligations_are_held_as_a_voters_if_any_was_though_the_first_was_not() {
    let mut r = Record::default();
    r.admit("etcd-1", Some(&"u1".to_string()), 10.0, false, false);
    r.admit("etcd-1", Some(&"u2".to_string()), 20.0, true, false);
    r.admit("etcd-1", Some(&"u3".to_string()), 30.0, false, false);
    let merged = r.admitted.iter().find(|a| a.at == 10.0).expect("u1's time");
    assert_eq!(merged.voter, Some(true), "{:?}", r.admitted);
}

/// Found by mutation testing (#40): obligations that were all a non-voter's stay a
/// non-voter's when merged (a learner's replacement evicted again rejoins as a learner).
#[test]
fn merged_obligations_of_a_non_voter_only_stay_a_non_voters() {
    let mut r = Record::default();
    r.admit("etcd-3", Some(&"u1".to_string()), 10.0, false, false);
    r.admit("etcd-3", Some(&"u2".to_string()), 20.0, false, false);
    r.admit("etcd-3", Some(&"u3".to_string()), 30.0, true, false);
    let merged = r.admitted.iter().find(|a| a.at == 10.0).expect("u1's time");
    assert_eq!(merged.voter, Some(false), "{:?}", r.admitted);
}

/// A `kubectl raft restart` brings each member back onto its node: the second of two members
/// that share a node is the holder's next eviction once the first is back, not held behind
/// the first by a plan of the whole node.
#[tokio::test(start_paused = true)]
async fn the_lock_holders_restart_of_two_members_on_one_node_goes_on() {
    let s = Scripted::of(5);
    place(&s, "etcd-3", "n1");
    let g = gate(&s);
    assert!(g.review(&holding(&s, "etcd-0")).await.allowed());
    s.replaced("etcd-0");
    let v = g.review(&holding(&s, "etcd-3")).await;
    assert!(v.allowed(), "{v:?}");
}

/// A replacement that never rejoins, evicted again and again (a descheduler): its record stays
/// one obligation and one pending entry, not one entry per eviction.
#[tokio::test(start_paused = true)]
async fn a_replacement_evicted_again_and_again_keeps_the_record_bounded() {
    let s = Scripted::of(5);
    let g = gate(&s);
    assert!(g.review(&evict("etcd-0")).await.allowed());
    for round in 0..5 {
        s.uids
            .lock()
            .unwrap()
            .insert("etcd-0".into(), format!("etcd-0-r{round}"));
        s.hang("etcd-0");
        assert!(g.review(&evict("etcd-0")).await.allowed());
    }
    let admitted = s.record.lock().unwrap().admitted.clone();
    assert_eq!(admitted.len(), 2, "{admitted:?}");
    assert_eq!(g.review(&evict("etcd-3")).await.reason(), "Rejoining");
}

/// A record written by a gate before `voter` was recorded: a learner's replacement that is a
/// healthy learner counts as rejoined (judged by what it is now), not held for ever.
#[tokio::test(start_paused = true)]
async fn an_older_records_learner_entry_is_judged_by_what_it_is_now() {
    let s = with_a_learner();
    *s.record.lock().unwrap() = Record {
        admitted: vec![Admitted {
            pod: "etcd-4".into(),
            uid: Some("uid-4".into()),
            at: 999_990.0,
            voter: None,
            since: None,
            stalled: false,
        }],
        version: Some("7".into()),
        ..Default::default()
    };
    s.replaced("etcd-4");
    let v = gate(&s).review(&evict("etcd-0")).await;
    assert!(v.allowed(), "{v:?}");
}

/// A review for a namespace the gate's webhook does not select (the API server never sent it:
/// anyone who reaches the port posted it): allowed, and nothing done: no transfer of its
/// leader, no record.
#[tokio::test(start_paused = true)]
async fn a_review_of_a_namespace_that_never_opted_in_does_nothing() {
    let mut s = Scripted::new();
    s.not_sent = Some("namespace db is not selected by webhook kubectl-raft-gate".into());
    let v = gate(&s).review(&evict("etcd-1")).await;
    assert!(v.allowed(), "{v:?}");
    assert!(s.transfers.lock().unwrap().is_empty(), "no transfer");
    assert!(s.record.lock().unwrap().version.is_none(), "no record");
}

/// A review of the leader's eviction, posted by whoever reaches the gate's port, for a member
/// whose node nobody drains: refused, no transfer started, nothing recorded. (Before, any such
/// review moved the leader of any recognised cluster of an opted-in namespace.)
#[tokio::test(start_paused = true)]
async fn a_leaders_eviction_from_a_node_not_being_drained_starts_no_transfer() {
    let s = Scripted::new();
    s.undrained.lock().unwrap().insert("n2".into());
    let v = gate(&s).review(&evict("etcd-1")).await;
    assert_eq!(v.reason(), "NotDraining", "{v:?}");
    assert!(
        v.message().contains("node n2 is not being drained"),
        "{v:?}"
    );
    assert!(s.transfers.lock().unwrap().is_empty(), "no transfer");
    assert!(s.record.lock().unwrap().version.is_none(), "no record");
}

/// The same for a follower: refused and not recorded, so a posted review cannot hold the
/// cluster's other evictions back for the 30 s an admitted one counts as terminating.
#[tokio::test(start_paused = true)]
async fn a_followers_eviction_from_a_node_not_being_drained_writes_no_record() {
    let s = Scripted::new();
    s.undrained.lock().unwrap().insert("n1".into());
    let v = gate(&s).review(&evict("etcd-0")).await;
    assert_eq!(v.reason(), "NotDraining", "{v:?}");
    assert!(s.record.lock().unwrap().version.is_none(), "no record");
}

/// Positive control of the two above: the same follower's node cordoned, its eviction is
/// admitted and recorded.
#[tokio::test(start_paused = true)]
async fn a_followers_eviction_from_a_cordoned_node_is_admitted_and_recorded() {
    let s = Scripted::new();
    let v = gate(&s).review(&evict("etcd-0")).await;
    assert!(v.allowed(), "{v:?}");
    assert_eq!(s.record.lock().unwrap().admitted.len(), 1);
}

/// A pod of a StatefulSet no profile recognises (a database beside the Raft clusters of an
/// opted-in namespace) is not the gate's: its eviction is allowed from any node (the
/// descheduler's, say). (Found by a reviewer: the first version of the node check came before
/// the look, and refused it.)
#[tokio::test(start_paused = true)]
async fn a_pod_of_no_raft_cluster_is_allowed_from_a_node_not_being_drained() {
    let mut s = Scripted::new();
    s.not_raft = true;
    s.undrained.lock().unwrap().insert("n1".into());
    let v = gate(&s).review(&evict("etcd-0")).await;
    assert_eq!(v.reason(), "Allowed", "{v:?}");
}

/// `kubectl raft restart` drains no node: its evictions, sent as the lock's holder, are
/// decided as before.
#[tokio::test(start_paused = true)]
async fn the_lock_holders_eviction_needs_no_node_being_drained() {
    let s = Scripted::new();
    s.undrained.lock().unwrap().insert("n1".into());
    let req = holding(&s, "etcd-0");
    let v = gate(&s).review(&req).await;
    assert!(v.allowed(), "{v:?}");
}

/// `kubectl drain --dry-run=server` cordons nothing: its dry runs are answered as before (the
/// leader's with the warning of the transfer a real eviction would start).
#[tokio::test(start_paused = true)]
async fn a_dry_run_needs_no_node_being_drained() {
    let s = Scripted::new();
    s.undrained.lock().unwrap().insert("n2".into());
    let mut req = evict("etcd-1");
    req.dry_run = true;
    let v = gate(&s).review(&req).await;
    assert_eq!(v.reason(), "WouldTransfer", "{v:?}");
    assert!(s.transfers.lock().unwrap().is_empty(), "no transfer");
}

#[test]
fn a_cordoned_node_is_being_drained() {
    assert_eq!(
        being_drained(&a_node("n1", true, &[]), &[]).as_deref(),
        Some("cordoned")
    );
}

#[test]
fn a_node_tainted_by_a_known_drainer_is_being_drained() {
    for key in DRAINERS_TAINTS {
        let n = a_node("n1", false, &["example.com/dedicated", key]);
        assert_eq!(
            being_drained(&n, &[]),
            Some(format!("tainted {key}")),
            "{key}"
        );
    }
}

#[test]
fn a_schedulable_node_with_other_taints_is_not_being_drained() {
    let n = a_node(
        "n1",
        false,
        &["example.com/dedicated", "node.kubernetes.io/not-ready"],
    );
    assert_eq!(being_drained(&n, &[]), None);
}

/// `--drain-taint`: a drainer the gate does not know, named by its taint.
#[test]
fn a_taint_named_by_the_admin_says_the_node_is_being_drained() {
    let n = a_node("n1", false, &["example.com/draining"]);
    assert_eq!(being_drained(&n, &[]), None);
    assert_eq!(
        being_drained(&n, &["example.com/draining".to_string()]).as_deref(),
        Some("tainted example.com/draining")
    );
}

/// A member whose Node is gone (deleted under it) is going anyway: decided as before.
#[tokio::test(start_paused = true)]
async fn a_member_whose_node_is_gone_is_decided_as_before() {
    let s = Scripted::new();
    s.undrained.lock().unwrap().insert("n1".into());
    s.gone.lock().unwrap().insert("n1".into());
    let v = gate(&s).review(&evict("etcd-0")).await;
    assert!(v.allowed(), "{v:?}");
}

/// Warn mode: an eviction from a node nobody drains is allowed, saying that enforce would
/// refuse it, and nothing acts.
#[tokio::test(start_paused = true)]
async fn warn_mode_says_it_would_refuse_an_eviction_from_a_node_not_being_drained() {
    let s = Scripted::new();
    s.undrained.lock().unwrap().insert("n2".into());
    let v = gate_in(&s, Mode::Warn).review(&evict("etcd-1")).await;
    assert!(v.allowed(), "{v:?}");
    assert_eq!(v.reason(), "NotDraining", "{v:?}");
    assert!(s.transfers.lock().unwrap().is_empty(), "no transfer");
}

/// A review for a member on a node nobody drains is answered before the cluster's decision
/// slot is taken: a real eviction decided meanwhile is not refused `Busy` because of it.
#[tokio::test(start_paused = true)]
async fn a_review_from_a_node_not_being_drained_does_not_hold_the_clusters_decision() {
    let mut s = Scripted::new();
    s.look_takes = Duration::from_secs(1);
    s.undrained.lock().unwrap().insert("n2".into());
    let g = gate(&s);
    let (forged, real) = (evict("etcd-1"), evict("etcd-0"));
    let (forged, real) = tokio::join!(g.review(&forged), g.review(&real));
    assert_eq!(forged.reason(), "NotDraining", "{forged:?}");
    assert!(real.allowed(), "{real:?}");
}

fn gate_in(s: &Scripted, mode: Mode) -> Gate<&Scripted> {
    let mut g = gate(s);
    g.settings.mode = mode;
    g
}

/// Warn mode, a trial: what enforce refuses (a hung member: the quorum at risk) is allowed,
/// with the refusal as its warning, and nothing is recorded.
#[tokio::test(start_paused = true)]
async fn warn_mode_allows_what_enforce_refuses_and_says_the_refusal() {
    let s = Scripted::new();
    s.hang("etcd-2");
    let v = gate_in(&s, Mode::Warn).review(&evict("etcd-0")).await;
    assert!(v.allowed(), "{v:?}");
    let Verdict::Would {
        code,
        message,
        warn,
    } = &v
    else {
        panic!("{v:?}")
    };
    assert_eq!(*code, Code::Blocked(BlockReason::QuorumAtRisk));
    assert!(*warn);
    assert!(
        message.starts_with("kubectl-raft gate (warn mode) would refuse this eviction: "),
        "{message}"
    );
    assert!(
        s.record.lock().unwrap().version.is_none(),
        "nothing recorded"
    );
}

/// Positive control of the trial: the same eviction in enforce mode is refused.
#[tokio::test(start_paused = true)]
async fn enforce_mode_refuses_what_warn_mode_lets_through() {
    let s = Scripted::new();
    s.hang("etcd-2");
    let v = gate_in(&s, Mode::Enforce).review(&evict("etcd-0")).await;
    assert_eq!(v.reason(), "QuorumAtRisk", "{v:?}");
    assert!(!v.allowed());
}

/// Warn mode starts no transfer: the leader's eviction is allowed, saying the transfer
/// enforce would start first.
#[tokio::test(start_paused = true)]
async fn warn_mode_starts_no_transfer() {
    let s = Scripted::new();
    let v = gate_in(&s, Mode::Warn).review(&evict("etcd-1")).await;
    assert!(v.allowed(), "{v:?}");
    assert_eq!(v.reason(), "WouldTransfer", "{v:?}");
    assert!(v.message().contains("would start a transfer to"), "{v:?}");
    assert!(s.transfers.lock().unwrap().is_empty(), "no transfer");
    assert!(
        s.record.lock().unwrap().version.is_none(),
        "nothing recorded"
    );
}

/// Audit mode: the same, without the admission warning.
#[tokio::test(start_paused = true)]
async fn audit_mode_allows_without_a_warning() {
    let s = Scripted::new();
    s.hang("etcd-2");
    let v = gate_in(&s, Mode::Audit).review(&evict("etcd-0")).await;
    assert!(
        matches!(&v, Verdict::Would { warn: false, message, .. } if message.contains("(audit mode)")),
        "{v:?}"
    );
}

/// Found by mutation testing (#40), `Mode::answer` alone: in warn mode a leader's real
/// eviction is answered with the refusal enforce would make (a transfer first), as a warning.
#[test]
fn warn_mode_answers_a_leaders_real_eviction_with_what_enforce_would_refuse() {
    let v = Mode::Warn.answer(Verdict::Warn(Code::WouldTransfer, "m".into()), false);
    assert_eq!(
        v,
        Verdict::Would {
            code: Code::WouldTransfer,
            message: "kubectl-raft gate (warn mode) would refuse this eviction: m".into(),
            warn: true
        }
    );
}

/// ... and a dry run's warning (what a real eviction would meet) is passed on as it is.
#[test]
fn warn_mode_passes_a_dry_runs_warning_on_as_it_is() {
    let warning = Verdict::Warn(Code::WouldTransfer, "m".into());
    assert_eq!(Mode::Warn.answer(warning.clone(), true), warning);
}

/// Audit mode says nothing to the evictor: a dry run's warning becomes a plain admission.
#[test]
fn audit_mode_answers_a_dry_runs_warning_with_a_plain_admission() {
    let warning = Verdict::Warn(Code::Blocked(BlockReason::QuorumAtRisk), "m".into());
    assert_eq!(
        Mode::Audit.answer(warning, true),
        Verdict::Allow("m".into())
    );
}

/// ... and a leader's real eviction is what enforce would refuse, without a warning.
#[test]
fn audit_mode_answers_a_leaders_real_eviction_without_a_warning() {
    let v = Mode::Audit.answer(Verdict::Warn(Code::WouldTransfer, "m".into()), false);
    assert!(
        matches!(
            &v,
            Verdict::Would {
                code: Code::WouldTransfer,
                warn: false,
                ..
            }
        ),
        "{v:?}"
    );
}

/// Found by mutation testing (#40): where `drain` would need --assume-followers-current, the
/// gate's refusal names the owner's annotation that says it instead.
#[test]
fn a_refusal_for_unknown_liveness_names_the_annotation_that_assumes_it() {
    let b = crate::plan::drain::Blocker {
        reason: BlockReason::LivenessUnknown,
        pod: None,
        message: "m".into(),
    };
    let v = refused(b, false);
    assert_eq!(
        v.message(),
        "m (for the gate, its owner annotates the StatefulSet kubectl-raft.io/gate-assume=followers-current)"
    );
}

/// A trial mode admits a follower's eviction as enforce would, and records nothing: a trial
/// never holds the next eviction back.
#[tokio::test(start_paused = true)]
async fn a_trial_records_no_admission() {
    let s = Scripted::new();
    let v = gate_in(&s, Mode::Audit).review(&evict("etcd-0")).await;
    assert_eq!(v.reason(), "Allowed", "{v:?}");
    assert!(
        s.record.lock().unwrap().version.is_none(),
        "nothing recorded"
    );
}

/// The judge alone, on gathered facts (no reads, no writes): a three-member etcd led by
/// etcd-0, member N on node nN with UID uid-N; the eviction of `pod` from its node.
fn judged(pod: &str, record: &Record, rejoining: &[String], age: Duration) -> Judged {
    judged_as(pod, record, rejoining, age, false, |_| {})
}

/// The leader etcd-0's eviction where this replica's own last transfer, from `from`, began
/// `ago` and failed; the record holds no transfer.
fn judged_after_my_failed_transfer(from: &str, ago: Duration) -> Judged {
    let mine = Transfer {
        from: from.into(),
        to: None,
        record_at: 1.0,
        started: Instant::now() - ago,
        ended: Some(Err("etcd-1 did not take over".into())),
    };
    let mut report = cluster(&[m(Role::Leader), m(Role::Follower), m(Role::Follower)]);
    report.summary.leader = Some("etcd-0".into());
    let pods = (0..3)
        .map(|i| crate::drain::fixtures::pod(&format!("etcd-{i}"), Some(&format!("uid-{i}"))))
        .collect();
    let look = crate::drain::fixtures::look(report, pods, true);
    let member = Member {
        namespace: "db".into(),
        name: "etcd".into(),
        pod: "etcd-0".into(),
        uid: Some("uid-0".into()),
        node: Some("n0".into()),
    };
    let settings = Settings::default();
    let age = |_: String| Duration::ZERO;
    judge(&Case {
        cluster: "db/etcd",
        member: &member,
        look: &look,
        record: &Record::default(),
        rejoining: &[],
        mine: Some(&mine),
        age: &age,
        settings: &settings,
        quiet: false,
        by_holder: false,
        opts: DrainOptions {
            nodes: BTreeSet::from(["n0".to_string()]),
            ..settings.opts.clone()
        },
    })
}

/// The lock holder's eviction of `pod`, judged on the look as `edit` leaves it.
fn holders_judged(pod: &str, edit: impl Fn(&mut Look)) -> Judged {
    judged_as(pod, &Record::default(), &[], Duration::ZERO, true, edit)
}

fn judged_as(
    pod: &str,
    record: &Record,
    rejoining: &[String],
    age: Duration,
    by_holder: bool,
    edit: impl Fn(&mut Look),
) -> Judged {
    let mut report = cluster(&[m(Role::Leader), m(Role::Follower), m(Role::Follower)]);
    report.summary.leader = Some("etcd-0".into());
    let pods = (0..3)
        .map(|i| crate::drain::fixtures::pod(&format!("etcd-{i}"), Some(&format!("uid-{i}"))))
        .collect();
    let mut look = crate::drain::fixtures::look(report, pods, true);
    edit(&mut look);
    let i = pod.trim_start_matches("etcd-");
    let member = Member {
        namespace: "db".into(),
        name: "etcd".into(),
        pod: pod.into(),
        uid: Some(format!("uid-{i}")),
        node: Some(format!("n{i}")),
    };
    let settings = Settings::default();
    let age = move |_: String| age;
    judge(&Case {
        cluster: "db/etcd",
        member: &member,
        look: &look,
        record,
        rejoining,
        mine: None,
        age: &age,
        settings: &settings,
        quiet: false,
        by_holder,
        opts: DrainOptions {
            nodes: BTreeSet::from([format!("n{i}")]),
            ..settings.opts.clone()
        },
    })
}

fn refusal_of(j: &Judged) -> Option<Code> {
    match j {
        Judged::Answer(Verdict::Refuse(c, _)) | Judged::Stall(Verdict::Refuse(c, _)) => Some(*c),
        _ => None,
    }
}

#[test]
fn the_judge_holds_the_others_while_a_replacement_rejoins() {
    let rejoining = ["etcd-1".to_string()];
    let j = judged("etcd-2", &Record::default(), &rejoining, Duration::ZERO);
    assert_eq!(refusal_of(&j), Some(Code::Rejoining), "{j:?}");
}

#[test]
fn the_judge_holds_the_cluster_while_its_recorded_transfer_runs() {
    let mut record = Record::default();
    record.begin_transfer("etcd-0", Some(&"etcd-1".to_string()), 1.0);
    let j = judged("etcd-2", &record, &[], Duration::ZERO);
    assert_eq!(refusal_of(&j), Some(Code::TransferInProgress), "{j:?}");
    // Past the transfer's timeout (by this replica's clock) it holds nothing.
    let j = judged("etcd-2", &record, &[], Duration::from_secs(61));
    assert!(matches!(j, Judged::Admit { .. }), "{j:?}");
}

/// Found by mutation testing (#40): the lock holder decided its eviction with its own flags,
/// which only the operator may give; the gate takes every one of them as given. Each test
/// below is one flag: the holder's eviction of a follower the gate's own evictors would be
/// refused is admitted.
fn admitted_for_the_holder(j: &Judged) -> bool {
    matches!(j, Judged::Admit { step, by_holder: true, .. } if step.pod == "etcd-1")
}

/// The five looks, one per flag: voters counted from pods, liveness unknown, etcd-1 with
/// emptyDir data, with hostPath data, and unable to come back on its node.
fn pods_counted(l: &mut Look) {
    l.input.report.summary.voters_from = crate::report::VotersFrom::Pods;
}
fn liveness_unknown(l: &mut Look) {
    l.input.liveness = crate::model::profile::Liveness::Unknown;
}
fn empty_dir(l: &mut Look) {
    l.input
        .empty_dirs
        .insert("etcd-1".into(), vec!["data".into()]);
}
fn host_path(l: &mut Look) {
    l.input
        .host_paths
        .insert("etcd-1".into(), vec!["data".into()]);
}
fn stuck(l: &mut Look) {
    let why = "its volume is pinned to n1".to_string();
    l.input.stuck.insert("etcd-1".into(), why);
}

#[test]
fn the_holders_eviction_counts_voters_from_pods_as_its_flag_said() {
    assert!(admitted_for_the_holder(&holders_judged(
        "etcd-1",
        pods_counted
    )));
}

#[test]
fn the_holders_eviction_takes_followers_as_current_as_its_flag_said() {
    assert!(admitted_for_the_holder(&holders_judged(
        "etcd-1",
        liveness_unknown
    )));
}

#[test]
fn the_holders_eviction_loses_emptydir_data_as_its_flag_said() {
    assert!(admitted_for_the_holder(&holders_judged(
        "etcd-1", empty_dir
    )));
}

#[test]
fn the_holders_eviction_leaves_hostpath_data_as_its_flag_said() {
    assert!(admitted_for_the_holder(&holders_judged(
        "etcd-1", host_path
    )));
}

#[test]
fn the_holders_eviction_goes_degraded_as_its_flag_said() {
    assert!(admitted_for_the_holder(&holders_judged("etcd-1", stuck)));
}

/// Positive control of the five: the gate's own evictor of the same follower, on the same
/// looks, is refused by each.
#[test]
fn the_gates_own_evictor_is_refused_where_the_holders_flags_admit() {
    let edits: [fn(&mut Look); 5] = [pods_counted, liveness_unknown, empty_dir, host_path, stuck];
    for (i, edit) in edits.into_iter().enumerate() {
        let j = judged_as(
            "etcd-1",
            &Record::default(),
            &[],
            Duration::ZERO,
            false,
            edit,
        );
        assert!(refusal_of(&j).is_some(), "edit {i}: {j:?}");
    }
}

/// `Record::settle` alone on the three-member look (etcd-N with uid-N, healthy), after `edit`
/// of its pods, every entry `age` old: the record kept, the members still rejoining, and
/// whether etcd-1 now counts as terminating (an admitted eviction under way).
fn settled(
    mut record: Record,
    edit: impl Fn(&mut Vec<Pod>),
    age: Duration,
) -> (Record, Vec<String>, bool) {
    let mut report = cluster(&[m(Role::Leader), m(Role::Follower), m(Role::Follower)]);
    report.summary.leader = Some("etcd-0".into());
    let mut pods = (0..3)
        .map(|i| crate::drain::fixtures::pod(&format!("etcd-{i}"), Some(&format!("uid-{i}"))))
        .collect();
    edit(&mut pods);
    let mut look = crate::drain::fixtures::look(report, pods, true);
    let age = move |_: String| age;
    let rejoining = record.settle(&mut look, "", &age, &Settings::default());
    let down = look
        .input
        .report
        .replicas
        .iter()
        .any(|x| x.pod == "etcd-1" && x.terminating);
    (record, rejoining, down)
}

fn admitted_etcd_1(uid: &str) -> Record {
    let mut r = Record::default();
    r.admit("etcd-1", Some(&uid.to_string()), 1.0, true, false);
    r
}

fn terminating(pods: &mut [Pod], name: &str, uid: &str) {
    let p = pods
        .iter_mut()
        .find(|p| p.metadata.name.as_deref() == Some(name))
        .unwrap();
    p.metadata.uid = Some(uid.into());
    p.metadata.deletion_timestamp =
        Some(serde_json::from_value(serde_json::json!("2026-01-01T00:00:00Z")).unwrap());
}

/// Found by mutation testing (#40), the boundary: an admitted eviction counts its member down
/// for `admitted_for`, and not at exactly that age.
#[test]
fn an_admission_exactly_admitted_for_old_no_longer_counts_its_member_down() {
    let d = Settings::default().admitted_for;
    let (_, _, down) = settled(
        admitted_etcd_1("uid-1"),
        |_| {},
        d - Duration::from_millis(1),
    );
    assert!(down, "within admitted_for");
    let (_, _, down) = settled(admitted_etcd_1("uid-1"), |_| {}, d);
    assert!(!down, "at admitted_for");
}

/// Found by mutation testing (#40), the boundary: a stalled entry is dropped at exactly twice
/// `admitted_for`.
#[test]
fn a_stalled_entry_is_dropped_at_exactly_twice_admitted_for() {
    let mut r = admitted_etcd_1("uid-1");
    r.admitted[0].stalled = true;
    let (kept, _, _) = settled(r, |_| {}, 2 * Settings::default().admitted_for);
    assert!(kept.admitted.is_empty(), "{:?}", kept.admitted);
}

/// Found by mutation testing (#40), the boundary: an entry that never took effect is
/// remembered for `remembered_for`, and dropped at exactly that age.
#[test]
fn an_entry_without_effect_is_dropped_at_exactly_remembered_for() {
    let (kept, _, _) = settled(
        admitted_etcd_1("uid-1"),
        |_| {},
        Settings::default().remembered_for(),
    );
    assert!(kept.admitted.is_empty(), "{:?}", kept.admitted);
}

/// Found by mutation testing (#40): a member evicted and not recreated yet (no pod of its
/// name) is waited for, holding the others ...
#[test]
fn a_member_with_no_pod_yet_is_waited_for() {
    let gone = |pods: &mut Vec<Pod>| pods.retain(|p| p.metadata.name.as_deref() != Some("etcd-1"));
    let (kept, rejoining, _) = settled(admitted_etcd_1("uid-1"), gone, Duration::ZERO);
    assert_eq!(rejoining, ["etcd-1"]);
    assert_eq!(kept.admitted.len(), 1);
}

/// ... for `rejoin_within`, and no longer at exactly that age.
#[test]
fn a_member_with_no_pod_for_exactly_rejoin_within_is_forgotten() {
    let gone = |pods: &mut Vec<Pod>| pods.retain(|p| p.metadata.name.as_deref() != Some("etcd-1"));
    let within = Settings::default().rejoin_within;
    let (kept, rejoining, _) = settled(admitted_etcd_1("uid-1"), gone, within);
    assert!(
        rejoining.is_empty() && kept.admitted.is_empty(),
        "{:?}",
        kept.admitted
    );
}

/// Found by mutation testing (#40): the admitted pod itself terminating keeps its entry, and
/// the planner counts it down from the pod (not as a replacement still to rejoin).
#[test]
fn the_admitted_pod_terminating_keeps_its_entry() {
    let (kept, rejoining, _) = settled(
        admitted_etcd_1("uid-1"),
        |pods| terminating(pods, "etcd-1", "uid-1"),
        Duration::ZERO,
    );
    assert_eq!(kept.admitted.len(), 1);
    assert!(rejoining.is_empty(), "{rejoining:?}");
}

/// Found by mutation testing (#40): a replacement (another UID) that rejoined healthy has met
/// its predecessor's obligation, terminating in turn or not: the entry goes.
#[test]
fn a_rejoined_replacement_terminating_in_turn_has_met_the_obligation() {
    let (kept, rejoining, _) = settled(
        admitted_etcd_1("uid-1"),
        |pods| terminating(pods, "etcd-1", "uid-9"),
        Duration::ZERO,
    );
    assert!(kept.admitted.is_empty(), "{:?}", kept.admitted);
    assert!(rejoining.is_empty(), "{rejoining:?}");
}

/// Found by mutation testing (#40): this replica's own failed transfer holds the next one
/// for `transfer_backoff` from its start, though the record no longer names it ...
#[tokio::test(start_paused = true)]
async fn my_failed_transfer_holds_the_next_for_its_backoff() {
    let j = judged_after_my_failed_transfer("etcd-0", Duration::ZERO);
    assert_eq!(refusal_of(&j), Some(Code::TransferBackoff), "{j:?}");
}

/// ... and no longer at exactly `transfer_backoff`.
#[tokio::test(start_paused = true)]
async fn my_failed_transfer_exactly_its_backoff_old_holds_nothing() {
    tokio::time::advance(Duration::from_secs(3600)).await;
    let backoff = Settings::default().transfer_backoff;
    let j = judged_after_my_failed_transfer("etcd-0", backoff);
    assert!(matches!(j, Judged::Transfer { .. }), "{j:?}");
}

/// Found by mutation testing (#40), the boundary: a transfer the record names, from a member
/// that no longer leads, holds the next one until exactly `transfer_backoff` of age.
#[test]
fn a_recorded_transfer_exactly_its_backoff_old_lets_the_next_begin() {
    let mut record = Record::default();
    record.begin_transfer("etcd-2", None, 1.0);
    let backoff = Settings::default().transfer_backoff;
    let j = judged("etcd-0", &record, &[], backoff - Duration::from_millis(1));
    assert_eq!(refusal_of(&j), Some(Code::TransferBackoff), "{j:?}");
    let j = judged("etcd-0", &record, &[], backoff);
    assert!(matches!(j, Judged::Transfer { .. }), "{j:?}");
}

/// Found by mutation testing (#40), the boundary: admitted without effect for exactly
/// `pending_at_most`, the member is stalled.
#[test]
fn admissions_without_effect_for_exactly_the_limit_are_stalled() {
    let mut record = Record::default();
    record.admit("etcd-1", Some(&"uid-1".to_string()), 1.0, true, false);
    let limit = Settings::default().pending_at_most;
    let j = judged("etcd-1", &record, &[], limit);
    assert!(matches!(j, Judged::Stall(_)), "{j:?}");
}

/// Found by mutation testing (#40): each transfer is aged on its own (by when this replica
/// first saw it), so that a new one never inherits an old one's age and counts as over.
#[test]
fn each_recorded_transfer_is_aged_on_its_own() {
    let mut record = Record::default();
    let a = record.begin_transfer("etcd-0", None, 1.0);
    let b = record.begin_transfer("etcd-0", None, 2.0);
    let c = record.begin_transfer("etcd-1", None, 1.0);
    assert_ne!(transfer_key(&a), transfer_key(&b));
    assert_ne!(transfer_key(&a), transfer_key(&c));
}

/// Found by mutation testing (#40), the boundary: at exactly `transfer_timeout` of age the
/// transfer no longer holds the cluster.
#[test]
fn a_recorded_transfer_exactly_its_timeout_old_holds_nothing() {
    let mut record = Record::default();
    record.begin_transfer("etcd-0", Some(&"etcd-1".to_string()), 1.0);
    let timeout = Settings::default().transfer_timeout;
    let j = judged("etcd-2", &record, &[], timeout);
    assert!(matches!(j, Judged::Admit { .. }), "{j:?}");
}

#[test]
fn the_judge_admits_the_first_follower_and_starts_the_leaders_transfer() {
    let j = judged("etcd-1", &Record::default(), &[], Duration::ZERO);
    assert!(
        matches!(&j, Judged::Admit { step, by_holder: false, .. } if step.pod == "etcd-1"),
        "{j:?}"
    );
    let j = judged("etcd-0", &Record::default(), &[], Duration::ZERO);
    assert!(
        matches!(&j, Judged::Transfer { step, .. } if step.pod == "etcd-0"),
        "{j:?}"
    );
}

/// A member admitted again and again without effect: the first refusal asks the commit to
/// mark it stalled; once marked, every refusal is an answer (nothing more to write).
#[test]
fn the_judge_marks_a_member_without_effect_once() {
    let mut record = Record::default();
    record.admit("etcd-1", Some(&"uid-1".to_string()), 1.0, true, false);
    let j = judged("etcd-1", &record, &[], Duration::from_secs(121));
    assert!(matches!(j, Judged::Stall(_)), "{j:?}");
    record.admitted[0].stalled = true;
    let j = judged("etcd-1", &record, &[], Duration::from_secs(121));
    assert!(
        matches!(j, Judged::Answer(Verdict::Refuse(Code::NoEffect, _))),
        "{j:?}"
    );
}

/// The leader's transfer is recorded as the review's time runs out (the API applied the write
/// and answers slowly): it is started all the same. Cut off there, the record named a transfer
/// nobody started, and every replica held the cluster's evictions for `transfer_timeout`.
#[tokio::test(start_paused = true)]
async fn a_transfer_recorded_as_time_runs_out_is_started() {
    let mut s = Scripted::new();
    s.look_takes = Duration::from_millis(1500);
    s.write_takes = Duration::from_millis(2000);
    let g = gate(&s);
    let a = g
        .review_by(&evict("etcd-1"), Instant::now(), Duration::from_secs(3))
        .await;
    let recorded = s.record.lock().unwrap().transfer.is_some();
    let started = s.transfers.lock().unwrap().len();
    assert_eq!((recorded, started), (true, 1), "{a:?}");
}

/// With less than `COMMIT_NEEDS` of its time left, the leader's eviction records nothing and
/// starts nothing: refused, to be retried.
#[tokio::test(start_paused = true)]
async fn a_leaders_eviction_with_too_little_time_left_records_no_transfer() {
    let mut s = Scripted::new();
    s.look_takes = Duration::from_millis(2500);
    let g = gate(&s);
    let a = g
        .review_by(&evict("etcd-1"), Instant::now(), Duration::from_secs(3))
        .await;
    assert_eq!(a.verdict.reason(), "CannotDecide", "{a:?}");
    assert!(s.record.lock().unwrap().transfer.is_none(), "{a:?}");
    assert!(s.transfers.lock().unwrap().is_empty(), "{a:?}");
}

/// Found by mutation testing (#40), the boundary: exactly `COMMIT_NEEDS` left is enough.
#[tokio::test(start_paused = true)]
async fn a_leaders_eviction_with_exactly_the_commits_time_left_starts_its_transfer() {
    let mut s = Scripted::new();
    s.look_takes = Duration::from_millis(2000);
    let g = gate(&s);
    let a = g
        .review_by(&evict("etcd-1"), Instant::now(), Duration::from_secs(3))
        .await;
    assert_eq!(s.transfers.lock().unwrap().len(), 1, "{a:?}");
}

/// A record write that hangs past the overrun is cut off: the review is answered in time
/// (a late answer is a 500 that makes kubectl drain give up).
#[tokio::test(start_paused = true)]
async fn a_transfers_record_write_that_hangs_is_cut_off_within_the_overrun() {
    let mut s = Scripted::new();
    s.look_takes = Duration::from_millis(1500);
    s.write_takes = Duration::from_secs(3600);
    let g = gate(&s);
    let began = Instant::now();
    let a = g
        .review_by(&evict("etcd-1"), began, Duration::from_secs(3))
        .await;
    assert_eq!(a.verdict.reason(), "CannotDecide", "{a:?}");
    assert!(began.elapsed() <= Duration::from_secs(3) + COMMIT_OVERRUN);
}

/// A webhook installed with `timeoutSeconds: 3` leaves a budget of 1 s: the leader's transfer
/// is still recorded and started (half the budget is enough).
#[tokio::test(start_paused = true)]
async fn a_one_second_budget_still_moves_the_leader() {
    let mut s = Scripted::new();
    s.look_takes = Duration::from_millis(200);
    let g = gate(&s);
    let a = g
        .review_by(&evict("etcd-1"), Instant::now(), Duration::from_secs(1))
        .await;
    assert_eq!(a.verdict.reason(), "TransferStarted", "{a:?}");
    assert_eq!(s.transfers.lock().unwrap().len(), 1);
}

/// The cluster's credentials cannot be read (its look is made without them, over its TLS):
/// the leader's transfer, sent with them, would fail at once; it is neither recorded nor
/// started, and the refusal says why.
#[tokio::test(start_paused = true)]
async fn a_leaders_eviction_whose_credentials_cannot_be_read_starts_no_transfer() {
    let mut s = Scripted::new();
    s.credentials_error = Some("secrets \"absent\" not found".into());
    let g = gate(&s);
    let v = g.review(&evict("etcd-1")).await;
    assert_eq!(v.reason(), "CannotDecide", "{v:?}");
    assert!(format!("{v:?}").contains("absent"), "{v:?}");
    assert!(s.record.lock().unwrap().transfer.is_none());
    assert!(s.transfers.lock().unwrap().is_empty());
}

/// Its followers are still decided on what the look says (the reads are truthful).
#[tokio::test(start_paused = true)]
async fn a_followers_eviction_is_decided_when_the_credentials_cannot_be_read() {
    let mut s = Scripted::new();
    s.credentials_error = Some("secrets \"absent\" not found".into());
    let g = gate(&s);
    let v = g.review(&evict("etcd-0")).await;
    assert_eq!(v.reason(), "Allowed", "{v:?}");
}

/// A lock holder's eviction from a node nobody drains, whose lock is released while it is
/// decided: answered as any such eviction, and not acted on (no Event, no held clock).
#[tokio::test(start_paused = true)]
async fn a_lock_holder_that_lost_its_lock_mid_decision_is_not_acted_on() {
    let mut s = Scripted::new();
    *s.lock.lock().unwrap() = Some("me@host".into());
    s.lock_released_at_call = Some(2);
    s.undrained.lock().unwrap().insert("n1".into());
    let g = gate(&s);
    let req = Request {
        lock_holder: Some("me@host".into()),
        ..evict("etcd-0")
    };
    let a = g
        .review_by(&req, Instant::now(), Duration::from_secs(8))
        .await;
    assert_eq!(a.verdict.reason(), "NotDraining", "{a:?}");
    assert!(!a.acted_on, "{a:?}");
}

/// A follower on the leader's node, when the credentials cannot be read: not let go (the
/// leader, next, could not be moved, and the drain would stop with the cluster one down).
#[tokio::test(start_paused = true)]
async fn a_follower_beside_a_leader_that_cannot_be_moved_is_not_let_go() {
    let mut s = Scripted::new();
    s.credentials_error = Some("secrets \"absent\" not found".into());
    s.report.lock().unwrap().replicas[0].node = Some("n2".into());
    let g = gate(&s);
    let v = g.review(&evict("etcd-0")).await;
    assert_eq!(v.reason(), "CannotDecide", "{v:?}");
    assert!(s.record.lock().unwrap().admitted.is_empty());
}

/// A dry run of the leader's eviction says what a real one would meet (not `WouldTransfer`).
#[tokio::test(start_paused = true)]
async fn a_dry_run_of_a_leader_that_cannot_be_moved_says_so() {
    let mut s = Scripted::new();
    s.credentials_error = Some("secrets \"absent\" not found".into());
    let g = gate(&s);
    let req = Request {
        dry_run: true,
        ..evict("etcd-1")
    };
    let v = g.review(&req).await;
    assert!(format!("{v:?}").contains("could not be read"), "{v:?}");
}
