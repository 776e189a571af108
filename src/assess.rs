//! Assessment: from what Kubernetes says and what each replica says, the cluster's summary
//! (quorum, fault tolerance, leader) and a warning for every contradiction. Pure: no I/O,
//! so every rule has unit tests and the arithmetic has property tests.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Node, Pod, Probe, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::model::profile::GroupKind;
use crate::model::{
    count_led, labels, pod_node, pod_ready, CheckOutcome, ClusterObservation, Member, ProbeError,
    ReplicaObservation, Role, Snapshot,
};
use crate::report::*;
use crate::select::{selector_matches, service_selects};

/// Votes needed among `voters`: a strict majority.
pub fn quorum(voters: u32) -> u32 {
    if voters == 0 {
        0
    } else {
        voters / 2 + 1
    }
}

/// How many more voters may fail with quorum kept; `None` when quorum is already lost.
pub fn fault_tolerance(voters: u32, healthy_voters: u32) -> Option<u32> {
    let q = quorum(voters);
    (voters > 0 && healthy_voters >= q).then(|| healthy_voters - q)
}

pub fn assess(obs: &ClusterObservation, snap: &Snapshot) -> ClusterReport {
    let t = &obs.target;
    let nodes: BTreeMap<&str, &Node> = snap
        .nodes
        .iter()
        .flatten()
        .filter_map(|n| Some((n.metadata.name.as_deref()?, n)))
        .collect();
    let services: Vec<&Service> = snap
        .services
        .iter()
        .filter(|s| s.metadata.namespace.as_deref() == Some(t.namespace.as_str()))
        .filter(|s| t.pods.iter().any(|p| service_selects(s, p)))
        .collect();

    // A member id two replicas both report belongs to neither: it cannot be told which one
    // the configuration (or a follower naming its leader) means.
    let mut claims: BTreeMap<&str, u32> = BTreeMap::new();
    for id in obs
        .replicas
        .iter()
        .filter_map(|r| r.facts.member_id.as_deref())
    {
        *claims.entry(id).or_default() += 1;
    }
    let claimed: BTreeSet<String> = claims.keys().map(|id| id.to_string()).collect();
    let duplicated: BTreeSet<String> = claims
        .into_iter()
        .filter(|(_, n)| *n > 1)
        .map(|(id, _)| id.to_string())
        .collect();
    // member id -> pod, from the replicas themselves and from the member list's names.
    let mut pod_of_member: BTreeMap<String, String> = BTreeMap::new();
    let pod_names: Vec<String> = obs.replicas.iter().map(|r| pod_name(&r.pod)).collect();
    let listed = listed_members(obs);
    for m in listed.unwrap_or_default() {
        if let Some(n) = member_pod(m).filter(|n| pod_names.iter().any(|p| p == n)) {
            pod_of_member.insert(m.id.clone(), n.to_string());
        }
    }
    for r in &obs.replicas {
        if let Some(id) = &r.facts.member_id {
            pod_of_member.insert(id.clone(), pod_name(&r.pod));
        }
    }
    for id in &duplicated {
        pod_of_member.remove(id);
    }

    let mut replicas: Vec<ReplicaReport> = obs
        .replicas
        .iter()
        .map(|r| {
            let mut x = replica_report(
                r,
                &nodes,
                &services,
                &snap.slices,
                &pod_of_member,
                t.profile.groups.as_ref().map(|g| &g.kinds),
            );
            let (configured, member) = configured(r, &x.pod, listed, &claimed, &duplicated);
            x.raft.configured = configured;
            // A replica that said nothing of itself is the member the configuration lists
            // under its pod's name, where exactly one entry no replica claims bears it: its
            // id is the list's (a transfer that names it sends that).
            if x.raft.member_id.is_none() {
                let named: Vec<&Member> = listed
                    .unwrap_or_default()
                    .iter()
                    .filter(|m| member_pod(m) == Some(x.pod.as_str()) && !claimed.contains(&m.id))
                    .collect();
                if let (Some(m), [_]) = (member, named.as_slice()) {
                    x.raft.member_id = Some(m.id.clone());
                }
            }
            x.raft.current = current(&x, r, member, &t.profile);
            x
        })
        .collect();

    let claimants: Vec<&ReplicaReport> = replicas
        .iter()
        .filter(|r| r.raft.role == Role::Leader)
        .collect();
    let leader = (claimants.len() == 1).then(|| claimants[0].clone());
    let leader_commit = leader
        .as_ref()
        .and_then(|l| l.raft.commit_index.or(l.raft.applied_index));
    for (r, o) in replicas.iter_mut().zip(&obs.replicas) {
        let own = r.raft.applied_index.or(r.raft.commit_index);
        r.raft.lag = match (
            leader_commit,
            own,
            o.facts.leader_commit_index,
            r.raft.commit_index,
        ) {
            (_, _, Some(lc), Some(c)) => Some(lc.saturating_sub(c)),
            (Some(lc), Some(own), _, _) if r.raft.health.state == CheckState::Ok => {
                Some(lc.saturating_sub(own))
            }
            _ => None,
        };
    }

    let desired = t.desired_replicas;
    let (members, voters, voters_from) = match &obs.members {
        Some(Ok(ms)) if !ms.is_empty() => (
            ms.len() as u32,
            ms.iter().filter(|m| !m.learner).count() as u32,
            VotersFrom::Configuration,
        ),
        _ => {
            let non_voters = replicas.iter().filter(|r| !r.raft.role.is_voter()).count() as u32;
            let members = desired.max(replicas.len() as u32);
            (
                members,
                members.saturating_sub(non_voters),
                if t.profile.membership.is_some() {
                    VotersFrom::Unreadable
                } else {
                    VotersFrom::Pods
                },
            )
        }
    };
    // With a single leader, the one definition of a healthy voter (`voter`: what drain and
    // yield count). Without one, nobody can be checked against a leader: the voters whose
    // own check passes and whom the configuration lets vote (the NoLeader warning says why
    // a drain would wait).
    let healthy_voters = replicas
        .iter()
        .filter(|r| match &leader {
            Some(l) => voter::voter_health(r, Some(l), voter::DEFAULT_MAX_LAG).is_ok(),
            None => r.raft.health.state == CheckState::Ok && voter::counts_as_voter(r),
        })
        .count() as u32;
    let healthy_voters = healthy_voters.min(voters);
    let tolerance = fault_tolerance(voters, healthy_voters);
    let summary = Summary {
        desired_replicas: desired,
        members,
        voters,
        healthy_voters,
        quorum: quorum(voters),
        has_quorum: tolerance.is_some(),
        fault_tolerance: tolerance.unwrap_or(0),
        leader: leader.as_ref().map(|l| l.pod.clone()),
        term: leader
            .as_ref()
            .and_then(|l| l.raft.term)
            .or_else(|| replicas.iter().filter_map(|r| r.raft.term).max()),
        ready_pods: replicas.iter().filter(|r| r.ready).count() as u32,
        voters_from,
    };

    let pdb = snap
        .pdbs
        .iter()
        .filter(|p| p.metadata.namespace.as_deref() == Some(t.namespace.as_str()))
        .find(|p| {
            let sel = p.spec.as_ref().and_then(|s| s.selector.as_ref());
            sel.is_some_and(|s| t.pods.iter().any(|pod| selector_matches(s, labels(pod))))
        })
        .map(pdb_report);

    let service_reports: Vec<ServiceReport> = services
        .iter()
        .map(|s| {
            let spec = s.spec.as_ref();
            ServiceReport {
                name: s.metadata.name.clone().unwrap_or_default(),
                headless: spec.and_then(|s| s.cluster_ip.as_deref()) == Some("None"),
                publish_not_ready_addresses: spec
                    .and_then(|s| s.publish_not_ready_addresses)
                    .unwrap_or(false),
            }
        })
        .collect();

    let mut report = ClusterReport {
        namespace: t.namespace.clone(),
        name: t.name.clone(),
        owner_kind: t.owner_kind,
        system: t.profile.name.clone(),
        summary,
        pdb,
        services: service_reports,
        replicas,
        warnings: vec![],
        gate: None,
    };
    report.warnings = warnings(&report, obs);
    report
}

