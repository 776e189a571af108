use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{
    Node, NodeCondition, NodeSpec, NodeStatus, PersistentVolume, Pod, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use proptest::prelude::*;
use serde_json::json;

use super::*;
use crate::plan::placement::{replacement_blocker, replacement_blockers};
use crate::report::CheckState;

/// One member, as a test describes it.
#[derive(Clone, Debug)]
struct M {
    role: Role,
    node: u8,
    health: CheckState,
    lag: u64,
    term: u64,
    ready: bool,
}

fn m(role: Role, node: u8) -> M {
    M {
        role,
        node,
        health: CheckState::Ok,
        lag: 0,
        term: 7,
        ready: true,
    }
}

fn base(x: &M) -> crate::plan::tests::M {
    crate::plan::tests::M {
        role: x.role,
        health: x.health,
        lag: Some(x.lag),
        cordoned: false,
        node: x.node,
    }
}

/// plan's test cluster, named `name`, with each member's readiness and term as given.
fn input(name: &str, ms: &[M], can_transfer: bool) -> ClusterInput {
    let bases: Vec<crate::plan::tests::M> = ms.iter().map(base).collect();
    let mut report = crate::plan::tests::cluster(&bases);
    report.name = name.into();
    for (i, (r, x)) in report.replicas.iter_mut().zip(ms).enumerate() {
        r.pod = format!("{name}-{i}");
        r.ready = x.ready;
        r.raft.term = Some(x.term);
    }
    ClusterInput::new(
        report,
        can_transfer,
        can_transfer,
        crate::model::profile::Liveness::Health,
    )
}

fn opts(nodes: &[u8]) -> DrainOptions {
    DrainOptions {
        nodes: nodes.iter().map(|n| format!("n{n}")).collect(),
        max_lag: 100,
        allow_degraded: false,
        delete_emptydir_data: false,
        assume_voters_are_pods: Default::default(),
        assume_followers_current: Default::default(),
        allow_hostpath_data: false,
    }
}

fn three() -> Vec<M> {
    vec![
        m(Role::Follower, 1),
        m(Role::Leader, 2),
        m(Role::Follower, 3),
    ]
}

#[test]
fn a_followers_node_is_one_eviction() {
    let p = plan_cluster(&input("etcd", &three(), true), &opts(&[1]));
    assert_eq!(p.blocker, None);
    assert_eq!(p.steps.len(), 1);
    let s = &p.steps[0];
    assert_eq!((s.pod.as_str(), s.action), ("etcd-0", Action::Evict));
    assert_eq!(
        (s.healthy_voters_during, s.quorum, s.fault_tolerance_during),
        (2, 2, 0)
    );
}

/// A learner's eviction costs no quorum, and its replacement comes back a learner: the later
/// steps of the plan do not count it as a voter.
#[test]
fn a_learner_is_not_counted_as_a_voter_in_the_steps_after_its_own() {
    let mut ms = three();
    ms[2].health = CheckState::Unreachable;
    ms.push(m(Role::Learner, 4));
    let mut c = input("etcd", &ms, true);
    c.report.summary.voters = 3;
    c.report.summary.quorum = 2;
    let p = plan_cluster(&c, &opts(&[1, 4]));
    let pods: Vec<&str> = p.steps.iter().map(|s| s.pod.as_str()).collect();
    assert_eq!(pods, ["etcd-3"], "only the learner goes: {p:?}");
    assert_eq!(
        p.blocker.as_ref().map(|b| b.reason),
        Some(BlockReason::QuorumAtRisk),
        "{p:?}"
    );
}

/// A member on a hostPath volume keeps its data on the node: its replacement elsewhere
/// starts without it. Refused unless the user allows it.
#[test]
fn a_member_on_a_host_path_is_refused_without_allow_hostpath_data() {
    let mut c = input("etcd", &three(), true);
    c.host_paths.insert(
        "etcd-0".into(),
        vec!["data (hostPath /var/lib/etcd)".into()],
    );
    let p = plan_cluster(&c, &opts(&[1]));
    let b = p.blocker.expect("a blocker");
    assert_eq!(b.reason, BlockReason::LocalData);
    assert!(
        b.message.contains("hostPath /var/lib/etcd") && b.message.contains("--allow-hostpath-data"),
        "{}",
        b.message
    );
    let mut o = opts(&[1]);
    o.allow_hostpath_data = true;
    assert_eq!(plan_cluster(&c, &o).steps.len(), 1);
}

#[test]
fn a_generic_ephemeral_volume_is_local_data_like_an_emptydir() {
    let mut pod = member(0, "n1");
    pod.spec.as_mut().unwrap().volumes = Some(vec![
        k8s_openapi::api::core::v1::Volume {
            name: "data".into(),
            ephemeral: Some(Default::default()),
            ..Default::default()
        },
        k8s_openapi::api::core::v1::Volume {
            name: "logs".into(),
            host_path: Some(k8s_openapi::api::core::v1::HostPathVolumeSource {
                path: "/var/log/etcd".into(),
                type_: None,
            }),
            ..Default::default()
        },
    ]);
    let (deleted, host) = node_local_volumes(&pod);
    assert_eq!(deleted, ["data (an ephemeral volume)"]);
    assert_eq!(host, ["logs (hostPath /var/log/etcd)"]);
}

/// The StatefulSet's controller is rolling it: a drain's eviction beside it could leave two
/// members down, so the drain waits.
#[test]
fn a_controller_rollout_under_way_is_waited_for() {
    let mut c = input("etcd", &three(), true);
    c.controller_rolling =
        Some("its StatefulSet's controller is rolling it from revision a to b".into());
    let p = plan_cluster(&c, &opts(&[1]));
    assert!(p.steps.is_empty());
    let b = p.blocker.expect("a blocker");
    assert_eq!(b.reason, BlockReason::RolloutInProgress);
    assert!(b.reason.waitable());
}

/// Voters the run has seen (a larger configuration at an earlier look) keep the quorum.
#[test]
fn the_quorum_is_never_smaller_than_the_run_has_seen() {
    let mut c = input("etcd", &three(), true);
    c.least_voters = 5;
    let p = plan_cluster(&c, &opts(&[1]));
    assert!(p.steps.is_empty(), "{p:?}");
    assert_eq!((p.voters, p.quorum), (5, 3));
    assert_eq!(p.blocker.map(|b| b.reason), Some(BlockReason::QuorumAtRisk));
}

#[test]
fn the_leader_goes_after_a_transfer_to_a_node_that_stays() {
    let p = plan_cluster(&input("etcd", &three(), true), &opts(&[2]));
    assert_eq!(p.steps.len(), 1);
    let s = &p.steps[0];
    assert_eq!(s.action, Action::TransferThenEvict);
    assert_eq!(s.target.as_deref(), Some("etcd-0"));
}

/// restart's members (`replace`) go wherever they run, and leadership never goes to one of
/// them: here etcd-0 is still to restart, so etcd-2 takes over.
#[test]
fn a_restart_hands_leadership_only_to_a_member_not_still_to_go() {
    let mut c = input("etcd", &three(), true);
    c.replace = ["etcd-0", "etcd-1"].map(String::from).into();
    let p = plan_cluster(&c, &opts(&[]));
    assert_eq!(p.blocker, None);
    let order: Vec<(&str, Action, Option<&str>)> = p
        .steps
        .iter()
        .map(|s| (s.pod.as_str(), s.action, s.target.as_deref()))
        .collect();
    assert_eq!(
        order,
        [
            ("etcd-0", Action::Evict, None),
            ("etcd-1", Action::TransferThenEvict, Some("etcd-2"))
        ]
    );
}

#[test]
fn a_member_that_counts_for_nothing_goes_first() {
    let mut ms = vec![
        m(Role::Follower, 1),
        m(Role::Leader, 2),
        m(Role::Follower, 3),
        m(Role::Follower, 4),
        m(Role::Follower, 5),
    ];
    ms[4].health = CheckState::Unreachable;
    let mut c = input("etcd", &ms, true);
    c.replace = ["etcd-0", "etcd-4"].map(String::from).into();
    let p = plan_cluster(&c, &opts(&[]));
    let order: Vec<&str> = p.steps.iter().map(|s| s.pod.as_str()).collect();
    assert_eq!(order, ["etcd-4", "etcd-0"], "{p:#?}");
}

#[test]
fn a_restart_of_every_member_plans_the_leader_after_a_restarted_follower() {
    let mut c = input("etcd", &three(), true);
    c.replace = ["etcd-0", "etcd-1", "etcd-2"].map(String::from).into();
    let p = plan_cluster(&c, &opts(&[]));
    let order: Vec<(&str, Action)> = p.steps.iter().map(|s| (s.pod.as_str(), s.action)).collect();
    assert_eq!(
        order,
        [
            ("etcd-0", Action::Evict),
            ("etcd-2", Action::Evict),
            ("etcd-1", Action::TransferThenEvict)
        ]
    );
    assert_eq!(
        p.steps[2].target, None,
        "no member restarted yet: one will be"
    );
}

#[test]
fn two_nodes_followers_first_leader_last_one_transfer() {
    let five = vec![
        m(Role::Leader, 1),
        m(Role::Follower, 2),
        m(Role::Follower, 3),
        m(Role::Follower, 4),
        m(Role::Follower, 5),
    ];
    let p = plan_cluster(&input("etcd", &five, true), &opts(&[1, 4]));
    let order: Vec<(&str, Action)> = p.steps.iter().map(|s| (s.pod.as_str(), s.action)).collect();
    assert_eq!(
        order,
        [
            ("etcd-3", Action::Evict),
            ("etcd-0", Action::TransferThenEvict)
        ]
    );
    assert_eq!(p.steps[1].target.as_deref(), Some("etcd-1"));
}

#[test]
fn a_silently_broken_follower_blocks_the_eviction_of_another() {
    let mut ms = three();
    ms[2].health = CheckState::Unreachable;
    let p = plan_cluster(&input("etcd", &ms, true), &opts(&[1]));
    assert!(p.steps.is_empty());
    let b = p.blocker.expect("blocked");
    assert_eq!(b.reason, BlockReason::QuorumAtRisk);
    assert!(
        b.message.contains("etcd-2's health check is unreachable"),
        "{}",
        b.message
    );
}

#[test]
fn a_lagging_or_stale_term_member_is_not_counted_healthy() {
    let mut ms = three();
    ms[2].lag = 5000;
    let p = plan_cluster(&input("etcd", &ms, true), &opts(&[1]));
    assert_eq!(p.blocker.map(|b| b.reason), Some(BlockReason::QuorumAtRisk));
    let mut ms = three();
    ms[2].term = 6;
    let p = plan_cluster(&input("etcd", &ms, true), &opts(&[1]));
    assert_eq!(p.blocker.map(|b| b.reason), Some(BlockReason::QuorumAtRisk));
}

#[test]
fn one_member_down_on_five_still_allows_one_eviction() {
    let mut five = vec![m(Role::Leader, 1)];
    five.extend((2..=5).map(|n| m(Role::Follower, n)));
    five[4].health = CheckState::Unreachable;
    let p = plan_cluster(&input("etcd", &five, true), &opts(&[2]));
    assert_eq!(p.blocker, None);
    assert_eq!(p.steps[0].fault_tolerance_during, 0);
}

#[test]
fn a_single_voter_cannot_go_and_waiting_would_not_help() {
    let p = plan_cluster(&input("etcd", &[m(Role::Leader, 1)], true), &opts(&[1]));
    let b = p.blocker.expect("refused");
    assert_eq!(b.reason, BlockReason::TooFewVoters);
    assert!(!b.reason.waitable());
    assert!(p.steps.is_empty());
}

#[test]
fn neither_of_two_voters_can_go_and_waiting_would_not_help() {
    let two = [m(Role::Leader, 1), m(Role::Follower, 2)];
    let p = plan_cluster(&input("etcd", &two, true), &opts(&[2]));
    let b = p.blocker.expect("refused");
    assert_eq!(b.reason, BlockReason::TooFewVoters);
    assert!(
        b.message.contains("has 2 voter(s) and needs 2"),
        "{}",
        b.message
    );
}

#[test]
fn a_member_that_comes_back_at_a_newer_revision_says_so_in_its_step() {
    let mut c = input("etcd", &three(), true);
    c.comes_back_at.insert("etcd-0".into(), "etcd-7d9".into());
    let p = plan_cluster(&c, &opts(&[1]));
    assert_eq!(p.steps[0].pod, "etcd-0");
    assert_eq!(p.steps[0].new_revision.as_deref(), Some("etcd-7d9"));
}

#[test]
fn no_leader_means_wait() {
    let ms = vec![
        m(Role::Follower, 1),
        m(Role::Candidate, 2),
        m(Role::Follower, 3),
    ];
    let p = plan_cluster(&input("etcd", &ms, true), &opts(&[1]));
    let b = p.blocker.expect("blocked");
    assert_eq!(b.reason, BlockReason::NoLeader);
    assert!(b.reason.waitable());
}

#[test]
fn without_a_transfer_the_leaders_eviction_is_an_election() {
    let p = plan_cluster(&input("zk", &three(), false), &opts(&[2]));
    assert_eq!(p.steps[0].action, Action::EvictLeader);
}

#[test]
fn a_pinned_member_is_refused_unless_degraded_is_allowed() {
    let mut c = input("etcd", &three(), true);
    c.stuck
        .insert("etcd-0".into(), "its volume is pinned to node n1".into());
    let p = plan_cluster(&c, &opts(&[1]));
    let b = p.blocker.expect("refused");
    assert_eq!(b.reason, BlockReason::Pinned);
    assert!(!b.reason.waitable());
    assert!(b.message.contains("--allow-degraded"), "{}", b.message);

    let mut o = opts(&[1]);
    o.allow_degraded = true;
    let p = plan_cluster(&c, &o);
    assert_eq!(p.steps.len(), 1);
    assert!(p.steps[0].degraded.is_some());
}

#[test]
fn a_member_on_an_emptydir_is_refused_unless_its_data_may_go() {
    let mut c = input("etcd", &three(), true);
    c.empty_dirs.insert("etcd-0".into(), vec!["data".into()]);
    let p = plan_cluster(&c, &opts(&[1]));
    assert!(p.steps.is_empty(), "{:?}", p.steps);
    let b = p.blocker.expect("refused");
    assert_eq!(b.reason, BlockReason::LocalData);
    assert!(!b.reason.waitable());
    assert!(
        b.message.contains("--delete-emptydir-data"),
        "{}",
        b.message
    );

    let mut o = opts(&[1]);
    o.delete_emptydir_data = true;
    let p = plan_cluster(&c, &o);
    assert_eq!(p.blocker, None);
    assert!(
        p.steps[0].why.contains("starts empty"),
        "{}",
        p.steps[0].why
    );
}

#[test]
fn placement_that_cannot_be_checked_refuses_unless_degraded_is_allowed() {
    let mut c = input("etcd", &three(), true);
    c.placement_unknown = Some(
        "without the right to list nodes, where a replacement could start cannot be checked".into(),
    );
    let p = plan_cluster(&c, &opts(&[1]));
    let b = p.blocker.expect("refused");
    assert_eq!(b.reason, BlockReason::PlacementUnknown);
    assert!(b.message.contains("--allow-degraded"), "{}", b.message);
    let mut o = opts(&[1]);
    o.allow_degraded = true;
    assert_eq!(plan_cluster(&c, &o).steps.len(), 1);
}

#[test]
fn voters_counted_from_pods_refuse_the_drain_unless_assumed() {
    let mut c = input("nats", &three(), true);
    c.report.summary.voters_from = crate::report::VotersFrom::Pods;
    let p = plan_cluster(&c, &opts(&[1]));
    assert!(p.steps.is_empty());
    let b = p.blocker.expect("refused");
    assert_eq!(b.reason, BlockReason::MembershipUnknown);
    assert!(!b.reason.waitable());
    assert!(
        b.message.contains("--assume-voters-are-pods"),
        "{}",
        b.message
    );
    let mut o = opts(&[1]);
    o.assume_voters_are_pods = crate::plan::drain::Assume::Every;
    assert_eq!(plan_cluster(&c, &o).steps.len(), 1);
}

#[test]
fn five_configured_voters_on_three_pods_allow_no_eviction() {
    // ZooKeeper with server.1..server.5 configured and replicas: 3.
    let mut c = input("zk", &three(), false);
    c.report.summary.voters = 5;
    c.report.summary.members = 5;
    c.report.summary.quorum = 3;
    let p = plan_cluster(&c, &opts(&[1]));
    assert!(p.steps.is_empty(), "{:?}", p.steps);
    let b = p.blocker.expect("refused");
    assert_eq!(b.reason, BlockReason::QuorumAtRisk);
    assert!(
        b.message
            .contains("would leave 2 healthy voter(s) where 3 are needed"),
        "{}",
        b.message
    );
    assert!(
        b.message.contains("2 of the 5 voter(s)") && b.message.contains("run in no pod"),
        "the voters without a pod are named as the reason: {}",
        b.message
    );
}

#[test]
fn a_quorum_wait_without_voters_beyond_the_pods_says_nothing_of_them() {
    let mut ms = three();
    ms[2].health = CheckState::Unreachable;
    let b = plan_cluster(&input("etcd", &ms, true), &opts(&[1]))
        .blocker
        .expect("refused");
    assert_eq!(b.reason, BlockReason::QuorumAtRisk);
    assert!(!b.message.contains("run in no pod"), "{}", b.message);
}

#[test]
fn a_degraded_cluster_never_loses_a_second_member() {
    let mut five = vec![m(Role::Leader, 5)];
    five.extend((1..=4).map(|n| m(Role::Follower, n)));
    let mut c = input("etcd", &five, true);
    c.stuck.insert("etcd-1".into(), "pinned".into());
    c.stuck.insert("etcd-2".into(), "pinned".into());
    let mut o = opts(&[1, 2]);
    o.allow_degraded = true;
    let p = plan_cluster(&c, &o);
    assert_eq!(p.steps.len(), 1);
    assert_eq!(p.blocker.map(|b| b.reason), Some(BlockReason::Degraded));
}

#[test]
fn an_unplaced_member_kept_away_by_the_drain_blocks_the_next() {
    let mut c = input("etcd", &three(), true);
    c.report.replicas[2].node = None;
    c.report.replicas[2].raft.health.state = CheckState::Unreachable;
    c.stuck.insert("etcd-2".into(), "pinned to n3".into());
    let p = plan_cluster(&c, &opts(&[1, 3]));
    assert_eq!(p.blocker.map(|b| b.reason), Some(BlockReason::Degraded));
    assert!(p.steps.is_empty());
}

// --- ordinary pods --------------------------------------------------------------------------

fn pod(owner: Option<&str>, emptydir: bool, phase: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {
            "name": "p",
            "ownerReferences": owner.map(|k| vec![json!({
                "apiVersion": "apps/v1", "kind": k, "name": "o", "uid": "u", "controller": true
            })]).unwrap_or_default(),
        },
        "spec": {
            "containers": [{"name": "c"}],
            "volumes": if emptydir { vec![json!({"name": "scratch", "emptyDir": {}})] } else { vec![] },
        },
        "status": {"phase": phase},
    }))
    .unwrap()
}

