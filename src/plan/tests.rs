use proptest::prelude::*;

use super::*;
use crate::model::OwnerKind;
use crate::profile::Catalog;
use crate::report::{Check, CheckState, Probes, RaftReport, Summary};

#[derive(Clone, Debug)]
pub(crate) struct M {
    pub role: Role,
    pub health: CheckState,
    pub lag: Option<u64>,
    pub cordoned: bool,
    pub node: u8,
}

pub(crate) fn m(role: Role) -> M {
    M {
        role,
        health: CheckState::Ok,
        lag: Some(0),
        cordoned: false,
        node: 0,
    }
}

/// A healthy-looking replica `etcd-{i}` as `x` describes it (shared with drain's tests).
pub(crate) fn replica(i: usize, x: &M) -> ReplicaReport {
    ReplicaReport {
        pod: format!("etcd-{i}"),
        node: Some(format!("n{}", if x.node == 0 { i as u8 } else { x.node })),
        node_unschedulable: x.cordoned,
        node_ready: Some(true),
        pod_ip: None,
        phase: "Running".into(),
        ready: true,
        terminating: false,
        terminating_until: None,
        disruption: None,
        restarts: 0,
        probes: Probes::default(),
        raft: RaftReport {
            health: Check {
                state: x.health,
                detail: "d".into(),
            },
            readiness: None,
            role: x.role,
            member_id: Some(format!("{}", 100 + i)),
            leader_id: None,
            leader_pod: None,
            has_leader: Some(true),
            term: Some(5),
            commit_index: Some(10),
            applied_index: Some(10),
            lag: x.lag,
            learner: x.role == Role::Learner,
            configured: crate::report::Configured::Unknown,
            last_contact_ms: None,
            current: None,
            version: None,
            leads: None,
            errors: vec![],
        },
        endpoints: vec![],
    }
}

/// A cluster `db/etcd` of these members, summarised (shared with drain's tests).
pub(crate) fn cluster(ms: &[M]) -> ClusterReport {
    let replicas: Vec<ReplicaReport> = ms.iter().enumerate().map(|(i, x)| replica(i, x)).collect();
    let voters = ms.iter().filter(|x| x.role.is_voter()).count() as u32;
    let healthy = ms
        .iter()
        .filter(|x| x.role.is_voter() && x.health == CheckState::Ok)
        .count() as u32;
    let q = crate::assess::quorum(voters);
    let tolerance = crate::assess::fault_tolerance(voters, healthy);
    ClusterReport {
        namespace: "db".into(),
        name: "etcd".into(),
        owner_kind: OwnerKind::StatefulSet,
        system: "etcd".into(),
        summary: Summary {
            desired_replicas: ms.len() as u32,
            members: ms.len() as u32,
            voters,
            healthy_voters: healthy,
            quorum: q,
            has_quorum: tolerance.is_some(),
            fault_tolerance: tolerance.unwrap_or(0),
            leader: None,
            term: Some(5),
            ready_pods: ms.len() as u32,
            voters_from: crate::report::VotersFrom::Configuration,
        },
        pdb: None,
        services: vec![],
        replicas,
        warnings: vec![],
        gate: None,
    }
}

fn etcd() -> Profile {
    Catalog::builtin().get("etcd").unwrap().clone()
}

fn opts() -> YieldOptions {
    YieldOptions {
        max_lag: 100,
        ..Default::default()
    }
}

