//! A rollout's operations on a real StatefulSet ([`RolloutOps`] for [`KubeRollout`]): the
//! record a rerun resumes from, on the cluster's Lease; the update strategy switched to
//! OnDelete and put back, each conditioned on what this run read; the members through
//! [`KubeCluster`].

use std::time::Duration;

use anyhow::{bail, Context, Result};
use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetUpdateStrategy};
use kube::api::{Api, Patch, PatchParams};
use tokio_util::sync::CancellationToken;

use super::cluster::{Following, KubeCluster};
use super::evict::sleep_or_cancel;
use super::lock;
use crate::drain::rollout::RolloutOps;
use crate::errors::api_context;
use crate::plan::restart::{
    describe_strategy, restore_patch, settled_for_restore, unobserved, Restart, RESTART_PENDING,
    SAVED_STRATEGY,
};

/// restart's `RolloutOps` over one StatefulSet: its members through `cluster`, which holds the
/// run's lock and follows the members still to replace; the StatefulSet itself by the
/// cluster's own client, namespace and name.
pub struct KubeRollout<'a> {
    cluster: KubeCluster<'a>,
    /// The cluster's lock and the members it follows, as `new` found them on it.
    lock: &'a lock::Held,
    following: &'a Following,
}

impl<'a> KubeRollout<'a> {
    /// None unless `cluster` holds its lock and follows a restart's members (`lock`,
    /// `restart`): a rollout's record lives on the one, its members come from the other.
    pub fn new(cluster: KubeCluster<'a>) -> Option<Self> {
        Some(KubeRollout {
            lock: cluster.lock?,
            following: cluster.restart?,
            cluster,
        })
    }

    fn api(&self) -> Api<StatefulSet> {
        Api::namespaced(self.cluster.surveyor.conn.client.clone(), self.cluster.ns)
    }
}

impl<'a> RolloutOps for KubeRollout<'a> {
    type Cluster = KubeCluster<'a>;

    fn cluster(&self) -> &Self::Cluster {
        &self.cluster
    }

    async fn set_record(&self, value: Option<&str>) -> Result<()> {
        self.lock.set_record(RESTART_PENDING, value).await
    }

    async fn switch_to_on_delete(&self, s: &StatefulSetUpdateStrategy) -> Result<()> {
        let api = self.api();
        switch_to_on_delete(&api, self.cluster.name, s).await?;
        // The switch changes the StatefulSet's spec: its controller acts on it within a
        // second. Waited for here, so that the first look does not take the run's own switch
        // for a change to wait for (RolloutInProgress) and plan nothing. Ctrl-C meanwhile is
        // the cluster loop's to see (a stop before any eviction puts the strategy back).
        let sts = read_sts(&api, self.cluster.name).await?;
        let _ = once_observed(
            &api,
            sts,
            crate::live::restart::OBSERVED_WITHIN,
            &self.cluster.evictor.cancel,
            &|_| {},
        )
        .await;
        Ok(())
    }

    async fn restore_strategy(&self, s: &StatefulSetUpdateStrategy) -> Result<()> {
        restore_strategy(&self.api(), self.cluster.name, s).await
    }

    fn restart_now(&self) -> Restart {
        self.following.now()
    }

    fn followed(&self) -> Vec<String> {
        self.following.notes()
    }
}

/// Records the user's strategy on the StatefulSet and makes it OnDelete (one patch): from
/// here its controller replaces no member by itself; each member deleted comes back at the
/// update revision. Conditioned on the StatefulSet as read (its resourceVersion): a conflict
/// with the controller's own status writes is read again, a few times.
async fn switch_to_on_delete(
    api: &Api<StatefulSet>,
    name: &str,
    s: &StatefulSetUpdateStrategy,
) -> Result<()> {
    let saved = serde_json::to_string(s).expect("a strategy serialises");
    for attempt in 1..=3 {
        // A strategy someone changed since this run decided on it is not overwritten.
        let current = read_sts(api, name).await?;
        let theirs = strategy_of(&current);
        if &theirs != s {
            bail!(
                "statefulset {name}'s update strategy changed since this restart read it (now {}); nothing was changed: run the same command again",
                describe_strategy(&theirs)
            );
        }
        let patch = serde_json::json!({
            "metadata": {"annotations": {SAVED_STRATEGY: saved}, "resourceVersion": current.metadata.resource_version},
            "spec": {"updateStrategy": {"type": "OnDelete", "rollingUpdate": null}},
        });
        if patch_unless_conflict(api, name, &patch, attempt < 3)
            .await
            .with_context(|| format!("setting statefulset {name}'s update strategy to OnDelete"))?
        {
            return Ok(());
        }
    }
    unreachable!("the last attempt returns")
}