fn rules() -> PodRules {
    PodRules::default()
}

#[test]
fn a_replicaset_pod_is_evicted() {
    assert_eq!(
        classify_pod(&pod(Some("ReplicaSet"), false, "Running"), &rules()),
        PodVerdict::Evict(None)
    );
}

#[test]
fn a_daemonset_pod_is_refused_or_skipped() {
    let p = pod(Some("DaemonSet"), false, "Running");
    assert!(
        matches!(classify_pod(&p, &rules()), PodVerdict::Refuse(m) if m.contains("--ignore-daemonsets"))
    );
    let r = PodRules {
        ignore_daemonsets: true,
        ..rules()
    };
    assert!(matches!(classify_pod(&p, &r), PodVerdict::Skip(_)));
}

#[test]
fn a_mirror_pod_is_skipped() {
    let mut p = pod(None, false, "Running");
    p.metadata.annotations =
        Some([("kubernetes.io/config.mirror".to_string(), "x".to_string())].into());
    assert!(matches!(classify_pod(&p, &rules()), PodVerdict::Skip(_)));
}

#[test]
fn emptydir_data_is_refused_unless_allowed() {
    let p = pod(Some("ReplicaSet"), true, "Running");
    assert!(
        matches!(classify_pod(&p, &rules()), PodVerdict::Refuse(m) if m.contains("--delete-emptydir-data"))
    );
    let r = PodRules {
        delete_emptydir_data: true,
        ..rules()
    };
    assert!(matches!(classify_pod(&p, &r), PodVerdict::Evict(Some(w)) if w.contains("scratch")));
}