fn pod_name(p: &Pod) -> String {
    p.metadata.name.clone().unwrap_or_default()
}

/// The members the system lists by id, when it lists them (not when it gives only a count,
/// and not when the list could not be read).
fn listed_members(obs: &ClusterObservation) -> Option<&[Member]> {
    match &obs.members {
        Some(Ok(ms)) if !ms.is_empty() && !ms.iter().any(|m| m.counted) => Some(ms),
        _ => None,
    }
}

/// The pod a member's name names: a name or host name whose first label is the pod's name
/// (zk-0.zk.ns.svc:2888).
fn member_pod(m: &Member) -> Option<&str> {
    m.name
        .as_deref()
        .map(|n| n.split(['.', ':']).next().unwrap_or(n))
}

/// What the configuration says of one replica, and its entry: found by the member id it
/// reports, or, when it reports none, by its pod's name in a member's name. A replica that
/// reports an id the list lacks is not listed, even if a member bears its pod's name (a
/// server that came back under a new id while the old entry stays).
fn configured<'m>(
    r: &ReplicaObservation,
    pod: &str,
    listed: Option<&'m [Member]>,
    claimed: &BTreeSet<String>,
    duplicated: &BTreeSet<String>,
) -> (Configured, Option<&'m Member>) {
    // Two replicas with one id: neither is counted, list or no list.
    if r.facts
        .member_id
        .as_ref()
        .is_some_and(|id| duplicated.contains(id))
    {
        return (Configured::DuplicateId, None);
    }
    let Some(members) = listed else {
        return (Configured::Unknown, None);
    };
    let found = match &r.facts.member_id {
        Some(id) => members.iter().find(|m| &m.id == id),
        // By its pod's name only an entry no replica claims by id: one member, one replica.
        None => members
            .iter()
            .find(|m| member_pod(m) == Some(pod) && !claimed.contains(&m.id)),
    };
    match found {
        Some(m) if m.learner => (Configured::NonVoter, Some(m)),
        Some(m) => (Configured::Voter, Some(m)),
        None => (Configured::NotListed, None),
    }
}

