//! One drain or restart per Raft cluster at a time: a `coordination.k8s.io` Lease per cluster,
//! all in one namespace (`--lock-namespace`, default `kubectl-raft`, the only namespace where
//! the plugin's roles write Leases), renewed while the command runs and deleted when it ends,
//! fenced as client-go's leader election fences its lock:
//!
//! - every write carries the resourceVersion last seen (an update, never a blind patch), so
//!   a renewal after someone else took the Lease fails instead of taking it back;
//! - a Lease held by another is taken over only after this process itself has watched it
//!   not change for its whole duration (its own monotonic clock, never another machine's
//!   `renewTime` against this one's);
//! - holdership is checked again (a GET) before each eviction and transfer: a drain that
//!   was paused (Ctrl-Z, a laptop lid) and overtaken stops before its next action, saying
//!   so; a lock that could not be renewed for its duration counts as lost;
//! - release deletes the Lease only if it is still this drain's (a resourceVersion
//!   precondition); a Lease that carries a record for the next run (restart's members still to
//!   restart) is kept, its holder cleared, and the next run takes it at once.
//!
//! kube-lease-manager was considered: it compares the holder's `renewTime` with the local
//! clock and refreshes with an unconditioned patch, the two things this module must not do.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, PostParams, Preconditions};
use kube::Client;
use tokio_util::sync::CancellationToken;

use crate::errors::{anyhow_chain, api_context, status_of};

/// The cluster a Lease locks, as NAMESPACE/NAME (its name may be shortened).
const CLUSTER_ANNOTATION: &str = "kubectl-raft.io/cluster";

/// Seconds a Lease stays valid without renewal.
const LEASE_SECONDS: i32 = 30;
const RENEW_EVERY: Duration = Duration::from_secs(10);
/// How often a Lease held by another is looked at while waiting to see whether it is dead.
const OBSERVE_EVERY: Duration = Duration::from_secs(2);

/// Where the locks live unless the caller names another namespace.
pub const DEFAULT_NAMESPACE: &str = "kubectl-raft";

/// The Lease of StatefulSet `sts` in namespace `ns`: `kubectl-raft.NS.STS` (a namespace has no
/// dots, so the first one after the prefix ends it); a name longer than the 253 characters
/// Kubernetes allows keeps its start and ends in a checksum of the whole.
pub fn lease_name(ns: &str, sts: &str) -> String {
    named("kubectl-raft", ns, sts)
}

/// The Lease in which the eviction gate's replicas keep their record of cluster NS/STS
/// (`gate::Record`): `kubectl-raft-gate.NS.STS`, shortened as [`lease_name`] is.
pub fn gate_record_name(ns: &str, sts: &str) -> String {
    named("kubectl-raft-gate", ns, sts)
}

fn named(prefix: &str, ns: &str, sts: &str) -> String {
    let full = format!("{prefix}.{ns}.{sts}");
    if full.len() <= 253 {
        return full;
    }
    // FNV-1a: stable across builds and platforms, unlike std's hasher.
    let sum = full.bytes().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100000001b3)
    });
    let mut head = full[..236].trim_end_matches(['.', '-']).to_string();
    head.push_str(&format!("-{sum:016x}"));
    head
}

/// Who holds it, in words a colleague recognises (`what`: the command after `kubectl raft`,
/// e.g. "drain worker-3" or "restart db/etcd"); unique per process run.
pub fn holder_identity(what: &str) -> String {
    let user = std::env::var("USER").unwrap_or_else(|_| "someone".into());
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_else(|_| "unknown-host".into());
    let started = Timestamp::now().as_millisecond();
    format!(
        "{user}@{host} pid {} started {started} (kubectl raft {what})",
        std::process::id(),
    )
}

/// What the lock knows of itself, shared with its renewal task.
#[derive(Debug)]
struct State {
    /// The resourceVersion of the Lease as this drain last wrote it.
    version: Option<String>,
    /// When it was last renewed (this process's clock).
    renewed: Instant,
    /// Why it is no longer ours, once it is not.
    lost: Option<String>,
}

/// A held Lease; renewed in the background until `release`.
pub struct Held {
    api: Api<Lease>,
    name: String,
    cluster: String,
    holder: String,
    state: Arc<Mutex<State>>,
    renew: tokio::task::JoinHandle<()>,
    /// One write of the Lease at a time (a renewal, a record): each names the version the
    /// last one wrote.
    writes: Arc<tokio::sync::Mutex<()>>,
    /// The Lease's annotations as this run found and wrote them (a record for the next run).
    annotations: Arc<Mutex<BTreeMap<String, String>>>,
}