#[test]
fn an_unmanaged_pod_is_refused_unless_forced() {
    let p = pod(None, false, "Running");
    assert!(matches!(classify_pod(&p, &rules()), PodVerdict::Refuse(m) if m.contains("--force")));
    let r = PodRules {
        force: true,
        ..rules()
    };
    assert!(matches!(classify_pod(&p, &r), PodVerdict::Evict(Some(_))));
}

#[test]
fn a_finished_pod_is_deleted_whatever_it_is() {
    assert_eq!(
        classify_pod(&pod(None, true, "Succeeded"), &rules()),
        PodVerdict::Evict(None)
    );
}

// --- placement ------------------------------------------------------------------------------

fn node(name: &str, cordoned: bool) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some([("kubernetes.io/hostname".to_string(), name.to_string())].into()),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            unschedulable: Some(cordoned),
            ..Default::default()
        }),
        status: Some(NodeStatus {
            conditions: Some(vec![NodeCondition {
                type_: "Ready".into(),
                status: "True".into(),
                ..Default::default()
            }]),
            ..Default::default()
        }),
    }
}

fn member(i: usize, node: &str) -> Pod {
    let mut p: Pod = serde_json::from_value(json!({
        "metadata": {"name": format!("etcd-{i}"), "namespace": "db", "labels": {"app": "etcd"}},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "etcd"}],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": format!("data-etcd-{i}")}}],
            "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "etcd"}}, "topologyKey": "kubernetes.io/hostname"}
            ]}},
        },
    }))
    .unwrap();
    p.status = Some(PodStatus::default());
    p.metadata.owner_references = Some(vec![OwnerReference {
        kind: "StatefulSet".into(),
        controller: Some(true),
        ..Default::default()
    }]);
    p
}

