//! The eviction gate, as a library: one answer per eviction of a Raft member that any evictor
//! sends (plain `kubectl drain`, cluster-autoscaler, Karpenter, kured, a managed node upgrade),
//! decided the way `kubectl raft drain` decides its own.
//!
//! It decides nothing itself: `plan::drain::plan_cluster` does, on a fresh look at the member's
//! cluster with the member's node drained, exactly as `drain` would plan that node. The gate
//! only turns the plan's first step into an answer:
//!
//! - the member is the next to go (a follower, or the leader of a system that cannot transfer)
//!   and the others keep a quorum of healthy, caught-up voters: **allowed**;
//! - the member leads and the system can transfer: the verified transfer `drain` runs is
//!   started in the background and the eviction is **refused with 429** ("transferring
//!   leadership ...; retry"); evictors retry a 429, and the retried eviction finds a follower;
//! - anything else the planner blocks on (a member hanging, a quorum at risk, no leader, the
//!   cluster's lock held by a `kubectl raft drain` or `restart`): **refused with 429** and
//!   the planner's own sentence; never a 5xx, which makes `kubectl drain` abort.
//!
//! Two evictors at once cannot both pass on the same look, whichever of the gate's replicas
//! each reaches: every cluster has a [`Record`] in the API (a Lease) of the evictions admitted
//! and the transfer under way, read before each decision and written, conditioned on the
//! version read, before an eviction is admitted or a transfer started; a replica that loses
//! that race refuses (429, retried). A member whose eviction was admitted counts as
//! terminating until the API server shows it so (or its replacement). Within one replica,
//! decisions on one cluster are also taken one at a time.
//! A decision gathers (the opt-in, the member, the lock, the node, the record, then one look),
//! judges (`judge`: a pure chain of small checks on what was gathered), then commits
//! (`Gate::commit`: the member asked again, the record written on the version read, the
//! transfer started). Everything the gate observes or starts goes through [`GateOps`];
//! `live::gate` implements it on a real cluster, the tests here on a scripted one.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Result;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use k8s_openapi::api::core::v1::Node;

use crate::drain::{Handover, Look};
use crate::plan::drain::{plan_cluster, Action, DrainOptions, DrainStep};

pub mod manifests;
pub mod review;

#[cfg(test)]
mod prop_tests;
#[cfg(test)]
mod tests;

/// An eviction as the gate reads it from the API server's review.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Request {
    pub namespace: String,
    pub pod: String,
    /// A dry-run eviction: answered, nothing started, nothing remembered.
    pub dry_run: bool,
    /// The lock holder a `kubectl raft drain`/`restart` names on its own evictions
    /// ([`LOCK_HOLDER_ANNOTATION`]).
    pub lock_holder: Option<String>,
}

/// The annotation `kubectl raft drain` and `restart` put on their Evictions: the holder of
/// the cluster's lock, which decided the eviction with the same planner.
pub const LOCK_HOLDER_ANNOTATION: &str = "kubectl-raft.io/lock-holder";

/// The member an eviction is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// The cluster's namespace and StatefulSet.
    pub namespace: String,
    pub name: String,
    pub pod: String,
    pub uid: Option<String>,
    pub node: Option<String>,
}

impl Member {
    pub fn cluster(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// Why an eviction was refused: a stable code (Events' `reason`, the metrics' label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    /// The plan's blocker (its `BlockReason`, by name).
    Blocked(crate::plan::drain::BlockReason),
    /// The member leads; a transfer was started now.
    TransferStarted,
    /// A transfer of this cluster is under way.
    TransferInProgress,
    /// Another member of the same cluster goes first (the plan's order).
    OtherFirst,
    /// A `kubectl raft drain` or `restart` holds the cluster's lock.
    LockHeld,
    /// A member evicted earlier has not rejoined yet (as the voter or non-voter it was, its
    /// system's readiness check passing).
    Rejoining,
    /// The last transfer failed, or one began too recently: the next waits.
    TransferBackoff,
    /// Another decision about the cluster is being taken, or was written meanwhile.
    Busy,
    /// A dry run of the leader's eviction: a real one would start a transfer.
    WouldTransfer,
    /// The member, asked again just before its admission, is not what the look found (it
    /// leads now, its term moved, it stopped answering): decided again on the next retry.
    ChangedSinceLook,
    /// The gate could not look at the cluster (an error, a timeout): refused, to be retried.
    CannotDecide,
    /// The member's node is not being drained (not cordoned, no drainer's taint), and the
    /// eviction is not a `kubectl raft` lock holder's: nothing is started or recorded for it.
    NotDraining,
    /// The member's evictions were admitted again and again for `pending_at_most` and none
    /// took effect: refused for a while, so that they cannot hold the others for ever.
    NoEffect,
}

impl Code {
    /// The reason as Events and metrics carry it (UpperCamelCase, as Kubernetes' reasons).
    pub fn reason(self) -> String {
        match self {
            Code::Blocked(b) => format!("{b:?}"),
            other => format!("{other:?}"),
        }
    }
}

/// What a cluster's owner let the gate assume of it (the StatefulSet's annotation
/// kubectl-raft.io/gate-assume, comma-separated), put into `opts` as `drain`'s `--assume-*`
/// flags for every cluster would be (the options are this decision's, this cluster's). A word
/// the gate does not know is an error, never ignored: it would assume less than its writer
/// meant, or more.
///
/// `voters-are-pods` counts only where the system has no member list at all (`pods_only`): a
/// list that exists but could not be read this time (a rotated token, a failed request) is
/// never replaced by a standing assumption, which would outlive the failure.
/// The words of kubectl-raft.io/gate-assume: the two assumptions `drain` takes as flags.
const VOTERS_ARE_PODS: &str = "voters-are-pods";
const FOLLOWERS_CURRENT: &str = "followers-current";

fn assumed(
    annotation: Option<&str>,
    pods_only: bool,
    opts: &mut DrainOptions,
) -> Result<(), String> {
    use crate::plan::drain::Assume;
    for word in annotation.unwrap_or("").split(',').map(str::trim) {
        match word {
            "" => {}
            VOTERS_ARE_PODS if pods_only => opts.assume_voters_are_pods = Assume::Every,
            VOTERS_ARE_PODS => {}
            FOLLOWERS_CURRENT => opts.assume_followers_current = Assume::Every,
            other => {
                return Err(format!(
                    "its annotation {}={annotation:?} names {other:?}, which the gate does not know (known: {VOTERS_ARE_PODS}, {FOLLOWERS_CURRENT}); correct it, then retry",
                    crate::profile::annotations::GATE_ASSUME,
                    annotation = annotation.unwrap_or(""),
                ))
            }
        }
    }
    Ok(())
}

/// The taints the known drainers put on a node before they evict its pods, besides a cordon
/// (`spec.unschedulable`, which `kubectl drain`, kured, GKE's and AKS's upgrades set, and
/// which Kubernetes mirrors as `node.kubernetes.io/unschedulable`): cluster-autoscaler's,
/// Karpenter's (v1, and v0.32 to v0.37), and EKS managed node groups' (which taint first and
/// cordon only once the node is empty). CloudNativePG reads a set like it. Others are added
/// with `gate serve --drain-taint`.
pub const DRAINERS_TAINTS: &[&str] = &[
    "node.kubernetes.io/unschedulable",
    "ToBeDeletedByClusterAutoscaler",
    "karpenter.sh/disrupted",
    "karpenter.sh/disruption",
    "eks.amazonaws.com/nodegroup",
];

/// How `node` shows that it is being drained (cordoned, a known drainer's taint, or one of
/// `extra`), or None.
pub fn being_drained(node: &Node, extra: &[String]) -> Option<String> {
    let spec = node.spec.as_ref()?;
    if spec.unschedulable == Some(true) {
        return Some("cordoned".into());
    }
    spec.taints
        .iter()
        .flatten()
        .find(|t| DRAINERS_TAINTS.contains(&t.key.as_str()) || extra.contains(&t.key))
        .map(|t| format!("tainted {}", t.key))
}

/// The planner's blocker as the gate's refusal. Where `drain` would take a flag, the gate
/// takes its owner's annotation instead, and the sentence says which.
fn refused(b: crate::plan::drain::Blocker, pods_only: bool) -> Verdict {
    use crate::plan::drain::BlockReason;
    let word = match b.reason {
        BlockReason::MembershipUnknown if pods_only => Some(VOTERS_ARE_PODS),
        BlockReason::LivenessUnknown => Some(FOLLOWERS_CURRENT),
        _ => None,
    };
    let message = match word {
        Some(w) => format!(
            "{} (for the gate, its owner annotates the StatefulSet {}={w})",
            b.message,
            crate::profile::annotations::GATE_ASSUME
        ),
        None => b.message,
    };
    Verdict::Refuse(Code::Blocked(b.reason), message)
}

/// The gate's answer to one eviction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Allow(String),
    /// A dry run allowed, with an admission warning (this sentence, its code's reason): what a
    /// real eviction would meet first. `kubectl drain --dry-run=server` prints it and ends,
    /// where a refusal would have it retry a dry run for ever.
    Warn(Code, String),
    /// Refused with 429 and this sentence; evictors retry.
    Refuse(Code, String),
    /// In warn or audit mode ([`Mode`]): the refusal enforce mode would have made, allowed,
    /// with this sentence as an admission warning when `warn` (kubectl prints it), and as an
    /// Event and a metric either way.
    Would {
        code: Code,
        message: String,
        warn: bool,
    },
}

