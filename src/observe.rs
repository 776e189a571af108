//! Observation: ask every replica of every cluster what it knows about Raft, concurrently
//! within the transport's in-flight bound. One slow or dead replica costs at most one probe
//! timeout and never hides the others.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::future::join_all;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

use crate::model::{
    CheckOutcome, ClusterObservation, ClusterTarget, Endpoint, Group, ProbeError, RaftFacts,
    ReplicaObservation, Role,
};
use crate::plan::ReplicaView;
use crate::profile::extract;
use crate::profile::{check_for, resolve_port, CheckSpec, PortSpec, Profile};
use crate::transport::Transport;

pub async fn observe_cluster(
    transport: &Transport,
    target: ClusterTarget,
    limit: Duration,
) -> ClusterObservation {
    let replicas = join_all(
        target
            .pods
            .iter()
            .map(|p| observe_replica(transport, &target.profile, p, limit)),
    )
    .await;
    let members = match &target.profile.membership {
        None => None,
        Some(spec) => {
            // Ask the leader (its list is authoritative), else any healthy member.
            let asked = replicas
                .iter()
                .find(|r| r.facts.role == Some(Role::Leader))
                .or_else(|| replicas.iter().find(|r| r.healthy()));
            match asked {
                None => None,
                Some(r) => Some(match endpoint(&target.profile, &r.pod, None) {
                    Err(e) => Err(e.to_string()),
                    Ok(ep) => match transport.call(&ep, &spec.request, limit).await {
                        Ok(ans) => extract::parse_membership(spec, &ans),
                        Err(e) => Err(format!("{} {}: {e}", ep.pod, spec.request.path)),
                    },
                }),
            }
        }
    };
    ClusterObservation {
        target,
        replicas,
        members,
        credentials_error: None,
        tls_unverified: false,
    }
}

/// Where a profile's request goes on this pod.
pub fn endpoint(
    profile: &Profile,
    pod: &Pod,
    port: Option<&PortSpec>,
) -> Result<Endpoint, ProbeError> {
    let spec = pod
        .spec
        .as_ref()
        .ok_or_else(|| ProbeError::Other("the pod has no spec".into()))?;
    let port_spec = port.unwrap_or(&profile.port);
    let port = resolve_port(spec, port_spec).ok_or_else(|| {
        ProbeError::Other(format!(
            "no container port named {:?} or numbered {:?}",
            port_spec.names, port_spec.numbers
        ))
    })?;
    let pod_ip = pod.status.as_ref().and_then(|s| s.pod_ip.clone());
    if pod_ip.is_none() {
        let phase = pod
            .status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_else(|| "Unknown".into());
        return Err(ProbeError::Unreachable(format!(
            "the pod has no IP (phase {phase})"
        )));
    }
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let names = crate::tls::member_names(
        spec.hostname.as_deref().or(pod.metadata.name.as_deref()),
        spec.subdomain.as_deref(),
        &namespace,
        pod_ip.as_deref(),
    );
    Ok(Endpoint {
        namespace,
        pod: pod.metadata.name.clone().unwrap_or_default(),
        pod_ip,
        port,
        scheme: profile.scheme,
        names,
    })
}

async fn check(
    transport: &Transport,
    profile: &Profile,
    pod: &Pod,
    spec: &CheckSpec,
    limit: Duration,
) -> Result<CheckOutcome, ProbeError> {
    let spec = match pod.spec.as_ref() {
        Some(pod_spec) => check_for(spec, &profile.port, pod_spec),
        None => spec,
    };
    let ep = endpoint(profile, pod, spec.port.as_ref())?;
    let ans = transport.call(&ep, &spec.request, limit).await?;
    Ok(extract::evaluate_check(spec, &ans))
}

pub async fn observe_replica(
    transport: &Transport,
    profile: &Profile,
    pod: &Pod,
    limit: Duration,
) -> ReplicaObservation {
    let health = check(transport, profile, pod, &profile.health, limit);
    let readiness = async {
        match &profile.ready {
            Some(spec) => Some(check(transport, profile, pod, spec, limit).await),
            None => None,
        }
    };
    let (health, readiness, read, groups) = tokio::join!(
        health,
        readiness,
        read_facts(transport, profile, pod, limit),
        read_groups(transport, profile, pod, limit),
    );
    let refused = match &health {
        Err(e @ (ProbeError::Forbidden(_) | ProbeError::Tls(_))) => Some(e.to_string()),
        _ => read.refused,
    };
    ReplicaObservation {
        pod: pod.clone(),
        health,
        readiness,
        facts: read.facts,
        errors: read.errors,
        refused,
        groups,
    }
}