fn pinned_pv(claim: &str, node: &str) -> PersistentVolume {
    serde_json::from_value(json!({
        "metadata": {"name": format!("pv-{claim}")},
        "spec": {
            "claimRef": {"namespace": "db", "name": claim},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}
            ]}]}},
        },
    }))
    .unwrap()
}

fn drained(n: &str) -> BTreeSet<String> {
    [n.to_string()].into()
}

#[test]
fn a_member_with_a_free_node_can_be_replaced() {
    let nodes: Vec<Node> = (1..=4).map(|i| node(&format!("n{i}"), false)).collect();
    let pods: Vec<Pod> = (0..3).map(|i| member(i, &format!("n{}", i + 1))).collect();
    assert_eq!(
        replacement_blocker(&pods[0], &[], &nodes, &pods, &drained("n1")),
        None
    );
}

#[test]
fn three_members_on_three_nodes_cannot_move() {
    let nodes: Vec<Node> = (1..=3).map(|i| node(&format!("n{i}"), false)).collect();
    let pods: Vec<Pod> = (0..3).map(|i| member(i, &format!("n{}", i + 1))).collect();
    let why = replacement_blocker(&pods[0], &[], &nodes, &pods, &drained("n1")).expect("stuck");
    assert!(
        why.contains("n2 runs etcd-1 (required anti-affinity"),
        "{why}"
    );
}

