use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::core::v1::{
    Container, HTTPGetAction, NodeSpec, PodCondition, PodSpec, PodStatus, ServiceSpec,
    TCPSocketAction,
};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions};
use k8s_openapi::api::policy::v1::{PodDisruptionBudgetSpec, PodDisruptionBudgetStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use proptest::prelude::*;

use super::*;
use crate::discovery::ClusterTarget;
use crate::profile::extract::RaftFacts;
use crate::profile::Catalog;

fn app() -> BTreeMap<String, String> {
    BTreeMap::from([("app".to_string(), "etcd".to_string())])
}

fn pod(i: usize, ready: bool, probe_tcp: bool) -> Pod {
    let probe = if probe_tcp {
        Probe {
            tcp_socket: Some(TCPSocketAction {
                port: IntOrString::Int(2379),
                ..Default::default()
            }),
            ..Default::default()
        }
    } else {
        Probe {
            http_get: Some(HTTPGetAction {
                port: IntOrString::String("client".into()),
                path: Some("/health".into()),
                ..Default::default()
            }),
            ..Default::default()
        }
    };
    Pod {
        metadata: ObjectMeta {
            name: Some(format!("etcd-{i}")),
            namespace: Some("db".into()),
            labels: Some(app()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_name: Some(format!("n{i}")),
            containers: vec![Container {
                name: "etcd".into(),
                readiness_probe: Some(probe),
                ..Default::default()
            }],
            ..Default::default()
        }),
        status: Some(PodStatus {
            phase: Some("Running".into()),
            pod_ip: Some(format!("10.0.0.{i}")),
            conditions: Some(vec![PodCondition {
                type_: "Ready".into(),
                status: if ready { "True" } else { "False" }.into(),
                ..Default::default()
            }]),
            ..Default::default()
        }),
    }
}

/// One replica: healthy or not, what it says of Raft.
#[derive(Clone)]
struct R {
    ready: bool,
    health: Option<bool>, // None: unreachable
    role: Option<Role>,
    term: u64,
    index: u64,
}

fn healthy(role: Role) -> R {
    R {
        ready: true,
        health: Some(true),
        role: Some(role),
        term: 2,
        index: 100,
    }
}

fn observe(rs: &[R], tcp_probe: bool) -> ClusterObservation {
    let profile = Catalog::builtin().get("etcd").unwrap().clone();
    let pods: Vec<Pod> = rs
        .iter()
        .enumerate()
        .map(|(i, r)| pod(i, r.ready, tcp_probe))
        .collect();
    let leader_id = rs
        .iter()
        .position(|r| r.role == Some(Role::Leader))
        .map(|i| i.to_string());
    let replicas = rs
        .iter()
        .zip(&pods)
        .enumerate()
        .map(|(i, (r, p))| ReplicaObservation {
            pod: p.clone(),
            health: match r.health {
                Some(ok) => Ok(CheckOutcome {
                    ok,
                    detail: "HTTP 200".into(),
                }),
                None => Err(ProbeError::Timeout(std::time::Duration::from_secs(2))),
            },
            readiness: None,
            facts: RaftFacts {
                role: r.role,
                member_id: Some(i.to_string()),
                leader_id: leader_id.clone(),
                has_leader: Some(leader_id.is_some()),
                term: Some(r.term),
                commit_index: Some(r.index),
                applied_index: Some(r.index),
                ..Default::default()
            },
            errors: vec![],
        })
        .collect();
    let target = ClusterTarget {
        namespace: "db".into(),
        name: "etcd".into(),
        owner_kind: "StatefulSet",
        profile,
        desired_replicas: rs.len() as u32,
        pods,
    };
    ClusterObservation {
        target,
        replicas,
        members: None,
    }
}

fn world(obs: &ClusterObservation, disruptions_allowed: Option<i32>) -> Snapshot {
    let svc = |name: &str, headless: bool| Service {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("db".into()),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            selector: Some(app()),
            cluster_ip: headless.then(|| "None".to_string()),
            publish_not_ready_addresses: Some(headless),
            ..Default::default()
        }),
        ..Default::default()
    };
    let slice = |svc: &str| EndpointSlice {
        metadata: ObjectMeta {
            name: Some(format!("{svc}-x")),
            namespace: Some("db".into()),
            labels: Some(BTreeMap::from([(
                "kubernetes.io/service-name".to_string(),
                svc.to_string(),
            )])),
            ..Default::default()
        },
        endpoints: obs
            .target
            .pods
            .iter()
            .map(|p| Endpoint {
                addresses: vec![],
                conditions: Some(EndpointConditions {
                    ready: Some(true),
                    serving: Some(true),
                    terminating: Some(false),
                }),
                target_ref: Some(ObjectReference {
                    kind: Some("Pod".into()),
                    name: p.metadata.name.clone(),
                    ..Default::default()
                }),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    Snapshot {
        services: vec![svc("etcd", true), svc("etcd-client", false)],
        slices: vec![slice("etcd"), slice("etcd-client")],
        pdbs: disruptions_allowed
            .map(|d| PodDisruptionBudget {
                metadata: ObjectMeta {
                    name: Some("etcd".into()),
                    namespace: Some("db".into()),
                    ..Default::default()
                },
                spec: Some(PodDisruptionBudgetSpec {
                    selector: Some(LabelSelector {
                        match_labels: Some(app()),
                        ..Default::default()
                    }),
                    max_unavailable: Some(IntOrString::Int(1)),
                    ..Default::default()
                }),
                status: Some(PodDisruptionBudgetStatus {
                    disruptions_allowed: d,
                    current_healthy: 3,
                    desired_healthy: 2,
                    expected_pods: 3,
                    ..Default::default()
                }),
            })
            .into_iter()
            .collect(),
        nodes: Some(vec![Node {
            metadata: ObjectMeta {
                name: Some("n0".into()),
                ..Default::default()
            },
            spec: Some(NodeSpec {
                unschedulable: Some(true),
                ..Default::default()
            }),
            ..Default::default()
        }]),
        ..Default::default()
    }
}

fn codes(r: &ClusterReport) -> Vec<&'static str> {
    r.warnings.iter().map(|w| w.code).collect()
}

#[test]
fn quorum_is_a_strict_majority() {
    assert_eq!(quorum(1), 1);
    assert_eq!(quorum(3), 2);
    assert_eq!(quorum(4), 3);
    assert_eq!(quorum(5), 3);
    assert_eq!(fault_tolerance(3, 3), Some(1));
    assert_eq!(fault_tolerance(3, 2), Some(0));
    assert_eq!(fault_tolerance(3, 1), None);
    assert_eq!(fault_tolerance(0, 0), None);
}

#[test]
fn a_healthy_cluster_has_a_leader_tolerance_and_no_warnings() {
    let obs = observe(
        &[
            healthy(Role::Follower),
            healthy(Role::Leader),
            healthy(Role::Follower),
        ],
        false,
    );
    let mut snap = world(&obs, Some(1));
    snap.nodes = Some(vec![]);
    let r = assess(&obs, &snap);
    assert_eq!(r.summary.leader.as_deref(), Some("etcd-1"));
    assert_eq!(r.summary.fault_tolerance, 1);
    assert_eq!(r.summary.term, Some(2));
    assert!(r.summary.has_quorum);
    assert_eq!(codes(&r), Vec::<&str>::new());
    assert_eq!(r.replicas[0].raft.leader_pod.as_deref(), Some("etcd-1"));
    assert_eq!(r.replicas[0].raft.lag, Some(0));
    assert_eq!(r.replicas[0].endpoints.len(), 2);
    assert_eq!(r.pdb.as_ref().unwrap().disruptions_allowed, 1);
}

#[test]
fn a_hung_member_drops_tolerance_to_zero_and_is_reported() {
    let hung = R {
        health: None,
        ..healthy(Role::Follower)
    };
    let obs = observe(
        &[hung, healthy(Role::Leader), healthy(Role::Follower)],
        false,
    );
    let r = assess(&obs, &world(&obs, Some(1)));
    assert_eq!(r.summary.healthy_voters, 2);
    assert_eq!(r.summary.fault_tolerance, 0);
    assert_eq!(r.replicas[0].raft.role, Role::Unknown);
    let c = codes(&r);
    assert!(c.contains(&"FaultToleranceZero"), "{c:?}");
    assert!(c.contains(&"ReadyButUnhealthy"), "{c:?}");
    assert!(
        c.contains(&"ServiceRoutesToUnready"),
        "the client Service still routes to it: {c:?}"
    );
    assert!(
        c.contains(&"DisruptionBudgetTooLoose"),
        "PDB allows 1, Raft tolerates 0: {c:?}"
    );
}

#[test]
fn losing_a_majority_loses_quorum() {
    let down = R {
        ready: false,
        health: None,
        ..healthy(Role::Follower)
    };
    let obs = observe(&[down.clone(), down, healthy(Role::Candidate)], false);
    let r = assess(&obs, &world(&obs, Some(0)));
    assert!(!r.summary.has_quorum);
    assert_eq!(r.summary.fault_tolerance, 0);
    let c = codes(&r);
    assert!(
        c.contains(&"QuorumLost") && c.contains(&"NoLeader") && c.contains(&"Unreachable"),
        "{c:?}"
    );
    assert!(
        !c.contains(&"FaultToleranceZero"),
        "quorum lost is said once, not twice: {c:?}"
    );
}

#[test]
fn two_claimants_a_weak_probe_and_a_cordoned_leader_are_warned_about() {
    let stale = R {
        term: 1,
        ..healthy(Role::Leader)
    };
    let obs = observe(
        &[stale, healthy(Role::Leader), healthy(Role::Follower)],
        true,
    );
    let r = assess(&obs, &world(&obs, Some(1)));
    assert_eq!(r.summary.leader, None, "no single leader");
    let c = codes(&r);
    assert!(
        c.contains(&"MultipleLeaders")
            && c.contains(&"WeakReadinessProbe")
            && c.contains(&"LeaderOnCordonedNode"),
        "{c:?}"
    );
    let w = r
        .warnings
        .iter()
        .find(|w| w.code == "MultipleLeaders")
        .unwrap();
    assert!(w.message.contains("etcd-0 (term 1)"), "{}", w.message);
}

#[test]
fn a_missing_pdb_is_worth_a_warning() {
    let obs = observe(
        &[
            healthy(Role::Leader),
            healthy(Role::Follower),
            healthy(Role::Follower),
        ],
        false,
    );
    let mut snap = world(&obs, None);
    snap.nodes = None; // nodes may not be readable: cordon state unknown, no warning about it
    let r = assess(&obs, &snap);
    assert_eq!(codes(&r), vec!["NoPodDisruptionBudget"]);
    assert!(!r.replicas[0].node_unschedulable);
}

#[test]
fn learners_do_not_vote() {
    let obs = observe(
        &[
            healthy(Role::Leader),
            healthy(Role::Follower),
            healthy(Role::Learner),
        ],
        false,
    );
    let r = assess(&obs, &world(&obs, Some(0)));
    assert_eq!(r.summary.voters, 2);
    assert_eq!(r.summary.quorum, 2);
    assert_eq!(r.summary.fault_tolerance, 0);
}

proptest! {
    /// Whatever the replicas say, the summary's arithmetic holds: healthy voters never
    /// exceed voters, tolerance plus quorum equals healthy voters when quorum holds, and a
    /// single claimant is the leader.
    #[test]
    fn summary_arithmetic_holds(states in prop::collection::vec((any::<bool>(), prop::option::of(any::<bool>()), 0u8..6), 1..8)) {
        let roles = [Role::Leader, Role::Follower, Role::Candidate, Role::Learner, Role::Observer, Role::Unknown];
        let rs: Vec<R> = states.iter().map(|(ready, health, role)| R {
            ready: *ready, health: *health, role: Some(roles[*role as usize]), term: 3, index: 10,
        }).collect();
        let obs = observe(&rs, false);
        let r = assess(&obs, &world(&obs, Some(1)));
        let s = &r.summary;
        prop_assert!(s.healthy_voters <= s.voters);
        prop_assert!(s.voters <= s.members);
        prop_assert_eq!(s.quorum, quorum(s.voters));
        if s.has_quorum {
            prop_assert_eq!(s.fault_tolerance + s.quorum, s.healthy_voters);
        } else {
            prop_assert_eq!(s.fault_tolerance, 0);
            prop_assert!(s.voters == 0 || r.warnings.iter().any(|w| w.code == "QuorumLost"));
        }
        let claimants: Vec<&str> = r.replicas.iter().filter(|x| x.raft.role == Role::Leader).map(|x| x.pod.as_str()).collect();
        prop_assert_eq!(s.leader.is_some(), claimants.len() == 1);
        prop_assert_eq!(claimants.len() > 1, r.warnings.iter().any(|w| w.code == "MultipleLeaders"));
        // An unreachable replica never claims a role.
        for x in &r.replicas {
            if x.raft.health.state == CheckState::Unreachable {
                prop_assert_eq!(x.raft.role, Role::Unknown);
            }
        }
    }
}
