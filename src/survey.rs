//! One survey, many verbs: list the Kubernetes objects once, select the clusters, ask every
//! replica, assess. `status` prints a survey; `yield` and `drain` decide on one, act, and
//! survey again rather than trust what they saw before.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use futures::StreamExt;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Event, Namespace, Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, ListParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::Client;

use crate::assess;
use crate::connect::{connect, ConnectOptions, Connection};
use crate::credentials::CredentialSource;
use crate::errors::{api_context, is_forbidden, is_not_found, NotFound};
use crate::model::{ClusterObservation, ClusterTarget, GateView, Selection, Snapshot};
use crate::observe::observe_cluster;
use crate::preflight::{self, Need};
use crate::profile::Catalog;
use crate::report::ClusterReport;
use crate::select::select;
use crate::transport::{Route, Transport};

/// The built-in profiles plus the user's `--profiles FILE`.
pub fn load_catalog(extra: Option<&Path>) -> Result<Catalog> {
    match extra {
        None => Ok(Catalog::builtin()),
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading profiles file {}", path.display()))?;
            Catalog::with_user_profiles(&text, &path.display().to_string())
        }
    }
}

/// Requests to replicas in flight at once unless told otherwise.
pub const DEFAULT_MAX_INFLIGHT: u16 = 32;

/// What a survey is set up from: the library's own settings (`cli` maps the flags onto them,
/// the one place they meet).
#[derive(Debug, Clone)]
pub struct SurveySettings {
    pub connect: ConnectOptions,
    /// A file of profiles beside the built-in ones (`--profiles`).
    pub profiles: Option<PathBuf>,
    /// A system every selected cluster must be (`--system`): checked against the catalog.
    pub system: Option<String>,
    pub all_namespaces: bool,
    pub route: Route,
    /// The limit on one request to one replica.
    pub probe_timeout: Duration,
    /// Requests to replicas in flight at once (at least 1).
    pub max_inflight: usize,
    pub credentials: CredentialSettings,
}

impl Default for SurveySettings {
    /// `kubectl raft status`'s defaults: pods/proxy, 2 s per request, 32 in flight.
    fn default() -> Self {
        SurveySettings {
            connect: ConnectOptions::default(),
            profiles: None,
            system: None,
            all_namespaces: false,
            route: Route::Proxy,
            probe_timeout: Duration::from_secs(2),
            max_inflight: usize::from(DEFAULT_MAX_INFLIGHT),
            credentials: CredentialSettings::default(),
        }
    }
}

/// Where a cluster's credentials come from besides its annotation: a Secret the user named,
/// a file, the environment (never printed).
#[derive(Debug, Clone, Default)]
pub struct CredentialSettings {
    pub secret: Option<String>,
    pub file: Option<PathBuf>,
    pub from_env: bool,
    /// TLS to the replicas besides the clusters' annotated Secrets.
    pub tls: crate::credentials::TlsSettings,
}

/// Everything a verb needs to look at the clusters, set up once from the flags.
pub struct Surveyor {
    pub conn: Connection,
    pub catalog: Catalog,
    pub transport: Transport,
    /// -n, else the context's namespace.
    pub namespace: String,
    pub all_namespaces: bool,
    pub probe_timeout: Duration,
    /// Whether a survey of one namespace also asks whether it exists (a missing one would
    /// look empty). The gate turns it off: the pod it decides about is in it, and its role
    /// may not read namespaces.
    pub check_namespace: bool,
    /// Each cluster's share of the in-flight slots, kept across surveys (the gate's, whose
    /// decisions are one cluster each): None, a share per survey (`observe`).
    pub shares: Option<crate::transport::ClusterShares>,
    /// Each cluster's credentials (--credentials-secret/-file, the annotation).
    pub credentials: CredentialSource,
    /// For a verb that surveys again and again (`status --watch`): the objects kept current
    /// by watches, read instead of listed. Only for surveys of the scope they watch.
    watched: Option<Watched>,
}