#[test]
fn a_cordoned_spare_node_does_not_count() {
    let mut nodes: Vec<Node> = (1..=3).map(|i| node(&format!("n{i}"), false)).collect();
    nodes.push(node("n4", true));
    let pods: Vec<Pod> = (0..3).map(|i| member(i, &format!("n{}", i + 1))).collect();
    let why = replacement_blocker(&pods[0], &[], &nodes, &pods, &drained("n1")).expect("stuck");
    assert!(why.contains("n4 is cordoned"), "{why}");
}

#[test]
fn each_replacement_takes_a_node_so_a_later_one_may_find_none() {
    let nodes: Vec<Node> = (1..=4).map(|i| node(&format!("n{i}"), false)).collect();
    let pods: Vec<Pod> = (0..3).map(|i| member(i, &format!("n{}", i + 1))).collect();
    let gone: BTreeSet<String> = ["n1".to_string(), "n2".to_string()].into();
    let stuck = replacement_blockers([&pods[0], &pods[1]], &[], &nodes, &pods, &gone);
    assert_eq!(stuck.keys().collect::<Vec<_>>(), ["etcd-1"], "{stuck:?}");
    assert!(stuck["etcd-1"].contains("n4 runs etcd-0"), "{stuck:?}");
}

#[test]
fn a_volume_pinned_to_the_drained_node_keeps_the_member_there() {
    let nodes: Vec<Node> = (1..=6).map(|i| node(&format!("n{i}"), false)).collect();
    let pods: Vec<Pod> = (0..3).map(|i| member(i, &format!("n{}", i + 1))).collect();
    let pvs = vec![pinned_pv("data-etcd-0", "n1")];
    let why = replacement_blocker(&pods[0], &pvs, &nodes, &pods, &drained("n1")).expect("pinned");
    assert!(why.contains("pinned by node affinity to node n1"), "{why}");
    // Pinned to a node that stays: the replacement goes there.
    let pvs = vec![pinned_pv("data-etcd-0", "n5")];
    assert_eq!(
        replacement_blocker(&pods[0], &pvs, &nodes, &pods, &drained("n1")),
        None
    );
}

// --- properties -----------------------------------------------------------------------------

fn arb_member() -> impl Strategy<Value = M> {
    (
        prop_oneof![
            6 => Just(Role::Follower),
            1 => Just(Role::Learner),
            1 => Just(Role::Candidate),
            1 => Just(Role::Unknown),
        ],
        1u8..=6,
        prop_oneof![4 => Just(CheckState::Ok), 1 => Just(CheckState::Unreachable), 1 => Just(CheckState::Failing)],
        prop_oneof![4 => Just(0u64), 1 => Just(5000u64)],
        prop_oneof![6 => Just(7u64), 1 => Just(6u64)],
        prop_oneof![6 => Just(true), 1 => Just(false)],
    )
        .prop_map(|(role, node, health, lag, term, ready)| M {
            role,
            node,
            health,
            lag,
            term,
            ready,
        })
}

/// A cluster: members, which one leads (if any, and sometimes two), which are pinned.
fn arb_cluster(name: &'static str) -> impl Strategy<Value = ClusterInput> {
    (
        prop::collection::vec(arb_member(), 1..=7),
        any::<prop::sample::Index>(),
        prop_oneof![8 => Just(1usize), 1 => Just(0), 1 => Just(2)],
        any::<bool>(),
        prop::collection::vec(any::<bool>(), 7),
    )
        .prop_map(move |(mut ms, at, leaders, can_transfer, pinned)| {
            let first = at.index(ms.len());
            for k in 0..leaders.min(ms.len()) {
                let i = (first + k) % ms.len();
                ms[i].role = Role::Leader;
                ms[i].lag = 0;
            }
            let mut c = input(name, &ms, can_transfer);
            for (i, p) in pinned.iter().enumerate().take(ms.len()) {
                if *p && i % 3 == 0 {
                    c.stuck.insert(format!("{name}-{i}"), "pinned".into());
                }
            }
            c
        })
}