/// Annotations of a cluster's Lease that are a record for a later run, not the lock's own.
fn is_record(key: &str) -> bool {
    key != CLUSTER_ANNOTATION
}

/// The records a cluster's Lease carries (restart's members still to restart), read without
/// taking the lock (a dry run); empty when there is no Lease.
pub async fn peek(
    client: &Client,
    lock_ns: &str,
    ns: &str,
    sts: &str,
) -> Result<BTreeMap<String, String>> {
    let api: Api<Lease> = Api::namespaced(client.clone(), lock_ns);
    let lease = api.get_opt(&lease_name(ns, sts)).await.map_err(|e| {
        api_context(e, "get", "leases.coordination.k8s.io", lock_ns)
            .context(format!("reading the lock of {ns}/{sts}"))
    })?;
    Ok(lease
        .and_then(|l| l.metadata.annotations)
        .unwrap_or_default()
        .into_iter()
        .filter(|(k, _)| is_record(k))
        .collect())
}

/// A held Lease as an observer sees it: its holder, its resourceVersion (which every renewal
/// changes) and its duration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub holder: String,
    pub version: Option<String>,
    pub duration: Duration,
}

/// The cluster's Lease, if it has a holder, for an observer that judges its liveness by its own
/// clock (the eviction gate: held while its version changed within its duration, as
/// `acquire` judges a Lease it waits for; never its renewTime against this clock).
pub async fn seen(client: &Client, lock_ns: &str, ns: &str, sts: &str) -> Result<Option<Seen>> {
    let api: Api<Lease> = Api::namespaced(client.clone(), lock_ns);
    let fail = |e| {
        api_context(e, "get", "leases.coordination.k8s.io", lock_ns)
            .context(format!("reading the lock of {ns}/{sts}"))
    };
    let lease = match api.get_opt(&lease_name(ns, sts)).await {
        Ok(l) => l,
        // No lock namespace: nobody can hold a lock.
        Err(e) if status_of(&e).is_some_and(|s| s.code == 404) => None,
        // A reader granted only in the lock namespace (docs/rbac.yaml's
        // kubectl-raft-gate-reads-locks) is refused there too when it does not exist (the gate
        // installed without docs/rbac.yaml): nobody can hold a lock then either.
        Err(e) if status_of(&e).is_some_and(|s| s.code == 403) => {
            let namespaces = Api::<Namespace>::all(client.clone());
            match namespaces.get_opt(lock_ns).await {
                Ok(None) => None,
                _ => return Err(fail(e)),
            }
        }
        Err(e) => return Err(fail(e)),
    };
    Ok(lease.and_then(|l| seen_in(&l)))
}

/// The holder, version and period of a lock Lease, if it has a holder.
fn seen_in(l: &Lease) -> Option<Seen> {
    let s = l.spec.as_ref()?;
    Some(Seen {
        holder: s.holder_identity.clone()?,
        version: l.metadata.resource_version.clone(),
        duration: period(s),
    })
}

/// How long a lock Lease counts as held after its last change: its own duration, but never
/// longer than the period kubectl raft writes ([`LEASE_SECONDS`]). Every holder renews well
/// within it; a Lease planted with a day's duration by whoever may write locks would otherwise
/// hold a cluster's drains, restarts and gated evictions for that day after its last change.
fn period(s: &LeaseSpec) -> Duration {
    let seconds = s
        .lease_duration_seconds
        .unwrap_or(LEASE_SECONDS)
        .clamp(1, LEASE_SECONDS);
    Duration::from_secs(seconds as u64)
}

fn spec(holder: &str, transitions: i32) -> LeaseSpec {
    let now = MicroTime(Timestamp::now());
    LeaseSpec {
        holder_identity: Some(holder.to_string()),
        lease_duration_seconds: Some(LEASE_SECONDS),
        acquire_time: Some(now.clone()),
        renew_time: Some(now),
        lease_transitions: Some(transitions),
        ..Default::default()
    }
}

/// The parts of a Lease that say whether its holder is alive: any change is a sign of life.
fn fingerprint(l: &Lease) -> (Option<String>, Option<String>) {
    (
        l.metadata.resource_version.clone(),
        l.spec.as_ref().and_then(|s| s.holder_identity.clone()),
    )
}

