//! What the executors' scripted clusters share (the drain's, the property tests', the gate's):
//! a look at the StatefulSet db/etcd as its survey would describe it.

use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetStatus};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::Look;
use crate::model::profile::Liveness;
use crate::model::{ClusterObservation, ClusterTarget, OwnerKind};
use crate::plan::drain::ClusterInput;
use crate::profile::Catalog;
use crate::report::ClusterReport;

/// Pod `name` of namespace db, with this UID if given.
pub(crate) fn pod(name: &str, uid: Option<&str>) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("db".into()),
            uid: uid.map(str::to_string),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// The StatefulSet db/etcd at `generation`, its controller having acted on `observed`.
pub(crate) fn etcd_statefulset(generation: i64, observed: i64) -> StatefulSet {
    StatefulSet {
        metadata: ObjectMeta {
            name: Some("etcd".into()),
            namespace: Some("db".into()),
            generation: Some(generation),
            ..Default::default()
        },
        status: Some(StatefulSetStatus {
            observed_generation: Some(observed),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The built-in etcd profile, parsed once (the property tests look thousands of times).
pub(crate) fn etcd_profile() -> crate::profile::Profile {
    static ETCD: std::sync::OnceLock<crate::profile::Profile> = std::sync::OnceLock::new();
    ETCD.get_or_init(|| Catalog::builtin().get("etcd").unwrap().clone())
        .clone()
}

/// A look at db/etcd (the built-in etcd profile, which can transfer) with these replicas and
/// pods; whether its transfer names the target by member id is the caller's.
pub(crate) fn look(report: ClusterReport, pods: Vec<Pod>, target_needs_id: bool) -> Look {
    let target = ClusterTarget {
        namespace: "db".into(),
        name: "etcd".into(),
        owner_kind: OwnerKind::StatefulSet,
        profile: etcd_profile(),
        desired_replicas: report.replicas.len() as u32,
        pods,
        credentials_secret: None,
        tls_secret: None,
        gate_assume: None,
        named: false,
    };
    Look {
        obs: ClusterObservation {
            target,
            replicas: vec![],
            members: None,
            credentials_error: None,
            tls_unverified: false,
        },
        input: ClusterInput::new(report, true, target_needs_id, Liveness::Health),
    }
}

/// What member `pod` answers now in a scripted report: its role and term, or nothing when it
/// is unreachable (or not in the report).
pub(crate) fn view_now(report: &ClusterReport, pod: &str) -> crate::plan::ReplicaView {
    let silent = crate::plan::ReplicaView::silent(pod.to_string());
    match report.replicas.iter().find(|x| x.pod == pod) {
        Some(x) if x.raft.health.state != crate::report::CheckState::Unreachable => {
            crate::plan::ReplicaView {
                role: Some(x.raft.role),
                term: x.raft.term,
                leader: report.summary.leader.clone(),
                ..silent
            }
        }
        _ => crate::plan::ReplicaView {
            error: Some("connection refused".into()),
            ..silent
        },
    }
}

/// Leadership moved to `pod` in a new `term` (an election): every replica says so.
pub(crate) fn elected(r: &mut ClusterReport, pod: &str, term: u64) {
    for x in &mut r.replicas {
        x.raft.role = if x.pod == pod {
            crate::model::Role::Leader
        } else {
            crate::model::Role::Follower
        };
        x.raft.term = Some(term);
    }
    r.summary.leader = Some(pod.to_string());
}
