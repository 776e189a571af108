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
use crate::model::MAX_ANSWER_BYTES;
use crate::model::{ClusterTarget, OwnerKind, RaftFacts};
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
            groups: None,
            refused: None,
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
        owner_kind: OwnerKind::StatefulSet,
        profile,
        desired_replicas: rs.len() as u32,
        pods,
        credentials_secret: None,
        tls_secret: None,
        gate_assume: None,
        named: true,
    };
    ClusterObservation {
        target,
        replicas,
        members: None,
        credentials_error: None,
        tls_unverified: false,
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
    r.warnings.iter().map(|w| w.code.as_str()).collect()
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
        .find(|w| w.code == WarningCode::MultipleLeaders)
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
            prop_assert!(s.voters == 0 || r.warnings.iter().any(|w| w.code == WarningCode::QuorumLost));
        }
        let claimants: Vec<&str> = r.replicas.iter().filter(|x| x.raft.role == Role::Leader).map(|x| x.pod.as_str()).collect();
        prop_assert_eq!(s.leader.is_some(), claimants.len() == 1);
        prop_assert_eq!(claimants.len() > 1, r.warnings.iter().any(|w| w.code == WarningCode::MultipleLeaders));
        // An unreachable replica never claims a role.
        for x in &r.replicas {
            if x.raft.health.state == CheckState::Unreachable {
                prop_assert_eq!(x.raft.role, Role::Unknown);
            }
        }
    }
}

#[test]
fn a_ready_replica_whose_answer_is_too_large_is_warned_about() {
    let mut obs = observe(
        &[
            healthy(Role::Leader),
            healthy(Role::Follower),
            healthy(Role::Follower),
        ],
        false,
    );
    obs.replicas[2].health = Err(ProbeError::TooLarge(MAX_ANSWER_BYTES));
    let r = assess(&obs, &world(&obs, Some(1)));
    assert_eq!(r.replicas[2].raft.health.state, CheckState::Unknown);
    let w: Vec<&Warning> = r
        .warnings
        .iter()
        .filter(|w| w.code == WarningCode::ReadyButUnhealthy)
        .collect();
    assert_eq!(w.len(), 1, "{:?}", r.warnings);
    assert_eq!(w[0].pod.as_deref(), Some("etcd-2"));
    assert!(w[0].message.contains("larger than"), "{}", w[0].message);
}

#[test]
fn a_ready_replica_that_knows_no_leader_is_warned_about() {
    let mut obs = observe(
        &[
            healthy(Role::Leader),
            healthy(Role::Follower),
            healthy(Role::Follower),
        ],
        false,
    );
    obs.replicas[1].facts.has_leader = Some(false);
    let r = assess(&obs, &world(&obs, Some(1)));
    let w: Vec<&Warning> = r
        .warnings
        .iter()
        .filter(|w| w.code == WarningCode::ReadyWithoutLeader)
        .collect();
    assert_eq!(w.len(), 1, "{:?}", r.warnings);
    assert_eq!(w[0].pod.as_deref(), Some("etcd-1"));
}

#[test]
fn an_unreadable_member_list_is_warned_about_and_replicas_are_counted_instead() {
    let mut obs = observe(
        &[
            healthy(Role::Leader),
            healthy(Role::Follower),
            healthy(Role::Follower),
        ],
        false,
    );
    obs.members = Some(Err("etcd-0 /v3/cluster/member/list: HTTP 500".into()));
    let r = assess(&obs, &world(&obs, Some(1)));
    assert!(codes(&r).contains(&"MembershipUnknown"), "{:?}", codes(&r));
    assert_eq!(r.summary.members, 3);
}

#[test]
fn unreadable_credentials_are_a_warning_that_names_the_secret() {
    let mut obs = observe(&[healthy(Role::Leader), healthy(Role::Follower)], false);
    let r = assess(&obs, &world(&obs, Some(1)));
    assert!(!codes(&r).contains(&"CredentialsUnreadable"));
    obs.credentials_error = Some("reading the credentials Secret \"ops\": not found".into());
    let r = assess(&obs, &world(&obs, Some(1)));
    let w = r
        .warnings
        .iter()
        .find(|w| w.code.as_str() == "CredentialsUnreadable")
        .expect("a warning");
    assert!(w.message.contains("Secret \"ops\""), "{}", w.message);
}

#[test]
fn replicas_read_without_verifying_their_certificates_are_marked() {
    let mut obs = observe(&[healthy(Role::Leader), healthy(Role::Follower)], false);
    let r = assess(&obs, &world(&obs, Some(1)));
    assert!(!codes(&r).contains(&"TlsUnverified"));
    obs.tls_unverified = true;
    let r = assess(&obs, &world(&obs, Some(1)));
    assert!(codes(&r).contains(&"TlsUnverified"), "{:?}", codes(&r));
}