/// Takes the cluster's Lease, or says who holds it and how to break it. A Lease held by
/// another whose last renewal looks recent is refused at once; otherwise it is watched, and
/// taken over only if it does not change for its whole duration by this process's clock.
/// Returns the Held lock and, when one was taken over, its former holder.
pub async fn acquire(
    client: &Client,
    lock_ns: &str,
    ns: &str,
    sts: &str,
    holder: &str,
    on_wait: &(dyn Fn(&str) + Sync),
    cancel: &CancellationToken,
) -> Result<(Held, Option<String>)> {
    let api: Api<Lease> = Api::namespaced(client.clone(), lock_ns);
    let name = lease_name(ns, sts);
    let interrupted = || {
        anyhow::anyhow!(
            "interrupted before the lock of {ns}/{sts} (Lease {lock_ns}/{name}) was taken: nothing was changed"
        )
    };
    if cancel.is_cancelled() {
        return Err(interrupted());
    }
    let lease = Lease {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            labels: Some(
                [(
                    "app.kubernetes.io/managed-by".to_string(),
                    "kubectl-raft".to_string(),
                )]
                .into(),
            ),
            annotations: Some([(CLUSTER_ANNOTATION.to_string(), format!("{ns}/{sts}"))].into()),
            ..Default::default()
        },
        spec: Some(spec(holder, 0)),
    };
    let lease_api = |e, verb| api_context(e, verb, "leases.coordination.k8s.io", lock_ns);
    let (written, took_over) = match api.create(&PostParams::default(), &lease).await {
        Ok(l) => (l, None),
        Err(e) if status_of(&e).is_some_and(|s| s.code == 409) => {
            let current = api.get(&name).await.map_err(|e| lease_api(e, "get"))?;
            let s = current.spec.clone().unwrap_or_default();
            // Released with a record for the next run: free, taken at once (if nobody wrote it
            // since this read).
            if s.holder_identity.is_none() {
                let mut taken = current.clone();
                taken.spec = Some(spec(
                    holder,
                    s.lease_transitions.unwrap_or(0).saturating_add(1),
                ));
                if cancel.is_cancelled() {
                    return Err(interrupted());
                }
                match api.replace(&name, &PostParams::default(), &taken).await {
                    Ok(l) => return Ok((held(api, name, ns, sts, holder, l), None)),
                    Err(e) if status_of(&e).is_some_and(|s| s.code == 409) => {
                        return Box::pin(acquire(client, lock_ns, ns, sts, holder, on_wait, cancel))
                            .await
                    }
                    Err(e) => return Err(lease_api(e, "update")),
                }
            }
            let who = s
                .holder_identity
                .clone()
                .unwrap_or_else(|| "unknown".into());
            let limit = period(&s).as_secs();
            let age = s
                .renew_time
                .as_ref()
                .map(|t| Timestamp::now().duration_since(t.0).as_secs_f64());
            let busy = |age: String| {
                anyhow::anyhow!(
                    "{ns}/{sts} is being drained or restarted by {who} (Lease {name} in namespace {lock_ns}, renewed {age}); wait until it ends. \
                     If that command is dead, the Lease is taken over once it has not changed for {limit}s, or break it now: kubectl delete lease -n {lock_ns} {name}"
                )
            };
            // Recent by its own clock: refuse now (a skewed clock can only make this refuse,
            // never take over).
            if let Some(a) = age.filter(|a| *a <= limit as f64) {
                return Err(busy(format!("{a:.0}s ago")));
            }
            // Otherwise watch it: a live holder renews it within its duration.
            on_wait(&format!(
                "the lock of {ns}/{sts} (Lease {lock_ns}/{name}) is held by {who}; taking it over if it does not change for {limit}s"
            ));
            let seen = fingerprint(&current);
            let since = Instant::now();
            let mut last = current;
            while since.elapsed() < Duration::from_secs(limit) {
                // Ctrl-C while watching: nothing of this process's is in the Lease yet.
                tokio::select! {
                    _ = cancel.cancelled() => return Err(interrupted()),
                    _ = tokio::time::sleep(OBSERVE_EVERY) => {}
                }
                match api.get_opt(&name).await.map_err(|e| lease_api(e, "get"))? {
                    // Released meanwhile: start again, from a fresh create.
                    None => {
                        return Box::pin(acquire(client, lock_ns, ns, sts, holder, on_wait, cancel))
                            .await
                    }
                    Some(l) if fingerprint(&l) != seen => {
                        return Err(busy("just now, while this drain watched it".into()))
                    }
                    Some(l) => last = l,
                }
            }
            let transitions = s.lease_transitions.unwrap_or(0).saturating_add(1);
            let mut replaced = last;
            replaced.spec = Some(spec(holder, transitions));
            if cancel.is_cancelled() {
                return Err(interrupted());
            }
            // Its resourceVersion is the one watched: if anyone wrote in between, this fails.
            let written = api
                .replace(&name, &PostParams::default(), &replaced)
                .await
                .map_err(|e| {
                    if status_of(&e).is_some_and(|s| s.code == 409) {
                        return busy("just now, as this drain tried to take it over".into());
                    }
                    lease_api(e, "update").context(format!(
                        "taking over the stale drain lock of {ns}/{sts} from {who}"
                    ))
                })?;
            (written, Some(who))
        }
        Err(e) if status_of(&e).is_some_and(|s| s.code == 404) => {
            bail!(
                "the lock namespace {lock_ns:?} does not exist (drain and restart keep one Lease per cluster there): \
                 create it once with `kubectl create namespace {lock_ns}` (`kubectl apply -f docs/rbac.yaml` creates {DEFAULT_NAMESPACE:?} and the rights to write Leases in it), or pass --lock-namespace NS"
            )
        }
        Err(e) => {
            return Err(lease_api(e, "create").context(format!(
                "locking {ns}/{sts} against concurrent drains and restarts"
            )))
        }
    };
    Ok((held(api, name, ns, sts, holder, written), took_over))
}

