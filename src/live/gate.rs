//! The eviction gate's operations on a real cluster ([`GateOps`] for [`KubeGate`]): the
//! member an eviction is about from its pod, the lock from its Lease, the look and the
//! transfer exactly as `drain` takes them ([`super::cluster::look`], [`KubeCluster`]'s
//! transfer with its one verdict).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Result;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolume, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, ListParams, PostParams};
use kube::ResourceExt;
use tokio_util::sync::CancellationToken;

use super::cluster::{look, KubeCluster};
use super::evict::Evictor;
use super::lock;
use crate::drain::{ClusterOps, Look};
use crate::errors::api_context;
use crate::errors::status_of;
use crate::gate::{GateOps, Member, Record, TransferSlot, Written};
use crate::model::GateView;
use crate::plan::drain::{DrainOptions, DrainStep};
use crate::select::NotRecognised;
use crate::survey::Surveyor;

/// The annotation of a gate record's Lease that holds the record (JSON).
const RECORD_ANNOTATION: &str = "kubectl-raft.io/gate-record";

/// A Lease's version, and when this process saw it change.
pub type Watched = (Option<String>, Instant);

/// The gate's view of the cluster it runs in.
#[derive(Clone)]
pub struct KubeGate {
    pub surveyor: Arc<Surveyor>,
    /// Where `kubectl raft drain` and `restart` keep their Leases (read, never written).
    pub lock_namespace: String,
    /// Where the gate keeps its records (its own namespace): apart from the locks, so that
    /// whoever may take a lock (every operator who drains, restarts or yields) cannot erase,
    /// corrupt or plant a record, and the gate needs no right to write a lock.
    pub records_namespace: String,
    /// The longest a transfer is waited for.
    pub transfer_timeout: Duration,
    /// Each lock Lease seen: its version, and when this process saw it change.
    pub watched: Arc<Mutex<HashMap<String, Watched>>>,
    /// The gate's ValidatingWebhookConfiguration, whose namespaceSelector says which
    /// namespaces' evictions the API server sends here (None: not named, not checked).
    pub webhook: Option<String>,
}

impl GateOps for KubeGate {
    async fn not_sent_here(&self, namespace: &str) -> Result<Option<String>> {
        let Some(name) = &self.webhook else {
            return Ok(None);
        };
        let client = self.surveyor.conn.client.clone();
        let (configs, namespaces) = (
            Api::<ValidatingWebhookConfiguration>::all(client.clone()),
            Api::<Namespace>::all(client),
        );
        let (config, ns) = tokio::join!(configs.get(name), namespaces.get_opt(namespace));
        // Without the right to read them (a gate.yaml from before this check), the gate decides
        // as it did before, rather than refusing every eviction; it says so.
        let forbidden = |e: &kube::Error| status_of(e).is_some_and(|s| s.code == 403);
        let config = match config {
            Err(e) if forbidden(&e) => {
                tracing::warn!("cannot read webhook {name} ({e}): every review is decided; grant get on it (docs/gate.yaml)");
                return Ok(None);
            }
            other => {
                other.map_err(|e| api_context(e, "get", "validatingwebhookconfigurations", ""))?
            }
        };
        let ns = match ns {
            Err(e) if forbidden(&e) => {
                tracing::warn!("cannot read namespace {namespace} ({e}): every review is decided; grant get on namespaces (docs/gate.yaml)");
                return Ok(None);
            }
            other => other.map_err(|e| api_context(e, "get", "namespaces", ""))?,
        };
        let Some(ns) = ns else {
            return Ok(Some(format!("namespace {namespace:?} does not exist")));
        };
        let view = GateView {
            webhooks: Ok(vec![config]),
            namespaces: [(namespace.to_string(), Ok(ns.labels().clone()))].into(),
            refusals: Default::default(),
            ready_endpoints: Default::default(),
        };
        Ok(match crate::assess::gated::sends_evictions_of(namespace, &view) {
            Ok(false) => Some(format!(
                "namespace {namespace:?} is not one whose evictions webhook {name} sends to the gate"
            )),
            Ok(true) | Err(_) => None,
        })
    }