#[test]
fn a_member_list_with_a_learner_sets_the_voters() {
    let mut obs = observe(
        &[
            healthy(Role::Leader),
            healthy(Role::Follower),
            healthy(Role::Follower),
        ],
        false,
    );
    let member = |id: &str, learner| crate::model::Member {
        counted: false,
        live: None,
        id: id.into(),
        name: Some(format!("etcd-{id}")),
        learner,
        url: None,
        address: None,
    };
    obs.members = Some(Ok(vec![
        member("0", false),
        member("1", false),
        member("2", false),
        member("3", true),
    ]));
    let r = assess(&obs, &world(&obs, Some(1)));
    assert_eq!((r.summary.members, r.summary.voters), (4, 3));
    assert!(!codes(&r).contains(&"MembershipUnknown"));
}

/// Three etcd members whose third did not answer, beside this member list (id, name).
fn third_unanswered_beside(list: &[(&str, &str)]) -> ClusterReport {
    let mut obs = observe(
        &[
            healthy(Role::Leader),
            healthy(Role::Follower),
            healthy(Role::Follower),
        ],
        false,
    );
    obs.replicas[2].facts = RaftFacts::default();
    obs.replicas[2].health = Err(ProbeError::Timeout(std::time::Duration::from_secs(2)));
    obs.members = Some(Ok(list
        .iter()
        .map(|(id, name)| crate::model::Member {
            counted: false,
            live: None,
            id: id.to_string(),
            name: Some(name.to_string()),
            learner: false,
            url: None,
            address: None,
        })
        .collect()));
    assess(&obs, &world(&obs, Some(1)))
}

#[test]
fn a_replica_that_says_nothing_of_itself_has_the_id_the_member_list_gives_its_pod() {
    let r = third_unanswered_beside(&[
        ("0", "etcd-0"),
        ("1", "etcd-1"),
        ("8e9e05c52164694d", "etcd-2"),
    ]);
    assert_eq!(
        r.replicas[2].raft.member_id.as_deref(),
        Some("8e9e05c52164694d")
    );
}

#[test]
fn a_replica_that_says_nothing_of_itself_under_two_listed_entries_has_no_id() {
    let r = third_unanswered_beside(&[
        ("0", "etcd-0"),
        ("1", "etcd-1"),
        ("old", "etcd-2"),
        ("new", "etcd-2"),
    ]);
    assert_eq!(r.replicas[2].raft.member_id, None);
}

/// One replica's health, in every form an observation can take.
fn health_of(kind: u8) -> Result<CheckOutcome, ProbeError> {
    let ok = |ok| {
        Ok(CheckOutcome {
            ok,
            detail: "x".into(),
        })
    };
    match kind {
        0 => ok(true),
        1 => ok(false),
        2 => Err(ProbeError::Timeout(std::time::Duration::from_secs(2))),
        3 => Err(ProbeError::Unreachable("connection refused".into())),
        4 => Err(ProbeError::TooLarge(MAX_ANSWER_BYTES)),
        5 => Err(ProbeError::Throttled {
            message: "too many requests".into(),
            retry_after: None,
        }),
        _ => Err(ProbeError::Other("pod is gone".into())),
    }
}

const ROLES: [Role; 6] = [
    Role::Leader,
    Role::Follower,
    Role::Candidate,
    Role::Learner,
    Role::Observer,
    Role::Unknown,
];

/// A cluster of replicas with the given (ready, health kind, role) each.
fn cluster_of(states: &[(bool, u8, u8)]) -> ClusterObservation {
    let rs: Vec<R> = states
        .iter()
        .map(|(ready, _, role)| R {
            ready: *ready,
            health: Some(true),
            role: Some(ROLES[*role as usize]),
            term: 3,
            index: 10,
        })
        .collect();
    let mut obs = observe(&rs, false);
    for (r, (_, h, _)) in obs.replicas.iter_mut().zip(states) {
        r.health = health_of(*h);
    }
    obs
}