/// The test's own reading of "a healthy voter", written from the definition and not from
/// assess::voter: the single leader itself, or a voting follower in its term that knows a
/// leader and is caught up; always Ready, answering healthy, not terminating.
fn oracle_healthy(x: &ReplicaReport, r: &ClusterReport, max_lag: u64) -> bool {
    let leaders: Vec<&ReplicaReport> = r
        .replicas
        .iter()
        .filter(|y| y.raft.role == Role::Leader)
        .collect();
    let [leader] = leaders.as_slice() else {
        return false;
    };
    let basics =
        !x.terminating && x.ready && !x.raft.learner && x.raft.health.state == CheckState::Ok;
    if !basics {
        return false;
    }
    if x.pod == leader.pod {
        return true;
    }
    let leader_has_index = leader
        .raft
        .commit_index
        .or(leader.raft.applied_index)
        .is_some();
    x.raft.role == Role::Follower
        && x.raft.term == leader.raft.term
        && x.raft.has_leader != Some(false)
        && x.raft.leader_pod.as_ref().is_none_or(|p| *p == leader.pod)
        && match x.raft.lag {
            Some(l) => l <= max_lag,
            None => !leader_has_index,
        }
}

/// What can go wrong with one member between two surveys.
fn harm(x: &mut ReplicaReport, kind: u8) {
    match kind {
        0 => x.raft.term = None,
        1 => x.raft.lag = None,
        2 => x.raft.has_leader = Some(false),
        3 => x.raft.leader_pod = Some("elsewhere-9".into()),
        4 => x.terminating = true,
        5 => x.ready = false,
        6 => x.raft.health.state = CheckState::Unreachable,
        7 => x.raft.term = x.raft.term.map(|t| t.saturating_add(1)),
        _ => x.raft.role = Role::Candidate,
    }
}