/// The lock as `written`, renewed from now on.
fn held(api: Api<Lease>, name: String, ns: &str, sts: &str, holder: &str, written: Lease) -> Held {
    let state = Arc::new(Mutex::new(State {
        version: written.metadata.resource_version.clone(),
        renewed: Instant::now(),
        lost: None,
    }));
    let writes = Arc::new(tokio::sync::Mutex::new(()));
    let renew = tokio::spawn(renew_loop(
        api.clone(),
        name.clone(),
        holder.to_string(),
        state.clone(),
        writes.clone(),
    ));
    Held {
        api,
        name,
        cluster: format!("{ns}/{sts}"),
        holder: holder.to_string(),
        state,
        renew,
        writes,
        annotations: Arc::new(Mutex::new(written.metadata.annotations.unwrap_or_default())),
    }
    .registered()
}

/// What a held lock needs to be released when the process must exit at once (a second
/// Ctrl-C): every lock this process holds, by its Lease's name.
struct Releasable {
    api: Api<Lease>,
    state: Arc<Mutex<State>>,
    annotations: Arc<Mutex<BTreeMap<String, String>>>,
}

static HELD: Mutex<Vec<(String, Releasable)>> = Mutex::new(Vec::new());

/// Releases every lock this process still holds, as `Held::release` does, without waiting for
/// a renewal in flight: for a process about to exit (`live::evict::stop_on_ctrl_c`'s second
/// Ctrl-C). Bound it with a timeout; a lock it could not release is taken over 30 s after its
/// last renewal.
pub async fn release_all_now() {
    let held: Vec<(String, Releasable)> = std::mem::take(&mut *HELD.lock().expect("not poisoned"));
    for (name, r) in held {
        let (version, lost) = {
            let st = r.state.lock().expect("not poisoned");
            (st.version.clone(), st.lost.is_some())
        };
        if lost {
            continue;
        }
        let keeps = r
            .annotations
            .lock()
            .expect("not poisoned")
            .keys()
            .any(|k| is_record(k));
        free(&r.api, &name, version, keeps).await;
    }
}