proptest! {
    /// The fault tolerance never exceeds voters − quorum, whatever the replicas say.
    #[test]
    fn fault_tolerance_never_exceeds_voters_minus_quorum(
        states in prop::collection::vec((any::<bool>(), 0u8..7, 0u8..6), 1..9)
    ) {
        let obs = cluster_of(&states);
        let s = assess(&obs, &world(&obs, Some(1))).summary;
        prop_assert!(s.fault_tolerance <= s.voters.saturating_sub(s.quorum));
    }

    /// A replica whose own check is not ok (failing, unreachable, too large, throttled, ...)
    /// is never counted healthy: healthy voters are at most the ok voters.
    #[test]
    fn a_replica_that_is_not_ok_is_never_counted_healthy(
        states in prop::collection::vec((any::<bool>(), 0u8..7, 0u8..6), 1..9)
    ) {
        let obs = cluster_of(&states);
        let r = assess(&obs, &world(&obs, Some(1)));
        let ok_voters = states
            .iter()
            .filter(|(_, h, role)| *h == 0 && ROLES[*role as usize].is_voter())
            .count() as u32;
        prop_assert!(r.summary.healthy_voters <= ok_voters);
        for (x, (ready, h, _)) in r.replicas.iter().zip(&states) {
            prop_assert_eq!(x.raft.health.state == CheckState::Ok, *h == 0);
            // Every Ready replica that is not ok gets its warning.
            let warned = r.warnings.iter().any(|w| {
                w.code == WarningCode::ReadyButUnhealthy && w.pod.as_deref() == Some(x.pod.as_str())
            });
            prop_assert_eq!(warned, *ready && *h != 0);
        }
    }

    /// Reordering the replicas changes no summary and no warning.
    #[test]
    fn reordering_replicas_changes_no_summary(
        (states, order) in prop::collection::vec((any::<bool>(), 0u8..7, 0u8..6), 1..9)
            .prop_flat_map(|v| {
                let n = v.len();
                (Just(v), Just((0..n).collect::<Vec<usize>>()).prop_shuffle())
            })
    ) {
        let obs = cluster_of(&states);
        let snap = world(&obs, Some(1));
        let mut shuffled = obs.clone();
        shuffled.replicas = order.iter().map(|&i| obs.replicas[i].clone()).collect();
        shuffled.target.pods = order.iter().map(|&i| obs.target.pods[i].clone()).collect();
        let a = assess(&obs, &snap);
        let b = assess(&shuffled, &snap);
        prop_assert_eq!(&a.summary, &b.summary);
        let mut wa: Vec<_> = a.warnings.iter().map(|w| (w.code, w.pod.clone())).collect();
        let mut wb: Vec<_> = b.warnings.iter().map(|w| (w.code, w.pod.clone())).collect();
        wa.sort();
        wb.sort();
        prop_assert_eq!(wa, wb);
    }
}

/// The `-o json` schema is a promise (docs/status-schema.md): a fixed report renders to the
/// same bytes as `tests/golden/status.json`. To change it on purpose, run the test with
/// UPDATE_GOLDEN=1 and review the diff.
#[test]
fn the_json_report_matches_the_golden_file() {
    let hung = R {
        health: None,
        ..healthy(Role::Follower)
    };
    let obs = observe(
        &[hung, healthy(Role::Leader), healthy(Role::Follower)],
        false,
    );
    let report = StatusReport {
        api_version: API_VERSION,
        kind: "StatusReport",
        clusters: vec![assess(&obs, &world(&obs, Some(1)))],
    };
    let mut out = vec![];
    crate::render::status(&report, crate::render::Format::Json, &mut out).unwrap();
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/status.json");
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &out).unwrap();
    }
    let golden = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (create it with UPDATE_GOLDEN=1)", path.display()));
    assert_eq!(String::from_utf8(out).unwrap(), golden);
}

/// The table a person reads: one summary line, the PDB, the Services, a row per replica and
/// the warnings, written to the writer the verb is given.
#[test]
fn the_table_report_lines() {
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
    let report = StatusReport {
        api_version: API_VERSION,
        kind: "StatusReport",
        clusters: vec![assess(&obs, &snap)],
    };
    let mut out = vec![];
    crate::render::status(&report, crate::render::Format::Table, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0],
        "db/etcd (etcd, StatefulSet): 3 members (counted from pods: member list unreadable), 3/3 voters healthy, quorum 2, fault tolerance 1, leader etcd-1 (term 2)"
    );
    assert!(lines[1].starts_with("PodDisruptionBudget etcd: 1 disruption(s) allowed"));
    assert!(lines[3].split_whitespace().eq([
        "POD",
        "NODE",
        "STATUS",
        "READY",
        "RESTARTS",
        "HEALTH",
        "ROLE",
        "TERM",
        "INDEX",
        "LAG",
        "ENDPOINTS"
    ]));
    let leader_row: Vec<&str> = lines[5].split_whitespace().collect();
    assert_eq!(
        &leader_row[..7],
        ["etcd-1", "n1", "Running", "true", "0", "ok", "leader"]
    );
    assert!(!text.contains("WARNING"), "{text}");
}

