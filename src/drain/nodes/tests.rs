//! The node-level drain against a scripted cluster: the order of its steps (rights, locks,
//! cordon, list, act, list again) and what it does when the cluster does not cooperate (a
//! pod that arrives before the cordon, a lock held elsewhere, a PDB that never allows, a
//! member that stays on the node).

use std::cell::{Cell, RefCell};

use anyhow::anyhow;
use k8s_openapi::api::core::v1::{PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use super::*;
use crate::drain::tests::{opts, Said, Scripted};

/// The scripted etcd (etcd-0 on n1, the leader etcd-1 on n2, etcd-2 on n3) and the other pods
/// on its nodes.
struct Nodes {
    cluster: Scripted,
    nodes: Vec<String>,
    /// Pods on the nodes that are not members.
    others: RefCell<Vec<Pod>>,
    /// Pods bound to the nodes after the first listing, before the cordon lands.
    arriving: RefCell<Vec<Pod>>,
    /// The pod selector selects only the others (no member).
    select_no_member: Cell<bool>,
    /// The rights check fails with this.
    rights_missing: RefCell<Option<String>>,
    /// Another drain holds the lock.
    lock_held: Cell<bool>,
    /// A PDB refuses the ordinary pods' evictions this many times.
    pod_refusals: Cell<u32>,
    /// A member that stays on its node after its drain (deleted with --cascade=orphan).
    orphan: RefCell<Option<Pod>>,
    /// The drain's requests would lack a credential: this stop, for any cluster it takes
    /// members of.
    requests_missing: RefCell<Option<String>>,
    /// The members each cluster gives up, as the drain told the requests' check.
    taking_asked: RefCell<Vec<Vec<String>>>,
    /// Whether the check of rights was told there are members to move.
    rights_for_members: Cell<Option<bool>>,
    cordoned: Cell<bool>,
}

fn pod(ns: &str, name: &str, node: &str, owner: Option<&str>) -> Pod {
    Pod {
        metadata: ObjectMeta {
            namespace: Some(ns.into()),
            name: Some(name.into()),
            uid: Some(format!("{ns}-{name}-{node}")),
            owner_references: owner.map(|kind| {
                vec![OwnerReference {
                    kind: kind.into(),
                    name: "owner".into(),
                    controller: Some(true),
                    ..Default::default()
                }]
            }),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_name: Some(node.into()),
            ..Default::default()
        }),
        status: Some(PodStatus {
            phase: Some("Running".into()),
            ..Default::default()
        }),
    }
}

impl Nodes {
    fn new(nodes: &[&str]) -> Self {
        Nodes {
            cluster: Scripted::new(),
            nodes: nodes.iter().map(|n| n.to_string()).collect(),
            others: RefCell::new(vec![pod("web", "web-1", nodes[0], Some("ReplicaSet"))]),
            arriving: RefCell::new(vec![]),
            select_no_member: Cell::new(false),
            rights_missing: RefCell::new(None),
            requests_missing: RefCell::new(None),
            taking_asked: RefCell::new(vec![]),
            lock_held: Cell::new(false),
            pod_refusals: Cell::new(0),
            orphan: RefCell::new(None),
            rights_for_members: Cell::new(None),
            cordoned: Cell::new(false),
        }
    }

    fn did(&self, what: String) {
        self.cluster.did(what);
    }

    fn actions(&self) -> Vec<String> {
        self.cluster.actions()
    }

    /// The members on the nodes now, as pods (a replacement elsewhere is a new pod).
    fn members(&self) -> Vec<Pod> {
        self.cluster
            .report
            .borrow()
            .replicas
            .iter()
            .filter_map(|x| {
                let node = x.node.clone()?;
                self.nodes
                    .contains(&node)
                    .then(|| pod("db", &x.pod, &node, Some("StatefulSet")))
            })
            .collect()
    }

    fn drain(&self) -> NodeDrain {
        NodeDrain {
            nodes: self.nodes.clone(),
            dry_run: false,
            rules: PodRules::default(),
            opts: opts(&self.nodes.iter().map(String::as_str).collect::<Vec<_>>()),
            settings: Settings {
                timeout: Duration::from_secs(60),
            },
            parallel_clusters: 1,
        }
    }
}

impl NodeOps for Nodes {
    type Lock = String;
    type Cluster<'a> = &'a Scripted;

