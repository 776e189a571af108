//! One drain per Raft cluster at a time: a `coordination.k8s.io` Lease in the cluster's
//! namespace, renewed while the drain runs and deleted when it ends. A drain that died
//! leaves a Lease that stops being renewed; after its duration another drain takes it over.

use std::time::Duration;

use anyhow::{bail, Result};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::Client;

use crate::errors::{anyhow_chain, api_context, status_of};

/// Seconds a Lease stays valid without renewal.
const LEASE_SECONDS: i32 = 30;
const RENEW_EVERY: Duration = Duration::from_secs(10);

pub fn lease_name(sts: &str) -> String {
    format!("kubectl-raft-drain.{sts}")
}

/// Who holds it, in words a colleague recognises.
pub fn holder_identity(nodes: &[String]) -> String {
    let user = std::env::var("USER").unwrap_or_else(|_| "someone".into());
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_else(|_| "unknown-host".into());
    format!(
        "{user}@{host} pid {} (kubectl raft drain {})",
        std::process::id(),
        nodes.join(" ")
    )
}

/// A held Lease; renewed in the background until `release`.
pub struct Held {
    api: Api<Lease>,
    name: String,
    renew: tokio::task::JoinHandle<()>,
}

fn spec(holder: &str) -> LeaseSpec {
    let now = MicroTime(Timestamp::now());
    LeaseSpec {
        holder_identity: Some(holder.to_string()),
        lease_duration_seconds: Some(LEASE_SECONDS),
        acquire_time: Some(now.clone()),
        renew_time: Some(now),
        ..Default::default()
    }
}

/// Takes the cluster's Lease, or says who holds it and how to break a stale one.
/// Returns the Held lock and, when a stale one was taken over, its former holder.
pub async fn acquire(
    client: &Client,
    ns: &str,
    sts: &str,
    holder: &str,
) -> Result<(Held, Option<String>)> {
    let api: Api<Lease> = Api::namespaced(client.clone(), ns);
    let name = lease_name(sts);
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
            ..Default::default()
        },
        spec: Some(spec(holder)),
    };
    let mut took_over = None;
    match api.create(&PostParams::default(), &lease).await {
        Ok(_) => {}
        Err(e) if status_of(&e).is_some_and(|s| s.code == 409) => {
            let current = api
                .get(&name)
                .await
                .map_err(|e| api_context(e, "get", "leases.coordination.k8s.io", ns))?;
            let s = current.spec.clone().unwrap_or_default();
            let who = s
                .holder_identity
                .clone()
                .unwrap_or_else(|| "unknown".into());
            let age = s
                .renew_time
                .as_ref()
                .map(|t| Timestamp::now().duration_since(t.0).as_secs_f64())
                .unwrap_or(f64::MAX);
            let limit = f64::from(s.lease_duration_seconds.unwrap_or(LEASE_SECONDS));
            if age <= limit {
                bail!(
                    "{ns}/{sts} is being drained by {who} (Lease {name} in namespace {ns}, renewed {age:.0}s ago); wait until it ends. \
                     If that drain is dead, the Lease expires {limit:.0}s after its last renewal, or break it now: kubectl delete lease -n {ns} {name}"
                );
            }
            let mut replaced = current;
            replaced.spec = Some(spec(holder));
            api.replace(&name, &PostParams::default(), &replaced)
                .await
                .map_err(|e| {
                    api_context(e, "update", "leases.coordination.k8s.io", ns).context(format!(
                        "taking over the stale drain lock of {ns}/{sts} from {who}"
                    ))
                })?;
            took_over = Some(who);
        }
        Err(e) => {
            return Err(api_context(e, "create", "leases.coordination.k8s.io", ns)
                .context(format!("locking {ns}/{sts} against concurrent drains")))
        }
    }
    let renew = {
        let api = api.clone();
        let name = name.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(RENEW_EVERY).await;
                let patch = serde_json::json!({"spec": {"renewTime": MicroTime(Timestamp::now())}});
                if let Err(e) = api
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                {
                    eprintln!(
                        "Warning: cannot renew the drain lock {name}: {}",
                        anyhow_chain(&anyhow::Error::new(e))
                    );
                }
            }
        })
    };
    Ok((Held { api, name, renew }, took_over))
}

impl Held {
    pub async fn release(self) {
        self.renew.abort();
        if let Err(e) = self.api.delete(&self.name, &DeleteParams::default()).await {
            eprintln!(
                "Warning: cannot delete the drain lock {} (it expires by itself in {LEASE_SECONDS}s): {}",
                self.name,
                anyhow_chain(&anyhow::Error::new(e))
            );
        }
    }
}