#[test]
fn etcd_hands_over_to_the_least_lagging_follower_with_its_member_id() {
    let lagging = M {
        lag: Some(7),
        ..m(Role::Follower)
    };
    let c = cluster(&[lagging, m(Role::Leader), m(Role::Follower)]);
    let p = plan_yield(&c, &etcd(), &opts()).unwrap();
    assert_eq!((p.leader.as_str(), p.target.as_str()), ("etcd-1", "etcd-2"));
    assert!(p.targeted);
    assert_eq!(p.call.pod, "etcd-1", "MoveLeader goes to the leader");
    assert_eq!(p.call.method, "POST");
    assert_eq!(p.call.path, "/v3/maintenance/transfer-leadership");
    assert_eq!(p.call.body.as_deref(), Some(r#"{"targetID": "102"}"#));
    assert!(p.why.contains("caught up"), "{}", p.why);
}

/// A member on a cordoned node is the next to be drained: leadership given to it would move
/// again, so a caught-up member on a schedulable node is preferred to one a little closer.
#[test]
fn leadership_goes_to_a_schedulable_node_before_a_cordoned_one() {
    let cordoned = M {
        cordoned: true,
        ..m(Role::Follower)
    };
    let a_little_behind = M {
        lag: Some(3),
        ..m(Role::Follower)
    };
    let c = cluster(&[cordoned, m(Role::Leader), a_little_behind]);
    let p = plan_yield(&c, &etcd(), &opts()).unwrap();
    assert_eq!(p.target, "etcd-2");
}

#[test]
fn a_named_target_is_used_and_bad_ones_are_refused_with_the_reason() {
    let learner = m(Role::Learner);
    let down = M {
        health: CheckState::Unreachable,
        ..m(Role::Follower)
    };
    let behind = M {
        lag: Some(5000),
        ..m(Role::Follower)
    };
    let c = cluster(&[
        m(Role::Leader),
        m(Role::Follower),
        learner,
        down,
        behind,
        m(Role::Follower),
        m(Role::Follower),
    ]);
    let to = |pod: &str| YieldOptions {
        to: Some(pod.into()),
        ..opts()
    };
    assert_eq!(
        plan_yield(&c, &etcd(), &to("etcd-1")).unwrap().target,
        "etcd-1"
    );
    let reason = |pod: &str| plan_yield(&c, &etcd(), &to(pod)).unwrap_err().reason;
    assert_eq!(reason("etcd-0"), RefusalReason::TargetIsLeader);
    assert_eq!(reason("etcd-2"), RefusalReason::TargetLearner);
    assert_eq!(reason("etcd-3"), RefusalReason::TargetUnreachable);
    assert_eq!(reason("etcd-4"), RefusalReason::TargetLagging);
    assert_eq!(reason("etcd-9"), RefusalReason::TargetNotMember);
    let e = plan_yield(&c, &etcd(), &to("etcd-9")).unwrap_err();
    assert!(e.message.contains("etcd-0, etcd-1, etcd-2"), "{e}");
    // --force overrides what can be overridden, and says so.
    let forced = YieldOptions {
        force: true,
        ..to("etcd-3")
    };
    let p = plan_yield(&c, &etcd(), &forced).unwrap();
    assert_eq!(p.overridden.len(), 1);
    let forced_learner = YieldOptions {
        force: true,
        ..to("etcd-2")
    };
    assert!(plan_yield(&c, &etcd(), &forced_learner).is_err());
}

#[test]
fn a_forced_target_that_reports_no_member_id_is_never_sent_an_empty_one() {
    let down = M {
        health: CheckState::Unreachable,
        ..m(Role::Follower)
    };
    let mut c = cluster(&[m(Role::Leader), m(Role::Follower), down]);
    c.replicas[2].raft.member_id = None;
    let forced = YieldOptions {
        to: Some("etcd-2".into()),
        force: true,
        ..opts()
    };
    let e = plan_yield(&c, &etcd(), &forced).unwrap_err();
    assert_eq!(e.reason, RefusalReason::TargetNotMember, "{e}");
}

#[test]
fn a_forced_target_whose_pod_is_terminating_is_still_refused() {
    let mut c = cluster(&[m(Role::Leader), m(Role::Follower), m(Role::Follower)]);
    c.replicas[2].terminating = true;
    let forced = YieldOptions {
        to: Some("etcd-2".into()),
        force: true,
        ..opts()
    };
    let e = plan_yield(&c, &etcd(), &forced).unwrap_err();
    assert_eq!(e.reason, RefusalReason::TargetTerminating, "{e}");
}

#[test]
fn no_leader_several_leaders_and_zero_tolerance_are_refused() {
    let c = cluster(&[m(Role::Follower), m(Role::Follower), m(Role::Candidate)]);
    assert_eq!(
        plan_yield(&c, &etcd(), &opts()).unwrap_err().reason,
        RefusalReason::NoLeader
    );
    let c = cluster(&[m(Role::Leader), m(Role::Leader), m(Role::Follower)]);
    assert_eq!(
        plan_yield(&c, &etcd(), &opts()).unwrap_err().reason,
        RefusalReason::MultipleLeaders
    );
    let sick = M {
        health: CheckState::Failing,
        ..m(Role::Follower)
    };
    let c = cluster(&[m(Role::Leader), m(Role::Follower), sick]);
    let e = plan_yield(&c, &etcd(), &opts()).unwrap_err();
    assert_eq!(e.reason, RefusalReason::FaultToleranceZero);
    assert!(e.message.contains("--force"), "{e}");
    let forced = YieldOptions {
        force: true,
        ..opts()
    };
    assert_eq!(plan_yield(&c, &etcd(), &forced).unwrap().target, "etcd-1");
}

#[test]
fn systems_without_a_transfer_say_so() {
    let zk = Catalog::builtin().get("zookeeper").unwrap().clone();
    let c = cluster(&[m(Role::Leader), m(Role::Follower), m(Role::Follower)]);
    let e = plan_yield(&c, &zk, &opts()).unwrap_err();
    assert_eq!(e.reason, RefusalReason::NoTransfer);
    assert!(
        e.message.contains("ZooKeeper") && e.message.contains("--allow-election"),
        "{e}"
    );
}

#[test]
fn keeper_yields_untargeted_to_the_leader_and_requests_leadership_at_a_named_target() {
    let keeper = Catalog::builtin().get("clickhouse-keeper").unwrap().clone();
    let c = cluster(&[m(Role::Follower), m(Role::Leader), m(Role::Follower)]);
    let p = plan_yield(&c, &keeper, &opts()).unwrap();
    assert!(!p.targeted);
    assert_eq!(p.call.pod, "etcd-1");
    assert_eq!(p.call.path, "/api/v1/commands/ydld?command=ydld");
    assert_eq!(
        p.expect().target,
        None,
        "the system picks: any other member will do"
    );
    let to = YieldOptions {
        to: Some("etcd-2".into()),
        ..opts()
    };
    let p = plan_yield(&c, &keeper, &to).unwrap();
    assert!(p.targeted);
    assert_eq!(
        p.call.pod, "etcd-2",
        "rqld goes to the member that takes over"
    );
    assert_eq!(p.call.path, "/api/v1/commands/rqld?command=rqld");
}

#[test]
fn rqlite_asks_the_leader_to_transfer_to_the_targets_node_id_and_waits() {
    let rqlite = Catalog::builtin().get("rqlite").unwrap().clone();
    let c = cluster(&[m(Role::Leader), m(Role::Follower), m(Role::Follower)]);
    let p = plan_yield(&c, &rqlite, &opts()).unwrap();
    assert!(p.targeted && p.call.synchronous);
    assert_eq!(
        (
            p.call.pod.as_str(),
            p.call.method.as_str(),
            p.call.path.as_str()
        ),
        ("etcd-0", "POST", "/leader?wait")
    );
    assert_eq!(p.call.body.as_deref(), Some(r#"{"id": "101"}"#));
    assert!(p.call.hints[&405].contains("v8.40.0"));
}

#[test]
fn drain_never_gets_a_target_on_a_node_it_drains() {
    let c = cluster(&[m(Role::Leader), m(Role::Follower), m(Role::Follower)]);
    let o = YieldOptions {
        avoid_nodes: vec!["n1".into()],
        ..opts()
    };
    assert_eq!(plan_yield(&c, &etcd(), &o).unwrap().target, "etcd-2");
    let o = YieldOptions {
        avoid_nodes: vec!["n1".into(), "n2".into()],
        ..opts()
    };
    let e = plan_yield(&c, &etcd(), &o).unwrap_err();
    assert_eq!(e.reason, RefusalReason::NoCandidate);
    assert!(e.message.contains("being drained"), "{e}");
}

fn view(pod: &str, role: Option<Role>, leader: Option<&str>) -> ReplicaView {
    ReplicaView {
        pod: pod.into(),
        role,
        leader: leader.map(str::to_string),
        has_leader: role.map(|_| leader.is_some()),
        term: Some(6),
        error: None,
    }
}

#[test]
fn the_wait_ends_only_when_the_old_leader_follows_and_a_majority_names_the_target() {
    let expect = Expect {
        old_leader: "a".into(),
        target: Some("b".into()),
        old_leader_may_vanish: false,
    };
    let f = Some(Role::Follower);
    let l = Some(Role::Leader);
    // Mid-handover: the target already leads, the old leader still claims to.
    let mid = [
        view("a", l, Some("a")),
        view("b", l, Some("b")),
        view("c", f, Some("b")),
    ];
    assert_eq!(judge(&expect, &mid, 3).done, Done::No);
    // Somebody says "no leader": not agreed.
    let gap = [
        view("a", f, None),
        view("b", l, Some("b")),
        view("c", f, Some("b")),
    ];
    assert_eq!(judge(&expect, &gap, 3).agreed, None);
    // The old leader is silent: not proof that it stepped down.
    let silent = [
        ReplicaView {
            error: Some("timeout".into()),
            ..view("a", None, None)
        },
        view("b", l, Some("b")),
        view("c", f, Some("b")),
    ];
    assert_eq!(judge(&expect, &silent, 3).done, Done::No);
    let done = [
        view("a", f, Some("b")),
        view("b", l, Some("b")),
        view("c", f, Some("b")),
    ];
    let j = judge(&expect, &done, 3);
    assert_eq!(
        (j.done, j.agreed.as_deref(), j.term),
        (Done::Transferred, Some("b"), Some(6))
    );
    let elsewhere = [
        view("a", f, Some("c")),
        view("b", f, Some("c")),
        view("c", l, Some("c")),
    ];
    assert_eq!(
        judge(&expect, &elsewhere, 3).done,
        Done::WentElsewhere("c".into())
    );
}

#[test]
fn an_old_leader_chosen_again_after_stepping_down_is_reported_as_returned() {
    let expect = Expect {
        old_leader: "a".into(),
        target: None,
        old_leader_may_vanish: false,
    };
    let (f, l) = (Some(Role::Follower), Some(Role::Leader));
    let leading = [
        view("a", l, Some("a")),
        view("b", f, Some("a")),
        view("c", f, Some("a")),
    ];
    let mut seen = false;
    // Before it was ever seen following: still waiting, not "returned".
    assert_eq!(
        judge_with_history(&expect, &leading, 3, &mut seen).done,
        Done::No
    );
    let stepped = [view("a", f, None), view("b", f, None), view("c", f, None)];
    assert_eq!(
        judge_with_history(&expect, &stepped, 3, &mut seen).done,
        Done::No
    );
    assert!(seen);
    let j = judge_with_history(&expect, &leading, 3, &mut seen);
    assert_eq!((j.done, j.agreed.as_deref()), (Done::Returned, Some("a")));
}

proptest! {
    /// Whatever the cluster looks like, an automatic choice is never the leader, a learner,
    /// an unhealthy or lagging member, or on a node being drained; and reordering the
    /// replicas changes no plan.
    #[test]
    fn the_chosen_target_is_eligible_and_order_free(
        (ms, order) in prop::collection::vec(
            (0u8..6, 0u8..4, prop::option::of(0u64..300), any::<bool>(), 0u8..4), 1..8)
            .prop_flat_map(|v| { let n = v.len(); (Just(v), Just((0..n).collect::<Vec<_>>()).prop_shuffle()) }),
        avoid in prop::option::of(1u8..4),
    ) {
        let roles = [Role::Leader, Role::Follower, Role::Follower, Role::Candidate, Role::Learner, Role::Unknown];
        let states = [CheckState::Ok, CheckState::Ok, CheckState::Failing, CheckState::Unreachable];
        let ms: Vec<M> = ms.iter().map(|(r, h, lag, cordoned, node)| M {
            role: roles[*r as usize], health: states[*h as usize], lag: *lag, cordoned: *cordoned, node: *node,
        }).collect();
        let c = cluster(&ms);
        let o = YieldOptions { avoid_nodes: avoid.map(|n| format!("n{n}")).into_iter().collect(), ..opts() };
        let plan = plan_yield(&c, &etcd(), &o);
        if let Ok(p) = &plan {
            let t = c.replicas.iter().find(|x| x.pod == p.target).unwrap();
            prop_assert_ne!(&p.target, &p.leader);
            prop_assert_eq!(t.raft.role, Role::Follower);
            prop_assert_eq!(t.raft.health.state, CheckState::Ok);
            prop_assert!(t.raft.lag.is_none_or(|l| l <= o.max_lag));
            prop_assert!(!o.avoid_nodes.contains(t.node.as_ref().unwrap()));
            prop_assert!(p.overridden.is_empty());
            // Fault tolerance is never 0 (or lost) when a transfer goes ahead without --force.
            prop_assert!(c.summary.has_quorum && c.summary.fault_tolerance > 0);
        }
        let mut shuffled = c.clone();
        shuffled.replicas = order.iter().map(|&i| c.replicas[i].clone()).collect();
        prop_assert_eq!(plan, plan_yield(&shuffled, &etcd(), &o));
    }

    /// The agreed leader, when there is one, claims leadership and is named by a majority.
    #[test]
    fn an_agreed_leader_claims_leadership_and_has_a_majority(
        vs in prop::collection::vec((0u8..4, prop::option::of(0u8..4)), 1..7)
    ) {
        let roles = [None, Some(Role::Leader), Some(Role::Follower), Some(Role::Candidate)];
        let views: Vec<ReplicaView> = vs.iter().enumerate().map(|(i, (r, l))| {
            view(&format!("p{i}"), roles[*r as usize], l.map(|l| format!("p{l}")).as_deref())
        }).collect();
        if let Some(a) = agreed_leader(&views, views.len()) {
            prop_assert!(views.iter().any(|v| v.pod == a && v.role == Some(Role::Leader)));
            let named = views.iter().filter(|v| v.leader.as_deref() == Some(a.as_str()) || (v.leader.is_none() && v.pod == a && v.role == Some(Role::Leader))).count();
            prop_assert!(named > views.len() / 2);
            prop_assert!(!views.iter().any(|v| v.role.is_some() && v.has_leader == Some(false)));
        }
    }
}

fn builtin(name: &str) -> Profile {
    Catalog::builtin().get(name).unwrap().clone()
}

#[test]
fn a_leader_alone_yields_through_the_untargeted_request_to_itself() {
    let call = self_yield_call(&builtin("clickhouse-keeper"), "localhost").unwrap();
    assert_eq!(
        (call.pod.as_str(), call.method.as_str(), call.path.as_str()),
        ("localhost", "GET", "/api/v1/commands/ydld?command=ydld")
    );
    assert!(!call.synchronous, "ydld answers before the handover");
}

#[test]
fn a_leader_alone_cannot_yield_where_the_transfer_needs_a_peer_or_there_is_none() {
    let etcd = self_yield_call(&builtin("etcd"), "localhost").unwrap_err();
    assert_eq!(etcd.reason, RefusalReason::NoCandidate);
    assert!(etcd.message.contains("member list"), "{}", etcd.message);
    let zk = self_yield_call(&builtin("zookeeper"), "localhost").unwrap_err();
    assert_eq!(zk.reason, RefusalReason::NoTransfer);
}

fn alone(role: Option<Role>, leader: Option<&str>, has_leader: Option<bool>) -> ReplicaView {
    ReplicaView {
        pod: "me".into(),
        role,
        leader: leader.map(str::to_string),
        has_leader,
        term: None,
        error: None,
    }
}

#[test]
fn a_leader_alone_has_stepped_down_when_it_follows_a_leader() {
    assert!(stepped_down(&alone(Some(Role::Follower), None, Some(true))));
    assert!(stepped_down(&alone(
        Some(Role::Follower),
        Some("other"),
        None
    )));
    // A system that reports neither (Vault's standby) is taken at its role.
    assert!(stepped_down(&alone(Some(Role::Follower), None, None)));
    // Still leading; following nobody (the gap of a handover); no answer.
    assert!(!stepped_down(&alone(
        Some(Role::Leader),
        Some("me"),
        Some(true)
    )));
    assert!(!stepped_down(&alone(
        Some(Role::Follower),
        None,
        Some(false)
    )));
    assert!(!stepped_down(&alone(
        Some(Role::Follower),
        Some("me"),
        None
    )));
    assert!(!stepped_down(&alone(None, None, None)));
}

fn leader_and_two() -> ClusterReport {
    cluster(&[m(Role::Leader), m(Role::Follower), m(Role::Follower)])
}

#[test]
fn consuls_transfer_names_the_targets_raft_id_and_keeps_the_token_a_template() {
    let p = plan_yield(&leader_and_two(), &builtin("consul"), &opts()).unwrap();
    assert_eq!(p.call.pod, "etcd-0", "sent to the leader");
    assert_eq!(
        (p.call.method.as_str(), p.call.path.clone()),
        (
            "POST",
            format!(
                "/v1/operator/raft/transfer-leader?id={}",
                p.target_id.clone().unwrap()
            )
        )
    );
    assert_eq!(
        p.call.headers.get("X-Consul-Token").map(String::as_str),
        Some("${CONSUL_HTTP_TOKEN:-}"),
        "the token is read when sent, never stored in the plan"
    );
    assert!(p.call.synchronous);
}

/// Consul's non-voters answer "Follower" like any voter: only its member list says who votes.
/// With that list unreadable now (voters counted from pods), no member is chosen, `--force`
/// or not (the preStop hook forces, and looks again instead).
#[test]
fn a_consul_whose_member_list_cannot_be_read_now_is_given_no_target() {
    let mut c = leader_and_two();
    c.summary.voters_from = crate::report::VotersFrom::Unreadable;
    for force in [false, true] {
        let o = YieldOptions { force, ..opts() };
        let e = plan_yield(&c, &builtin("consul"), &o).unwrap_err();
        assert_eq!(e.reason, RefusalReason::VotersUnknown, "{e}");
    }
}

/// Vault's step-down leaves the choice to Vault: its unreadable list does not stop it.
#[test]
fn a_vault_whose_member_list_cannot_be_read_now_still_steps_down() {
    let mut c = leader_and_two();
    c.summary.voters_from = crate::report::VotersFrom::Unreadable;
    assert!(plan_yield(&c, &builtin("vault"), &opts()).is_ok());
}

/// etcd's learners say so themselves: its unreadable list does not stop a transfer.
#[test]
fn an_etcd_whose_member_list_cannot_be_read_now_still_hands_over() {
    let mut c = leader_and_two();
    c.summary.voters_from = crate::report::VotersFrom::Unreadable;
    assert!(plan_yield(&c, &etcd(), &opts()).is_ok());
}

#[test]
fn vaults_step_down_cannot_be_aimed() {
    let p = plan_yield(&leader_and_two(), &builtin("vault"), &opts()).unwrap();
    assert!(!p.targeted);
    assert_eq!(
        (p.call.method.as_str(), p.call.path.as_str()),
        ("PUT", "/v1/sys/step-down")
    );
    let to = YieldOptions {
        to: Some("etcd-2".into()),
        ..opts()
    };
    let e = plan_yield(&leader_and_two(), &builtin("vault"), &to).unwrap_err();
    assert_eq!(e.reason, RefusalReason::NotTargeted);
}

#[test]
fn nomads_transfer_is_a_put_with_the_targets_id() {
    let p = plan_yield(&leader_and_two(), &builtin("nomad"), &opts()).unwrap();
    assert_eq!(p.call.method, "PUT");
    assert!(
        p.call
            .path
            .ends_with(&format!("?id={}", p.target_id.clone().unwrap())),
        "{}",
        p.call.path
    );
}

#[test]
fn a_target_needs_a_member_id_only_where_the_transfer_names_it() {
    let mut c = leader_and_two();
    for r in &mut c.replicas {
        r.raft.member_id = None;
    }
    // Keeper's /ready reports no id, and neither ydld nor rqld names one.
    let keeper = builtin("clickhouse-keeper");
    assert!(plan_yield(&c, &keeper, &opts()).is_ok());
    let to = YieldOptions {
        to: Some("etcd-2".into()),
        ..opts()
    };
    let p = plan_yield(&c, &keeper, &to).unwrap();
    assert_eq!(
        (p.call.pod.as_str(), p.targeted),
        ("etcd-2", true),
        "rqld goes to the target"
    );
    // etcd's MoveLeader names the target's id: without one there is no target.
    let e = plan_yield(&c, &etcd(), &opts()).unwrap_err();
    assert_eq!(e.reason, RefusalReason::NoCandidate);
    assert!(e.message.contains("reports no member id"), "{e}");
}

fn says(pod: &str, role: Role, has_leader: Option<bool>) -> ReplicaView {
    ReplicaView {
        pod: pod.into(),
        role: Some(role),
        leader: None,
        has_leader,
        term: None,
        error: None,
    }
}

#[test]
fn replicas_that_cannot_name_the_leader_agree_with_its_only_claimant() {
    use Role::{Follower as F, Leader as L};
    // Keeper: followers say only hasLeader.
    let keeper = [
        says("a", F, Some(true)),
        says("b", L, Some(true)),
        says("c", F, Some(true)),
    ];
    assert_eq!(agreed_leader(&keeper, 3).as_deref(), Some("b"));
    // Vault: standbys say nothing about the leader.
    let vault = [says("a", F, None), says("b", L, None), says("c", F, None)];
    assert_eq!(agreed_leader(&vault, 3).as_deref(), Some("b"));
    // The handover's gap: somebody says there is no leader.
    let gap = [
        says("a", F, Some(false)),
        says("b", L, Some(true)),
        says("c", F, Some(true)),
    ];
    assert_eq!(agreed_leader(&gap, 3), None);
    // Two claimants: nobody can tell which the silent ones follow.
    let two = [
        says("a", L, Some(true)),
        says("b", L, Some(true)),
        says("c", F, Some(true)),
    ];
    assert_eq!(agreed_leader(&two, 3), None);
    // A claimant alone, the others silent (no answer): not a majority.
    let alone = [
        says("a", L, Some(true)),
        ReplicaView {
            role: None,
            ..says("b", F, None)
        },
        ReplicaView {
            role: None,
            ..says("c", F, None)
        },
    ];
    assert_eq!(agreed_leader(&alone, 3), None);
}

/// The leader and two followers whose member ids are `id` (a replica chose them).
fn with_ids(id: &str) -> ClusterReport {
    let mut c = leader_and_two();
    for r in &mut c.replicas[1..] {
        r.raft.member_id = Some(id.to_string());
    }
    c
}

#[test]
fn a_member_id_cannot_add_to_a_consul_query() {
    let p = plan_yield(&with_ids("x&dc=dc2"), &builtin("consul"), &opts()).unwrap();
    assert_eq!(
        p.call.path, "/v1/operator/raft/transfer-leader?id=x%26dc%3Ddc2",
        "the id is one query value"
    );
}

#[test]
fn a_member_id_cannot_add_to_etcds_json_body() {
    let p = plan_yield(&with_ids(r#"1","x":"y"#), &builtin("etcd"), &opts()).unwrap();
    let body: serde_json::Value = serde_json::from_str(p.call.body.as_deref().unwrap()).unwrap();
    assert_eq!(
        body["targetID"], r#"1","x":"y"#,
        "the id is one JSON string"
    );
    assert_eq!(body.as_object().unwrap().len(), 1, "{body}");
}

#[test]
fn a_member_id_cannot_take_a_path_off_the_replicas_port() {
    let mut p = builtin("consul");
    p.transfer
        .as_mut()
        .unwrap()
        .targeted
        .as_mut()
        .unwrap()
        .request
        .path = "/v1/transfer/{target_id}/go".into();
    let e = plan_yield(&with_ids(".."), &p, &opts()).unwrap_err();
    assert_eq!(e.reason, RefusalReason::UnsafeRequest, "{e}");
    let ok = plan_yield(&with_ids("a/b"), &p, &opts()).unwrap();
    assert_eq!(ok.call.path, "/v1/transfer/a%2Fb/go");
}