    async fn first_look(&self) -> Result<FirstLook> {
        Ok(FirstLook {
            clusters: self.cluster.look().await?.into_iter().collect(),
            skipped: vec![],
        })
    }

    async fn pods_on(&self, selected_only: bool) -> Result<Vec<Pod>> {
        let mut pods = self.others.borrow().clone();
        if !(selected_only && self.select_no_member.get()) {
            pods.extend(self.members());
        }
        if self.cordoned.get() {
            pods.extend(self.arriving.borrow().iter().cloned());
        }
        if !selected_only {
            pods.extend(self.orphan.borrow().iter().cloned());
        }
        Ok(pods)
    }

    async fn check_rights(&self, members: bool) -> Result<()> {
        self.rights_for_members.set(Some(members));
        match self.rights_missing.borrow().clone() {
            Some(why) => Err(anyhow!(why)),
            None => Ok(()),
        }
    }

    async fn requests_stop(&self, taking: &[(&Look, BTreeSet<String>)]) -> Result<Vec<String>> {
        *self.taking_asked.borrow_mut() = taking
            .iter()
            .map(|(_, t)| t.iter().cloned().collect())
            .collect();
        Ok(self
            .requests_missing
            .borrow()
            .iter()
            .filter(|_| taking.iter().any(|(_, t)| !t.is_empty()))
            .cloned()
            .collect())
    }

    async fn lock(&self, ns: &str, name: &str) -> Result<(String, Option<String>)> {
        if self.lock_held.get() {
            self.did(format!("lock {ns}/{name} refused"));
            bail!("{ns}/{name} is being drained by bob@laptop (its lock is renewed)");
        }
        self.did(format!("lock {ns}/{name}"));
        Ok((format!("{ns}/{name}"), None))
    }

    async fn release(&self, lock: String) {
        self.did(format!("release {lock}"));
    }

    async fn cordon(&self, node: &str) -> Result<()> {
        self.did(format!("cordon {node}"));
        self.cordoned.set(true);
        Ok(())
    }

    async fn evict_pod(&self, p: &Pod) -> Result<Attempt> {
        let name = p.name_any();
        if self.pod_refusals.get() > 0 {
            self.pod_refusals.set(self.pod_refusals.get() - 1);
            self.did(format!("eviction of pod {name} refused"));
            return Ok(Attempt::Refused(
                "PodDisruptionBudget web allows 0 disruption(s)".into(),
            ));
        }
        self.did(format!("evict pod {name}"));
        self.others.borrow_mut().retain(|o| o.name_any() != name);
        self.arriving.borrow_mut().retain(|o| o.name_any() != name);
        Ok(Attempt::Done(Evicted::Accepted))
    }

    async fn wait_pod_gone(&self, _: &Pod) -> Result<()> {
        Ok(())
    }

    async fn pdb_answer(&self, p: &Pod) -> String {
        self.did(format!("ask the PDB about {}", p.name_any()));
        "allowed".into()
    }

    fn cluster<'a>(&'a self, _: &'a str, _: &'a str, _: Option<&'a String>) -> &'a Scripted {
        &self.cluster
    }

    async fn pause(&self, d: Duration) -> bool {
        self.cluster.pause(d).await
    }

    fn interrupted(&self) -> bool {
        self.cluster.interrupted()
    }
}

impl Sink for Said {
    type Line = Said;

    fn line(&self, _: &str) -> Said {
        Said::default()
    }

    fn say(&self, msg: &str) {
        self.did(msg);
    }
}

async fn run(n: &Nodes) -> Result<DrainReport> {
    drain_nodes(n, &Said::default(), &n.drain()).await
}

/// The lock was given back, and nothing was done after that.
fn released_last(n: &Nodes) {
    let a = n.actions();
    assert_eq!(
        a.last().map(String::as_str),
        Some("release db/etcd"),
        "{a:?}"
    );
}

fn position(actions: &[String], what: &str) -> usize {
    actions
        .iter()
        .position(|a| a == what)
        .unwrap_or_else(|| panic!("no {what:?} in {actions:?}"))
}