/// How the gate acts on what it decides (`gate serve --mode`): enforce, or one of the two
/// trial modes in which it refuses nothing, starts nothing and records nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Refusals are answered 429, transfers started, admissions recorded.
    #[default]
    Enforce,
    /// Every eviction is allowed; one it would have refused carries that refusal as an
    /// admission warning and an Event.
    Warn,
    /// As warn, without the admission warning: an Event and a metric only.
    Audit,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Enforce => "enforce",
            Mode::Warn => "warn",
            Mode::Audit => "audit",
        }
    }

    /// `verdict`, decided without side effects in a trial mode, as this mode answers it: a
    /// refusal (or, for a real eviction, the transfer a leader's would start) allowed as
    /// `Verdict::Would`.
    pub fn answer(self, verdict: Verdict, dry_run: bool) -> Verdict {
        let warn = match self {
            Mode::Enforce => return verdict,
            Mode::Warn => true,
            Mode::Audit => false,
        };
        let (code, message) = match verdict {
            Verdict::Refuse(code, message) => (code, message),
            // A leader's real eviction: enforce would refuse it, starting a transfer.
            Verdict::Warn(Code::WouldTransfer, message) if !dry_run => {
                (Code::WouldTransfer, message)
            }
            // A dry run's warning (what a real eviction would meet): audit says nothing.
            Verdict::Warn(_, message) if !warn => return Verdict::Allow(message),
            other => return other,
        };
        Verdict::Would {
            code,
            message: format!(
                "kubectl-raft gate ({} mode) would refuse this eviction: {message}",
                self.as_str()
            ),
            warn,
        }
    }
}

impl Verdict {
    pub fn allowed(&self) -> bool {
        !matches!(self, Verdict::Refuse(..))
    }

    pub fn message(&self) -> &str {
        match self {
            Verdict::Allow(m) | Verdict::Warn(_, m) | Verdict::Refuse(_, m) => m,
            Verdict::Would { message, .. } => message,
        }
    }

    /// `allowed` or the refusal's (or warning's) reason code.
    pub fn reason(&self) -> String {
        match self {
            Verdict::Allow(_) => "Allowed".into(),
            Verdict::Warn(c, _) | Verdict::Refuse(c, _) | Verdict::Would { code: c, .. } => {
                c.reason()
            }
        }
    }
}

/// An eviction the gate admitted: the pod (its UID), when (seconds since the epoch), and
/// what it was before (a voter, or a learner or observer): what its replacement must be
/// again to count as rejoined.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Admitted {
    pub pod: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    pub at: f64,
    /// None in a record of a gate before this field: its replacement is then judged by what
    /// it is now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub voter: Option<bool>,
    /// When this pod's eviction (under this UID) was first admitted, when it has been admitted
    /// again since without taking effect (a PDB refusing it, or a review replayed); None after
    /// one admission. What bounds how long such an eviction holds the others
    /// (`Settings::pending_at_most`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<f64>,
    /// Its evictions are refused (`NoEffect`) by every replica until the entry is dropped:
    /// `admitted_for` after its last admission expired, in the dropping replica's clock.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stalled: bool,
}

impl Admitted {
    /// This entry is of `pod` under `uid` (an entry without a UID, of a gate before UIDs, is
    /// of none).
    pub fn is(&self, pod: &str, uid: Option<&String>) -> bool {
        self.pod == pod && self.uid.is_some() && self.uid.as_ref() == uid
    }
}

/// A transfer a gate replica started (seconds since the epoch).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Started {
    pub from: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    pub at: f64,
}

/// What the gate's replicas share of one cluster, kept in the API and written only on the
/// version read (`version`: the store's, e.g. a resourceVersion; None when there is none yet).
///
/// A gate reads only a record it understands whole: a field it does not know, or a `format`
/// above its own ([`RECORD_FORMAT`]), is an error (the eviction refused, to be retried), never
/// dropped on the next write: what a newer gate holds back stays held.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Record {
    /// The record's format (0 before formats were written: the same as 1).
    #[serde(default)]
    pub format: u32,
    #[serde(default)]
    pub admitted: Vec<Admitted>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transfer: Option<Started>,
    #[serde(skip)]
    pub version: Option<String>,
}

/// The format of the records this gate writes.
pub const RECORD_FORMAT: u32 = 1;

impl Record {
    /// The record as stored, checked to be one this gate understands whole.
    pub fn parse(text: &str) -> Result<Record, String> {
        let r: Record = serde_json::from_str(text).map_err(|e| e.to_string())?;
        if r.format > RECORD_FORMAT {
            return Err(format!(
                "it is of format {}, this gate knows {RECORD_FORMAT} at most",
                r.format
            ));
        }
        Ok(r)
    }