/// The StatefulSet's update strategy as read (RollingUpdate when unset).
fn strategy_of(sts: &StatefulSet) -> StatefulSetUpdateStrategy {
    sts.spec
        .as_ref()
        .and_then(|x| x.update_strategy.clone())
        .unwrap_or_default()
}

/// `sts` once its controller has acted on its latest change (`plan::restart::unobserved`),
/// read again every [`OBSERVED_POLL`] for at most `within`; the StatefulSet as last read when
/// that runs out (a restart then refuses to decide on it, saying why). It reads with GET, the
/// right restart's role grants (a watch is not granted: docs/rbac.yaml), says once what it
/// waits for, and stops at once when `cancel` fires (Ctrl-C), nothing having been changed.
pub async fn once_observed(
    api: &Api<StatefulSet>,
    sts: StatefulSet,
    within: Duration,
    cancel: &CancellationToken,
    say: &(dyn Fn(&str) + Sync),
) -> Result<StatefulSet> {
    let Some((generation, observed)) = unobserved(&sts) else {
        return Ok(sts);
    };
    let name = sts.metadata.name.clone().unwrap_or_default();
    say(&format!(
        "waiting up to {}s for statefulset {name}'s controller to act on its latest change (generation {generation}, observed {observed}) before deciding",
        within.as_secs()
    ));
    let deadline = tokio::time::Instant::now() + within;
    let mut last = sts;
    while unobserved(&last).is_some() && tokio::time::Instant::now() < deadline {
        let pause = OBSERVED_POLL.min(deadline - tokio::time::Instant::now());
        if sleep_or_cancel(cancel, pause).await {
            bail!(Interrupted(format!(
                "waiting for statefulset {name}'s controller"
            )));
        }
        // A read that fails (a moment of the API server's) is read again at the next pause;
        // the last read, at the limit, must answer.
        if let Ok(s) = read_sts(api, &name).await {
            last = s;
        }
    }
    if unobserved(&last).is_some() {
        last = read_sts(api, &name).await?;
    }
    Ok(last)
}

/// How often [`once_observed`] reads the StatefulSet again.
pub const OBSERVED_POLL: Duration = Duration::from_millis(500);

/// Ctrl-C came before a step was taken: nothing was changed.
#[derive(Debug)]
pub struct Interrupted(pub String);

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "interrupted while {}; nothing was changed", self.0)
    }
}

impl std::error::Error for Interrupted {}

async fn read_sts(api: &Api<StatefulSet>, name: &str) -> Result<StatefulSet> {
    api.get(name)
        .await
        .map_err(|e| api_context(e, "get", "statefulsets", ""))
        .with_context(|| format!("reading statefulset {name}"))
}

/// How long a put-back waits for the StatefulSet's controller to count the last member
/// replaced at its update revision (it does so within a second when it runs).
const SETTLED_WITHIN: Duration = Duration::from_secs(15);