/// The Kubernetes objects of one scope kept current by kube-runtime reflectors (a watch
/// each): a survey reads them from memory instead of listing them again.
pub struct Watched {
    scope: Option<String>,
    selector: Option<String>,
    statefulsets: Store<StatefulSet>,
    pods: Store<Pod>,
    services: Store<Service>,
    slices: Store<EndpointSlice>,
    pdbs: Store<PodDisruptionBudget>,
    /// None where nodes may not be watched: they are listed each round.
    nodes: Option<Store<Node>>,
    /// One per watch, set while it is failing (its store may be stale).
    broken: Vec<Arc<AtomicBool>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Watched {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// A reflector over `api` (its watch restarted with backoff when it breaks), and the task
/// that drives it.
fn reflect<K>(
    api: Api<K>,
    config: watcher::Config,
    broken: Arc<AtomicBool>,
) -> (Store<K>, tokio::task::JoinHandle<()>)
where
    K: kube::Resource
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    let (reader, writer) = reflector::store();
    let stream = watcher(api, config).default_backoff().reflect(writer);
    // A watch that fails (the API server restarting, a right taken away) leaves the store as
    // it was: it counts as broken until the watcher's next event, and surveys list meanwhile.
    let task = tokio::spawn(async move {
        stream
            .for_each(|event| {
                broken.store(event.is_err(), Ordering::Relaxed);
                futures::future::ready(())
            })
            .await;
    });
    (reader, task)
}

/// Whether the store has its first full list within `limit`.
async fn in_sync<K>(store: &Store<K>, limit: Duration) -> bool
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    matches!(
        tokio::time::timeout(limit, store.wait_until_ready()).await,
        Ok(Ok(()))
    )
}