    /// Records an admission of `pod` (under `uid`) at `now`, `voter` or not before it, by the
    /// lock holder or not: the entry written, which the record now holds.
    ///
    /// A retry after a refusal further down the chain (a PDB) replaces its entry: the same pod
    /// under the same UID. An entry of an earlier UID is a replacement's obligation to rejoin,
    /// which an eviction of that replacement (that may never take effect) does not lift;
    /// several such obligations of one pod (a replacement evicted again and again) are one:
    /// the earliest, held to the strictest test, so that the record stays bounded. The first
    /// admission under this UID is kept (`since`): retries and replays do not start the bound
    /// on how long they hold the others again; the lock holder's admissions carry none (its
    /// own retries are its command's).
    pub fn admit(
        &mut self,
        pod: &str,
        uid: Option<&String>,
        now: f64,
        voter: bool,
        by_holder: bool,
    ) -> Admitted {
        let since = self
            .admitted
            .iter()
            .filter(|a| !by_holder && a.is(pod, uid))
            .map(|a| a.since.unwrap_or(a.at))
            .min_by(f64::total_cmp);
        self.admitted
            .retain(|a| !(a.pod == pod && (a.uid.is_none() || a.uid.as_ref() == uid)));
        let (older, mut kept): (Vec<Admitted>, Vec<Admitted>) = std::mem::take(&mut self.admitted)
            .into_iter()
            .partition(|a| a.pod == pod);
        if let Some(first) = older.iter().min_by(|a, b| a.at.total_cmp(&b.at)) {
            let voter = if older.iter().any(|a| a.voter == Some(true)) {
                Some(true)
            } else if older.iter().all(|a| a.voter == Some(false)) {
                Some(false)
            } else {
                None
            };
            kept.push(Admitted {
                voter,
                ..first.clone()
            });
        }
        let entry = Admitted {
            pod: pod.to_string(),
            uid: uid.cloned(),
            at: now,
            voter: Some(voter),
            since,
            stalled: false,
        };
        kept.push(entry.clone());
        self.admitted = kept;
        entry
    }

    /// Records a transfer from `from` (to `to`, if named) begun at `now`: the one the record
    /// holds now.
    pub fn begin_transfer(&mut self, from: &str, to: Option<&String>, now: f64) -> Started {
        let t = Started {
            from: from.to_string(),
            to: to.cloned(),
            at: now,
        };
        self.transfer = Some(t.clone());
        t
    }

    /// The record as it is stored: always in this gate's format.
    pub fn to_text(&self) -> String {
        let mut r = self.clone();
        r.format = RECORD_FORMAT;
        serde_json::to_string(&r).expect("a record serialises")
    }
}

/// How a conditioned write of a [`Record`] went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    Done,
    /// Someone else wrote it since it was read (another replica's decision).
    Conflict,
}

/// A transfer the gate started, and how it ended.
#[derive(Debug, Clone)]
pub struct Transfer {
    pub from: String,
    pub to: Option<String>,
    /// The record's stamp of this transfer (`Started::at`): which transfer of the record it is.
    pub record_at: f64,
    pub started: Instant,
    /// None while it runs.
    pub ended: Option<Result<Handover, String>>,
}

/// Where a background transfer reports its end.
pub type TransferSlot = Arc<Mutex<Option<Transfer>>>;

/// Everything the gate learns from, or starts in, the world.
#[allow(async_fn_in_trait)]
pub trait GateOps {
    /// Why the API server would never send this namespace's evictions here (its webhook's
    /// namespaceSelector does not select it), or None: sent here, or it cannot be told. Asked
    /// before anything else, so that a review the API server never sent (posted by anyone who
    /// reaches the gate's port) for a namespace that never opted in does nothing.
    async fn not_sent_here(&self, namespace: &str) -> Result<Option<String>>;
    /// The Raft cluster this pod is a member of; None when it is none the gate knows (not a
    /// StatefulSet's pod, no profile recognises it): such evictions are never refused.
    async fn member(&self, namespace: &str, pod: &str) -> Result<Option<Member>>;
    /// Who holds the cluster's lock now (a Lease renewed within its duration), if anyone.
    async fn lock_holder(&self, m: &Member) -> Result<Option<String>>;
    /// The node as it is now (None: there is no such node any more), judged by
    /// [`being_drained`].
    async fn node(&self, name: &str) -> Result<Option<Node>>;
    /// The cluster now, planned as a drain of the member's node; None when it is gone.
    async fn look(&self, m: &Member, opts: &DrainOptions) -> Result<Option<Look>>;
    /// Why the members' controller makes an eviction unsafe now, on the StatefulSet read
    /// afresh just before the gate admits one (the look's read is as old as its probes):
    /// `ClusterOps::controller_busy_now`'s question, answered by the same function.
    async fn controller_busy_now(&self, look: &Look) -> Option<String>;
    /// The member's own answer now, read just before its admission is written (the look's
    /// probes are up to `decide_within` old): `ClusterOps::member_now`'s question, answered by
    /// the same function and judged by the same `plan::drain::still_as_looked`.
    async fn member_now(&self, look: &Look, pod: &str) -> crate::plan::ReplicaView;
    /// Start the verified transfer `drain` runs for this step, in the background; its end
    /// goes into `slot` (`Transfer::ended`).
    fn start_transfer(&self, look: Look, step: DrainStep, opts: DrainOptions, slot: TransferSlot);
    /// The cluster's shared record, with its version.
    async fn record(&self, m: &Member) -> Result<Record>;
    /// Writes the record if nobody wrote it since `record.version` was read.
    async fn write_record(&self, m: &Member, record: &Record) -> Result<Written>;
    /// Now, in seconds since the epoch (the clock the record's times are in).
    fn now(&self) -> f64;
}

/// The gate's settings.
#[derive(Debug, Clone)]
pub struct Settings {
    /// What `drain` would be run with (max lag; the assumptions are never made by the gate).
    pub opts: DrainOptions,
    /// The longest a transfer may run before another can be started.
    pub transfer_timeout: Duration,
    /// How long an admitted eviction counts its member as terminating while the API server
    /// still shows it running (a PDB may refuse it after the gate admitted it).
    pub admitted_for: Duration,
    /// How long the evictions of one member, admitted again and again without taking effect
    /// (its pod running on under the same UID: a PDB refuses them, or a review is replayed),
    /// may hold the cluster's other evictions: past it, that member's evictions are refused
    /// (`NoEffect`) until its last admission has expired and `admitted_for` more has passed,
    /// in which the others are decided on what the cluster is.
    pub pending_at_most: Duration,
    /// The longest one decision may take; past it the eviction is refused (429, retried).
    pub decide_within: Duration,
    /// How long after a transfer began (or failed) the next may begin.
    pub transfer_backoff: Duration,
    /// How long an evicted member's replacement is waited for before the next eviction; after
    /// it, the planner's count of healthy voters alone decides.
    pub rejoin_within: Duration,
    /// Enforce, or a trial mode (warn, audit) that acts on nothing.
    pub mode: Mode,
    /// Taint keys besides [`DRAINERS_TAINTS`] that say a node is being drained.
    pub drain_taints: Vec<String>,
}

impl Settings {
    /// How long an entry that no longer holds the others is remembered after its member's
    /// first admission, so that the next admission carries `since` on: until a retry after
    /// `pending_at_most` has had `admitted_for` to arrive and be refused.
    fn remembered_for(&self) -> Duration {
        self.pending_at_most + self.admitted_for
    }
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            opts: DrainOptions {
                max_lag: crate::assess::voter::DEFAULT_MAX_LAG,
                ..Default::default()
            },
            transfer_timeout: Duration::from_secs(60),
            admitted_for: Duration::from_secs(30),
            pending_at_most: Duration::from_secs(120),
            decide_within: Duration::from_secs(8),
            transfer_backoff: Duration::from_secs(30),
            rejoin_within: Duration::from_secs(600),
            mode: Mode::Enforce,
            drain_taints: vec![],
        }
    }
}