    async fn member(&self, namespace: &str, pod: &str) -> Result<Option<Member>> {
        let api: Api<Pod> = Api::namespaced(self.surveyor.conn.client.clone(), namespace);
        let Some(p) = api
            .get_opt(pod)
            .await
            .map_err(|e| api_context(e, "get", "pods", namespace))?
        else {
            return Ok(None);
        };
        let sts = p
            .owner_references()
            .iter()
            // apps/v1's only: another kind named StatefulSet (OpenKruise's) is not surveyed.
            .find(|o| {
                o.controller == Some(true) && o.kind == "StatefulSet" && o.api_version == "apps/v1"
            })
            .map(|o| o.name.clone());
        Ok(sts.map(|name| Member {
            namespace: namespace.to_string(),
            name,
            pod: pod.to_string(),
            uid: p.metadata.uid.clone(),
            node: p.spec.as_ref().and_then(|s| s.node_name.clone()),
        }))
    }

    async fn lock_holder(&self, m: &Member) -> Result<Option<String>> {
        let name = lock::lease_name(&m.namespace, &m.name);
        let client = &self.surveyor.conn.client;
        let seen = lock::seen(client, &self.lock_namespace, &m.namespace, &m.name).await?;
        let mut watched = self.watched.lock().expect("not poisoned");
        let Some(seen) = seen else {
            watched.remove(&name);
            return Ok(None);
        };
        // Held while it changed within its duration by this process's clock; a Lease seen for
        // the first time counts as held for one duration.
        let now = Instant::now();
        let since = watched
            .entry(name)
            .and_modify(|(v, at)| {
                if *v != seen.version {
                    *v = seen.version.clone();
                    *at = now;
                }
            })
            .or_insert((seen.version.clone(), now))
            .1;
        Ok((now.duration_since(since) <= seen.duration).then_some(seen.holder))
    }

    async fn node(&self, name: &str) -> Result<Option<Node>> {
        // Listed by name, not fetched: the gate's role lists nodes (its looks do) and gets none.
        let lp = ListParams::default().fields(&format!("metadata.name={name}"));
        let nodes = Api::<Node>::all(self.surveyor.conn.client.clone())
            .list(&lp)
            .await
            .map_err(|e| api_context(e, "list", "nodes", ""))?;
        Ok(nodes.items.into_iter().next())
    }

    async fn look(&self, m: &Member, opts: &DrainOptions) -> Result<Option<Look>> {
        // Where a replacement could start: without the right to list them, the planner says so.
        let pvs = Api::<PersistentVolume>::all(self.surveyor.conn.client.clone())
            .list(&ListParams::default())
            .await
            .ok()
            .map(|l| l.items);
        // The cluster's Secret as it is now (rotated, or its consent label taken away).
        self.surveyor.credentials.forget();
        let found = look(
            &self.surveyor,
            pvs.as_deref(),
            &m.namespace,
            &m.name,
            false,
            &opts.nodes,
            None,
        )
        .await;
        match found {
            Ok(found) => Ok(found.map(|(obs, input)| Look { obs, input })),
            // A StatefulSet no profile recognises (a database, a cache): not the gate's.
            Err(e) if e.is::<NotRecognised>() => Ok(None),
            Err(e) => Err(e.context(format!("surveying {}", m.cluster()))),
        }
    }

    async fn controller_busy_now(&self, look: &Look) -> Option<String> {
        super::cluster::controller_busy_now(&self.surveyor.conn.client, look).await
    }

    async fn member_now(&self, look: &Look, pod: &str) -> crate::plan::ReplicaView {
        super::cluster::member_now(&self.surveyor, look, pod, self.surveyor.probe_timeout).await
    }

