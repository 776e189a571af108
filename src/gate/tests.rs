//! The gate against a scripted cluster that is not kind: a second evictor at the same moment,
//! a look that hangs, a member that hangs, a lock someone else holds, a leader that will not
//! let go.

use std::sync::Mutex;

use anyhow::anyhow;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::*;
use crate::model::{ClusterObservation, ClusterTarget, OwnerKind, Role};
use crate::plan::drain::{BlockReason, ClusterInput};
use crate::plan::tests::{cluster, m};
use crate::profile::Catalog;
use crate::report::{CheckState, ClusterReport};

struct Scripted {
    report: Mutex<ClusterReport>,
    /// Each pod's UID now (a replacement gets a new one).
    uids: Mutex<BTreeMap<String, String>>,
    lock: Mutex<Option<String>>,
    /// How long a look takes (a slow replica).
    look_takes: Duration,
    look_fails: bool,
    transfers: Mutex<Vec<(String, Option<String>, TransferSlot)>>,
    /// The shared record as the API keeps it, its version counted up on each write.
    record: Mutex<Record>,
    clock: Mutex<f64>,
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
            look_takes: Duration::ZERO,
            look_fails: false,
            transfers: Mutex::new(vec![]),
            record: Mutex::new(Record::default()),
            clock: Mutex::new(1_000_000.0),
        }
    }

    /// The member's pod is replaced: a new UID, and not (yet) a healthy voter.
    fn replaced_unready(&self, pod: &str) {
        self.uids
            .lock()
            .unwrap()
            .insert(pod.into(), format!("{pod}-new"));
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
            let mut r = self.report.lock().unwrap();
            for x in &mut r.replicas {
                x.raft.role = if x.pod == to {
                    Role::Leader
                } else {
                    Role::Follower
                };
            }
            r.summary.leader = Some(to.clone());
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

fn pod(name: &str, uid: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("db".into()),
            uid: Some(uid.into()),
            ..Default::default()
        },
        ..Default::default()
    }
}

impl GateOps for &Scripted {
    async fn member(&self, namespace: &str, pod: &str) -> Result<Option<Member>> {
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
        Ok(self.lock.lock().unwrap().clone())
    }

    async fn look(&self, _: &Member, _: &DrainOptions) -> Result<Option<Look>> {
        tokio::time::sleep(self.look_takes).await;
        if self.look_fails {
            return Err(anyhow!("replica etcd-2 did not answer: connection refused"));
        }
        let report = self.report.lock().unwrap().clone();
        let uids = self.uids.lock().unwrap().clone();
        let target = ClusterTarget {
            namespace: "db".into(),
            name: "etcd".into(),
            owner_kind: OwnerKind::StatefulSet,
            profile: Catalog::builtin().get("etcd").unwrap().clone(),
            desired_replicas: 3,
            pods: report
                .replicas
                .iter()
                .map(|x| pod(&x.pod, &uids[&x.pod]))
                .collect(),
            credentials_secret: None,
            named: false,
        };
        Ok(Some(Look {
            obs: ClusterObservation {
                target,
                replicas: vec![],
                members: None,
                credentials_error: None,
            },
            input: ClusterInput {
                report,
                can_transfer: true,
                target_needs_id: true,
                stuck: Default::default(),
                empty_dirs: Default::default(),
                host_paths: Default::default(),
                placement_unknown: None,
                replace: Default::default(),
                conflict: None,
                comes_back_at: Default::default(),
                liveness: crate::model::profile::Liveness::Health,
                least_voters: 0,
                configuration_seen: false,
                evicted_before: Default::default(),
                controller_rolling: None,
            },
        }))
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
        let mut stored = self.record.lock().unwrap();
        if stored.version != r.version {
            return Ok(Written::Conflict);
        }
        let next = stored
            .version
            .as_deref()
            .map_or(1, |v| v.parse::<u64>().unwrap() + 1);
        *stored = Record {
            version: Some(next.to_string()),
            ..r.clone()
        };
        Ok(Written::Done)
    }

    fn now(&self) -> f64 {
        *self.clock.lock().unwrap()
    }
}

fn evict(pod: &str) -> Request {
    Request {
        namespace: "db".into(),
        pod: pod.into(),
        ..Default::default()
    }
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
    s.tick(g.settings.admitted_for.as_secs_f64() + 1.0);
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

#[tokio::test(start_paused = true)]
async fn the_lock_holders_own_eviction_passes() {
    let s = Scripted::new();
    s.hang("etcd-2");
    let holder = "alice@laptop pid 7 (kubectl raft drain n1 --allow-degraded)";
    *s.lock.lock().unwrap() = Some(holder.into());
    let mut req = evict("etcd-0");
    req.lock_holder = Some(holder.into());
    assert!(gate(&s).review(&req).await.allowed());
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
    s.uids
        .lock()
        .unwrap()
        .insert("etcd-0".into(), "etcd-0-new".into());
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
    tokio::time::advance(wait).await;
    s.tick(wait.as_secs_f64());
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
