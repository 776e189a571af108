//! The node-level drain's operations on a real cluster ([`NodeOps`] for [`KubeNodes`]): the
//! first survey, the nodes' pods, the rights, the locks, the cordon and the ordinary pods'
//! evictions; each cluster's own operations are [`KubeCluster`]'s.

use std::collections::BTreeSet;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::{Node, PersistentVolume, Pod};
use kube::api::{Api, ListParams};

use super::cluster::{cluster_input, KubeCluster};
use super::evict::{sleep_or_cancel, Evictor};
use super::{lock, needs};
use crate::drain::nodes::{FirstLook, NodeOps, Sink};
use crate::drain::{Attempt, Look};
use crate::errors::{api_context, is_forbidden};
use crate::live::progress::{Line, Progress};
use crate::model::Selection;
use crate::plan::drain::DrainOptions;
use crate::preflight::{self, Need};
use crate::survey::Surveyor;

/// A real cluster's nodes, as the drain's flags name them (the nodes are `opts.nodes`).
pub struct KubeNodes {
    pub surveyor: Arc<Surveyor>,
    /// For ordinary pods: with --grace-period.
    pub evictor: Evictor,
    /// For Raft members: each with its own grace period (its preStop hook and shutdown are
    /// part of a safe handover; --grace-period does not cut them).
    pub members: Evictor,
    pub pod_selector: Option<String>,
    pub lock_namespace: String,
    /// The holder identity its locks carry.
    pub holder: String,
    pub opts: DrainOptions,
    /// The longest wait for one replica's answer while a handover is watched.
    pub probe_limit: Duration,
    /// Every PersistentVolume, listed at the first look (None: no right to list them).
    pvs: OnceLock<Option<Vec<PersistentVolume>>>,
    /// The rights the drain's NATS requests need (a port-forward off the direct route), found
    /// when their credentials were checked.
    request_rights: OnceLock<Vec<Need>>,
}

impl KubeNodes {
    pub fn new(
        surveyor: Arc<Surveyor>,
        evictor: Evictor,
        opts: DrainOptions,
        pod_selector: Option<String>,
        lock_namespace: String,
        probe_limit: Duration,
    ) -> Self {
        let nodes: Vec<&str> = opts.nodes.iter().map(String::as_str).collect();
        let holder = lock::holder_identity(&format!("drain {}", nodes.join(" ")));
        let evictor = Evictor {
            lock_holder: Some(holder.clone()),
            ..evictor
        };
        let members = Evictor {
            grace_period: None,
            ..evictor.clone()
        };
        KubeNodes {
            surveyor,
            evictor,
            members,
            pod_selector,
            lock_namespace,
            holder,
            opts,
            probe_limit,
            pvs: OnceLock::new(),
            request_rights: OnceLock::new(),
        }
    }

    fn client(&self) -> &kube::Client {
        &self.surveyor.conn.client
    }

    fn pvs(&self) -> Option<&[PersistentVolume]> {
        self.pvs.get().and_then(|p| p.as_deref())
    }
}

/// Every PersistentVolume (pinned volumes decide where replacements can go). Listed once per
/// drain: a member's replacement keeps its claim and so its volume. Without the right to list
/// them, none is known to pin anything (and the planner says placement cannot be checked).
async fn list_pvs(client: &kube::Client) -> Result<Option<Vec<PersistentVolume>>> {
    match Api::<PersistentVolume>::all(client.clone())
        .list(&ListParams::default())
        .await
    {
        Ok(l) => Ok(Some(l.items)),
        Err(e) if is_forbidden(&e) => Ok(None),
        Err(e) => Err(api_context(e, "list", "persistentvolumes", "")),
    }
}

impl NodeOps for KubeNodes {
    type Lock = lock::Held;
    type Cluster<'a> = KubeCluster<'a>;

    async fn first_look(&self) -> Result<FirstLook> {
        let survey = self
            .surveyor
            .survey_in(
                None,
                &Selection {
                    nodes: self.opts.nodes.iter().cloned().collect(),
                    ..Default::default()
                },
            )
            .await?;
        let pvs = list_pvs(self.client()).await?;
        let pvs = self.pvs.get_or_init(|| pvs).as_deref();
        let clusters = survey
            .observations
            .into_iter()
            .zip(survey.reports)
            .map(|(obs, report)| {
                let input = cluster_input(
                    &obs,
                    report,
                    &survey.snapshot,
                    pvs,
                    &self.opts.nodes,
                    BTreeSet::new(),
                );
                Look { obs, input }
            })
            .collect();
        Ok(FirstLook {
            clusters,
            skipped: survey.skipped,
        })
    }

