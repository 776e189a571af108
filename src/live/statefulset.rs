//! A rollout's operations on a real StatefulSet ([`RolloutOps`] for [`KubeRollout`]): the
//! record a rerun resumes from, on the cluster's Lease; the update strategy switched to
//! OnDelete and put back, each conditioned on what this run read; the members through
//! [`KubeCluster`].

use anyhow::{bail, Context, Result};
use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetUpdateStrategy};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::wait::await_condition;

use super::cluster::{Following, KubeCluster};
use super::lock;
use crate::drain::rollout::RolloutOps;
use crate::errors::api_context;
use crate::plan::restart::{
    describe_strategy, restore_patch, unobserved, Restart, RESTART_PENDING, SAVED_STRATEGY,
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
        switch_to_on_delete(&self.api(), self.cluster.name, s).await
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
/// update revision.
async fn switch_to_on_delete(
    api: &Api<StatefulSet>,
    name: &str,
    s: &StatefulSetUpdateStrategy,
) -> Result<()> {
    let saved = serde_json::to_string(s).expect("a strategy serialises");
    // Conditioned on the StatefulSet as read with the strategy this run decided on: a
    // strategy someone changed since is not overwritten.
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
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|e| api_context(e, "patch", "statefulsets", ""))
        .with_context(|| format!("setting statefulset {name}'s update strategy to OnDelete"))?;
    Ok(())
}

/// The StatefulSet's update strategy as read (RollingUpdate when unset).
fn strategy_of(sts: &StatefulSet) -> StatefulSetUpdateStrategy {
    sts.spec
        .as_ref()
        .and_then(|x| x.update_strategy.clone())
        .unwrap_or_default()
}

/// `sts` once its controller has acted on its latest change (`plan::restart::unobserved`),
/// watched for at most `within`; the StatefulSet as last read when that runs out (a restart
/// then refuses to decide on it, saying why).
pub async fn once_observed(
    api: &Api<StatefulSet>,
    sts: StatefulSet,
    within: std::time::Duration,
) -> Result<StatefulSet> {
    if unobserved(&sts).is_none() {
        return Ok(sts);
    }
    let name = sts.metadata.name.clone().unwrap_or_default();
    let seen = await_condition(api.clone(), &name, |s: Option<&StatefulSet>| {
        s.is_some_and(|s| unobserved(s).is_none())
    });
    match tokio::time::timeout(within, seen).await {
        Ok(Ok(Some(s))) => Ok(s),
        _ => read_sts(api, &name).await,
    }
}

async fn read_sts(api: &Api<StatefulSet>, name: &str) -> Result<StatefulSet> {
    api.get(name)
        .await
        .map_err(|e| api_context(e, "get", "statefulsets", ""))
        .with_context(|| format!("reading statefulset {name}"))
}

/// Puts `s` back over the OnDelete this restart set (a put-back after every member was
/// updated, also when a rerun finds that an earlier run stopped before it).
pub async fn restore_strategy(
    api: &Api<StatefulSet>,
    name: &str,
    s: &StatefulSetUpdateStrategy,
) -> Result<()> {
    // Only over the OnDelete this restart set, as read now (a resourceVersion precondition):
    // a strategy someone set meanwhile is theirs, and kept. The controller writes the
    // StatefulSet's status often: a conflict is read again, a few times.
    for attempt in 1..=3 {
        let current = read_sts(api, name).await?;
        let theirs = strategy_of(&current);
        if theirs.type_.as_deref() != Some("OnDelete") {
            bail!(
                "statefulset {name}'s update strategy was changed meanwhile (now {}); it is left as it is, and {} is not put back",
                describe_strategy(&theirs),
                describe_strategy(s)
            );
        }
        let mut patch = restore_patch(s);
        patch["metadata"]["resourceVersion"] = serde_json::json!(current.metadata.resource_version);
        match api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => return Ok(()),
            Err(e) if attempt < 3 && crate::errors::status_of(&e).is_some_and(|x| x.code == 409) => {}
            Err(e) => {
                return Err(api_context(e, "patch", "statefulsets", "")).with_context(|| {
                    format!(
                        "putting statefulset {name}'s update strategy back to {} (by hand: kubectl patch sts {name} --type=merge -p '{}')",
                        describe_strategy(s),
                        restore_patch(s)
                    )
                })
            }
        }
    }
    unreachable!("the last attempt returns")
}