/// Renews the Lease every RENEW_EVERY with an update conditioned on the version last
/// written; stops at the first sign that it is no longer ours.
async fn renew_loop(
    api: Api<Lease>,
    name: String,
    holder: String,
    state: Arc<Mutex<State>>,
    writes: Arc<tokio::sync::Mutex<()>>,
) {
    loop {
        tokio::time::sleep(RENEW_EVERY).await;
        let _one_write = writes.lock().await;
        let version = state.lock().expect("not poisoned").version.clone();
        let outcome = async {
            let mut l = api.get(&name).await?;
            let theirs = l
                .spec
                .as_ref()
                .and_then(|s| s.holder_identity.clone())
                .filter(|h| *h != holder);
            // The precondition: the version this drain wrote last, not the one just read.
            l.metadata.resource_version = version.clone();
            if let Some(s) = l.spec.as_mut() {
                s.renew_time = Some(MicroTime(Timestamp::now()));
            }
            match theirs {
                Some(who) => Ok(Err(who)),
                None => api.replace(&name, &PostParams::default(), &l).await.map(Ok),
            }
        }
        .await;
        let mut st = state.lock().expect("not poisoned");
        match outcome {
            Ok(Ok(l)) => {
                st.version = l.metadata.resource_version;
                st.renewed = Instant::now();
            }
            Ok(Err(who)) => {
                st.lost = Some(format!("the drain lock {name} is now held by {who}"));
                return;
            }
            Err(e) if status_of(&e).is_some_and(|s| s.code == 409 || s.code == 404) => {
                st.lost = Some(format!(
                    "the drain lock {name} was changed by someone else (taken over, or deleted): {}",
                    anyhow_chain(&anyhow::Error::new(e))
                ));
                return;
            }
            Err(e) => {
                if st.renewed.elapsed() >= Duration::from_secs(LEASE_SECONDS as u64) {
                    st.lost = Some(format!(
                        "the drain lock {name} could not be renewed for {LEASE_SECONDS}s (another drain may have taken it over): {}",
                        anyhow_chain(&anyhow::Error::new(e))
                    ));
                    return;
                }
                eprintln!(
                    "Warning: cannot renew the drain lock {name} (retrying; it is lost {LEASE_SECONDS}s after the last renewal): {}",
                    anyhow_chain(&anyhow::Error::new(e))
                );
            }
        }
    }
}

/// Frees Lease `name` as last written at `version`: deleted, or, when it keeps a record for the
/// next run, kept with its holder cleared. A Lease written by someone else since is left alone.
async fn free(api: &Api<Lease>, name: &str, version: Option<String>, keeps_record: bool) {
    if keeps_record {
        let result = async {
            let mut l = api.get(name).await?;
            l.metadata.resource_version = version.clone();
            if let Some(s) = l.spec.as_mut() {
                s.holder_identity = None;
                s.renew_time = None;
            }
            api.replace(name, &PostParams::default(), &l).await
        }
        .await;
        if let Err(e) = result {
            if !status_of(&e).is_some_and(|s| s.code == 409 || s.code == 404) {
                eprintln!(
                    "Warning: cannot release the lock {name} (it is taken over {LEASE_SECONDS}s after its last renewal): {}",
                    anyhow_chain(&anyhow::Error::new(e))
                );
            }
        }
        return;
    }
    let dp = DeleteParams {
        preconditions: Some(Preconditions {
            resource_version: version,
            uid: None,
        }),
        ..Default::default()
    };
    match api.delete(name, &dp).await {
        Ok(_) => {}
        // Changed since this drain's last write: another drain's now; leave it.
        Err(e) if status_of(&e).is_some_and(|s| s.code == 409 || s.code == 404) => {}
        Err(e) => eprintln!(
            "Warning: cannot delete the drain lock {name} (it is taken over {LEASE_SECONDS}s after its last renewal): {}",
            anyhow_chain(&anyhow::Error::new(e))
        ),
    }
}

impl Held {
    /// Listed for `release_all_now`.
    fn registered(self) -> Self {
        HELD.lock().expect("not poisoned").push((
            self.name.clone(),
            Releasable {
                api: self.api.clone(),
                state: self.state.clone(),
                annotations: self.annotations.clone(),
            },
        ));
        self
    }

    /// A record this run's Lease carries for a later run (restart's members still to restart).
    pub fn record(&self, key: &str) -> Option<String> {
        self.annotations
            .lock()
            .expect("not poisoned")
            .get(key)
            .cloned()
    }