/// What an admission records besides the pod: whether it was a voter (what its replacement
/// must be again), and whether it is the lock holder's (whose retries start no `since`).
#[derive(Debug, Clone, Copy)]
struct Admission {
    voter: bool,
    by_holder: bool,
}

/// One cluster's memory in this replica: the last transfer it started.
#[derive(Default)]
struct ClusterState {
    transfer: TransferSlot,
}

/// A cluster's memory in this replica that nobody uses and that holds nothing to remember:
/// no decision of it under way (its `Arc` is cloned only under the map's lock, where this is
/// asked, so a count of one means none), and no transfer it started within `keep` (the longer
/// of `FORGET_AFTER` and `transfer_timeout`: a running or recent one says whether the record's
/// transfer ended here, and backs a failed one off).
fn forgettable(state: &Arc<tokio::sync::Mutex<ClusterState>>, keep: Duration) -> bool {
    Arc::strong_count(state) == 1
        && state.try_lock().is_ok_and(|s| {
            s.transfer
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .as_ref()
                .is_none_or(|t| t.started.elapsed() >= keep)
        })
}

/// How long a replica remembers when it first saw a record's entry after it last asked (and,
/// at least, a transfer it started: `forgettable`): an
/// entry still in a record is asked at every decision of its cluster, so its age keeps
/// counting for as long as it matters (it never starts again at 0, which would hold a
/// finished transfer or a stale admission back again).
const FORGET_AFTER: Duration = Duration::from_secs(3600);

/// A review's answer, and whether it was about an eviction the gate acts on (a member's, from
/// a node being drained or by the lock holder): only those leave a trace beyond the log (an
/// Event on the pod, the clock of how long it was held). Anyone who reaches the gate's port
/// can have the others answered, a refusal to decide in time included.
#[derive(Debug, Clone)]
pub struct Answered {
    pub verdict: Verdict,
    pub acted_on: bool,
}

/// How far one decision got, read by its caller when its time runs out.
struct Progress {
    /// When its time runs out (its review's arrival plus its budget).
    deadline: tokio::time::Instant,
    /// The least of its time left to record a transfer and start it: `COMMIT_NEEDS`, or half
    /// of a shorter budget (a webhook installed with `timeoutSeconds: 3` has 1 s in all).
    commit_needs: Duration,
    /// It is about an eviction the gate acts on (`Answered::acted_on`).
    acted_on: AtomicBool,
    /// It is recording a transfer and starting it: let finish past its deadline.
    committing: AtomicBool,
}

impl Progress {
    fn until(arrived: tokio::time::Instant, budget: Duration) -> Self {
        Progress {
            deadline: arrived + budget,
            commit_needs: COMMIT_NEEDS.min(budget / 2),
            acted_on: AtomicBool::new(false),
            committing: AtomicBool::new(false),
        }
    }
}

/// The least of a review's time left to record a transfer and start it (a record write and a
/// lock read), or half its budget if that is less: with less, it is refused to be retried,
/// and nothing is written.
const COMMIT_NEEDS: Duration = Duration::from_secs(1);

/// How long a transfer being recorded and started may run past its review's deadline: within
/// the 2 s the budget leaves under the webhook's own timeout (`live::webhook`), of which the
/// API server's rounding up takes at most 1 s and the answer's way back the rest.
const COMMIT_OVERRUN: Duration = Duration::from_millis(750);

/// The refusal of a decision that failed (a read or a write): retried by the evictor.
fn cannot_decide(req: &Request, why: &str) -> Verdict {
    Verdict::Refuse(
        Code::CannotDecide,
        format!(
            "kubectl-raft gate cannot decide the eviction of {}/{} now: {why}; retry",
            req.namespace, req.pod
        ),
    )
}

/// The gate: decisions one cluster at a time, over [`GateOps`].
pub struct Gate<O> {
    pub ops: O,
    pub settings: Settings,
    clusters: Mutex<BTreeMap<String, Arc<tokio::sync::Mutex<ClusterState>>>>,
    /// When this replica first saw each entry of a record (by its stamp), and when it last
    /// asked: ages are judged by this process's own clock, never by comparing another
    /// replica's wall clock with it.
    first_seen: Mutex<BTreeMap<String, (Instant, Instant)>>,
}

impl<O: GateOps> Gate<O> {
    pub fn new(ops: O, settings: Settings) -> Self {
        Gate {
            ops,
            settings,
            clusters: Mutex::new(BTreeMap::new()),
            first_seen: Mutex::new(BTreeMap::new()),
        }
    }

    /// The answer to one eviction, within `decide_within` (past it: refused, to be retried).
    pub async fn review(&self, req: &Request) -> Verdict {
        self.review_by(
            req,
            tokio::time::Instant::now(),
            self.settings.decide_within,
        )
        .await
        .verdict
    }

    /// The answer to one eviction within `budget` of `arrived`, when its review arrived: the
    /// time its body took to arrive counts (the webhook's own timeout counts from the sending,
    /// and its expiry is a 500 that makes kubectl drain give up).
    pub async fn review_by(
        &self,
        req: &Request,
        arrived: tokio::time::Instant,
        budget: Duration,
    ) -> Answered {
        let progress = Progress::until(arrived, budget);
        let verdict = self.decided(req, budget, &progress).await;
        Answered {
            verdict: self.settings.mode.answer(verdict, req.dry_run),
            acted_on: progress.acted_on.load(Ordering::Relaxed),
        }
    }

    async fn decided(&self, req: &Request, budget: Duration, progress: &Progress) -> Verdict {
        let decision = self.decide(req, progress);
        tokio::pin!(decision);
        let outcome = tokio::select! {
            done = &mut decision => Some(done),
            _ = tokio::time::sleep_until(progress.deadline) => None,
        };
        // Out of time while recording and starting a transfer: finished, not cut off (the
        // record would name a transfer nobody started, held by every replica for
        // `transfer_timeout`). It began with at least `COMMIT_NEEDS` left, and may run
        // `COMMIT_OVERRUN` past the deadline (an API server that hangs longer cuts it off).
        let outcome = match outcome {
            None if progress.committing.load(Ordering::Relaxed) => {
                tokio::time::timeout(COMMIT_OVERRUN, decision).await.ok()
            }
            other => other,
        };
        match outcome {
            Some(Ok(v)) => v,
            Some(Err(e)) => cannot_decide(req, &format!("{e:#}")),
            None => Verdict::Refuse(
                Code::CannotDecide,
                format!(
                    "kubectl-raft gate could not decide the eviction of {}/{} within {}s of its review's arrival (a replica or the API server is slow); retry",
                    req.namespace,
                    req.pod,
                    budget.as_secs()
                ),
            ),
        }
    }