fn arb_opts() -> impl Strategy<Value = DrainOptions> {
    (prop::collection::btree_set(1u8..=6, 1..=3), any::<bool>()).prop_map(|(nodes, deg)| {
        DrainOptions {
            nodes: nodes.into_iter().map(|n| format!("n{n}")).collect(),
            max_lag: 100,
            allow_degraded: deg,
            delete_emptydir_data: false,
            assume_voters_are_pods: Default::default(),
            assume_followers_current: Default::default(),
            allow_hostpath_data: false,
        }
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Counted independently of the planner (and of assess::voter, by `oracle_healthy`):
    /// before each step, the members healthy at the start, plus the replaced ones, minus the
    /// ones kept away, minus this one, form a quorum.
    #[test]
    fn no_step_leaves_fewer_healthy_voters_than_a_quorum(c in arb_cluster("a"), o in arb_opts()) {
        let p = plan_cluster(&c, &o);
        let mut healthy: BTreeSet<String> = c.report.replicas.iter()
            .filter(|x| oracle_healthy(x, &c.report, o.max_lag))
            .map(|x| x.pod.clone())
            .collect();
        for s in &p.steps {
            let mut during = healthy.clone();
            during.remove(&s.pod);
            prop_assert!(during.len() as u32 >= c.report.summary.quorum, "{s:?} leaves {during:?}");
            if s.degraded.is_some() { healthy.remove(&s.pod); } else { healthy.insert(s.pod.clone()); }
        }
    }

    #[test]
    fn the_leader_is_last_and_never_before_its_transfer(c in arb_cluster("a"), o in arb_opts()) {
        let p = plan_cluster(&c, &o);
        for (i, s) in p.steps.iter().enumerate() {
            let leads = p.leader.as_deref() == Some(s.pod.as_str());
            if leads {
                prop_assert_eq!(i, p.steps.len() - 1, "the leader is not last: {:?}", p.steps);
                let want = if c.can_transfer { Action::TransferThenEvict } else { Action::EvictLeader };
                prop_assert_eq!(s.action, want);
            } else {
                prop_assert_eq!(s.action, Action::Evict);
            }
        }
    }

    #[test]
    fn only_members_on_drained_nodes_go_and_each_once(c in arb_cluster("a"), o in arb_opts()) {
        let p = plan_cluster(&c, &o);
        let mut seen = BTreeSet::new();
        for s in &p.steps {
            prop_assert!(o.nodes.contains(&s.node));
            prop_assert!(seen.insert(s.pod.clone()), "{} twice", s.pod);
        }
    }

    #[test]
    fn a_degraded_step_is_the_clusters_last(c in arb_cluster("a"), o in arb_opts()) {
        let p = plan_cluster(&c, &o);
        if let Some(i) = p.steps.iter().position(|s| s.degraded.is_some()) {
            prop_assert!(o.allow_degraded);
            prop_assert_eq!(i, p.steps.len() - 1);
        }
    }

    /// Several drained nodes still mean one transfer per cluster, to a member on a node that
    /// stays whenever one can take over.
    #[test]
    fn one_transfer_per_cluster_to_a_node_that_stays(c in arb_cluster("a"), o in arb_opts()) {
        let p = plan_cluster(&c, &o);
        let transfers: Vec<&DrainStep> = p.steps.iter().filter(|s| s.action == Action::TransferThenEvict).collect();
        prop_assert!(transfers.len() <= 1);
        for t in transfers {
            if let Some(target) = &t.target {
                let node = c.report.replicas.iter().find(|x| &x.pod == target).and_then(|x| x.node.clone());
                prop_assert!(node.is_some_and(|n| !o.nodes.contains(&n)));
            }
        }
    }

    #[test]
    fn reordering_the_input_changes_no_plan(
        a in arb_cluster("a"), b in arb_cluster("b"), o in arb_opts(), seed in any::<u64>()
    ) {
        let plans = plan_drain(&[a.clone(), b.clone()], &o);
        let mut a2 = a.clone();
        let mut b2 = b.clone();
        // A deterministic shuffle of each cluster's replicas.
        let n = a2.report.replicas.len();
        a2.report.replicas.rotate_left((seed as usize) % n);
        b2.report.replicas.reverse();
        prop_assert_eq!(plans, plan_drain(&[b2, a2], &o));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(10_000))]

    /// Adversarial: the cluster as the executor may find it at any moment (members hung,
    /// lagging, in another term, knowing no leader or another one, terminating, with facts
    /// missing; more voters configured than pods; the membership unknown). The executor only
    /// ever takes the first step of a plan made from such a moment: that step never leaves
    /// fewer than a quorum of the *configured* voters healthy, by the oracle above (not by
    /// assess::voter), and a cluster counted from its pods is not touched unless assumed.
    #[test]
    fn the_first_step_of_a_fresh_plan_keeps_a_quorum_whatever_the_cluster_does(
        c in arb_cluster("a"),
        o in arb_opts(),
        extra in 0u32..=2,
        harms in prop::collection::vec((0usize..7, 0u8..9), 0..4),
        pods_only in any::<bool>(),
        assume in any::<bool>(),
    ) {
        let mut c = c;
        let mut o = o;
        o.assume_voters_are_pods = if assume { crate::plan::drain::Assume::Every } else { crate::plan::drain::Assume::Nothing };
        let voters = c.report.replicas.iter().filter(|x| x.raft.role.is_voter() && !x.raft.learner).count() as u32 + extra;
        c.report.summary.voters = voters;
        c.report.summary.quorum = crate::assess::quorum(voters);
        c.report.summary.voters_from = if pods_only {
            crate::report::VotersFrom::Pods
        } else {
            crate::report::VotersFrom::Configuration
        };
        for (i, kind) in harms {
            if let Some(x) = c.report.replicas.get_mut(i) {
                harm(x, kind);
            }
        }
        let p = plan_cluster(&c, &o);
        if let Some(s) = p.steps.first() {
            prop_assert!(!pods_only || assume, "acted on a pod count: {s:?}");
            let left = c.report.replicas.iter()
                .filter(|x| x.pod != s.pod && oracle_healthy(x, &c.report, o.max_lag))
                .count() as u32;
            prop_assert!(
                left >= c.report.summary.quorum,
                "{s:?} leaves {left} healthy of {voters} configured voters (quorum {})",
                c.report.summary.quorum
            );
        }
    }
}

/// The planner's time for a full plan at scale (docs/benchmarks.md; not a test: it asserts
/// nothing about time). Run by tests/bench/plan.sh:
/// `cargo test --release --bins plan_at_scale -- --ignored --nocapture`.
#[test]
#[ignore]
fn plan_at_scale() {
    const NODES: usize = 1000;
    const CLUSTERS: usize = 500;
    const MEMBERS: usize = 5;
    let nodes: Vec<Node> = (0..NODES).map(|i| node(&format!("n{i}"), false)).collect();
    let drained: BTreeSet<String> = (0..10).map(|i| format!("n{}", i * 97)).collect();
    let mut all_pods = vec![];
    let mut clusters = vec![];
    for k in 0..CLUSTERS {
        let on: Vec<String> = (0..MEMBERS)
            .map(|m| format!("n{}", (k * 7 + m * 197) % NODES))
            .collect();
        let pods: Vec<Pod> = on
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let mut p = member(i, n);
                p.metadata.namespace = Some(format!("c{k}"));
                p
            })
            .collect();
        all_pods.extend(pods.iter().cloned());
        let ms: Vec<M> = (0..MEMBERS)
            .map(|i| m(if i == 1 { Role::Leader } else { Role::Follower }, 1))
            .collect();
        let mut c = input(&format!("c{k}"), &ms, true);
        c.report.namespace = format!("c{k}");
        for (x, n) in c.report.replicas.iter_mut().zip(&on) {
            x.node = Some(n.clone());
        }
        clusters.push((pods, c));
    }
    let o = DrainOptions {
        nodes: drained.clone(),
        max_lag: 100,
        ..Default::default()
    };
    let mut times = vec![];
    for _ in 0..5 {
        let start = std::time::Instant::now();
        let inputs: Vec<ClusterInput> = clusters
            .iter()
            .map(|(pods, c)| {
                let mut c = c.clone();
                c.stuck = crate::plan::placement::stuck_members(
                    pods,
                    Some(&pods[1].metadata.name.clone().unwrap_or_default()),
                    &[],
                    Some(&nodes),
                    &all_pods,
                    &drained,
                );
                c
            })
            .collect();
        let plans = plan_drain(&inputs, &o);
        times.push(start.elapsed());
        assert_eq!(plans.len(), CLUSTERS);
    }
    times.sort();
    println!(
        "plan_at_scale: {NODES} nodes, {CLUSTERS} clusters, {} members, {} drained: median {:.1} ms (min {:.1}, max {:.1}) over 5 runs",
        CLUSTERS * MEMBERS,
        drained.len(),
        times[2].as_secs_f64() * 1000.0,
        times[0].as_secs_f64() * 1000.0,
        times[4].as_secs_f64() * 1000.0
    );
}

/// `still_as_looked`'s steps: a follower's eviction of the 3-member etcd (etcd-0 follows,
/// etcd-1 leads, term 5).
fn follower_step(action: Action) -> (DrainStep, ClusterReport) {
    let report = crate::plan::tests::cluster(&[
        crate::plan::tests::m(Role::Follower),
        crate::plan::tests::m(Role::Leader),
        crate::plan::tests::m(Role::Follower),
    ]);
    let step = DrainStep {
        pod: "etcd-0".into(),
        node: "n1".into(),
        action,
        target: None,
        passed_over: vec![],
        why: "a follower".into(),
        healthy_voters_during: 2,
        quorum: 2,
        fault_tolerance_during: 0,
        degraded: None,
        new_revision: None,
    };
    (step, report)
}