/// A follower whose last contact with its leader is older than this is not live
/// (hashicorp/raft's followers hear from their leader every tenth of a heartbeat timeout).
pub const MAX_LAST_CONTACT_MS: u64 = 2000;

/// Whether the replica is live now, by the best evidence its system gives for it (the
/// leader's view of it, its last contact with its leader, its own sync state, a health check
/// that needs the leader); None where the system gives none. Evidence the profile reads but
/// this replica's answer lacks counts against it. The leader is live by its own claim (its
/// health is checked apart).
fn current(
    x: &ReplicaReport,
    r: &ReplicaObservation,
    member: Option<&Member>,
    profile: &crate::profile::Profile,
) -> Option<bool> {
    if x.raft.role == Role::Leader {
        return Some(true);
    }
    if let Some(live) = member.and_then(|m| m.live) {
        return Some(live);
    }
    let reads = |f| profile.requests.iter().any(|q| q.fields.contains_key(&f));
    use crate::profile::Fact;
    if reads(Fact::LastContact) {
        return Some(
            r.facts
                .last_contact_ms
                .is_some_and(|ms| ms <= MAX_LAST_CONTACT_MS),
        );
    }
    if reads(Fact::Current) {
        return Some(r.facts.current == Some(true));
    }
    if profile.health_needs_leader {
        return Some(x.raft.health.state == CheckState::Ok);
    }
    None
}