    /// The decision; `progress.acted_on` is set once it is about an eviction the gate acts on
    /// (a member's, from a node being drained or by the lock holder, or a dry run of one).
    async fn decide(&self, req: &Request, progress: &Progress) -> Result<Verdict> {
        if let Some(why) = self.ops.not_sent_here(&req.namespace).await? {
            return Ok(Verdict::Allow(format!(
                "{why}: not the gate's to decide; nothing done"
            )));
        }
        let Some(m) = self.ops.member(&req.namespace, &req.pod).await? else {
            return Ok(Verdict::Allow(format!(
                "{}/{} is not a member of a Raft cluster the gate knows",
                req.namespace, req.pod
            )));
        };
        let cluster = m.cluster();
        // Only an eviction from a node being drained acts (starts a transfer, writes a record):
        // a review posted by whoever reaches the gate's port, for a member on a node nobody
        // drains, is answered here, before the cluster's decision slot and record: it changes
        // nothing and does not make the cluster's real evictions wait (`Busy`). The lock
        // holder's own evictions (they name it, and it holds the lock) are decided as such
        // below, a restart drains no node; a dry run starts nothing (it does take the slot
        // while it is decided).
        if !req.dry_run {
            // An eviction naming a holder is the holder's only while that holder has the lock.
            let holders = match &req.lock_holder {
                None => false,
                Some(named) => self.ops.lock_holder(&m).await?.as_deref() == Some(named.as_str()),
            };
            if !holders {
                if let Some(v) = self.not_draining(&m, false).await? {
                    return Ok(v);
                }
            }
        }
        progress.acted_on.store(true, Ordering::Relaxed);
        let state = {
            let mut clusters = self.clusters.lock().expect("not poisoned");
            // A cluster seen for the first time: the memory of those with nothing to remember
            // goes (a gate that runs for months meets StatefulSets that come and go).
            if !clusters.contains_key(&cluster) {
                let keep = FORGET_AFTER.max(self.settings.transfer_timeout);
                clusters.retain(|_, s| !forgettable(s, keep));
            }
            clusters.entry(cluster.clone()).or_default().clone()
        };
        // One decision per cluster at a time in this replica; one asked meanwhile is retried
        // (it would otherwise queue behind slow looks and run out of time there).
        let Ok(mut state) = state.try_lock() else {
            return Ok(Verdict::Refuse(
                Code::Busy,
                format!("{cluster}: another eviction of it is being decided; retry"),
            ));
        };
        // The lock under the same guard as the decision: a drain that takes it meanwhile has
        // its own evictions wait for this one (the record below).
        let by_holder = match self.ops.lock_holder(&m).await? {
            Some(h) if req.lock_holder.as_deref() == Some(h.as_str()) => true,
            Some(h) => return Ok(lock_held(&cluster, &h)),
            None => false,
        };
        // What changes nothing: a dry run, and every decision of a trial mode.
        let quiet = req.dry_run || self.settings.mode != Mode::Enforce;
        let mut opts = self.settings.opts.clone();
        opts.nodes = m.node.iter().cloned().collect();
        // The record first, then the look: an eviction admitted after this read makes the
        // write below fail, never pass unseen.
        let mut record = self.ops.record(&m).await?;
        let Some(mut look) = self.ops.look(&m, &opts).await? else {
            return Ok(Verdict::Allow(format!(
                "{cluster} is not a Raft cluster the gate recognises (or no longer exists)"
            )));
        };
        // A holder that lost its lock between the two reads: as any other eviction.
        if !by_holder && !req.dry_run && req.lock_holder.is_some() {
            if let Some(v) = self.not_draining(&m, true).await? {
                // Not acted on after all: as any eviction from a node nobody drains.
                progress.acted_on.store(false, Ordering::Relaxed);
                return Ok(v);
            }
        }
        let age = |key: String| self.age(&cluster, key);
        let rejoining = record.settle(&mut look, &m.pod, &age, &self.settings);
        let mine = state.transfer.lock().expect("not poisoned").clone();
        // Judge: the gate's rules, on what was gathered, without a read or a write.
        let judged = judge(&Case {
            cluster: &cluster,
            member: &m,
            look: &look,
            record: &record,
            rejoining: &rejoining,
            mine: mine.as_ref(),
            age: &age,
            settings: &self.settings,
            quiet,
            by_holder,
            opts,
        });
        // Commit: what the judgement asks for, each write on the version read.
        self.commit(judged, &m, &mut record, quiet, look, &mut state, progress)
            .await
    }

    /// Carries a judgement out: an admission once the member (and, but for the lock holder,
    /// its controller) is asked again and found as looked, then recorded on the version read
    /// and, but for a dry run, checked against a lock taken meanwhile; a transfer recorded,
    /// then started (with at least `COMMIT_NEEDS` of its time left, and then to the end: see
    /// `decided`); a member's evictions marked as without effect.
    #[allow(clippy::too_many_arguments)]
    async fn commit(
        &self,
        judged: Judged,
        m: &Member,
        record: &mut Record,
        quiet: bool,
        look: Look,
        state: &mut ClusterState,
        progress: &Progress,
    ) -> Result<Verdict> {
        let cluster = m.cluster();
        let now = self.ops.now();
        match judged {
            Judged::Answer(v) => Ok(v),
            Judged::Stall(refusal) => {
                if quiet {
                    return Ok(refusal);
                }
                for a in record.admitted.iter_mut() {
                    if a.is(&m.pod, m.uid.as_ref()) {
                        a.stalled = true;
                    }
                }
                Ok(match self.ops.write_record(m, record).await? {
                    Written::Done => refusal,
                    Written::Conflict => written_meanwhile(&cluster),
                })
            }
            Judged::Admit {
                step,
                allow,
                voter,
                by_holder,
            } => {
                // A rollout begun since the look (its probes take seconds) holds it back.
                if !by_holder {
                    if let Some(why) = self.ops.controller_busy_now(&look).await {
                        return Ok(Verdict::Refuse(
                            Code::Blocked(crate::plan::drain::BlockReason::RolloutInProgress),
                            format!("{cluster}: {why}; an eviction beside it could leave two members down; retry"),
                        ));
                    }
                }
                if let Some(v) = self.changed_since(&look, &step).await {
                    return Ok(v);
                }
                Ok(
                    match self
                        .admit(m, record, now, quiet, Admission { voter, by_holder }, allow)
                        .await?
                    {
                        // A dry run took nothing, and the lock holder holds the lock: no lock
                        // to look at again.
                        Some(v) if quiet || by_holder => v,
                        Some(v) => self.still_unlocked(m, v).await?,
                        None => written_meanwhile(&cluster),
                    },
                )
            }
            Judged::Transfer { step, opts } => {
                let left = progress
                    .deadline
                    .saturating_duration_since(tokio::time::Instant::now());
                if left < progress.commit_needs {
                    return Ok(Verdict::Refuse(
                        Code::CannotDecide,
                        format!(
                            "{cluster}: {} leads, and too little of this review's time is left ({} ms) to record and start its transfer; retry",
                            m.pod,
                            left.as_millis()
                        ),
                    ));
                }
                progress.committing.store(true, Ordering::Relaxed);
                let t = record.begin_transfer(&m.pod, step.target.as_ref(), now);
                if self.ops.write_record(m, record).await? == Written::Conflict {
                    return Ok(written_meanwhile(&cluster));
                }
                // Its age starts now, in this replica's clock.
                self.age(&cluster, transfer_key(&t));
                // A drain that took the lock meanwhile acts on its own: the transfer is not
                // started beside it (the record's entry only holds back, and expires).
                if let Verdict::Refuse(c, why) = self
                    .still_unlocked(m, Verdict::Allow(String::new()))
                    .await?
                {
                    return Ok(Verdict::Refuse(c, why));
                }
                // A slot of its own: a transfer that outlives its timeout cannot write its end
                // onto the next one.
                let slot: TransferSlot = Arc::new(Mutex::new(Some(Transfer {
                    from: m.pod.clone(),
                    to: step.target.clone(),
                    record_at: now,
                    started: Instant::now(),
                    ended: None,
                })));
                state.transfer = slot.clone();
                let to = step
                    .target
                    .clone()
                    .unwrap_or_else(|| "another member".into());
                self.ops.start_transfer(look, step, opts, slot);
                Ok(Verdict::Refuse(
                    Code::TransferStarted,
                    format!(
                        "{cluster}: {} leads; transferring leadership to {to} first; retry",
                        m.pod
                    ),
                ))
            }
        }
    }

