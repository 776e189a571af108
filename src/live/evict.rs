//! Evicting one pod as `kubectl drain` does: the Eviction API (or a delete with
//! `--disable-eviction`), PodDisruptionBudgets honoured, a 429 retried with the blocking PDB
//! named with its numbers, and a UID precondition so that a pod recreated under the same
//! name is never evicted in its predecessor's place.

use std::time::Duration;

use anyhow::{bail, Result};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::{Eviction, PodDisruptionBudget};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    DeleteOptions, ObjectMeta, Preconditions as K8sPreconditions,
};
use kube::api::{Api, DeleteParams, Preconditions};
use kube::runtime::wait::{await_condition, conditions};
use kube::{Client, ResourceExt};
use tokio_util::sync::CancellationToken;

use crate::errors::{anyhow_chain, api_context, status_of};
use crate::select::selector_matches;

#[derive(Clone)]
pub struct Evictor {
    /// A client that does not retry 429s by itself: a PDB's refusal is ours to explain.
    pub client: Client,
    pub grace_period: Option<u32>,
    pub disable_eviction: bool,
    pub timeout: Duration,
    /// Ctrl-C: every wait ends early when it fires.
    pub cancel: CancellationToken,
    /// This run's lock holder, named on each Eviction (`gate::LOCK_HOLDER_ANNOTATION`): an
    /// eviction gate lets the lock holder's own evictions through, which it decided with the
    /// same planner.
    pub lock_holder: Option<String>,
}

pub use crate::drain::{Attempt, Evicted};

/// Ctrl-C cancels `cancel` (the verb stops after its current step, saying so); a second one
/// releases the locks this process holds (for at most [`RELEASE_WITHIN`]) and exits. Abort the
/// handle when the verb is done.
pub fn stop_on_ctrl_c(cancel: CancellationToken) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            // The second Ctrl-C is listened for before the first is answered: one pressed
            // while the line below is written is not lost.
            let mut again = Box::pin(tokio::signal::ctrl_c());
            let early = futures::poll!(&mut again);
            cancel.cancel();
            eprintln!("interrupted: stopping after the current step (Ctrl-C again to exit at once: a transfer in flight is then not reported; the cluster's lock is released first)");
            let second = match early {
                std::task::Poll::Ready(r) => r,
                std::task::Poll::Pending => again.await,
            };
            if second.is_ok() {
                let released =
                    tokio::time::timeout(RELEASE_WITHIN, super::lock::release_all_now()).await;
                if released.is_err() {
                    eprintln!("the cluster's lock could not be released within {}s: it is taken over 30s after its last renewal", RELEASE_WITHIN.as_secs());
                }
                std::process::exit(130);
            }
        }
    })
}

/// How long a second Ctrl-C waits for the locks to be released before the process exits.
pub const RELEASE_WITHIN: Duration = Duration::from_secs(3);

/// Sleeps `d`, or less if `cancel` fires; true when it fired.
pub async fn sleep_or_cancel(cancel: &CancellationToken, d: Duration) -> bool {
    tokio::select! {
        _ = cancel.cancelled() => true,
        _ = tokio::time::sleep(d) => false,
    }
}

/// The Eviction of this pod (its UID: never a successor under the same name), with the grace
/// period when one is given.
fn eviction(p: &Pod, grace_period: Option<u32>, lock_holder: Option<&str>) -> Eviction {
    Eviction {
        metadata: ObjectMeta {
            name: p.metadata.name.clone(),
            namespace: p.metadata.namespace.clone(),
            annotations: lock_holder.map(|h| {
                [(
                    crate::gate::LOCK_HOLDER_ANNOTATION.to_string(),
                    h.to_string(),
                )]
                .into()
            }),
            ..Default::default()
        },
        delete_options: Some(DeleteOptions {
            grace_period_seconds: grace_period.map(i64::from),
            preconditions: Some(K8sPreconditions {
                uid: p.uid(),
                resource_version: None,
            }),
            ..Default::default()
        }),
    }
}

fn key(p: &Pod) -> String {
    format!("{}/{}", p.namespace().unwrap_or_default(), p.name_any())
}

impl Evictor {
    fn params(&self, p: &Pod, dry_run: bool) -> DeleteParams {
        DeleteParams {
            dry_run,
            grace_period_seconds: self.grace_period,
            preconditions: Some(Preconditions {
                uid: p.uid(),
                resource_version: None,
            }),
            ..Default::default()
        }
    }