#[tokio::test(start_paused = true)]
async fn the_nodes_are_cordoned_after_every_lock_and_before_any_eviction() {
    let n = Nodes::new(&["n1"]);
    let r = run(&n).await.unwrap();
    assert!(r.succeeded, "{}", r.message);
    let a = n.actions();
    assert!(
        position(&a, "lock db/etcd") < position(&a, "cordon n1"),
        "{a:?}"
    );
    assert!(
        position(&a, "cordon n1") < position(&a, "evict pod web-1"),
        "{a:?}"
    );
    assert!(
        position(&a, "cordon n1") < position(&a, "evict etcd-0"),
        "{a:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn the_locks_are_given_back_after_the_last_action() {
    let n = Nodes::new(&["n1"]);
    run(&n).await.unwrap();
    released_last(&n);
}

#[tokio::test(start_paused = true)]
async fn the_locks_are_given_back_when_a_cluster_stops() {
    let n = Nodes::new(&["n2"]);
    *n.cluster.transfer_fails.borrow_mut() = Some("etcd-0 did not take over".into());
    let r = run(&n).await.unwrap();
    assert!(!r.succeeded);
    assert_eq!(r.clusters[0].result, ClusterResult::Stopped);
    released_last(&n);
}

#[tokio::test(start_paused = true)]
async fn a_missing_right_stops_the_drain_before_its_first_lock() {
    let n = Nodes::new(&["n1"]);
    *n.rights_missing.borrow_mut() = Some("the drain needs `create` on `pods/eviction`".into());
    let e = run(&n).await.unwrap_err();
    assert!(e.to_string().contains("pods/eviction"), "{e}");
    assert_eq!(n.actions(), Vec::<String>::new());
}

#[tokio::test(start_paused = true)]
async fn a_request_without_its_credentials_stops_the_drain_before_its_first_lock() {
    let n = Nodes::new(&["n2"]);
    *n.requests_missing.borrow_mut() =
        Some("moving the NATS meta leader needs a system-account user".into());
    let e = run(&n).await.unwrap_err();
    assert!(e.to_string().contains("system-account user"), "{e}");
    assert!(e.to_string().contains("before changing anything"), "{e}");
    assert_eq!(n.actions(), Vec::<String>::new());
    assert_eq!(*n.taking_asked.borrow(), vec![vec!["etcd-1".to_string()]]);
}

#[tokio::test(start_paused = true)]
async fn a_dry_run_says_the_request_that_would_stop_the_drain() {
    let n = Nodes::new(&["n2"]);
    *n.requests_missing.borrow_mut() =
        Some("moving the NATS meta leader needs a system-account user".into());
    let d = NodeDrain {
        dry_run: true,
        ..n.drain()
    };
    let report = drain_nodes(&n, &Said::default(), &d).await.unwrap();
    assert!(!report.succeeded);
    assert!(
        report
            .message
            .contains("would stop before changing anything"),
        "{}",
        report.message
    );
    // Only questions: no lock, no cordon, no eviction.
    assert!(
        n.actions().iter().all(|a| a.starts_with("ask the PDB")),
        "{:?}",
        n.actions()
    );
}

#[tokio::test(start_paused = true)]
async fn a_lock_held_by_another_drain_stops_before_the_cordon() {
    let n = Nodes::new(&["n1"]);
    n.lock_held.set(true);
    let e = run(&n).await.unwrap_err();
    assert!(e.to_string().contains("bob@laptop"), "{e}");
    assert_eq!(n.actions(), ["lock db/etcd refused"]);
}

#[tokio::test(start_paused = true)]
async fn an_interrupt_before_the_cordon_changes_nothing() {
    let n = Nodes::new(&["n1"]);
    // Ctrl-C during the first look: already pressed before the locks are asked for (a stale
    // lock's wait stops in the lock itself, live::lock::acquire).
    n.cluster.interrupt_after_pauses.set(Some(0));
    let e = run(&n).await.unwrap_err();
    assert!(
        e.to_string().contains("interrupted before the cordon"),
        "{e}"
    );
    let actions = n.actions();
    assert!(
        !actions
            .iter()
            .any(|a| a.starts_with("cordon") || a.starts_with("evict") || a.starts_with("lock")),
        "{actions:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_statefulset_pod_bound_before_the_cordon_stops_the_drain_before_any_eviction() {
    let n = Nodes::new(&["n1"]);
    n.arriving
        .borrow_mut()
        .push(pod("queue", "zk-0", "n1", Some("StatefulSet")));
    let e = run(&n).await.unwrap_err();
    assert!(
        e.to_string().contains("queue/zk-0")
            && e.to_string().contains("run the same command again"),
        "{e}"
    );
    let a = n.actions();
    assert!(!a.iter().any(|x| x.starts_with("evict")), "{a:?}");
    assert_eq!(
        a.last().map(String::as_str),
        Some("release db/etcd"),
        "{a:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn an_ordinary_pod_bound_before_the_cordon_is_evicted_too() {
    let n = Nodes::new(&["n1"]);
    n.arriving
        .borrow_mut()
        .push(pod("web", "web-2", "n1", Some("ReplicaSet")));
    let r = run(&n).await.unwrap();
    assert!(r.succeeded, "{}", r.message);
    assert!(n.actions().contains(&"evict pod web-2".to_string()));
}

#[tokio::test(start_paused = true)]
async fn a_pod_kubectl_drain_refuses_stops_everything_before_any_eviction() {
    let n = Nodes::new(&["n1"]);
    n.others
        .borrow_mut()
        .push(pod("kube-system", "agent-x", "n1", Some("DaemonSet")));
    let r = run(&n).await.unwrap();
    assert!(!r.succeeded);
    assert!(
        r.message.contains("kube-system/agent-x") && r.message.contains("--ignore-daemonsets"),
        "{}",
        r.message
    );
    assert!(r.message.contains("Nothing was evicted"), "{}", r.message);
    let a = n.actions();
    assert!(!a.iter().any(|x| x.starts_with("evict")), "{a:?}");
}

#[tokio::test(start_paused = true)]
async fn a_pdb_that_never_allows_an_ordinary_pod_stops_it_after_the_timeout() {
    let n = Nodes::new(&["n1"]);
    n.pod_refusals.set(u32::MAX);
    let r = run(&n).await.unwrap();
    assert!(!r.succeeded);
    let web = r.pods.iter().find(|p| p.name == "web-1").unwrap();
    assert!(
        web.result.contains("cannot evict pod web/web-1 within 60s"),
        "{}",
        web.result
    );
}

#[tokio::test(start_paused = true)]
async fn an_interrupt_while_an_ordinary_pod_waits_on_its_pdb_stops_its_retries() {
    let n = Nodes::new(&["n1"]);
    n.pod_refusals.set(u32::MAX);
    n.cluster.interrupt_after_pauses.set(Some(1));
    let r = run(&n).await.unwrap();
    let web = r.pods.iter().find(|p| p.name == "web-1").unwrap();
    assert!(
        web.result.contains("interrupted before pod web/web-1"),
        "{}",
        web.result
    );
    let refusals = n
        .actions()
        .iter()
        .filter(|a| *a == "eviction of pod web-1 refused")
        .count();
    assert_eq!(refusals, 1);
}

#[tokio::test(start_paused = true)]
async fn a_member_still_on_the_node_after_its_drain_is_reported_stopped() {
    let n = Nodes::new(&["n1"]);
    *n.orphan.borrow_mut() = Some(pod("db", "etcd-0", "n1", Some("StatefulSet")));
    let r = run(&n).await.unwrap();
    assert!(!r.succeeded);
    let c = &r.clusters[0];
    assert_eq!(c.result, ClusterResult::Stopped);
    assert!(c.message.contains("etcd-0 on n1"), "{}", c.message);
}

#[tokio::test(start_paused = true)]
async fn a_pod_selector_that_selects_no_member_leaves_the_cluster_alone() {
    let n = Nodes::new(&["n1"]);
    n.select_no_member.set(true);
    let r = run(&n).await.unwrap();
    assert!(r.succeeded, "{}", r.message);
    assert!(r.clusters.is_empty());
    assert_eq!(n.rights_for_members.get(), Some(false));
    assert_eq!(n.actions(), ["cordon n1", "evict pod web-1"]);
}

#[tokio::test(start_paused = true)]
async fn a_dry_run_changes_nothing_and_asks_each_pdb() {
    let n = Nodes::new(&["n1", "n2"]);
    let d = NodeDrain {
        dry_run: true,
        ..n.drain()
    };
    let r = drain_nodes(&n, &Said::default(), &d).await.unwrap();
    assert!(r.dry_run && r.succeeded, "{}", r.message);
    let steps: Vec<&str> = r.clusters[0]
        .plan
        .steps
        .iter()
        .map(|s| s.pod.as_str())
        .collect();
    assert_eq!(steps, ["etcd-0", "etcd-1"]);
    assert_eq!(
        n.actions(),
        [
            "ask the PDB about web-1",
            "ask the PDB about etcd-0",
            "ask the PDB about etcd-1"
        ]
    );
    assert_eq!(
        n.rights_for_members.get(),
        None,
        "a dry run needs no rights to act"
    );
}