fn replica_report(
    r: &ReplicaObservation,
    nodes: &BTreeMap<&str, &Node>,
    services: &[&Service],
    slices: &[EndpointSlice],
    pod_of_member: &BTreeMap<String, String>,
    group_kinds: Option<&BTreeMap<String, GroupKind>>,
) -> ReplicaReport {
    let pod = &r.pod;
    let name = pod_name(pod);
    let status = pod.status.as_ref();
    let node_name = pod_node(pod).map(str::to_string);
    let node = node_name.as_deref().and_then(|n| nodes.get(n));
    let ready = pod_ready(pod);
    let restarts = status
        .and_then(|s| s.container_statuses.as_ref())
        .map(|cs| cs.iter().map(|c| c.restart_count).sum())
        .unwrap_or(0);
    let main = pod.spec.as_ref().and_then(|s| s.containers.first());
    let health = to_check(&r.health);
    let unreachable = health.state == CheckState::Unreachable;
    let f = &r.facts;
    let role = if unreachable {
        Role::Unknown
    } else {
        f.role.unwrap_or(Role::Unknown)
    };
    let leader_pod = f
        .leader_id
        .as_ref()
        .and_then(|id| pod_of_member.get(id).cloned())
        .or_else(|| (role == Role::Leader).then(|| name.clone()));
    let endpoints = services
        .iter()
        .filter(|s| service_selects(s, pod))
        .map(|s| endpoint_report(s, slices, &name))
        .collect();
    ReplicaReport {
        pod: name,
        node_unschedulable: node
            .and_then(|n| n.spec.as_ref())
            .and_then(|s| s.unschedulable)
            .unwrap_or(false),
        node_ready: node.map(|n| {
            n.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
                .is_some_and(|c| c.status == "True")
        }),
        node: node_name,
        pod_ip: status.and_then(|s| s.pod_ip.clone()),
        phase: status
            .and_then(|s| s.phase.clone())
            .unwrap_or_else(|| "Unknown".into()),
        ready,
        terminating: pod.metadata.deletion_timestamp.is_some(),
        terminating_until: pod
            .metadata
            .deletion_timestamp
            .as_ref()
            .map(|t| t.0.to_string()),
        disruption: status
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| {
                cs.iter()
                    .find(|c| c.type_ == "DisruptionTarget" && c.status == "True")
            })
            .map(|c| {
                let reason = c
                    .reason
                    .clone()
                    .unwrap_or_else(|| "DisruptionTarget".into());
                match c.message.as_deref().filter(|m| !m.is_empty()) {
                    Some(m) => format!("{reason}: {m}"),
                    None => reason,
                }
            }),
        restarts,
        probes: Probes {
            readiness: main
                .and_then(|c| c.readiness_probe.as_ref())
                .map(describe_probe),
            liveness: main
                .and_then(|c| c.liveness_probe.as_ref())
                .map(describe_probe),
            startup: main
                .and_then(|c| c.startup_probe.as_ref())
                .map(describe_probe),
        },
        raft: RaftReport {
            health,
            readiness: r.readiness.as_ref().map(to_check),
            role,
            member_id: f.member_id.clone(),
            leader_id: f.leader_id.clone(),
            leader_pod,
            has_leader: if unreachable { None } else { f.has_leader },
            term: f.term,
            commit_index: f.commit_index,
            applied_index: f.applied_index,
            lag: None,
            learner: f.learner.unwrap_or(false) || role == Role::Learner,
            configured: Configured::Unknown,
            last_contact_ms: if unreachable { None } else { f.last_contact_ms },
            current: None,
            version: f.version.clone(),
            leads: match (&r.groups, &f.member_id, group_kinds) {
                (Some(Ok(groups)), Some(id), Some(kinds)) if !unreachable => {
                    Some(count_led(kinds.keys(), groups, id))
                }
                _ => None,
            },
            errors: if unreachable {
                vec![]
            } else {
                let mut errors = r.errors.clone();
                if let Some(Err(e)) = &r.groups {
                    errors.push(e.clone());
                }
                errors
            },
        },
        endpoints,
    }
}

fn to_check(r: &Result<CheckOutcome, ProbeError>) -> Check {
    match r {
        Ok(c) if c.ok => Check {
            state: CheckState::Ok,
            detail: c.detail.clone(),
        },
        Ok(c) => Check {
            state: CheckState::Failing,
            detail: c.detail.clone(),
        },
        Err(e @ (ProbeError::Timeout(_) | ProbeError::Unreachable(_))) => Check {
            state: CheckState::Unreachable,
            detail: e.to_string(),
        },
        Err(e) => Check {
            state: CheckState::Unknown,
            detail: e.to_string(),
        },
    }
}