/// An Api in one namespace, or in all of them.
fn scoped<K>(client: &Client, ns: Option<&str>) -> Api<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    K::DynamicType: Default,
{
    match ns {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

fn owned<K>(store: &Store<K>) -> Vec<K>
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    store.state().iter().map(|o| (**o).clone()).collect()
}

/// What one survey saw and concluded.
pub struct Survey {
    /// The objects read (drain plans from its nodes and pods).
    pub snapshot: Snapshot,
    pub observations: Vec<ClusterObservation>,
    pub reports: Vec<ClusterReport>,
    /// StatefulSets left out, each with why ("statefulset NS/NAME: ...; skipped").
    pub skipped: Vec<String>,
}

impl Surveyor {
    pub async fn new(settings: &SurveySettings) -> Result<Self> {
        let catalog = load_catalog(settings.profiles.as_deref())?;
        if let Some(s) = &settings.system {
            catalog.require(s)?;
        }
        let conn = connect(&settings.connect).await?;
        let namespace = settings
            .connect
            .namespace
            .clone()
            .unwrap_or_else(|| conn.default_namespace.clone());
        // The user's TLS choices (--tls-server-name, --tls-skip-verify) with no material:
        // what a cluster whose own TLS cannot be read is read with.
        let base_tls = crate::tls::Tls::new(None, &settings.credentials.tls.choices)
            .map_err(|e| anyhow::anyhow!(e))?;
        let transport = Transport::along(
            settings.route,
            &conn.probe_client,
            settings.max_inflight.max(1),
        )
        .with_tls(std::sync::Arc::new(base_tls));
        let credentials = CredentialSource::new(
            conn.client.clone(),
            settings.credentials.secret.clone(),
            settings.credentials.file.as_deref(),
            settings.credentials.from_env,
        )?
        .with_tls(settings.credentials.tls.clone())?;
        Ok(Surveyor {
            credentials,
            conn,
            catalog,
            transport,
            namespace,
            all_namespaces: settings.all_namespaces,
            check_namespace: true,
            shares: None,
            probe_timeout: settings.probe_timeout,
            watched: None,
        })
    }

    /// Watches the objects `survey(sel)` reads (kube-runtime reflectors) so that later
    /// surveys read them from memory: one watch per kind instead of a list per kind per
    /// round. Says why not (`Ok(Some(why))`) when the watches are not in sync within `limit`
    /// (RBAC without `watch`, say): surveys then list as before. A namespace that does not
    /// exist is an error, as in a listed survey.
    pub async fn watch_objects(
        &mut self,
        sel: &Selection,
        limit: Duration,
    ) -> Result<Option<String>> {
        let client = &self.conn.watch_client;
        let scope = self.scope().map(str::to_string);
        let ns = scope.as_deref();
        if let Some(n) = ns {
            if let Err(e) = Api::<Namespace>::all(client.clone()).get(n).await {
                if is_not_found(&e) {
                    bail!(NotFound::Namespace(n.to_string()));
                }
            }
        }
        // Asked first: a watcher without the right would keep its first list and retry
        // forever, looking in sync while going stale.
        let why = "keep it current";
        let scope_of = |n: Need| match ns {
            Some(ns) => n.in_namespace(ns),
            None => n,
        };
        let needs = [
            scope_of(Need::new("watch", "statefulsets", why).group("apps")),
            scope_of(Need::new("watch", "pods", why)),
            scope_of(Need::new("watch", "services", why)),
            scope_of(Need::new("watch", "endpointslices", why).group("discovery.k8s.io")),
            scope_of(Need::new("watch", "poddisruptionbudgets", why).group("policy")),
            Need::new("watch", "nodes", why),
        ];
        let missing = match preflight::missing(client, &needs).await {
            Ok(m) => m,
            Err(e) => return Ok(Some(e)),
        };
        let watch_nodes = !missing.iter().any(|n| n.resource == "nodes");
        let missing: Vec<String> = missing
            .iter()
            .filter(|n| n.resource != "nodes")
            .map(|n| format!("watch {}", n.resource))
            .collect();
        if !missing.is_empty() {
            return Ok(Some(format!(
                "this user may not {} (docs/rbac.yaml's kubectl-raft-status grants it)",
                missing.join(", ")
            )));
        }
        let pods_config = match &sel.selector {
            Some(s) => watcher::Config::default().labels(s),
            None => watcher::Config::default(),
        };
        let all = watcher::Config::default;
        let mut broken = vec![];
        let mut b = || {
            let flag = Arc::new(AtomicBool::new(false));
            broken.push(flag.clone());
            flag
        };
        let (statefulsets, t1) = reflect(scoped::<StatefulSet>(client, ns), all(), b());
        let (pods, t2) = reflect(scoped::<Pod>(client, ns), pods_config, b());
        let (services, t3) = reflect(scoped::<Service>(client, ns), all(), b());
        let (slices, t4) = reflect(scoped::<EndpointSlice>(client, ns), all(), b());
        let (pdbs, t5) = reflect(scoped::<PodDisruptionBudget>(client, ns), all(), b());
        let (nodes, t6) = reflect(Api::<Node>::all(client.clone()), all(), b());
        if !watch_nodes {
            t6.abort();
        }
        let mut watched = Watched {
            scope: scope.clone(),
            selector: sel.selector.clone(),
            statefulsets,
            pods,
            services,
            slices,
            pdbs,
            nodes: watch_nodes.then_some(nodes),
            broken,
            tasks: vec![t1, t2, t3, t4, t5, t6],
        };
        let w = &watched;
        let nodes_in_sync = async {
            match &w.nodes {
                Some(n) => in_sync(n, limit).await,
                None => true,
            }
        };
        let (a, b, c, d, e, f) = tokio::join!(
            in_sync(&w.statefulsets, limit),
            in_sync(&w.pods, limit),
            in_sync(&w.services, limit),
            in_sync(&w.slices, limit),
            in_sync(&w.pdbs, limit),
            nodes_in_sync,
        );
        let missing: Vec<&str> = [
            ("statefulsets", a),
            ("pods", b),
            ("services", c),
            ("endpointslices", d),
            ("poddisruptionbudgets", e),
        ]
        .into_iter()
        .filter(|(_, ok)| !ok)
        .map(|(what, _)| what)
        .collect();
        if !missing.is_empty() {
            return Ok(Some(format!(
                "could not watch {} within {} (does this user have `watch` on them? docs/rbac.yaml)",
                missing.join(", "),
                crate::model::human_duration(limit)
            )));
        }
        if !f {
            // Nodes are optional: listed each round instead.
            watched.nodes = None;
            watched.tasks[5].abort();
        }
        if watched.nodes.is_none() {
            // The nodes' watch (the last one started) no longer counts.
            watched.broken.truncate(5);
        }
        self.watched = Some(watched);
        Ok(None)
    }

    /// The watched objects, if they are the ones a survey of `ns` with `sel` reads.
    fn watched_for(&self, ns: Option<&str>, sel: &Selection) -> Option<&Watched> {
        self.watched.as_ref().filter(|w| {
            w.scope.as_deref() == ns
                && w.selector == sel.selector
                && !w.broken.iter().any(|b| b.load(Ordering::Relaxed))
        })
    }

    /// "namespace \"db\"" or "any namespace", for messages.
    pub fn place(&self) -> String {
        if self.all_namespaces {
            "any namespace".to_string()
        } else {
            format!("namespace {:?}", self.namespace)
        }
    }

    fn scope(&self) -> Option<&str> {
        (!self.all_namespaces).then_some(self.namespace.as_str())
    }

    /// Lists, selects, probes and assesses. Each cluster's replicas are asked as soon as the
    /// StatefulSets and pods are known, while the Services, EndpointSlices, PDBs and nodes
    /// (needed only for the assessment) are still being read.
    pub async fn survey(&self, sel: &Selection) -> Result<Survey> {
        self.survey_in(self.scope(), sel).await
    }

    /// `survey` in one namespace (Some) or all of them (None), whatever the flags said:
    /// drain surveys everywhere first, then each cluster in its own namespace.
    pub async fn survey_in(&self, ns: Option<&str>, sel: &Selection) -> Result<Survey> {
        let client = &self.conn.client;
        let where_ = ns
            .map(|n| format!("in namespace {n:?}"))
            .unwrap_or_else(|| "in any namespace".into());
        let pod_params = match &sel.selector {
            Some(s) => ListParams::default().labels(s),
            None => ListParams::default(),
        };
        let all = ListParams::default();

        let watched = self.watched_for(ns, sel);
        let probing = async {
            let (sts, pods) = match watched {
                Some(w) => (Ok(owned(&w.statefulsets)), Ok(owned(&w.pods))),
                None => {
                    tokio::join!(
                        list::<StatefulSet>(client, ns, &all),
                        list::<Pod>(client, ns, &pod_params),
                    )
                }
            };
            let snap = Snapshot {
                statefulsets: sts
                    .map_err(|e| api_context(e, "list", "statefulsets.apps", &where_))?,
                pods: pods.map_err(|e| api_context(e, "list", "pods", &where_))?,
                ..Default::default()
            };
            let targets = select(&snap, &self.catalog, sel, ns.unwrap_or(&self.namespace));
            let observations = match &targets {
                Ok(t) => self.observe(t.clusters.clone()).await,
                Err(_) => vec![],
            };
            Ok::<_, anyhow::Error>((snap, targets, observations))
        };
        let context = async {
            let nodes = async {
                if let Some(n) = watched.and_then(|w| w.nodes.as_ref()) {
                    return Ok(Some(owned(n)));
                }
                match Api::<Node>::all(client.clone()).list(&all).await {
                    Ok(l) => Ok(Some(l.items)),
                    Err(e) if is_forbidden(&e) => Ok(None),
                    Err(e) => Err(e),
                }
            };
            if let Some(w) = watched {
                // The namespace was checked when the watches started.
                return (
                    None,
                    Ok(owned(&w.services)),
                    Ok(owned(&w.slices)),
                    Ok(owned(&w.pdbs)),
                    nodes.await,
                );
            }
            let namespace = async {
                match ns {
                    Some(n) if self.check_namespace => {
                        Some(Api::<Namespace>::all(client.clone()).get(n).await)
                    }
                    _ => None,
                }
            };
            tokio::join!(
                namespace,
                list::<Service>(client, ns, &all),
                list::<EndpointSlice>(client, ns, &all),
                list::<PodDisruptionBudget>(client, ns, &all),
                nodes,
            )
        };
        let (probed, (namespace, services, slices, pdbs, nodes)) = tokio::join!(probing, context);

        // A missing namespace would otherwise look like an empty one.
        if let (Some(n), Some(Err(e))) = (ns, &namespace) {
            if is_not_found(e) {
                bail!(NotFound::Namespace(n.to_string()));
            }
        }
        let nodes = nodes.map_err(|e| api_context(e, "list", "nodes", ""))?;
        // The node list answers --node too; without the right to list nodes it cannot be checked.
        if let Some(list) = &nodes {
            for node in &sel.nodes {
                if !list
                    .iter()
                    .any(|n| n.metadata.name.as_deref() == Some(node.as_str()))
                {
                    bail!(NotFound::Node(node.clone()));
                }
            }
        }
        let (mut snapshot, targets, observations) = probed?;
        let skipped = targets?.skipped;
        snapshot.services = services.map_err(|e| api_context(e, "list", "services", &where_))?;
        snapshot.slices = slices
            .map_err(|e| api_context(e, "list", "endpointslices.discovery.k8s.io", &where_))?;
        snapshot.pdbs =
            pdbs.map_err(|e| api_context(e, "list", "poddisruptionbudgets.policy", &where_))?;
        snapshot.nodes = nodes;

        // Without pods/proxy rights nothing can be observed: that is an error, not a report.
        // (GET and POST through the proxy are separate rights, `get` and `create`: etcd's
        // health is a GET, its status a POST, so either refusal alone blinds the report.)
        let replicas: Vec<_> = observations.iter().flat_map(|o| &o.replicas).collect();
        if !replicas.is_empty() && replicas.iter().all(|r| r.refused.is_some()) {
            if let Some(e) = replicas.iter().find_map(|r| r.refused.clone()) {
                bail!("{e}");
            }
        }
        let reports = observations
            .iter()
            .map(|o| assess::assess(o, &snapshot))
            .collect();
        Ok(Survey {
            snapshot,
            observations,
            reports,
            skipped,
        })
    }

    /// What `status` needs to say whether the gate decides evictions in `namespaces` and what
    /// it last refused: the webhooks, and only where a gate webhook exists, the namespaces'
    /// labels, the gate's Warning Events and its Services' ready endpoints. A constant number
    /// of requests however many namespaces (one LIST of each; per namespace only for a user
    /// who may not list them cluster-wide). A part the user may not read is an Err that says so.
    pub async fn gate_view(&self, namespaces: &std::collections::BTreeSet<String>) -> GateView {
        let client = &self.conn.client;
        let webhooks = Api::<ValidatingWebhookConfiguration>::all(client.clone())
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .map_err(|e| refused_why(e, "list", "validatingwebhookconfigurations"));
        // Where no gate webhook exists (most clusters) nothing more is read: every cluster is
        // then not gated, and no gate refused anything.
        let services: std::collections::BTreeSet<String> = match &webhooks {
            Ok(configs) => {
                if assess::gated::gate_webhooks(configs).next().is_none() {
                    return GateView {
                        webhooks,
                        namespaces: Default::default(),
                        refusals: Default::default(),
                        ready_endpoints: Default::default(),
                    };
                }
                assess::gated::gate_webhooks(configs)
                    .filter_map(|(_, h)| assess::gated::service_of(h))
                    .collect()
            }
            Err(_) => Default::default(),
        };
        let endpoints = futures::future::join_all(services.into_iter().map(|svc| async move {
            let (ns, name) = svc.split_once('/').unwrap_or(("", &svc));
            let lp = ListParams::default().labels(&format!("kubernetes.io/service-name={name}"));
            let ready = Api::<EndpointSlice>::namespaced(client.clone(), ns)
                .list(&lp)
                .await
                .map(|l| {
                    l.items
                        .iter()
                        .flat_map(|s| &s.endpoints)
                        // EndpointSlice: an unset `ready` means ready.
                        .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) != Some(false))
                        // One per pod, whatever its address families (a slice each).
                        .map(|e| {
                            e.target_ref
                                .as_ref()
                                .and_then(|r| r.name.clone())
                                .unwrap_or_else(|| e.addresses.join(","))
                        })
                        .collect::<std::collections::BTreeSet<_>>()
                        .len() as u32
                })
                .map_err(|e| refused_why(e, "list", "endpointslices"));
            (svc, ready)
        }));
        let (labels, events, endpoints) = tokio::join!(
            namespace_labels(client, namespaces),
            gate_refusals(client, namespaces),
            endpoints
        );
        GateView {
            webhooks,
            namespaces: labels,
            refusals: events,
            ready_endpoints: endpoints.into_iter().collect(),
        }
    }

    /// The transport for one cluster: the shared one (and its in-flight bound) with the
    /// cluster's credentials. An error names the Secret or file and what to do.
    pub async fn transport_for(&self, target: &ClusterTarget) -> Result<Transport> {
        let vars = self.credentials.for_cluster(target).await?;
        let tls = self.credentials.tls_for_cluster(target).await?;
        Ok(self.shared(target).with_vars(vars).with_tls(tls))
    }

    /// The shared transport, with the cluster's share of its slots where shares are kept.
    fn shared(&self, target: &ClusterTarget) -> Transport {
        match &self.shares {
            Some(shares) => self
                .transport
                .with_cluster_share(shares, &format!("{}/{}", target.namespace, target.name)),
            None => self.transport.clone(),
        }
    }

    /// The transport to *read* a cluster with (watching a wait, asking a member again): its
    /// credentials, or, when they cannot be read, none, as the survey observes it (its report
    /// says why: `credentials_error`). Acting (a transfer) uses `transport_for` and stops.
    pub async fn reading_transport(&self, target: &ClusterTarget) -> Transport {
        self.reading(target).await.0
    }

    /// The transport to read a cluster with, and why it lacks what it lacks: with its
    /// credentials and TLS; where its credentials cannot be read, without them but still over
    /// its TLS (a verified connection stays verified); where its TLS cannot be read, with
    /// neither (its HTTPS ports then refused on the routes that verify).
    async fn reading(&self, target: &ClusterTarget) -> (Transport, Option<anyhow::Error>) {
        let vars = self.credentials.for_cluster(target).await;
        let tls = self.credentials.tls_for_cluster(target).await;
        let transport = self.shared(target);
        match (vars, tls) {
            (Ok(vars), Ok(tls)) => (transport.with_vars(vars).with_tls(tls), None),
            (Err(e), Ok(tls)) => (transport.with_tls(tls), Some(e)),
            (Ok(_), Err(e)) | (Err(e), Err(_)) => (transport, Some(e)),
        }
    }

    /// Every cluster at once; the transport bounds the requests in flight. A cluster whose
    /// credentials cannot be read is observed without them, and its report says why.
    /// Each cluster takes a fair share of the in-flight slots (`Transport::with_share`).
    pub async fn observe(&self, targets: Vec<ClusterTarget>) -> Vec<ClusterObservation> {
        let clusters = targets.len();
        futures::future::join_all(targets.into_iter().map(|t| async move {
            let (transport, error) = self.reading(&t).await;
            let transport = transport.with_share(clusters);
            let unverified = transport.reads_https_unverified()
                && t.profile.scheme == crate::profile::Scheme::Https;
            let mut obs = observe_cluster(&transport, t, self.probe_timeout).await;
            obs.credentials_error = error.map(|e| crate::errors::anyhow_chain(&e));
            obs.tls_unverified = unverified;
            obs
        }))
        .await
    }
}