    async fn once(&self, p: &Pod, dry_run: bool) -> Result<(), kube::Error> {
        let api: Api<Pod> =
            Api::namespaced(self.client.clone(), &p.namespace().unwrap_or_default());
        if self.disable_eviction {
            let dp = self.params(p, dry_run);
            api.delete(&p.name_any(), &dp).await.map(|_| ())
        } else {
            // Not kube's `Api::evict`: its body names the options `delete_options` (kube-core
            // 5.0), a field the API server ignores, so neither the grace period nor the UID
            // precondition reached it. The Eviction as Kubernetes spells it instead.
            let pp = kube::api::PostParams {
                dry_run,
                field_manager: None,
            };
            let body = eviction(p, self.grace_period, self.lock_holder.as_deref());
            api.create_subresource::<_, serde_json::Value>("eviction", &p.name_any(), &pp, &body)
                .await
                .map(|_| ())
        }
    }

    /// One eviction request: accepted, already gone (404; a 409 when the UID precondition
    /// finds a new pod under the name, or none), or refused by a PDB. A 409 while the same
    /// pod is still there is a conflict to retry on a fresh plan, never "gone".
    pub async fn attempt(&self, p: &Pod) -> Result<Attempt> {
        match self.once(p, false).await {
            Ok(()) => Ok(Attempt::Done(Evicted::Accepted)),
            Err(e) if status_of(&e).is_some_and(|s| s.code == 404) => {
                Ok(Attempt::Done(Evicted::AlreadyGone))
            }
            Err(e) if status_of(&e).is_some_and(|s| s.code == 409) => {
                let api: Api<Pod> =
                    Api::namespaced(self.client.clone(), &p.namespace().unwrap_or_default());
                match api.get_opt(&p.name_any()).await {
                    Ok(Some(now)) if now.uid() == p.uid() => Ok(Attempt::Refused(format!(
                        "the API server answered 409 Conflict for {} ({}), and the pod is still there",
                        key(p),
                        status_of(&e).map(|s| crate::model::text::message(&s.message)).unwrap_or_default()
                    ))),
                    Ok(_) => Ok(Attempt::Done(Evicted::AlreadyGone)),
                    Err(g) => Err(api_context(g, "get", "pods", "")
                        .context(format!("after a 409 Conflict evicting {}", key(p)))),
                }
            }
            Err(e) if status_of(&e).is_some_and(|s| s.code == 429) => {
                Ok(Attempt::Refused(self.blocking_pdb(p, &e).await))
            }
            Err(e) => {
                let (api_verb, resource, doing) = if self.disable_eviction {
                    ("delete", "pods", "deleting")
                } else {
                    ("create", "pods/eviction", "evicting")
                };
                Err(api_context(e, api_verb, resource, "")
                    .context(format!("{doing} pod {}", key(p))))
            }
        }
    }

    /// What the API server would answer now (a server-side dry run): Ok(None) if it
    /// allows the eviction, Ok(Some(why)) if a PDB refuses it, Err(message) otherwise.
    pub async fn answer_now(&self, p: &Pod) -> Result<Option<String>, String> {
        match self.once(p, true).await {
            Ok(()) => Ok(None),
            Err(e) if status_of(&e).is_some_and(|s| s.code == 429) => {
                Ok(Some(self.blocking_pdb(p, &e).await))
            }
            Err(e) => Err(anyhow_chain(&anyhow::Error::new(e))),
        }
    }

    /// The dry run's answer in words: "allowed", "refused now: WHY" or "error: ...".
    pub async fn dry_run(&self, p: &Pod) -> String {
        match self.answer_now(p).await {
            Ok(None) => "allowed".into(),
            Ok(Some(why)) => format!("refused now: {why}"),
            Err(e) => format!("error: {e}"),
        }
    }

    /// The PDB that refused, by name, with its numbers; else the API server's words (an
    /// admission webhook's refusal, the gate's among them, in its own sentence).
    async fn blocking_pdb(&self, p: &Pod, e: &kube::Error) -> String {
        let said = status_of(e).map(|s| s.message.clone()).unwrap_or_default();
        if !status_of(e).is_some_and(refused_by_a_pdb) {
            return said;
        }
        let api: Api<PodDisruptionBudget> =
            Api::namespaced(self.client.clone(), &p.namespace().unwrap_or_default());
        let Ok(list) = api.list(&Default::default()).await else {
            return said;
        };
        let labels = p.labels().clone();
        let named: Vec<String> = list
            .items
            .iter()
            .filter(|b| {
                b.spec
                    .as_ref()
                    .and_then(|s| s.selector.as_ref())
                    .is_some_and(|s| selector_matches(s, &labels))
            })
            .map(|b| {
                let s = b.status.clone().unwrap_or_default();
                format!(
                    "PodDisruptionBudget {} allows {} disruption(s) ({} healthy, {} required)",
                    b.name_any(),
                    s.disruptions_allowed,
                    s.current_healthy,
                    s.desired_healthy
                )
            })
            .collect();
        if named.is_empty() {
            said
        } else {
            named.join("; ")
        }
    }