/// The other Raft groups the replica takes part in, where the profile lists them.
pub async fn read_groups(
    transport: &Transport,
    profile: &Profile,
    pod: &Pod,
    limit: Duration,
) -> Option<Result<Vec<Group>, String>> {
    let spec = profile.groups.as_ref()?;
    let ep = match endpoint(profile, pod, spec.port.as_ref()) {
        Ok(ep) => ep,
        Err(e) => return Some(Err(e.to_string())),
    };
    // Parsed while its bound on large answers is held: no more listings in memory at once.
    Some(
        match transport
            .call_then(&ep, &spec.request, limit, |ans| {
                extract::parse_groups(spec, &ans)
            })
            .await
        {
            Ok(parsed) => parsed,
            Err(e) => Err(format!("{}: {e}", spec.request.path)),
        },
    )
}

/// What the fact requests of one replica gave.
pub struct FactsRead {
    pub facts: RaftFacts,
    /// Failed requests, one message each (optional ones left out).
    pub errors: Vec<String>,
    /// The first (not optional) request the API server refused for want of a permission
    /// (RBAC), as `ProbeError::Forbidden` says it.
    pub refused: Option<String>,
}

/// The profile's fact requests on one replica (no health check, no member list): what a
/// waiting loop needs, as often as it needs it.
pub async fn read_facts(
    transport: &Transport,
    profile: &Profile,
    pod: &Pod,
    limit: Duration,
) -> FactsRead {
    // Each answer is read as it arrives and dropped: only the values it held are kept.
    let answers = join_all(profile.requests.iter().map(|r| async move {
        let ep = endpoint(profile, pod, r.port.as_ref())?;
        let ans = transport.call(&ep, &r.request, limit).await?;
        Ok::<_, ProbeError>(extract::read_values(r, &ans))
    }))
    .await;
    let mut facts = RaftFacts::default();
    let mut errors = vec![];
    let mut refused = None;
    for (spec, answer) in profile.requests.iter().zip(answers) {
        if let (Err(e @ (ProbeError::Forbidden(_) | ProbeError::Tls(_))), None, false) =
            (&answer, &refused, spec.optional)
        {
            refused = Some(e.to_string());
        }
        let result = answer
            .map_err(|e| format!("{}: {e}", spec.request.path))
            .and_then(|values| values)
            .and_then(|values| extract::apply(spec, values, &mut facts));
        if let Err(e) = result {
            if !spec.optional {
                errors.push(e);
            }
        }
    }
    extract::finish(profile, &mut facts);
    FactsRead {
        facts,
        errors,
        refused,
    }
}

/// One replica in a waiting loop: its role, the leader it names (as a pod, through
/// `pod_of_member`) and its term.
pub async fn poll_view(
    transport: &Transport,
    profile: &Profile,
    pod: &Pod,
    pod_of_member: &BTreeMap<String, String>,
    limit: Duration,
) -> ReplicaView {
    let name = pod.name_any();
    let FactsRead {
        facts: f, errors, ..
    } = read_facts(transport, profile, pod, limit).await;
    let answered = f.role.is_some() || f.term.is_some() || f.leader_id.is_some();
    if !answered {
        return ReplicaView {
            pod: name,
            role: None,
            leader: None,
            has_leader: None,
            term: None,
            error: Some(errors.join("; ")),
        };
    }
    let leader = f
        .leader_id
        .as_ref()
        .and_then(|id| pod_of_member.get(id).cloned())
        .or_else(|| (f.role == Some(Role::Leader)).then(|| name.clone()));
    ReplicaView {
        pod: name,
        role: Some(f.role.unwrap_or(Role::Unknown)),
        leader,
        has_leader: f.has_leader,
        term: f.term,
        error: None,
    }
}