/// Puts `s` back over the OnDelete this restart set (a put-back after every member was
/// updated, also when a rerun finds that an earlier run stopped before it), only once its
/// controller has acted on its latest change and every member is at its update revision
/// (`plan::restart::settled_for_restore`): a template that arrived after the last look stays
/// under OnDelete, for the same command to drive. A strategy someone set meanwhile is theirs:
/// kept, and the saved one is removed (an error says so).
pub async fn restore_strategy(
    api: &Api<StatefulSet>,
    name: &str,
    s: &StatefulSetUpdateStrategy,
) -> Result<()> {
    let by_hand = || {
        format!(
            "by hand: kubectl patch sts {name} --type=merge -p '{}'",
            restore_patch(s)
        )
    };
    let deadline = tokio::time::Instant::now() + SETTLED_WITHIN;
    let mut attempt = 0;
    loop {
        let current = read_sts(api, name).await?;
        let theirs = strategy_of(&current);
        let saved_now = current
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(SAVED_STRATEGY));
        if &theirs == s && !saved_now {
            // Put back already (another restore-only run, on the lock before this one).
            return Ok(());
        }
        if theirs.type_.as_deref() != Some("OnDelete") {
            let forget = serde_json::json!({
                "metadata": {"annotations": {SAVED_STRATEGY: null}, "resourceVersion": current.metadata.resource_version},
            });
            let forgot = api
                .patch(name, &PatchParams::default(), &Patch::Merge(&forget))
                .await
                .is_ok();
            bail!(
                "statefulset {name}'s update strategy was changed meanwhile (now {}): it is left as it is, and {} is not put back{}. While it was not OnDelete, its controller could have deleted members beside the restart at a template change: keep updateStrategy OnDelete in the manifest (GitOps) for Raft StatefulSets",
                describe_strategy(&theirs),
                describe_strategy(s),
                if forgot { format!(" ({SAVED_STRATEGY} removed)") } else { format!(" (remove {SAVED_STRATEGY} by hand)") }
            );
        }
        if let Err(why) = settled_for_restore(&current) {
            if tokio::time::Instant::now() < deadline {
                tokio::time::sleep(OBSERVED_POLL).await;
                continue;
            }
            bail!(
                "statefulset {name} stays OnDelete, and {} is not put back yet: {why}. Run the same command again: it drives the new template in the safe order and then puts the strategy back ({})",
                describe_strategy(s),
                by_hand()
            );
        }
        attempt += 1;
        let mut patch = restore_patch(s);
        patch["metadata"]["resourceVersion"] = serde_json::json!(current.metadata.resource_version);
        if patch_unless_conflict(api, name, &patch, attempt < 3)
            .await
            .with_context(|| {
                format!(
                    "putting statefulset {name}'s update strategy back to {} ({})",
                    describe_strategy(s),
                    by_hand()
                )
            })?
        {
            return Ok(());
        }
    }
}

/// One merge patch conditioned on a resourceVersion: Ok(true) when written, Ok(false) on a
/// conflict (409: the StatefulSet changed since it was read, often by its controller's status
/// writes) when `again` says it is read and tried again.
async fn patch_unless_conflict(
    api: &Api<StatefulSet>,
    name: &str,
    patch: &serde_json::Value,
    again: bool,
) -> Result<bool> {
    match api
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
    {
        Ok(_) => Ok(true),
        Err(e) if again && crate::errors::status_of(&e).is_some_and(|x| x.code == 409) => Ok(false),
        Err(e) => Err(api_context(e, "patch", "statefulsets", "")),
    }
}

#[cfg(test)]
mod observed_tests {
    //! The wait for the StatefulSet's controller, against a fake API that grants what
    //! restart's role grants (GET; a watch is refused) and answers from a script.
    use std::sync::{Arc, Mutex};

    use http::{Request, Response};
    use kube::client::Body;
    use kube::Client;

    use super::*;
    use crate::drain::fixtures::etcd_statefulset as sts;

    /// The StatefulSet's successive answers to GET (the last repeats); GETs counted; a watch
    /// (or a list) refused with 403.
    struct Fake {
        answers: Mutex<Vec<StatefulSet>>,
        gets: Mutex<u32>,
    }