    /// The refusal of an eviction of `m` from a node nobody drains (not cordoned, no drainer's
    /// taint), once its cluster is known to be a Raft cluster (`recognised`, or by a look
    /// here). None when its node is being drained, it has no node, its node is gone (its pods
    /// are going anyway), or no profile recognises its StatefulSet (then decided as any pod
    /// of no Raft cluster, after the lock).
    async fn not_draining(&self, m: &Member, recognised: bool) -> Result<Option<Verdict>> {
        let Some(node) = &m.node else {
            return Ok(None);
        };
        let Some(n) = self.ops.node(node).await? else {
            return Ok(None);
        };
        if being_drained(&n, &self.settings.drain_taints).is_some() {
            return Ok(None);
        }
        if !recognised {
            let mut opts = self.settings.opts.clone();
            opts.nodes = BTreeSet::from([node.clone()]);
            // A look that fails refuses as much: nothing acts from this node either way.
            if let Ok(None) = self.ops.look(m, &opts).await {
                return Ok(None);
            }
        }
        Ok(Some(Verdict::Refuse(
            Code::NotDraining,
            format!("{}: {}'s node {node} is not being drained (not cordoned, no drainer's taint): the gate admits a Raft member's eviction only from a node being drained (kubectl drain, a node upgrade, cluster-autoscaler, Karpenter) or from kubectl raft drain and restart; cordon the node first, or move leadership with kubectl raft yield", m.cluster(), m.pod),
        )))
    }

    /// How long ago this replica first saw `key` of `cluster` (now, if never): ages by its own
    /// clock. Keys not asked for within an hour are forgotten.
    fn age(&self, cluster: &str, key: String) -> Duration {
        let now = Instant::now();
        let mut seen = self.first_seen.lock().expect("not poisoned");
        seen.retain(|_, (_, asked)| now.duration_since(*asked) < FORGET_AFTER);
        let (first, asked) = seen.entry(format!("{cluster}/{key}")).or_insert((now, now));
        *asked = now;
        now.duration_since(*first)
    }

    /// `allow`, unless a `kubectl raft drain` or `restart` took the cluster's lock while this
    /// decision was taken (it acts on a look of its own, which may predate this admission):
    /// then refused, and the record's entry only holds others back until it expires.
    async fn still_unlocked(&self, m: &Member, allow: Verdict) -> Result<Verdict> {
        Ok(match self.ops.lock_holder(m).await? {
            Some(h) => lock_held(&m.cluster(), &h),
            None => allow,
        })
    }

    /// A refusal when the member, asked again now, is not what the look found
    /// (`plan::drain::still_as_looked`, drain's own test before its eviction).
    async fn changed_since(&self, look: &Look, step: &DrainStep) -> Option<Verdict> {
        if step.action != Action::Evict {
            return None;
        }
        let now = self.ops.member_now(look, &step.pod).await;
        let why = crate::plan::drain::still_as_looked(step, &look.input.report, &now).err()?;
        Some(Verdict::Refuse(
            Code::ChangedSinceLook,
            format!(
                "{}/{}: {why}; decided again on a fresh look; retry",
                look.obs.target.namespace, look.obs.target.name
            ),
        ))
    }

    /// Records the admission (not for a dry run) and answers `allow`; None when another
    /// decision wrote the record since it was read.
    async fn admit(
        &self,
        m: &Member,
        record: &mut Record,
        now: f64,
        dry_run: bool,
        who: Admission,
        allow: Verdict,
    ) -> Result<Option<Verdict>> {
        let Admission { voter, by_holder } = who;
        if dry_run {
            return Ok(Some(allow));
        }
        let entry = record.admit(&m.pod, m.uid.as_ref(), now, voter, by_holder);
        // Its age starts now, in this replica's clock; so does the bound on its repeats (the
        // key of the first admission, which the repeats carry as `since`).
        self.age(&m.cluster(), admitted_key(&entry, "pending"));
        self.age(&m.cluster(), since_key(&entry));
        Ok(match self.ops.write_record(m, record).await? {
            Written::Done => Some(allow),
            Written::Conflict => None,
        })
    }
}

/// What one decision judges, gathered once by this replica: the member, its cluster's fresh
/// look and shared record (both settled: admissions matched against the pods, replacements
/// still to rejoin), this replica's own last transfer, and its clock for the record's ages.
struct Case<'a> {
    cluster: &'a str,
    member: &'a Member,
    look: &'a Look,
    record: &'a Record,
    /// Members evicted earlier whose replacements have not rejoined.
    rejoining: &'a [String],
    /// The last transfer this replica started, if any.
    mine: Option<&'a Transfer>,
    /// How long ago this replica first saw a key of the record.
    age: &'a dyn Fn(String) -> Duration,
    settings: &'a Settings,
    /// A dry run, or a trial mode: nothing is to change.
    quiet: bool,
    /// The eviction is the lock holder's (it names the holder, which holds the lock).
    by_holder: bool,
    /// `drain`'s options for the member's node.
    opts: DrainOptions,
}

/// What the gate's rules make of an eviction: an answer now, or what the commit must do.
#[derive(Debug)]
enum Judged {
    Answer(Verdict),
    /// Refuse with this `NoEffect` refusal, marking the member's entry `stalled` first.
    Stall(Verdict),
    /// Admit the step's member (once asked again), answering `allow`.
    Admit {
        step: DrainStep,
        allow: Verdict,
        voter: bool,
        by_holder: bool,
    },
    /// Begin the member's transfer (it leads), answering 429.
    Transfer {
        step: DrainStep,
        opts: DrainOptions,
    },
}

