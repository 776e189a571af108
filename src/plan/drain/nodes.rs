//! `drain`'s decisions about the nodes' pods, around its Raft clusters (pure): which pods are
//! ordinary and what kubectl drain's filters say of each, and what arrived on the nodes
//! between the first look and the cordon.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

use super::{classify_pod, PodRules, PodVerdict};

/// The ordinary pods on the nodes (not members of a Raft cluster being drained), in namespace
/// and name order, with what kubectl drain's filters say of each.
#[derive(Debug, Clone, Default)]
pub struct Ordinary {
    pub pods: Vec<(Pod, PodVerdict)>,
    /// "NS/NAME: why" for each pod that stops the drain before any eviction.
    pub refused: Vec<String>,
    /// "ignoring pod NS/NAME: why" and "pod NS/NAME: warning" lines, kubectl's.
    pub warnings: Vec<String>,
}

impl Ordinary {
    /// The pods to evict.
    pub fn to_evict(&self) -> impl Iterator<Item = &(Pod, PodVerdict)> {
        self.pods
            .iter()
            .filter(|(_, v)| matches!(v, PodVerdict::Evict(_)))
    }
}

fn key(p: &Pod) -> (String, String) {
    (p.namespace().unwrap_or_default(), p.name_any())
}

/// kubectl drain's filters over the pods on the nodes that are not `members` (namespace,
/// name): each kept, skipped or refused with the reason the user sees.
pub fn ordinary_pods(
    on_nodes: &[Pod],
    members: &BTreeSet<(String, String)>,
    rules: &PodRules,
) -> Ordinary {
    let mut pods: Vec<(Pod, PodVerdict)> = on_nodes
        .iter()
        .filter(|p| !members.contains(&key(p)))
        .map(|p| (p.clone(), classify_pod(p, rules)))
        .collect();
    pods.sort_by_key(|(p, _)| key(p));
    let mut refused = vec![];
    let mut warnings = vec![];
    for (p, v) in &pods {
        let (ns, name) = key(p);
        match v {
            PodVerdict::Refuse(why) => refused.push(format!("{ns}/{name}: {why}")),
            PodVerdict::Skip(why) => warnings.push(format!("ignoring pod {ns}/{name}: {why}")),
            PodVerdict::Evict(Some(w)) => warnings.push(format!("pod {ns}/{name}: {w}")),
            PodVerdict::Evict(None) => {}
        }
    }
    Ordinary {
        pods,
        refused,
        warnings,
    }
}

/// A StatefulSet's pod on the nodes now that was not there at the first look (scheduled
/// before the cordon took): a Raft member, perhaps, that no plan counted.
pub fn arrived_member<'a>(seen: &[Pod], now: &'a [Pod]) -> Option<&'a Pod> {
    let seen: BTreeSet<_> = seen.iter().map(|p| p.metadata.uid.clone()).collect();
    now.iter().find(|p| {
        !seen.contains(&p.metadata.uid)
            && p.owner_references()
                .iter()
                .any(|o| o.controller == Some(true) && o.kind == "StatefulSet")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

    fn pod(ns: &str, name: &str, owner: Option<&str>) -> Pod {
        Pod {
            metadata: ObjectMeta {
                namespace: Some(ns.into()),
                name: Some(name.into()),
                uid: Some(format!("{ns}-{name}")),
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
            spec: Some(PodSpec::default()),
            ..Default::default()
        }
    }

    fn rules() -> PodRules {
        PodRules {
            ignore_daemonsets: true,
            delete_emptydir_data: false,
            force: false,
        }
    }

    #[test]
    fn members_are_not_ordinary_and_the_rest_are_sorted() {
        let on = [
            pod("b", "web", Some("ReplicaSet")),
            pod("db", "etcd-0", Some("StatefulSet")),
            pod("a", "web", Some("ReplicaSet")),
        ];
        let members = [("db".to_string(), "etcd-0".to_string())].into();
        let o = ordinary_pods(&on, &members, &rules());
        let names: Vec<_> = o.pods.iter().map(|(p, _)| key(p)).collect();
        assert_eq!(
            names,
            [("a".into(), "web".into()), ("b".into(), "web".into())]
        );
        assert_eq!(o.to_evict().count(), 2);
        assert!(o.refused.is_empty() && o.warnings.is_empty());
    }

    #[test]
    fn an_unmanaged_pod_is_refused_and_a_daemonset_pod_ignored_with_a_warning() {
        let on = [pod("a", "bare", None), pod("a", "agent", Some("DaemonSet"))];
        let o = ordinary_pods(&on, &BTreeSet::new(), &rules());
        assert_eq!(o.refused.len(), 1, "{:?}", o.refused);
        assert!(o.refused[0].starts_with("a/bare: "), "{:?}", o.refused);
        assert_eq!(o.warnings.len(), 1, "{:?}", o.warnings);
        assert!(o.warnings[0].starts_with("ignoring pod a/agent: "));
        assert_eq!(o.to_evict().count(), 0);
    }

    #[test]
    fn only_a_statefulset_pod_that_arrived_since_the_first_look_is_a_possible_member() {
        let seen = [pod("db", "etcd-0", Some("StatefulSet"))];
        let now = [
            pod("db", "etcd-0", Some("StatefulSet")),
            pod("a", "web", Some("ReplicaSet")),
        ];
        assert!(
            arrived_member(&seen, &now).is_none(),
            "a new ordinary pod is drained"
        );
        let now = [
            pod("db", "etcd-0", Some("StatefulSet")),
            pod("zk", "zk-1", Some("StatefulSet")),
        ];
        assert_eq!(
            arrived_member(&seen, &now).map(|p| p.name_any()),
            Some("zk-1".into())
        );
    }
}
