//! Observation: ask every replica of every cluster, all at once, what it knows about Raft.
//! One slow or dead replica costs at most one probe timeout and never hides the others.

use std::time::Duration;

use futures::future::join_all;
use k8s_openapi::api::core::v1::Pod;

use crate::discovery::ClusterTarget;
use crate::profile::extract::{self, CheckOutcome, Member, RaftFacts, Role};
use crate::profile::{resolve_port, CheckSpec, PortSpec, Profile};
use crate::transport::{Endpoint, ProbeError, Transport};

#[derive(Debug, Clone)]
pub struct ReplicaObservation {
    pub pod: Pod,
    pub health: Result<CheckOutcome, ProbeError>,
    pub readiness: Option<Result<CheckOutcome, ProbeError>>,
    pub facts: RaftFacts,
    /// Failed requests, one message each (optional requests are left out).
    pub errors: Vec<String>,
}

#[derive(Debug, Clone)]
pub struct ClusterObservation {
    pub target: ClusterTarget,
    pub replicas: Vec<ReplicaObservation>,
    /// The Raft membership as one member lists it, where the profile knows how to ask.
    pub members: Option<Result<Vec<Member>, String>>,
}

pub async fn observe_all(
    transport: &Transport,
    targets: Vec<ClusterTarget>,
    limit: Duration,
) -> Vec<ClusterObservation> {
    join_all(
        targets
            .into_iter()
            .map(|t| observe_cluster(transport, t, limit)),
    )
    .await
}

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
                .or_else(|| {
                    replicas
                        .iter()
                        .find(|r| r.health.as_ref().is_ok_and(|c| c.ok))
                });
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
    Ok(Endpoint {
        namespace: pod.metadata.namespace.clone().unwrap_or_default(),
        pod: pod.metadata.name.clone().unwrap_or_default(),
        pod_ip,
        port,
        scheme: profile.scheme,
    })
}

async fn check(
    transport: &Transport,
    profile: &Profile,
    pod: &Pod,
    spec: &CheckSpec,
    limit: Duration,
) -> Result<CheckOutcome, ProbeError> {
    let ep = endpoint(profile, pod, None)?;
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
    let requests = join_all(profile.requests.iter().map(|r| async move {
        let ep = endpoint(profile, pod, r.port.as_ref())?;
        transport.call(&ep, &r.request, limit).await
    }));
    let (health, readiness, answers) = tokio::join!(health, readiness, requests);

    let mut facts = RaftFacts::default();
    let mut errors = vec![];
    for (spec, answer) in profile.requests.iter().zip(answers) {
        let result = answer
            .map_err(|e| format!("{}: {e}", spec.request.path))
            .and_then(|ans| extract::extract(spec, &ans, &mut facts));
        if let Err(e) = result {
            if !spec.optional {
                errors.push(e);
            }
        }
    }
    extract::finish(profile, &mut facts);
    ReplicaObservation {
        pod: pod.clone(),
        health,
        readiness,
        facts,
        errors,
    }
}