/// The gate's rules, in order, as a chain of small checks on what was gathered (the API
/// server's `eviction.go` and `drain`'s planner have the same shape): a replacement still to
/// rejoin, a transfer under way; then, for the lock holder, its own plan; for every other
/// evictor, evictions that never take effect, the owner's assumptions and the plan's first
/// step, with the transfer's backoff for a leader. No read, no write: `Gate::commit` acts.
fn judge(c: &Case) -> Judged {
    let (cluster, m) = (c.cluster, c.member);
    if let Some(pod) = c.rejoining.iter().find(|p| **p != m.pod) {
        return Judged::Answer(Verdict::Refuse(
            Code::Rejoining,
            format!("{cluster}: {pod} was evicted and its replacement has not rejoined yet (as kubectl raft drain, the gate waits for it before the next member); retry"),
        ));
    }
    if let Some(v) = transfer_running(c) {
        return Judged::Answer(v);
    }
    if c.by_holder {
        return holders(c);
    }
    if let Some(refusal) = no_effect(c) {
        return refusal;
    }
    // The owner's word counts for the gate's own decisions only: the lock holder's are
    // checked with every assumption given, and a word mistyped by a tenant never holds back
    // an admin's `kubectl raft drain`.
    let mut opts = c.opts.clone();
    let pods_only = c.look.input.report.summary.voters_from == crate::report::VotersFrom::Pods;
    if let Err(why) = assumed(
        c.look.obs.target.gate_assume.as_deref(),
        pods_only,
        &mut opts,
    ) {
        return Judged::Answer(Verdict::Refuse(
            Code::CannotDecide,
            format!("{cluster}: {why}"),
        ));
    }
    // Credentials that cannot be read: the leader's transfer, sent with them, would fail, so
    // no member goes whose node holds the leader (or when no leader is known), in every mode.
    let report = &c.look.input.report;
    let on_node: BTreeSet<String> = report
        .replicas
        .iter()
        .filter(|r| r.pod == m.pod || (m.node.is_some() && r.node == m.node))
        .map(|r| r.pod.clone())
        .collect();
    let leaders: BTreeSet<String> = report
        .replicas
        .iter()
        .filter(|r| r.raft.role == crate::model::Role::Leader)
        .map(|r| r.pod.clone())
        .collect();
    if let Some(why) =
        crate::plan::groups::credentials_for_transfer_of(&c.look.obs, &leaders, &on_node)
    {
        return Judged::Answer(Verdict::Refuse(
            Code::CannotDecide,
            format!("{cluster}: {why}; fix them; retry"),
        ));
    }
    let plan = plan_cluster(&c.look.input, &opts);
    match plan.steps.first() {
        Some(step) if step.pod != m.pod => other_first(cluster, step),
        Some(step) => match step.action {
            Action::Evict | Action::EvictLeader => Judged::Admit {
                step: step.clone(),
                allow: Verdict::Allow(format!(
                    "{cluster}: {} ({}); {} healthy voter(s) stay where {} are needed",
                    m.pod, step.why, step.healthy_voters_during, step.quorum
                )),
                voter: crate::assess::voter::was_voter(&c.look.input.report, &m.pod),
                by_holder: false,
            },
            Action::TransferThenEvict if c.quiet => Judged::Answer(Verdict::Warn(
                Code::WouldTransfer,
                format!(
                    "{cluster}: {} leads; a real eviction would start a transfer to {} first",
                    m.pod,
                    step.target.as_deref().unwrap_or("another member")
                ),
            )),
            Action::TransferThenEvict => match backing_off(c) {
                Some(v) => Judged::Answer(v),
                None => Judged::Transfer {
                    step: step.clone(),
                    opts,
                },
            },
        },
        None => Judged::Answer(match plan.blocker {
            Some(b) => refused(b, pods_only),
            None => Verdict::Allow(format!(
                "{cluster}: {} is not one of its members now",
                m.pod
            )),
        }),
    }
}

/// A refusal while a transfer recorded for the cluster runs: begun less than
/// `transfer_timeout` ago (by this replica's clock), its member still the leader the report
/// agrees on, and not ended here.
fn transfer_running(c: &Case) -> Option<Verdict> {
    let t = c.record.transfer.as_ref()?;
    // The one leader the report agrees on, as `drain` and the rejoin test read it.
    let leader = c.look.input.report.leader_replica().map(|x| x.pod.as_str());
    let ended_here = c
        .mine
        .is_some_and(|mine| mine.from == t.from && mine.record_at == t.at && mine.ended.is_some());
    let running = (c.age)(transfer_key(t)) < c.settings.transfer_timeout
        && leader == Some(t.from.as_str())
        && !ended_here;
    running.then(|| {
        let to = t.to.as_deref().unwrap_or("another member");
        Verdict::Refuse(
            Code::TransferInProgress,
            format!(
                "{}: transferring leadership from {} to {to}; retry",
                c.cluster, t.from
            ),
        )
    })
}

/// The lock holder's own eviction. It decided it with the same planner and its own flags, on
/// a look of its own; the gate checks it on its fresh look with every flag that only the
/// operator may give taken as given (`--allow-degraded`, the `--assume-*`, local data): what
/// no flag overrides still holds (a quorum of healthy voters, the leader only after its
/// transfer, one member at a time).
fn holders(c: &Case) -> Judged {
    use crate::plan::drain::Assume;
    let (cluster, m) = (c.cluster, c.member);
    // Only this member leaves, wherever it runs: the holder's own order among members that
    // share its node is its own (a restart brings each back onto the same node), and nothing
    // is assumed of another member it has not evicted yet (one that hangs counts as down).
    let given = DrainOptions {
        allow_degraded: true,
        delete_emptydir_data: true,
        allow_hostpath_data: true,
        assume_voters_are_pods: Assume::Every,
        assume_followers_current: Assume::Every,
        nodes: BTreeSet::new(),
        ..c.opts.clone()
    };
    let mut input = c.look.input.clone();
    input.replace = BTreeSet::from([m.pod.clone()]);
    let plan = plan_cluster(&input, &given);
    // The first step only, as for every evictor: a later one assumes the members before it
    // went and came back healthy, which nothing has shown yet.
    match plan.steps.first() {
        Some(step) if step.pod != m.pod => other_first(cluster, step),
        Some(step) if step.action == Action::TransferThenEvict => Judged::Answer(Verdict::Refuse(
            Code::WouldTransfer,
            format!(
                "{cluster}: {} leads; its leadership is handed over before it is evicted; retry",
                m.pod
            ),
        )),
        Some(step) => Judged::Admit {
            step: step.clone(),
            allow: Verdict::Allow(format!(
                "{cluster}'s lock holder decided this eviction with the same planner"
            )),
            voter: crate::assess::voter::was_voter(&c.look.input.report, &m.pod),
            by_holder: true,
        },
        None => Judged::Answer(match plan.blocker {
            Some(b) => Verdict::Refuse(Code::Blocked(b.reason), b.message),
            None => Verdict::Allow(format!(
                "{cluster}: {} is not one of its members now",
                m.pod
            )),
        }),
    }
}

/// A refusal of a member whose evictions have been admitted for `pending_at_most` without
/// one taking effect (its pod running on under the same UID): a PDB that refuses them, or a
/// review replayed, would otherwise hold the cluster's other evictions for as long as it is
/// retried. The first replica to refuse marks the entry `stalled` in the record
/// (`Judged::Stall`), so that every replica refuses it, whatever its own clock says, until
/// the entry is dropped. A dry run is answered the same, and marks nothing.
fn no_effect(c: &Case) -> Option<Judged> {
    let m = c.member;
    let a = c
        .record
        .admitted
        .iter()
        .find(|a| a.is(&m.pod, m.uid.as_ref()))?;
    let since = (c.age)(since_key(a));
    if !a.stalled && since < c.settings.pending_at_most {
        return None;
    }
    let left = (2 * c.settings.admitted_for).saturating_sub((c.age)(admitted_key(a, "pending")));
    let refusal = Verdict::Refuse(
        Code::NoEffect,
        format!(
            "{}: {}'s eviction was first admitted {}s ago and again since, and none took effect (a PodDisruptionBudget refusing it, or a review replayed); so that it does not hold the cluster's other evictions for ever, it is refused for {}s more; retry",
            c.cluster,
            m.pod,
            since.as_secs(),
            left.as_secs()
        ),
    );
    Some(if a.stalled {
        Judged::Answer(refusal)
    } else {
        Judged::Stall(refusal)
    })
}