fn int_or_string(v: &IntOrString) -> String {
    match v {
        IntOrString::Int(i) => i.to_string(),
        IntOrString::String(s) => s.clone(),
    }
}

pub fn describe_probe(p: &Probe) -> String {
    let port = int_or_string;
    if let Some(h) = &p.http_get {
        format!(
            "http-get :{}{}",
            port(&h.port),
            h.path.as_deref().unwrap_or("/")
        )
    } else if let Some(t) = &p.tcp_socket {
        format!("tcp-socket :{}", port(&t.port))
    } else if let Some(e) = &p.exec {
        format!("exec {}", e.command.clone().unwrap_or_default().join(" "))
    } else if let Some(g) = &p.grpc {
        format!("grpc :{}", g.port)
    } else {
        "unknown".into()
    }
}

fn endpoint_report(svc: &Service, slices: &[EndpointSlice], pod: &str) -> EndpointReport {
    let name = svc.metadata.name.clone().unwrap_or_default();
    let ns = svc.metadata.namespace.as_deref();
    let found = slices
        .iter()
        .filter(|s| s.metadata.namespace.as_deref() == ns)
        .filter(|s| {
            s.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("kubernetes.io/service-name"))
                == Some(&name)
        })
        .flat_map(|s| s.endpoints.iter())
        .find(|e| {
            e.target_ref
                .as_ref()
                .is_some_and(|r| r.kind.as_deref() == Some("Pod") && r.name.as_deref() == Some(pod))
        });
    match found {
        None => EndpointReport {
            service: name,
            listed: false,
            ready: None,
            serving: None,
            terminating: None,
        },
        Some(e) => {
            let c = e.conditions.clone().unwrap_or_default();
            EndpointReport {
                service: name,
                listed: true,
                ready: c.ready,
                serving: c.serving,
                terminating: c.terminating,
            }
        }
    }
}

fn pdb_report(p: &PodDisruptionBudget) -> PdbReport {
    let s = int_or_string;
    let spec = p.spec.as_ref();
    let st = p.status.as_ref();
    PdbReport {
        name: p.metadata.name.clone().unwrap_or_default(),
        min_available: spec.and_then(|x| x.min_available.as_ref()).map(s),
        max_unavailable: spec.and_then(|x| x.max_unavailable.as_ref()).map(s),
        current_healthy: st.map(|x| x.current_healthy).unwrap_or(0),
        desired_healthy: st.map(|x| x.desired_healthy).unwrap_or(0),
        disruptions_allowed: st.map(|x| x.disruptions_allowed).unwrap_or(0),
    }
}

// --- warnings: one small rule each, like kubectl drain's filters ----------------------------

type Rule = fn(&ClusterReport, &ClusterObservation) -> Vec<Warning>;

const RULES: &[Rule] = &[
    quorum_lost,
    no_leader,
    several_leaders,
    fault_tolerance_zero,
    ready_but_raft_dead,
    ready_without_leader,
    unreachable_replica,
    client_service_routes_unready,
    tcp_only_readiness,
    leader_on_cordoned_node,
    pdb_looser_than_raft,
    membership_unknown,
    credentials_unreadable,
    tls_unverified,
];

pub fn warnings(r: &ClusterReport, obs: &ClusterObservation) -> Vec<Warning> {
    RULES.iter().flat_map(|rule| rule(r, obs)).collect()
}

fn w(code: WarningCode, pod: Option<&str>, message: String) -> Warning {
    Warning {
        code,
        pod: pod.map(str::to_string),
        message,
    }
}

fn quorum_lost(r: &ClusterReport, _: &ClusterObservation) -> Vec<Warning> {
    let s = &r.summary;
    if s.has_quorum || s.voters == 0 {
        return vec![];
    }
    vec![w(
        WarningCode::QuorumLost,
        None,
        format!("only {} of {} voters are healthy and {} are needed: the cluster cannot elect a leader or commit writes", s.healthy_voters, s.voters, s.quorum),
    )]
}