    /// Waits until the pod with this UID is gone (its grace period and preStop hook run).
    pub async fn wait_gone(&self, p: &Pod) -> Result<()> {
        let api: Api<Pod> =
            Api::namespaced(self.client.clone(), &p.namespace().unwrap_or_default());
        let uid = p.uid().unwrap_or_default();
        let name = p.name_any();
        match tokio::time::timeout(
            self.timeout,
            await_condition(api, &name, conditions::is_deleted(&uid)),
        )
        .await
        {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => bail!("watching pod {} until it is gone: {e}", key(p)),
            Err(_) => bail!(
                "pod {} was still there after {} (see `kubectl describe pod -n {} {name}`)",
                key(p),
                crate::model::human_duration(self.timeout),
                p.namespace().unwrap_or_default()
            ),
        }
    }
}

/// Whether a 429 is a PodDisruptionBudget's (the API server's eviction names its cause
/// `DisruptionBudget`; older servers said only "disruption budget"), not an admission
/// webhook's or a rate limit's.
fn refused_by_a_pdb(s: &kube::core::Status) -> bool {
    s.details
        .as_ref()
        .is_some_and(|d| d.causes.iter().any(|c| c.reason == "DisruptionBudget"))
        || (s.message.contains("disruption budget") && !s.message.contains("admission webhook"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(message: &str, causes: &[&str]) -> kube::core::Status {
        serde_json::from_value(serde_json::json!({
            "code": 429,
            "reason": "TooManyRequests",
            "message": message,
            "details": {"causes": causes.iter().map(|c| serde_json::json!({"reason": c})).collect::<Vec<_>>()},
        }))
        .unwrap()
    }

    #[test]
    fn a_pdbs_refusal_is_told_by_its_cause() {
        let s = status(
            "Cannot evict pod as it would violate the pod's disruption budget.",
            &["DisruptionBudget"],
        );
        assert!(refused_by_a_pdb(&s));
    }

    /// The gate's 429 is its own sentence, not a PDB's numbers (a drain through the gate once
    /// showed "PodDisruptionBudget etcd allows 1 disruption(s)" for a gate refusal).
    #[test]
    fn an_admission_webhooks_429_is_not_a_pdbs() {
        let s = status(
            "admission webhook \"evictions.gate.kubectl-raft.io\" denied the request: db/etcd: etcd-1 goes first; retry",
            &[],
        );
        assert!(!refused_by_a_pdb(&s));
    }

    fn pod() -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("etcd-0".into()),
                namespace: Some("db".into()),
                uid: Some("u-1".into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    /// The API server reads `deleteOptions`; a body that spells it otherwise (kube-core 5.0's
    /// `delete_options`) loses the grace period and the UID precondition without an error.
    #[test]
    fn an_eviction_carries_its_grace_period_and_uid_where_the_api_server_reads_them() {
        let body = serde_json::to_value(eviction(&pod(), Some(1), None)).unwrap();
        assert_eq!(body["deleteOptions"]["gracePeriodSeconds"], 1, "{body}");
        assert_eq!(
            body["deleteOptions"]["preconditions"]["uid"], "u-1",
            "{body}"
        );
        assert_eq!(body["metadata"]["name"], "etcd-0");
    }

    #[test]
    fn an_eviction_without_a_grace_period_leaves_the_pods_own() {
        let body = serde_json::to_value(eviction(&pod(), None, None)).unwrap();
        assert!(
            body["deleteOptions"].get("gracePeriodSeconds").is_none(),
            "{body}"
        );
    }

    #[test]
    fn an_eviction_names_the_lock_holder_for_an_eviction_gate() {
        let body = serde_json::to_value(eviction(&pod(), None, Some("alice@h pid 1"))).unwrap();
        assert_eq!(
            body["metadata"]["annotations"][crate::gate::LOCK_HOLDER_ANNOTATION],
            "alice@h pid 1",
            "{body}"
        );
    }
}