    fn api(fake: Arc<Fake>) -> Api<StatefulSet> {
        let svc = tower::service_fn(move |req: Request<Body>| {
            let fake = fake.clone();
            async move {
                let query = req.uri().query().unwrap_or_default();
                let named = req.uri().path().ends_with("/statefulsets/etcd");
                let answer = if req.method() == "GET" && named && !query.contains("watch") {
                    *fake.gets.lock().unwrap() += 1;
                    let mut answers = fake.answers.lock().unwrap();
                    let s = if answers.len() > 1 {
                        answers.remove(0)
                    } else {
                        answers[0].clone()
                    };
                    Response::builder()
                        .status(200)
                        .body(Body::from(serde_json::to_vec(&s).unwrap()))
                        .unwrap()
                } else {
                    let body = serde_json::json!({"kind": "Status", "apiVersion": "v1",
                        "status": "Failure", "reason": "Forbidden", "code": 403,
                        "message": "statefulsets.apps is forbidden: cannot watch"});
                    Response::builder()
                        .status(403)
                        .body(Body::from(serde_json::to_vec(&body).unwrap()))
                        .unwrap()
                };
                Ok::<_, std::convert::Infallible>(answer)
            }
        });
        Api::namespaced(Client::new(svc, "default"), "db")
    }

    fn fake(answers: Vec<StatefulSet>) -> Arc<Fake> {
        Arc::new(Fake {
            answers: Mutex::new(answers),
            gets: Mutex::new(0),
        })
    }

    /// With restart's role (no watch), a change the controller acts on a moment later is
    /// waited for and the StatefulSet as observed is what the restart decides on. (Before, a
    /// watch was refused, the wait ended at once and the restart refused, blaming the
    /// controller; this failed there.)
    #[tokio::test(start_paused = true)]
    async fn a_change_observed_a_moment_later_is_waited_for_with_get_alone() {
        let f = fake(vec![sts(3, 2), sts(3, 2), sts(3, 3)]);
        let said = Mutex::new(vec![]);
        let got = once_observed(
            &api(f.clone()),
            sts(3, 2),
            Duration::from_secs(30),
            &CancellationToken::new(),
            &|m: &str| said.lock().unwrap().push(m.to_string()),
        )
        .await
        .unwrap();
        assert_eq!(unobserved(&got), None, "the StatefulSet as observed");
        assert_eq!(*f.gets.lock().unwrap(), 3);
        let said = said.into_inner().unwrap();
        assert_eq!(said.len(), 1, "said once what it waits for: {said:?}");
        assert!(said[0].contains("generation 3, observed 2"), "{said:?}");
    }

    /// A controller that never acts: the wait ends at its limit with the StatefulSet as last
    /// read (restart then refuses, saying why).
    #[tokio::test(start_paused = true)]
    async fn a_controller_that_never_acts_is_waited_for_no_longer_than_the_limit() {
        let f = fake(vec![sts(3, 2)]);
        let began = tokio::time::Instant::now();
        let got = once_observed(
            &api(f),
            sts(3, 2),
            Duration::from_secs(30),
            &CancellationToken::new(),
            &|_: &str| {},
        )
        .await
        .unwrap();
        assert_eq!(unobserved(&got), Some((3, 2)));
        assert_eq!(began.elapsed(), Duration::from_secs(30));
    }

    /// Ctrl-C during the wait stops it at once, nothing changed. (Before, the handler was
    /// installed only once the lock was taken: a Ctrl-C in the wait of a second `-l`
    /// StatefulSet was swallowed and the restart went on.)
    #[tokio::test(start_paused = true)]
    async fn ctrl_c_during_the_wait_stops_it_at_once() {
        let cancel = CancellationToken::new();
        cancel.cancel();
        let began = tokio::time::Instant::now();
        let err = once_observed(
            &api(fake(vec![sts(3, 2)])),
            sts(3, 2),
            Duration::from_secs(30),
            &cancel,
            &|_: &str| {},
        )
        .await
        .unwrap_err();
        assert!(err.is::<Interrupted>(), "{err:#}");
        assert_eq!(began.elapsed(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn a_settled_statefulset_is_not_read_again() {
        let f = fake(vec![sts(3, 3)]);
        let got = once_observed(
            &api(f.clone()),
            sts(3, 3),
            Duration::from_secs(30),
            &CancellationToken::new(),
            &|_: &str| panic!("nothing to wait for"),
        )
        .await
        .unwrap();
        assert_eq!(unobserved(&got), None);
        assert_eq!(*f.gets.lock().unwrap(), 0);
    }
}