/// A refusal while no transfer of this cluster may start: this replica's last one failed
/// less than `transfer_backoff` after it began, or any replica began one less than
/// `transfer_backoff` ago. Evictors retry every few seconds: without this, a transfer that
/// fails (or a leader that takes leadership back), or a forged review, would be tried on
/// every retry.
fn backing_off(c: &Case) -> Option<Verdict> {
    let (cluster, backoff) = (c.cluster, c.settings.transfer_backoff);
    if let Some(Transfer {
        from,
        started,
        ended: Some(Err(e)),
        ..
    }) = c.mine
    {
        if started.elapsed() < backoff {
            return Some(Verdict::Refuse(
                Code::TransferBackoff,
                format!("{cluster}: {e}; the next transfer from {from} may begin {}s after this one; retry", backoff.as_secs()),
            ));
        }
    }
    let t = c.record.transfer.as_ref()?;
    let age = (c.age)(transfer_key(t));
    (age < backoff).then(|| {
        Verdict::Refuse(
            Code::TransferBackoff,
            format!("{cluster}: a transfer from {} began {}s ago; the next may begin {}s after it; retry", t.from, age.as_secs(), backoff.as_secs()),
        )
    })
}

/// A lock holder as a refusal names it to any evictor: who and what, without the process id
/// and start time that make the identity an eviction must carry to pass (`lock_holder`).
fn public_holder(holder: &str) -> String {
    let Some(what) = holder.rfind(" (kubectl raft ") else {
        return "another kubectl raft command".into();
    };
    match holder[..what].rfind(" pid ") {
        Some(pid) => format!("{}{}", &holder[..pid], &holder[what..]),
        None => "another kubectl raft command".into(),
    }
}

/// The refusal of an eviction of `cluster` that another decision wrote the record for since
/// this one read it.
fn written_meanwhile(cluster: &str) -> Verdict {
    Verdict::Refuse(
        Code::Busy,
        format!("{cluster}: another eviction of it was decided at the same moment; retry"),
    )
}

/// The refusal of an eviction of `cluster` while `step`, the plan's first, is another
/// member's: only the first step may be acted on (later ones assume the members before them
/// went and came back healthy).
fn other_first(cluster: &str, step: &DrainStep) -> Judged {
    Judged::Answer(Verdict::Refuse(
        Code::OtherFirst,
        format!("{cluster}: {} goes first ({}); retry", step.pod, step.why),
    ))
}

/// The refusal of an eviction of `cluster` while `holder` holds its lock.
fn lock_held(cluster: &str, holder: &str) -> Verdict {
    Verdict::Refuse(
        Code::LockHeld,
        format!("{cluster} is being drained or restarted by {} (kubectl raft's lock): its members are evicted by that command only until it ends; retry", public_holder(holder)),
    )
}

/// The key under which a replica remembers when it first saw a record's transfer.
fn transfer_key(t: &Started) -> String {
    format!("transfer/{}/{}", t.from, t.at)
}

/// The key under which a replica remembers when it first saw a member's first admission of
/// those that did not take effect.
fn since_key(a: &Admitted) -> String {
    format!(
        "since/{}/{}/{}",
        a.pod,
        a.uid.as_deref().unwrap_or(""),
        a.since.unwrap_or(a.at)
    )
}

/// The key under which a replica remembers when it first saw an admission in a state.
fn admitted_key(a: &Admitted, state: &str) -> String {
    format!(
        "{state}/{}/{}/{}",
        a.pod,
        a.uid.as_deref().unwrap_or(""),
        a.at
    )
}

impl Record {
    /// The record's admissions against what the look shows, as `drain` waits between steps
    /// (ages by this replica's clock, from when it first saw each entry in each state):
    /// - the pod still runs under the admitted UID, not deleted: its eviction is under way (or was
    ///   refused further down the chain, by a PDB): it counts as terminating for `admitted_for`,
    ///   then is forgotten; not for its own retry (`evicted`), which replaces it;
    /// - the pod is terminating: the planner sees that itself;
    /// - a replacement (another UID) that is not a healthy voter yet: kept, and returned, so the
    ///   next eviction waits for it, however long (as `drain` waits; the operator looks at it);
    /// - no pod of that name at all: waited for `rejoin_within`, then forgotten (the StatefulSet
    ///   was scaled down, or its controller does not recreate it).
    ///
    /// Entries that no longer matter are dropped, and so is a transfer past its timeout and
    /// its backoff (written with the next write).
    pub fn settle(
        &mut self,
        look: &mut Look,
        evicted: &str,
        age: &dyn Fn(String) -> Duration,
        settings: &Settings,
    ) -> Vec<String> {
        let report = &look.input.report;
        let pods: BTreeMap<String, (Option<String>, bool)> = look
            .obs
            .target
            .pods
            .iter()
            .map(|p| {
                (
                    p.metadata.name.clone().unwrap_or_default(),
                    (
                        p.metadata.uid.clone(),
                        p.metadata.deletion_timestamp.is_some(),
                    ),
                )
            })
            .collect();
        // The one leader the report agrees on, as `drain` reads it.
        let leader = report.leader_replica();
        // Rejoined as `drain` judges it: what it was before, its system's readiness included.
        let rejoined = |a: &Admitted| {
            report.replicas.iter().any(|x| {
                let voter = a
                    .voter
                    .unwrap_or_else(|| crate::assess::voter::counts_as_voter(x));
                x.pod == a.pod
                    && crate::assess::voter::rejoined(x, voter, leader, settings.opts.max_lag)
                        .is_ok()
            })
        };
        let mut pending = BTreeSet::new();
        let mut rejoining = vec![];
        self.admitted.retain(|a| {
            let same = |uid: &Option<String>| a.uid.is_none() || *uid == a.uid;
            match pods.get(&a.pod) {
                Some((uid, false)) if same(uid) => {
                    let fresh = age(admitted_key(a, "pending")) < settings.admitted_for;
                    if fresh && a.pod != evicted {
                        pending.insert(a.pod.clone());
                    }
                    // Not holding the others once its last admission expired, but remembered: the
                    // next admission carries `since` on (`remembered_for`); once stalled, until
                    // the others have had `admitted_for` (its evictions refused meanwhile).
                    let remembered = if a.stalled {
                        age(admitted_key(a, "pending")) < 2 * settings.admitted_for
                    } else {
                        age(since_key(a)) < settings.remembered_for()
                    };
                    fresh || remembered
                }
                Some((uid, true)) if same(uid) => true,
                Some(_) => {
                    let keep = !rejoined(a);
                    if keep {
                        rejoining.push(a.pod.clone());
                    }
                    keep
                }
                None => {
                    let keep = age(admitted_key(a, "missing")) < settings.rejoin_within;
                    if keep {
                        rejoining.push(a.pod.clone());
                    }
                    keep
                }
            }
        });
        // A transfer past its timeout and its backoff (by this replica's clock) holds nothing
        // back: it leaves the record with the next write.
        let over = settings.transfer_timeout.max(settings.transfer_backoff);
        if self
            .transfer
            .as_ref()
            .is_some_and(|t| age(transfer_key(t)) >= over)
        {
            self.transfer = None;
        }
        for x in &mut look.input.report.replicas {
            if pending.contains(x.pod.as_str()) {
                x.terminating = true;
            }
        }
        rejoining
    }
}