    fn start_transfer(&self, look: Look, step: DrainStep, opts: DrainOptions, slot: TransferSlot) {
        let surveyor = self.surveyor.clone();
        let timeout = self.transfer_timeout;
        tokio::spawn(async move {
            let evictor = Evictor {
                client: surveyor.conn.probe_client.clone(),
                grace_period: None,
                disable_eviction: false,
                timeout,
                cancel: CancellationToken::new(),
                lock_holder: None,
            };
            let (ns, name) = (
                look.obs.target.namespace.clone(),
                look.obs.target.name.clone(),
            );
            let cluster = KubeCluster {
                surveyor: &surveyor,
                evictor: &evictor,
                pvs: None,
                timeout,
                probe_limit: surveyor.probe_timeout,
                opts: &opts,
                ns: &ns,
                name: &name,
                named: false,
                lock: None,
                restart: None,
            };
            let ended = cluster
                .transfer(&look, &step)
                .await
                .map_err(|e| format!("{e:#}"));
            match &ended {
                Ok(h) => {
                    tracing::info!(cluster = %format!("{ns}/{name}"), from = %h.from, to = %h.to, "leadership transferred")
                }
                Err(e) => tracing::warn!(cluster = %format!("{ns}/{name}"), "transfer failed: {e}"),
            }
            if let Some(t) = slot.lock().expect("not poisoned").as_mut() {
                t.ended = Some(ended);
            }
        });
    }

    async fn record(&self, m: &Member) -> Result<Record> {
        let api = self.leases();
        let name = lock::gate_record_name(&m.namespace, &m.name);
        let lease = api.get_opt(&name).await.map_err(|e| {
            api_context(
                e,
                "get",
                "leases.coordination.k8s.io",
                &self.records_namespace,
            )
        })?;
        let Some(lease) = lease else {
            return Ok(Record::default());
        };
        let text = lease
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(RECORD_ANNOTATION));
        // A record this gate cannot read whole (a newer gate wrote it, or someone else) is
        // never taken for an empty one, nor rewritten: what it holds back would be let through.
        let mut record: Record = match text {
            Some(t) => Record::parse(t).map_err(|e| {
                anyhow::anyhow!(
                    "the gate's record of {} (Lease {}/{name}) cannot be read ({e}): a gate of another version wrote it? Run one version of the gate (roll forward: a newer gate reads an older one's records); delete the Lease only once `kubectl raft status` shows every member healthy, since it holds the replacements still to rejoin",
                    m.cluster(),
                    self.records_namespace
                )
            })?,
            None => Record::default(),
        };
        record.version = lease.metadata.resource_version.clone();
        Ok(record)
    }

    async fn write_record(&self, m: &Member, record: &Record) -> Result<Written> {
        let api = self.leases();
        let name = lock::gate_record_name(&m.namespace, &m.name);
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                resource_version: record.version.clone(),
                labels: Some(
                    [(
                        "app.kubernetes.io/managed-by".to_string(),
                        "kubectl-raft-gate".to_string(),
                    )]
                    .into(),
                ),
                annotations: Some(
                    [
                        ("kubectl-raft.io/cluster".to_string(), m.cluster()),
                        (RECORD_ANNOTATION.to_string(), record.to_text()),
                    ]
                    .into(),
                ),
                ..Default::default()
            },
            spec: None,
        };
        let pp = PostParams::default();
        let written = match &record.version {
            None => api.create(&pp, &lease).await,
            Some(_) => api.replace(&name, &pp, &lease).await,
        };
        match written {
            Ok(_) => Ok(Written::Done),
            Err(e) if status_of(&e).is_some_and(|s| s.code == 409) => Ok(Written::Conflict),
            // Deleted since it was read: someone else's change, decided again.
            Err(e) if record.version.is_some() && status_of(&e).is_some_and(|s| s.code == 404) => {
                Ok(Written::Conflict)
            }
            Err(e) if status_of(&e).is_some_and(|s| s.code == 404) => Err(anyhow::anyhow!(
                "the namespace {:?} does not exist: the gate keeps its record of each cluster in its own namespace (-n; the manifests `kubectl raft gate manifests` prints create kubectl-raft-gate)",
                self.records_namespace
            )),
            Err(e) => Err(api_context(e, "write", "leases.coordination.k8s.io", &self.records_namespace)),
        }
    }

    fn now(&self) -> f64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0)
    }
}

impl KubeGate {
    fn leases(&self) -> Api<Lease> {
        Api::namespaced(self.surveyor.conn.client.clone(), &self.records_namespace)
    }
}