fn no_leader(r: &ClusterReport, _: &ClusterObservation) -> Vec<Warning> {
    let any_claim = r.replicas.iter().any(|x| x.raft.role == Role::Leader);
    let any_answer = r
        .replicas
        .iter()
        .any(|x| x.raft.health.state != CheckState::Unreachable);
    if any_claim || !any_answer || r.replicas.is_empty() {
        return vec![];
    }
    vec![w(
        WarningCode::NoLeader,
        None,
        "no replica reports itself leader: writes fail until an election completes".into(),
    )]
}

fn several_leaders(r: &ClusterReport, _: &ClusterObservation) -> Vec<Warning> {
    let claims: Vec<String> = r
        .replicas
        .iter()
        .filter(|x| x.raft.role == Role::Leader)
        .map(|x| match x.raft.term {
            Some(t) => format!("{} (term {t})", x.pod),
            None => x.pod.clone(),
        })
        .collect();
    if claims.len() < 2 {
        return vec![];
    }
    vec![w(
        WarningCode::MultipleLeaders,
        None,
        format!("{} replicas claim leadership: {}; a stale leader in an older term may still serve reads", claims.len(), claims.join(", ")),
    )]
}

fn fault_tolerance_zero(r: &ClusterReport, _: &ClusterObservation) -> Vec<Warning> {
    let s = &r.summary;
    if !s.has_quorum || s.fault_tolerance > 0 {
        return vec![];
    }
    vec![w(
        WarningCode::FaultToleranceZero,
        None,
        format!("fault tolerance is 0: {} of {} voters are healthy and {} are needed, so losing one more replica (a drain, a crash, a rollout) stops the cluster", s.healthy_voters, s.voters, s.quorum),
    )]
}

fn ready_but_raft_dead(r: &ClusterReport, _: &ClusterObservation) -> Vec<Warning> {
    r.replicas
        .iter()
        .filter(|x| x.ready && x.raft.health.state != CheckState::Ok)
        .map(|x| {
            w(
                WarningCode::ReadyButUnhealthy,
                Some(&x.pod),
                format!(
                    "pod {} is Ready but its {} check is {}: {}",
                    x.pod,
                    r.system,
                    x.raft.health.state.as_str(),
                    x.raft.health.detail
                ),
            )
        })
        .collect()
}

fn ready_without_leader(r: &ClusterReport, _: &ClusterObservation) -> Vec<Warning> {
    r.replicas
        .iter()
        .filter(|x| x.ready && x.raft.has_leader == Some(false))
        .map(|x| w(WarningCode::ReadyWithoutLeader, Some(&x.pod), format!("pod {} is Ready but knows no leader: it cannot serve a linearizable read or a write", x.pod)))
        .collect()
}

fn unreachable_replica(r: &ClusterReport, _: &ClusterObservation) -> Vec<Warning> {
    r.replicas
        .iter()
        .filter(|x| !x.ready && x.raft.health.state == CheckState::Unreachable)
        .map(|x| {
            w(
                WarningCode::Unreachable,
                Some(&x.pod),
                format!("pod {}: {}", x.pod, x.raft.health.detail),
            )
        })
        .collect()
}

fn client_service_routes_unready(r: &ClusterReport, _: &ClusterObservation) -> Vec<Warning> {
    let client_services: Vec<&ServiceReport> = r
        .services
        .iter()
        .filter(|s| !s.publish_not_ready_addresses)
        .collect();
    let mut out = vec![];
    for x in &r.replicas {
        let raft_unready = match &x.raft.readiness {
            Some(c) => c.state != CheckState::Ok,
            None => x.raft.health.state != CheckState::Ok || x.raft.has_leader == Some(false),
        };
        if !raft_unready {
            continue;
        }
        for e in &x.endpoints {
            let is_client = client_services.iter().any(|s| s.name == e.service);
            if is_client && e.listed && e.ready != Some(false) && e.terminating != Some(true) {
                out.push(w(
                    WarningCode::ServiceRoutesToUnready,
                    Some(&x.pod),
                    format!(
                        "Service {} routes clients to {}, which is not ready by {}'s own account",
                        e.service, x.pod, r.system
                    ),
                ));
            }
        }
    }
    out
}