type PerNamespace<T> = std::collections::BTreeMap<String, Result<T, String>>;

/// Why a read failed, as `status` says it: "may not VERB WHAT" for a right the user lacks.
fn refused_why(e: kube::Error, verb: &str, what: &str) -> String {
    if is_forbidden(&e) {
        format!("may not {verb} {what}")
    } else {
        format!("cannot {verb} {what}: {e}")
    }
}

/// Each namespace's labels: one LIST of namespaces, or (one namespace, or a user who may not
/// list them) a GET of each.
async fn namespace_labels(
    client: &Client,
    namespaces: &std::collections::BTreeSet<String>,
) -> PerNamespace<std::collections::BTreeMap<String, String>> {
    let api = Api::<Namespace>::all(client.clone());
    if namespaces.len() > 1 {
        match api.list(&ListParams::default()).await {
            Ok(l) => {
                let mut by: std::collections::BTreeMap<String, _> = l
                    .items
                    .into_iter()
                    .filter_map(|n| Some((n.metadata.name?, n.metadata.labels.unwrap_or_default())))
                    .collect();
                return namespaces
                    .iter()
                    .map(|ns| {
                        let got = by
                            .remove(ns)
                            .ok_or_else(|| format!("namespace {ns:?} was not listed"));
                        (ns.clone(), got)
                    })
                    .collect();
            }
            Err(e) if !is_forbidden(&e) => {
                let why = refused_why(e, "list", "namespaces");
                return namespaces
                    .iter()
                    .map(|ns| (ns.clone(), Err(why.clone())))
                    .collect();
            }
            Err(_) => {}
        }
    }
    futures::future::join_all(namespaces.iter().map(|ns| {
        let api = api.clone();
        async move {
            let got = api
                .get(ns)
                .await
                .map(|n| n.metadata.labels.unwrap_or_default())
                .map_err(|e| refused_why(e, "get", "namespaces"));
            (ns.clone(), got)
        }
    }))
    .await
    .into_iter()
    .collect()
}