/// The table of a one-member cluster whose report carries `gate`.
fn table_with_gate(gate: GateReport) -> String {
    let obs = observe(&[healthy(Role::Leader)], false);
    let mut snap = world(&obs, Some(1));
    snap.nodes = Some(vec![]);
    let mut c = assess(&obs, &snap);
    c.gate = Some(gate);
    let report = StatusReport {
        api_version: API_VERSION,
        kind: "StatusReport",
        clusters: vec![c],
    };
    let mut out = vec![];
    crate::render::status(&report, crate::render::Format::Table, &mut out).unwrap();
    String::from_utf8(out).unwrap()
}

fn gated_by_kubectl_raft_gate(last_refusal: Option<GateRefusal>) -> GateReport {
    GateReport {
        state: GateState::Gated,
        webhook: Some("kubectl-raft-gate".into()),
        failure_policy: Some("Fail".into()),
        mode: None,
        ready_endpoints: None,
        unknown_because: None,
        last_refusal,
    }
}

/// A gate none of whose replicas is ready fails every eviction (failurePolicy Fail): the gate
/// line says so, and what to look at.
#[test]
fn the_table_says_when_no_gate_replica_is_ready() {
    let mut g = gated_by_kubectl_raft_gate(None);
    g.ready_endpoints = Some(0);
    let text = table_with_gate(g);
    let line = text.lines().nth(2).unwrap_or_default();
    assert!(
        line.contains("NO GATE REPLICA IS READY: every eviction of these pods fails"),
        "{text}"
    );
}

/// Positive control: one ready replica, nothing said of it.
#[test]
fn the_table_says_nothing_of_a_ready_gate_replica() {
    let mut g = gated_by_kubectl_raft_gate(None);
    g.ready_endpoints = Some(1);
    let text = table_with_gate(g);
    let line = text.lines().nth(2).unwrap_or_default();
    assert!(line.starts_with("Gate: "), "{text}");
    assert!(!line.contains("READY"), "{text}");
}

/// A gate in a trial mode says so on the gate line: it refuses nothing.
#[test]
fn the_table_says_when_the_gate_only_tries() {
    let mut g = gated_by_kubectl_raft_gate(None);
    g.mode = Some("warn".into());
    let text = table_with_gate(g);
    assert_eq!(
        text.lines().nth(2),
        Some("Gate: evictions decided by the gate (webhook kubectl-raft-gate, failurePolicy Fail, warn mode: a trial, nothing refused, what it would refuse recorded)"),
        "{text}"
    );
}

/// A gated cluster's table says so under the PDB, with the gate's last refusal.
#[test]
fn the_table_names_the_gate_and_its_last_refusal() {
    let text = table_with_gate(gated_by_kubectl_raft_gate(Some(GateRefusal {
        pod: "etcd-2".into(),
        reason: "QuorumAtRisk".into(),
        message: "etcd-2 cannot go: 1 healthy voter(s) where 2 are needed".into(),
        at: "2026-12-02T01:05:00Z".into(),
        count: 4,
    })));
    assert_eq!(
        text.lines().nth(2),
        Some("Gate: evictions decided by the gate (webhook kubectl-raft-gate, failurePolicy Fail); last refused etcd-2 at 2026-12-02T01:05:00Z (4×): etcd-2 cannot go: 1 healthy voter(s) where 2 are needed (QuorumAtRisk)"),
        "{text}"
    );
}

/// A cluster no gate decides for, with no refusal, gets no gate line: nothing to say.
#[test]
fn the_table_of_an_ungated_cluster_has_no_gate_line() {
    let text = table_with_gate(GateReport {
        state: GateState::NotGated,
        webhook: None,
        failure_policy: None,
        mode: None,
        ready_endpoints: None,
        unknown_because: None,
        last_refusal: None,
    });
    assert!(!text.contains("Gate:"), "{text}");
}

/// The last refusal comes from an Event, which anyone allowed to write Events in the
/// namespace could have written: its text never makes a line of its own in the table.
#[test]
fn a_refusal_with_line_breaks_stays_on_the_gate_line() {
    let text = table_with_gate(gated_by_kubectl_raft_gate(Some(GateRefusal {
        pod: "etcd-0".into(),
        reason: "QuorumAtRisk\netcd-9 n9 Running".into(),
        message: "fine\nWARNING: etcd-0 lost its data".into(),
        at: "2026-12-02T01:05:00Z".into(),
        count: 1,
    })));
    assert!(
        !text.lines().any(|l| l.starts_with("WARNING: etcd-0 lost")),
        "{text}"
    );
    assert!(!text.lines().any(|l| l.starts_with("etcd-9")), "{text}");
}