fn tcp_only_readiness(r: &ClusterReport, _: &ClusterObservation) -> Vec<Warning> {
    let weak: Vec<&str> = r
        .replicas
        .iter()
        .filter(|x| {
            x.probes
                .readiness
                .as_deref()
                .is_none_or(|p| p.starts_with("tcp-socket"))
        })
        .map(|x| x.pod.as_str())
        .collect();
    if weak.is_empty() {
        return vec![];
    }
    let what = match r
        .replicas
        .iter()
        .find(|x| weak.contains(&x.pod.as_str()))
        .and_then(|x| x.probes.readiness.clone())
    {
        Some(p) => format!("the readiness probe only checks TCP ({p})"),
        None => "there is no readiness probe".to_string(),
    };
    vec![w(
        WarningCode::WeakReadinessProbe,
        None,
        format!("{what} on {}: a replica whose Raft core has died stays Ready; probe the system's health endpoint instead", weak.join(", ")),
    )]
}

fn leader_on_cordoned_node(r: &ClusterReport, _: &ClusterObservation) -> Vec<Warning> {
    r.replicas
        .iter()
        .filter(|x| x.raft.role == Role::Leader && x.node_unschedulable)
        .map(|x| {
            w(
                WarningCode::LeaderOnCordonedNode,
                Some(&x.pod),
                format!("leader {} runs on cordoned node {}: a drain will evict it; move leadership first", x.pod, x.node.as_deref().unwrap_or("?")),
            )
        })
        .collect()
}

fn pdb_looser_than_raft(r: &ClusterReport, _: &ClusterObservation) -> Vec<Warning> {
    let Some(pdb) = &r.pdb else {
        return vec![w(WarningCode::NoPodDisruptionBudget, None, "no PodDisruptionBudget covers these pods: kubectl drain may evict several voters at once".into())];
    };
    let s = &r.summary;
    if s.has_quorum && pdb.disruptions_allowed > s.fault_tolerance as i32 {
        return vec![w(
            WarningCode::DisruptionBudgetTooLoose,
            None,
            format!(
                "PodDisruptionBudget {} allows {} disruption{} but Raft tolerates {}: evictions it allows can break quorum",
                pdb.name,
                pdb.disruptions_allowed,
                if pdb.disruptions_allowed == 1 { "" } else { "s" },
                s.fault_tolerance
            ),
        )];
    }
    vec![]
}

fn membership_unknown(_: &ClusterReport, obs: &ClusterObservation) -> Vec<Warning> {
    match &obs.members {
        Some(Err(e)) => vec![w(WarningCode::MembershipUnknown, None, format!("could not read the Raft member list ({e}); counting the StatefulSet's replicas instead"))],
        _ => vec![],
    }
}

fn credentials_unreadable(_: &ClusterReport, obs: &ClusterObservation) -> Vec<Warning> {
    match &obs.credentials_error {
        Some(e) => vec![w(
            WarningCode::CredentialsUnreadable,
            None,
            format!("{e}; observed without its credentials (over its TLS, where it has one)"),
        )],
        None => vec![],
    }
}

fn tls_unverified(_: &ClusterReport, obs: &ClusterObservation) -> Vec<Warning> {
    if !obs.tls_unverified {
        return vec![];
    }
    vec![w(
        WarningCode::TlsUnverified,
        None,
        "the replicas' HTTPS certificates were not verified (--tls-skip-verify, or pods/proxy without the cluster's CA: the API server does not verify them), so anything on the path could have answered for them; give the CA (ca.crt in the cluster's TLS Secret, or --tls-ca) to verify them end to end".into(),
    )]
}

pub mod gated;
pub mod voter;

#[cfg(test)]
mod tests;