/// The gate's Warning Events in each namespace: one LIST across namespaces, or (one namespace,
/// or a user who may list Events only in some) one in each.
async fn gate_refusals(
    client: &Client,
    namespaces: &std::collections::BTreeSet<String>,
) -> PerNamespace<Vec<Event>> {
    let lp = ListParams::default().fields(&format!(
        "reportingComponent={},type=Warning",
        crate::model::GATE_COMPONENT
    ));
    if namespaces.len() > 1 {
        match Api::<Event>::all(client.clone()).list(&lp).await {
            Ok(l) => {
                let mut by: PerNamespace<Vec<Event>> = namespaces
                    .iter()
                    .map(|ns| (ns.clone(), Ok(vec![])))
                    .collect();
                for e in l.items {
                    let ns = e.metadata.namespace.clone().unwrap_or_default();
                    if let Some(Ok(list)) = by.get_mut(&ns) {
                        list.push(e);
                    }
                }
                return by;
            }
            Err(e) if !is_forbidden(&e) => {
                let why = refused_why(e, "list", "events");
                return namespaces
                    .iter()
                    .map(|ns| (ns.clone(), Err(why.clone())))
                    .collect();
            }
            Err(_) => {}
        }
    }
    futures::future::join_all(namespaces.iter().map(|ns| {
        let lp = lp.clone();
        async move {
            let got = Api::<Event>::namespaced(client.clone(), ns)
                .list(&lp)
                .await
                .map(|l| l.items)
                .map_err(|e| refused_why(e, "list", "events"));
            (ns.clone(), got)
        }
    }))
    .await
    .into_iter()
    .collect()
}

/// One LIST, in a namespace or in all of them.
async fn list<K>(client: &Client, ns: Option<&str>, lp: &ListParams) -> kube::Result<Vec<K>>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    Ok(scoped::<K>(client, ns).list(lp).await?.items)
}