    /// Sets (or, with None, removes) a record on the Lease, in a write conditioned on the
    /// version this run last wrote, as a renewal is: a Lease someone else took is not
    /// written.
    pub async fn set_record(&self, key: &str, value: Option<&str>) -> Result<()> {
        let _one_write = self.writes.lock().await;
        let version = self.state.lock().expect("not poisoned").version.clone();
        let mut l = self.api.get(&self.name).await.map_err(|e| {
            api_context(e, "get", "leases.coordination.k8s.io", "")
                .context(format!("recording on the lock of {}", self.cluster))
        })?;
        l.metadata.resource_version = version;
        let ann = l.metadata.annotations.get_or_insert_with(Default::default);
        match value {
            Some(v) => ann.insert(key.to_string(), v.to_string()),
            None => ann.remove(key),
        };
        let written = self
            .api
            .replace(&self.name, &PostParams::default(), &l)
            .await
            .map_err(|e| {
                if status_of(&e).is_some_and(|s| s.code == 409) {
                    self.state.lock().expect("not poisoned").lost = Some(format!(
                        "the lock of {} was changed by someone else",
                        self.cluster
                    ));
                }
                api_context(e, "update", "leases.coordination.k8s.io", "")
                    .context(format!("recording on the lock of {}", self.cluster))
            })?;
        self.state.lock().expect("not poisoned").version =
            written.metadata.resource_version.clone();
        *self.annotations.lock().expect("not poisoned") =
            written.metadata.annotations.unwrap_or_default();
        Ok(())
    }

    /// Why the lock is lost, if its renewal found so already (no request).
    pub fn lost(&self) -> Option<String> {
        self.state.lock().expect("not poisoned").lost.clone()
    }

    /// Before an action: the Lease is still this drain's, by a fresh read. A lock lost to
    /// another drain (or not renewed for its duration) is an error that stops this cluster.
    pub async fn verify(&self) -> Result<()> {
        let lost = self.state.lock().expect("not poisoned").lost.clone();
        if let Some(why) = lost {
            bail!("{why}; this drain stopped before its next action");
        }
        if self.state.lock().expect("not poisoned").renewed.elapsed()
            >= Duration::from_secs(LEASE_SECONDS as u64)
        {
            bail!(
                "the drain lock {} was not renewed for {LEASE_SECONDS}s (this process was paused, or the API server did not answer): another drain may hold it now; this drain stopped before its next action",
                self.name
            );
        }
        let current = self.api.get_opt(&self.name).await.map_err(|e| {
            api_context(e, "get", "leases.coordination.k8s.io", "")
                .context(format!("checking the drain lock of {}", self.cluster))
        })?;
        let holder = current
            .as_ref()
            .and_then(|l| l.spec.as_ref())
            .and_then(|s| s.holder_identity.clone());
        if holder.as_deref() != Some(self.holder.as_str()) {
            let who = holder.unwrap_or_else(|| "nobody (the Lease is gone)".into());
            let why = format!(
                "the drain lock of {} is now held by {who}; this drain stopped before its next action",
                self.cluster
            );
            self.state.lock().expect("not poisoned").lost = Some(why.clone());
            bail!("{why}");
        }
        Ok(())
    }

    pub async fn release(self) {
        // A renewal in flight finishes first (its write is the version released), then no
        // other starts.
        let writes = self.writes.clone();
        let _one_write = writes.lock().await;
        self.renew.abort();
        // Still in HELD until it is freed: a second Ctrl-C meanwhile (`release_all_now`)
        // frees it too (the later of the two conditional writes finds it gone or changed).
        let forget = || {
            HELD.lock()
                .expect("not poisoned")
                .retain(|(n, _)| *n != self.name)
        };
        let (version, lost) = {
            let st = self.state.lock().expect("not poisoned");
            (st.version.clone(), st.lost.is_some())
        };
        if lost {
            // Not ours any more: someone else's drain holds it.
            forget();
            return;
        }
        let keeps_record = self
            .annotations
            .lock()
            .expect("not poisoned")
            .keys()
            .any(|k| is_record(k));
        free(&self.api, &self.name, version, keeps_record).await;
        forget();
    }
}

#[cfg(test)]
mod fenced_tests {
    //! The fence, against a fake Lease API whose answers the test scripts: every write
    //! carries the resourceVersion this drain last wrote, so a Lease someone else wrote in
    //! between is neither renewed over nor deleted.
    use std::sync::Mutex as StdMutex;

    use http::{Request, Response};
    use http_body_util::BodyExt;
    use kube::client::Body;

    use super::*;

    /// What happens to the Lease from outside (another drain's write).
    type Write = Box<dyn FnOnce(&mut Lease) + Send>;