    async fn pods_on(&self, selected_only: bool) -> Result<Vec<Pod>> {
        let mut out = vec![];
        for n in &self.opts.nodes {
            let mut lp = ListParams::default().fields(&format!("spec.nodeName={n}"));
            if let Some(s) = self.pod_selector.as_deref().filter(|_| selected_only) {
                lp = lp.labels(s);
            }
            let pods = Api::<Pod>::all(self.client().clone())
                .list(&lp)
                .await
                .map_err(|e| api_context(e, "list", "pods", "in any namespace"))?;
            out.extend(pods.items);
        }
        Ok(out)
    }

    async fn check_rights(&self, members: bool) -> Result<()> {
        let mut needs = vec![Need::new("patch", "nodes", "cordon the nodes")];
        needs.extend(preflight::member_steps(
            None,
            self.evictor.disable_eviction,
            &self.lock_namespace,
        ));
        if !self.opts.allow_degraded {
            for resource in ["nodes", "persistentvolumes"] {
                needs.push(Need::new(
                    "list",
                    resource,
                    "check that a member's replacement can start elsewhere; or --allow-degraded",
                ));
            }
        }
        needs.extend(self.request_rights.get().cloned().unwrap_or_default());
        if !members {
            // Only ordinary pods: no member to ask, no cluster to lock, no placement to check.
            let for_members = |n: &Need| {
                matches!(n.resource, "leases" | "pods/proxy" | "persistentvolumes")
                    || (n.verb == "list" && n.resource == "nodes")
            };
            needs.retain(|n| !for_members(n));
        }
        let say = |m: &str| eprintln!("Warning: {}", crate::render::clean(m));
        preflight::check(self.client(), "the drain", &needs, &say).await
    }

    async fn requests_stop(&self, taking: &[(&Look, BTreeSet<String>)]) -> Result<Vec<String>> {
        // Every cluster at once: each may wait seconds for a server's answer.
        let asked = futures::future::join_all(
            taking
                .iter()
                .map(|(look, pods)| needs::requests_needs(&self.surveyor, &look.obs, pods)),
        )
        .await;
        let mut stops = vec![];
        let mut rights = vec![];
        for ((look, _), nats) in taking.iter().zip(asked) {
            let nats = nats?;
            let t = &look.obs.target;
            if let Some(stop) = nats.stop("the drain", &format!("{}/{}", t.namespace, t.name)) {
                stops.push(stop);
            }
            rights.extend(nats.rights);
        }
        let _ = self.request_rights.set(rights);
        Ok(stops)
    }

    async fn lock(&self, ns: &str, name: &str) -> Result<(lock::Held, Option<String>)> {
        let say = |m: &str| eprintln!("{}", crate::render::clean(m));
        lock::acquire(
            self.client(),
            &self.lock_namespace,
            ns,
            name,
            &self.holder,
            &say,
            &self.evictor.cancel,
        )
        .await
    }

    async fn release(&self, lock: lock::Held) {
        lock.release().await;
    }

    async fn cordon(&self, node: &str) -> Result<()> {
        Api::<Node>::all(self.client().clone())
            .cordon(node)
            .await
            .map_err(|e| api_context(e, "patch", "nodes", ""))
            .with_context(|| format!("cordoning node {node}"))?;
        Ok(())
    }

    async fn evict_pod(&self, pod: &Pod) -> Result<Attempt> {
        self.evictor.attempt(pod).await
    }

    async fn wait_pod_gone(&self, pod: &Pod) -> Result<()> {
        self.evictor.wait_gone(pod).await
    }

    async fn pdb_answer(&self, pod: &Pod) -> String {
        self.evictor.dry_run(pod).await
    }

    fn cluster<'a>(
        &'a self,
        ns: &'a str,
        name: &'a str,
        lock: Option<&'a lock::Held>,
    ) -> KubeCluster<'a> {
        KubeCluster {
            surveyor: &self.surveyor,
            evictor: &self.members,
            pvs: self.pvs(),
            timeout: self.evictor.timeout,
            probe_limit: self.probe_limit,
            opts: &self.opts,
            ns,
            name,
            // A cluster found on the drained nodes is not one the user named: it gets no
            // credentials of the user's own (docs/security.md).
            named: false,
            lock,
            restart: None,
        }
    }

    async fn pause(&self, d: Duration) -> bool {
        sleep_or_cancel(&self.evictor.cancel, d).await
    }

    fn interrupted(&self) -> bool {
        self.evictor.cancel.is_cancelled()
    }
}

/// The drain's words on stderr: a live line per task on a terminal, timestamped lines
/// otherwise, and kept lines around them.
pub struct Stderr(pub Progress);

impl Sink for Stderr {
    type Line = Line;

    fn line(&self, label: &str) -> Line {
        self.0.line(label)
    }

    fn say(&self, msg: &str) {
        eprintln!("{}", crate::render::clean(msg));
    }
}