fn answers(role: Option<Role>, term: Option<u64>) -> crate::plan::ReplicaView {
    crate::plan::ReplicaView {
        role,
        term,
        ..crate::plan::ReplicaView::silent("etcd-0".into())
    }
}

#[test]
fn a_follower_that_still_follows_in_the_same_term_stands() {
    let (step, report) = follower_step(Action::Evict);
    assert_eq!(
        still_as_looked(&step, &report, &answers(Some(Role::Follower), Some(5))),
        Ok(())
    );
}

#[test]
fn a_member_silent_at_the_look_and_now_is_still_evicted() {
    // A frozen member is evicted first by design; its silence now says nothing new.
    let (step, mut report) = follower_step(Action::Evict);
    report.replicas[0].raft.role = Role::Unknown;
    report.replicas[0].raft.term = None;
    assert_eq!(
        still_as_looked(&step, &report, &answers(None, None)),
        Ok(())
    );
}

#[test]
fn a_leader_that_cannot_transfer_is_evicted_as_the_leader_it_is() {
    let (mut step, report) = follower_step(Action::EvictLeader);
    step.pod = "etcd-1".into();
    assert_eq!(
        still_as_looked(&step, &report, &answers(Some(Role::Leader), Some(5))),
        Ok(())
    );
}

#[test]
fn a_candidate_now_holds_the_eviction() {
    let (step, report) = follower_step(Action::Evict);
    let why = still_as_looked(&step, &report, &answers(Some(Role::Candidate), Some(6)));
    assert!(why.is_err_and(|w| w.contains("stands for election")));
}

#[test]
fn a_member_hung_at_the_look_that_still_tells_its_role_is_still_evicted() {
    // Its health check failed at the look (the plan counted it out), its role page answered:
    // silence now changes nothing the plan counted on.
    let (step, mut report) = follower_step(Action::Evict);
    report.replicas[0].raft.health.state = crate::report::CheckState::Unreachable;
    assert_eq!(
        still_as_looked(&step, &report, &answers(None, None)),
        Ok(())
    );
}

#[test]
fn a_healthy_member_silent_now_holds_the_eviction() {
    let (step, report) = follower_step(Action::Evict);
    let why = still_as_looked(&step, &report, &answers(None, None));
    assert!(why.is_err_and(|w| w.contains("did not answer")));
}

#[test]
fn a_term_that_moved_since_the_look_holds_the_eviction() {
    let (step, report) = follower_step(Action::Evict);
    let why = still_as_looked(&step, &report, &answers(Some(Role::Follower), Some(6)));
    assert!(
        why.is_err_and(|w| w.contains("reads term 6 where the cluster was looked at in term 5"))
    );
}

#[test]
fn a_follower_that_leads_now_holds_the_eviction() {
    let (step, report) = follower_step(Action::Evict);
    let why = still_as_looked(&step, &report, &answers(Some(Role::Leader), Some(5)));
    assert!(why.is_err_and(|w| w.contains("leads now")));
}

/// A member stuck standing for election at the look (cut off, no leader known: etcd and
/// ZooKeeper read that as a candidate), counted out by the plan: its eviction is its repair,
/// however its own term climbs.
#[test]
fn a_member_already_a_candidate_at_the_look_is_still_evicted() {
    let (step, mut report) = follower_step(Action::Evict);
    report.replicas[0].raft.role = Role::Candidate;
    report.replicas[0].raft.health.state = crate::report::CheckState::Failing;
    assert_eq!(
        still_as_looked(&step, &report, &answers(Some(Role::Candidate), Some(9))),
        Ok(())
    );
}

/// A lagging member whose own term was behind the leader's at the look, caught up since:
/// no election happened.
#[test]
fn a_member_that_caught_up_to_the_leaders_term_is_still_evicted() {
    let (step, mut report) = follower_step(Action::Evict);
    report.replicas[0].raft.term = Some(4);
    assert_eq!(
        still_as_looked(&step, &report, &answers(Some(Role::Follower), Some(5))),
        Ok(())
    );
}

/// A member whose term could not be read at the look (its status read failed, its health
/// passed) reads a newer term than the leader's then: an election happened elsewhere.
#[test]
fn a_term_newer_than_the_looks_leader_holds_an_eviction_the_look_had_no_term_for() {
    let (step, mut report) = follower_step(Action::Evict);
    report.replicas[0].raft.term = None;
    report.replicas[0].raft.role = Role::Unknown;
    let why = still_as_looked(&step, &report, &answers(Some(Role::Follower), Some(6)));
    assert!(why.is_err_and(|w| w.contains("an election happened")));
}

/// ZooKeeper reads no term: a follower that names another leader than the look's tells that
/// leadership moved.
#[test]
fn a_follower_that_names_another_leader_holds_the_eviction() {
    let (step, mut report) = follower_step(Action::Evict);
    report.summary.leader = Some("etcd-1".into());
    report.summary.term = None;
    for x in &mut report.replicas {
        x.raft.term = None;
    }
    let mut now = answers(Some(Role::Follower), None);
    now.leader = Some("etcd-2".into());
    let why = still_as_looked(&step, &report, &now);
    assert!(why.is_err_and(|w| w.contains("follows etcd-2 now")));
}

#[test]
fn a_member_the_look_does_not_hold_is_refused() {
    let (mut step, report) = follower_step(Action::Evict);
    step.pod = "etcd-9".into();
    assert!(still_as_looked(&step, &report, &answers(Some(Role::Follower), Some(5))).is_err());
}