    /// One Lease, as the API server keeps it; `after_get` runs once after the next GET (a
    /// second drain writing just after this one read).
    #[derive(Default)]
    struct Fake {
        lease: StdMutex<Option<Lease>>,
        after_get: StdMutex<Option<Write>>,
    }

    fn status(code: u16, reason: &str) -> Response<Body> {
        let body = serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
            "message": reason, "reason": reason, "code": code});
        Response::builder()
            .status(code)
            .body(Body::from(serde_json::to_vec(&body).unwrap()))
            .unwrap()
    }

    fn ok(l: &Lease) -> Response<Body> {
        Response::builder()
            .status(200)
            .body(Body::from(serde_json::to_vec(l).unwrap()))
            .unwrap()
    }

    fn bump(l: &mut Lease) {
        let rv: u64 = l
            .metadata
            .resource_version
            .as_deref()
            .unwrap_or("0")
            .parse()
            .unwrap();
        l.metadata.resource_version = Some((rv + 1).to_string());
    }

    impl Fake {
        async fn serve(&self, req: Request<Body>) -> Response<Body> {
            let method = req.method().clone();
            let body = req.into_body().collect().await.unwrap().to_bytes();
            let mut slot = self.lease.lock().unwrap();
            let Some(current) = slot.as_mut() else {
                return status(404, "NotFound");
            };
            match method.as_str() {
                "GET" => {
                    let answer = ok(current);
                    if let Some(f) = self.after_get.lock().unwrap().take() {
                        f(current);
                    }
                    answer
                }
                "PUT" => {
                    let mut new: Lease = serde_json::from_slice(&body).unwrap();
                    // As the API server: an update that names a resourceVersion must name the
                    // current one; one that names none is applied as it is.
                    if new.metadata.resource_version.is_some()
                        && new.metadata.resource_version != current.metadata.resource_version
                    {
                        return status(409, "Conflict");
                    }
                    new.metadata.resource_version = current.metadata.resource_version.clone();
                    bump(&mut new);
                    *current = new;
                    ok(current)
                }
                "DELETE" => {
                    let opts: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
                    let want = opts
                        .pointer("/preconditions/resourceVersion")
                        .and_then(|v| v.as_str());
                    if want.is_some_and(|w| Some(w) != current.metadata.resource_version.as_deref())
                    {
                        return status(409, "Conflict");
                    }
                    *slot = None;
                    status(200, "Deleted")
                }
                _ => status(405, "MethodNotAllowed"),
            }
        }
    }

    fn lease(holder: &str, rv: &str) -> Lease {
        Lease {
            metadata: ObjectMeta {
                name: Some("kubectl-raft.db.etcd".into()),
                namespace: Some("kubectl-raft".into()),
                resource_version: Some(rv.into()),
                ..Default::default()
            },
            spec: Some(spec(holder, 0)),
        }
    }

    fn client(fake: std::sync::Arc<Fake>) -> Api<Lease> {
        let svc = tower::service_fn(move |req: Request<Body>| {
            let fake = fake.clone();
            async move { Ok::<_, std::convert::Infallible>(fake.serve(req).await) }
        });
        Api::namespaced(Client::new(svc, "default"), "kubectl-raft")
    }

    fn held(api: Api<Lease>, version: &str) -> Held {
        Held {
            api,
            name: "kubectl-raft.db.etcd".into(),
            cluster: "db/etcd".into(),
            holder: "alice".into(),
            state: Arc::new(Mutex::new(State {
                version: Some(version.into()),
                renewed: Instant::now(),
                lost: None,
            })),
            renew: tokio::spawn(async {}),
            writes: Arc::new(tokio::sync::Mutex::new(())),
            annotations: Arc::new(Mutex::new(BTreeMap::new())),
        }
    }

    fn holder_now(fake: &Fake) -> Option<String> {
        fake.lease
            .lock()
            .unwrap()
            .as_ref()
            .and_then(|l| l.spec.as_ref()?.holder_identity.clone())
    }

    #[tokio::test]
    async fn a_release_leaves_a_lease_someone_else_wrote_since() {
        // alice last wrote version 4; bob took the Lease over since (version 5).
        let fake = std::sync::Arc::new(Fake {
            lease: StdMutex::new(Some(lease("bob", "5"))),
            ..Default::default()
        });
        held(client(fake.clone()), "4").release().await;
        assert_eq!(
            holder_now(&fake).as_deref(),
            Some("bob"),
            "bob's lock was deleted"
        );
    }

    /// A second Ctrl-C exits at once; the lock goes first (`release_all_now`), not 30 s later.
    #[tokio::test]
    async fn an_exit_at_once_still_releases_the_lock() {
        let fake = std::sync::Arc::new(Fake {
            lease: StdMutex::new(Some(lease("alice", "4"))),
            ..Default::default()
        });
        let _held = held(client(fake.clone()), "4").registered();
        release_all_now().await;
        assert!(fake.lease.lock().unwrap().is_none());
    }

    #[tokio::test]
    async fn a_release_deletes_its_own_lease() {
        let fake = std::sync::Arc::new(Fake {
            lease: StdMutex::new(Some(lease("alice", "4"))),
            ..Default::default()
        });
        held(client(fake.clone()), "4").release().await;
        assert!(fake.lease.lock().unwrap().is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_renewal_does_not_write_over_a_takeover_between_its_read_and_its_write() {
        let fake = std::sync::Arc::new(Fake {
            lease: StdMutex::new(Some(lease("alice", "4"))),
            ..Default::default()
        });
        // bob writes just after alice's renewal reads.
        *fake.after_get.lock().unwrap() = Some(Box::new(|l: &mut Lease| {
            l.spec.as_mut().unwrap().holder_identity = Some("bob".into());
            bump(l);
        }));
        let state = Arc::new(Mutex::new(State {
            version: Some("4".into()),
            renewed: Instant::now(),
            lost: None,
        }));
        let task = tokio::spawn(renew_loop(
            client(fake.clone()),
            "kubectl-raft.db.etcd".into(),
            "alice".into(),
            state.clone(),
            Arc::new(tokio::sync::Mutex::new(())),
        ));
        tokio::time::timeout(Duration::from_secs(60), task)
            .await
            .expect("the renewal stops once the lock is lost")
            .unwrap();
        assert_eq!(
            holder_now(&fake).as_deref(),
            Some("bob"),
            "alice renewed over bob"
        );
        assert!(state.lock().unwrap().lost.is_some());
    }
}

#[cfg(test)]
mod name_tests {
    use super::lease_name;

    #[test]
    fn a_lease_is_named_by_its_clusters_namespace_and_statefulset() {
        assert_eq!(lease_name("db", "etcd"), "kubectl-raft.db.etcd");
        // A namespace has no dots: the first dot after the prefix ends it.
        assert_ne!(lease_name("a-b", "c"), lease_name("a", "b-c"));
        assert_ne!(lease_name("a", "b.c"), lease_name("a", "b-c"));
    }

    #[test]
    fn a_name_too_long_for_kubernetes_is_shortened_and_stays_distinct() {
        let long = "s".repeat(250);
        let a = lease_name("db", &long);
        let b = lease_name("db", &format!("{long}x"));
        assert!(a.len() <= 253 && b.len() <= 253, "{a} {b}");
        assert_ne!(a, b);
        assert!(a.starts_with("kubectl-raft.db.sss"), "{a}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(holder: Option<&str>, seconds: Option<i32>) -> Lease {
        Lease {
            metadata: ObjectMeta {
                resource_version: Some("7".into()),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_string),
                lease_duration_seconds: seconds,
                ..Default::default()
            }),
        }
    }

    #[test]
    fn a_lock_planted_with_a_days_duration_counts_for_kubectl_raft_s_period_only() {
        let seen = seen_in(&lease(Some("mallory"), Some(86_400))).expect("held");
        assert_eq!(seen.duration, Duration::from_secs(LEASE_SECONDS as u64));
    }

    #[test]
    fn a_lock_with_a_shorter_duration_counts_for_its_own() {
        let seen = seen_in(&lease(Some("alice@laptop"), Some(10))).expect("held");
        assert_eq!(seen.duration, Duration::from_secs(10));
    }

    #[test]
    fn a_lock_with_a_zero_or_negative_duration_counts_for_a_second() {
        for seconds in [0, -5] {
            let seen = seen_in(&lease(Some("bob"), Some(seconds))).expect("held");
            assert_eq!(seen.duration, Duration::from_secs(1), "{seconds}");
        }
    }

    #[test]
    fn a_released_lock_has_no_holder_to_wait_for() {
        assert!(seen_in(&lease(None, Some(30))).is_none());
    }
}
