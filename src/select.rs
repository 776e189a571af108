//! Selection: from the objects a survey read, decide, without I/O, which pods form which
//! Raft cluster and which profile reads them. Every rule is unit-tested.

use std::collections::BTreeMap;

use anyhow::{bail, Context, Result};
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::core::{Selector, SelectorExt};

pub use crate::model::{labels, pod_node};
use crate::model::{ClusterTarget, OwnerKind, Selection, Snapshot};
use crate::profile::annotations::{self, Described};
use crate::profile::{Catalog, Profile};

/// A StatefulSet asked for by name runs nothing kubectl raft recognises (commands that act on
/// a selection of StatefulSets skip it, saying so).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotRecognised(pub String);

impl std::fmt::Display for NotRecognised {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for NotRecognised {}

/// `sts/etcd`, `statefulset/etcd`, `statefulsets.apps/etcd` -> `etcd`
pub fn strip_kind(name: &str) -> Result<&str> {
    match name.split_once('/') {
        None => Ok(name),
        Some((kind, n)) if ["sts", "statefulset", "statefulsets", "statefulset.apps", "statefulsets.apps"].contains(&kind.to_ascii_lowercase().as_str()) => Ok(n),
        Some((kind, _)) => bail!("{name:?}: only StatefulSets hold Raft clusters here, not {kind}; use -l SELECTOR for other pods"),
    }
}

/// The clusters chosen, and the StatefulSets left out with the reason the user sees.
#[derive(Debug, Default)]
pub struct Selected {
    pub clusters: Vec<ClusterTarget>,
    /// "statefulset NS/NAME: why": a bad annotation on a StatefulSet the user did not name is
    /// a warning about that one, never an error for everyone (a tenant could otherwise stop
    /// an admin's `status -A` or `drain`).
    pub skipped: Vec<String>,
}

/// Decides the clusters. Pure, so every rule is unit-tested.
#[cfg(test)]
pub fn select_clusters(
    snap: &Snapshot,
    catalog: &Catalog,
    sel: &Selection,
    namespace_hint: &str,
) -> Result<Vec<ClusterTarget>> {
    select(snap, catalog, sel, namespace_hint).map(|s| s.clusters)
}

/// `select_clusters`, with what it left out and why.
pub fn select(
    snap: &Snapshot,
    catalog: &Catalog,
    sel: &Selection,
    namespace_hint: &str,
) -> Result<Selected> {
    let forced = sel
        .system
        .as_deref()
        .map(|s| catalog.require(s).cloned())
        .transpose()?;
    let mut skipped = vec![];
    let mut clusters = if let Some(selector) = &sel.selector {
        clusters_from_selector(snap, catalog, forced.as_ref(), selector)?
    } else {
        clusters_from_statefulsets(
            snap,
            catalog,
            forced.as_ref(),
            sel,
            namespace_hint,
            &mut skipped,
        )?
    };
    if !sel.nodes.is_empty() {
        clusters.retain(|c| {
            c.pods
                .iter()
                .any(|p| pod_node(p).is_some_and(|n| sel.nodes.iter().any(|x| x == n)))
        });
    }
    clusters.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    Ok(Selected { clusters, skipped })
}

fn clusters_from_statefulsets(
    snap: &Snapshot,
    catalog: &Catalog,
    forced: Option<&Profile>,
    sel: &Selection,
    namespace_hint: &str,
    skipped: &mut Vec<String>,
) -> Result<Vec<ClusterTarget>> {
    let wanted = sel.name.as_deref().map(strip_kind).transpose()?;
    if let Some(w) = wanted {
        if !snap
            .statefulsets
            .iter()
            .any(|s| s.metadata.name.as_deref() == Some(w))
        {
            bail!(crate::errors::NotFound::StatefulSet {
                name: w.to_string(),
                namespace: namespace_hint.to_string(),
                known: snap
                    .statefulsets
                    .iter()
                    .filter_map(|s| s.metadata.name.clone())
                    .collect(),
            });
        }
    }
    let mut out = vec![];
    for sts in &snap.statefulsets {
        let name = sts.metadata.name.clone().unwrap_or_default();
        if wanted.is_some_and(|w| w != name) {
            continue;
        }
        let ns = sts.metadata.namespace.clone().unwrap_or_default();
        let template = sts.spec.as_ref().map(|s| &s.template);
        let mut ann: BTreeMap<String, String> = template
            .and_then(|t| t.metadata.as_ref())
            .and_then(|m| m.annotations.clone())
            .unwrap_or_default();
        ann.extend(sts.metadata.annotations.clone().unwrap_or_default());
        let described = annotations::describe(&name, &ann)
            .with_context(|| format!("statefulset {ns}/{name}: its kubectl-raft.io/ annotations"));
        let profile = match (forced, described) {
            (Some(p), _) => Ok(Some(p.clone())),
            (None, Err(e)) => Err(e),
            (None, Ok(Described::Profile(p))) => Ok(Some(*p)),
            (None, Ok(Described::System(s))) => catalog
                .require(&s)
                .with_context(|| {
                    format!(
                        "statefulset {ns}/{name}: annotation {}",
                        annotations::SYSTEM
                    )
                })
                .map(|p| Some(p.clone())),
            (None, Ok(Described::Nothing)) => Ok(template
                .and_then(|t| t.spec.as_ref())
                .and_then(|s| catalog.detect(s))
                .cloned()),
        };
        // The annotation's scheme, beside whichever profile: a built-in system served over
        // TLS is that system with `kubectl-raft.io/scheme: https`, or pods that declare only
        // its TLS port.
        let profile = profile.and_then(|p| {
            let scheme =
                annotations::scheme(&ann).with_context(|| format!("statefulset {ns}/{name}"))?;
            let spec = template.and_then(|t| t.spec.as_ref());
            Ok(p.map(|p| crate::profile::served(p, spec, scheme)))
        });
        let profile = match profile {
            Ok(p) => p,
            // Named: the user asked for exactly this one.
            Err(e) if wanted.is_some() && sel.named => return Err(e),
            // A tenant's words, one line of them (they may quote its YAML).
            Err(e) => {
                skipped.push(crate::model::text::one_line(
                    &format!("{e:#}; skipped"),
                    2000,
                ));
                continue;
            }
        };
        let Some(profile) = profile else {
            if wanted.is_some() {
                return Err(NotRecognised(format!(
                    "statefulset {ns}/{name} is not a Raft system kubectl raft recognises (known: {}); \
                     name one with --system, or describe it with the annotations {} and {} (docs/profiles.md)",
                    catalog.names().join(", "),
                    annotations::PORT,
                    annotations::HEALTH_PATH
                ))
                .into());
            }
            continue;
        };
        // Members are the pods this StatefulSet controls (its uid in their controller
        // reference), not whatever its selector matches: another StatefulSet's selector
        // (a tenant's, with replicas: 0) must not make them its own.
        let uid = sts.metadata.uid.as_deref();
        let mut pods: Vec<Pod> = snap
            .pods
            .iter()
            .filter(|p| p.metadata.namespace.as_deref() == Some(ns.as_str()))
            .filter(|p| controlled_by(p, uid, &name))
            .cloned()
            .collect();
        pods.sort_by_key(|p| ordinal(p.metadata.name.as_deref().unwrap_or_default()));
        let desired = sts
            .spec
            .as_ref()
            .and_then(|s| s.replicas)
            .unwrap_or(1)
            .max(0) as u32;
        out.push(ClusterTarget {
            namespace: ns,
            name,
            owner_kind: OwnerKind::StatefulSet,
            profile,
            desired_replicas: desired,
            pods,
            credentials_secret: annotations::credentials_secret(&ann),
            tls_secret: annotations::tls_secret(&ann),
            gate_assume: annotations::gate_assume(&ann),
            named: sel.named && wanted.is_some(),
        });
    }
    Ok(out)
}

fn clusters_from_selector(
    snap: &Snapshot,
    catalog: &Catalog,
    forced: Option<&Profile>,
    selector: &str,
) -> Result<Vec<ClusterTarget>> {
    if snap.pods.is_empty() {
        bail!("no pods match the selector {selector:?}");
    }
    let mut by_ns: BTreeMap<String, Vec<Pod>> = BTreeMap::new();
    for p in &snap.pods {
        by_ns
            .entry(p.metadata.namespace.clone().unwrap_or_default())
            .or_default()
            .push(p.clone());
    }
    let mut out = vec![];
    for (ns, mut pods) in by_ns {
        pods.sort_by_key(|p| ordinal(p.metadata.name.as_deref().unwrap_or_default()));
        let first = &pods[0];
        let ann = first.metadata.annotations.clone().unwrap_or_default();
        let profile = match (forced, annotations::describe(selector, &ann)?) {
            (Some(p), _) => p.clone(),
            (None, Described::Profile(p)) => *p,
            (None, Described::System(s)) => catalog.require(&s)?.clone(),
            (None, Described::Nothing) => match first.spec.as_ref().and_then(|s| catalog.detect(s)) {
                Some(p) => p.clone(),
                None => bail!(
                    "the pods matching {selector:?} in namespace {ns:?} are not a Raft system kubectl raft recognises; \
                     name one with --system ({}) or describe it with annotations (docs/profiles.md)",
                    catalog.names().join(", ")
                ),
            },
        };
        let profile =
            crate::profile::served(profile, first.spec.as_ref(), annotations::scheme(&ann)?);
        let n = pods.len() as u32;
        out.push(ClusterTarget {
            namespace: ns,
            name: selector.to_string(),
            owner_kind: OwnerKind::Selector,
            profile,
            desired_replicas: n,
            pods,
            credentials_secret: annotations::credentials_secret(&ann),
            tls_secret: annotations::tls_secret(&ann),
            // Pods chosen with -l are no StatefulSet its owner annotated.
            gate_assume: None,
            named: false,
        });
    }
    Ok(out)
}

/// Whether the StatefulSet (by uid; by name only where it has none, as in hand-made objects)
/// is the pod's controller.
fn controlled_by(p: &Pod, uid: Option<&str>, name: &str) -> bool {
    p.metadata
        .owner_references
        .iter()
        .flatten()
        .filter(|o| o.controller == Some(true) && o.kind == "StatefulSet")
        .any(|o| match uid {
            Some(u) => u == o.uid,
            None => o.name == name,
        })
}

/// StatefulSet pods sort by ordinal (etcd-2 before etcd-10), others by name.
fn ordinal(name: &str) -> (u64, String) {
    let n = name
        .rsplit('-')
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(u64::MAX);
    (n, name.to_string())
}

/// Kubernetes label selector semantics (kube-rs' `Selector`): matchLabels and
/// matchExpressions all hold. An empty selector matches everything (as in a PDB); callers
/// guard where it should not. A selector with an unknown operator matches nothing.
pub fn selector_matches(sel: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    Selector::try_from(sel.clone()).is_ok_and(|s| s.matches(labels))
}

/// A Service selects a pod when its (non-empty) selector is a subset of the pod's labels.
pub fn service_selects(svc: &Service, pod: &Pod) -> bool {
    let Some(sel) = svc.spec.as_ref().and_then(|s| s.selector.as_ref()) else {
        return false;
    };
    !sel.is_empty() && sel.iter().all(|(k, v)| labels(pod).get(k) == Some(v))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetSpec};
    use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
        LabelSelectorRequirement, ObjectMeta, OwnerReference,
    };

    fn sts(name: &str, image: &str, ann: &[(&str, &str)]) -> StatefulSet {
        let labels = BTreeMap::from([("app".to_string(), name.to_string())]);
        StatefulSet {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("db".into()),
                uid: Some(format!("uid-{name}")),
                annotations: Some(
                    ann.iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                ..Default::default()
            },
            spec: Some(StatefulSetSpec {
                replicas: Some(3),
                selector: LabelSelector {
                    match_labels: Some(labels.clone()),
                    ..Default::default()
                },
                template: PodTemplateSpec {
                    metadata: Some(ObjectMeta {
                        labels: Some(labels),
                        ..Default::default()
                    }),
                    spec: Some(PodSpec {
                        containers: vec![Container {
                            name: "c".into(),
                            image: Some(image.into()),
                            ..Default::default()
                        }],
                        ..Default::default()
                    }),
                },
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn pod(sts: &str, i: u32, node: &str) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(format!("{sts}-{i}")),
                namespace: Some("db".into()),
                labels: Some(BTreeMap::from([("app".to_string(), sts.to_string())])),
                owner_references: Some(vec![OwnerReference {
                    kind: "StatefulSet".into(),
                    name: sts.into(),
                    uid: format!("uid-{sts}"),
                    api_version: "apps/v1".into(),
                    controller: Some(true),
                    ..Default::default()
                }]),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: Some(node.into()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn snap() -> Snapshot {
        Snapshot {
            statefulsets: vec![
                sts("etcd", "quay.io/coreos/etcd:v3.4", &[]),
                sts("web", "nginx", &[]),
            ],
            pods: vec![
                pod("etcd", 10, "n1"),
                pod("etcd", 2, "n2"),
                pod("etcd", 0, "n3"),
                pod("web", 0, "n4"),
            ],
            ..Default::default()
        }
    }

    #[test]
    fn lists_only_recognised_clusters_with_pods_in_ordinal_order() {
        let cs =
            select_clusters(&snap(), &Catalog::builtin(), &Selection::default(), "db").unwrap();
        assert_eq!(cs.len(), 1);
        assert_eq!(cs[0].profile.name, "etcd");
        let names: Vec<_> = cs[0]
            .pods
            .iter()
            .map(|p| p.metadata.name.clone().unwrap())
            .collect();
        assert_eq!(names, ["etcd-0", "etcd-2", "etcd-10"]);
    }

    #[test]
    fn a_scheme_annotation_beside_a_system_serves_that_system_over_https() {
        let mut s = snap();
        s.statefulsets[0] = sts(
            "etcd",
            "quay.io/coreos/etcd:v3.4",
            &[
                ("kubectl-raft.io/system", "etcd"),
                ("kubectl-raft.io/scheme", "https"),
                ("kubectl-raft.io/tls-secret", "etcd-client-tls"),
            ],
        );
        let cs = select_clusters(&s, &Catalog::builtin(), &Selection::default(), "db").unwrap();
        assert_eq!(cs[0].profile.name, "etcd");
        assert_eq!(cs[0].profile.scheme, crate::profile::Scheme::Https);
        assert_eq!(cs[0].tls_secret.as_deref(), Some("etcd-client-tls"));
    }

    #[test]
    fn a_scheme_annotation_alone_keeps_the_recognised_system() {
        let mut s = snap();
        s.statefulsets[0] = sts(
            "etcd",
            "quay.io/coreos/etcd:v3.4",
            &[("kubectl-raft.io/scheme", "https")],
        );
        let cs = select_clusters(&s, &Catalog::builtin(), &Selection::default(), "db").unwrap();
        assert_eq!(cs.len(), 1, "not skipped");
        assert_eq!(cs[0].profile.scheme, crate::profile::Scheme::Https);
    }

    #[test]
    fn a_selector_match_is_not_membership() {
        // A second StatefulSet (replicas: 0) whose selector matches etcd's pods.
        let mut s = snap();
        let mut thief = sts(
            "thief",
            "nginx",
            &[
                ("kubectl-raft.io/port", "2379"),
                ("kubectl-raft.io/health-path", "/health"),
            ],
        );
        let spec = thief.spec.as_mut().unwrap();
        spec.replicas = Some(0);
        spec.selector.match_labels = Some(BTreeMap::from([("app".into(), "etcd".into())]));
        s.statefulsets.push(thief);
        let cs = select_clusters(&s, &Catalog::builtin(), &Selection::default(), "db").unwrap();
        let thief = cs.iter().find(|c| c.name == "thief").expect("listed");
        assert!(thief.pods.is_empty(), "took {} pods", thief.pods.len());
        assert_eq!(cs.iter().find(|c| c.name == "etcd").unwrap().pods.len(), 3);
    }

    #[test]
    fn a_bad_annotation_skips_that_statefulset_unless_it_is_named() {
        let mut s = snap();
        s.statefulsets[1] = sts("web", "nginx", &[("kubectl-raft.io/system", "nope")]);
        let cat = Catalog::builtin();
        let got = select(&s, &cat, &Selection::default(), "db").unwrap();
        assert_eq!(got.clusters.len(), 1, "etcd is still surveyed");
        assert_eq!(got.skipped.len(), 1);
        assert!(
            got.skipped[0].contains("db/web") && got.skipped[0].contains("unknown system"),
            "{:?}",
            got.skipped
        );
        let named = Selection {
            name: Some("web".into()),
            named: true,
            ..Default::default()
        };
        assert!(select(&s, &cat, &named, "db").is_err());
        // Looked at by name for the verb's own reasons (restart -l's match, a drain's look):
        // skipped with the reason, not an error for the whole run.
        let found = Selection {
            name: Some("web".into()),
            ..Default::default()
        };
        let got = select(&s, &cat, &found, "db").unwrap();
        assert!(got.clusters.is_empty());
        assert!(
            got.skipped[0].contains("unknown system"),
            "{:?}",
            got.skipped
        );
    }

    #[test]
    fn only_named_clusters_get_the_environment() {
        let cat = Catalog::builtin();
        let all = select_clusters(&snap(), &cat, &Selection::default(), "db").unwrap();
        assert!(!all[0].named);
        let named = Selection {
            name: Some("etcd".into()),
            named: true,
            ..Default::default()
        };
        assert!(select_clusters(&snap(), &cat, &named, "db").unwrap()[0].named);
        // Looked at by name for the verb's own reasons (drain's clusters, restart -l's
        // matches): not a name the user gave.
        let found = Selection {
            name: Some("etcd".into()),
            ..Default::default()
        };
        assert!(!select_clusters(&snap(), &cat, &found, "db").unwrap()[0].named);
    }

    #[test]
    fn a_named_statefulset_that_is_not_there_is_not_found_with_the_names_there_are() {
        let sel = Selection {
            name: Some("nope".into()),
            ..Default::default()
        };
        let e = select_clusters(&snap(), &Catalog::builtin(), &sel, "db").unwrap_err();
        match e.downcast_ref::<crate::errors::NotFound>() {
            Some(crate::errors::NotFound::StatefulSet {
                name,
                namespace,
                known,
            }) => {
                assert_eq!((name.as_str(), namespace.as_str()), ("nope", "db"));
                assert_eq!(known, &["etcd", "web"]);
            }
            other => panic!("not a missing StatefulSet: {other:?} ({e})"),
        }
    }

    #[test]
    fn a_named_statefulset_must_exist_and_be_recognised() {
        let cat = Catalog::builtin();
        let sel = |n: &str| Selection {
            name: Some(n.into()),
            ..Default::default()
        };
        let e = select_clusters(&snap(), &cat, &sel("nope"), "db")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("\"nope\" not found in namespace \"db\"") && e.contains("etcd, web"),
            "{e}"
        );
        let e = select_clusters(&snap(), &cat, &sel("web"), "db")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("not a Raft system") && e.contains("kubectl-raft.io/health-path"),
            "{e}"
        );
        assert_eq!(
            select_clusters(&snap(), &cat, &sel("sts/etcd"), "db")
                .unwrap()
                .len(),
            1
        );
        assert!(select_clusters(&snap(), &cat, &sel("deploy/etcd"), "db").is_err());
    }

    #[test]
    fn system_flag_and_annotations_override_recognition() {
        let cat = Catalog::builtin();
        let sel = Selection {
            name: Some("web".into()),
            system: Some("zookeeper".into()),
            ..Default::default()
        };
        assert_eq!(
            select_clusters(&snap(), &cat, &sel, "db").unwrap()[0]
                .profile
                .name,
            "zookeeper"
        );
        let mut s = snap();
        s.statefulsets[1] = sts(
            "web",
            "nginx",
            &[
                ("kubectl-raft.io/port", "8080"),
                ("kubectl-raft.io/health-path", "/healthz"),
            ],
        );
        let cs = select_clusters(&s, &cat, &Selection::default(), "db").unwrap();
        assert_eq!(cs.len(), 2);
        let bad = Selection {
            system: Some("mongo".into()),
            ..Default::default()
        };
        assert!(select_clusters(&snap(), &cat, &bad, "db")
            .unwrap_err()
            .to_string()
            .contains("unknown system"));
    }

    #[test]
    fn node_filter_keeps_clusters_with_a_replica_there() {
        let cat = Catalog::builtin();
        let on = |n: &str| Selection {
            nodes: vec![n.into()],
            ..Default::default()
        };
        assert_eq!(
            select_clusters(&snap(), &cat, &on("n2"), "db")
                .unwrap()
                .len(),
            1
        );
        assert_eq!(
            select_clusters(&snap(), &cat, &on("n4"), "db")
                .unwrap()
                .len(),
            0
        );
    }

    #[test]
    fn selector_groups_pods_and_needs_a_system() {
        let cat = Catalog::builtin();
        let mut s = snap();
        s.pods
            .retain(|p| p.metadata.name.as_deref() == Some("web-0"));
        let sel = Selection {
            selector: Some("app=web".into()),
            ..Default::default()
        };
        assert!(select_clusters(&s, &cat, &sel, "db")
            .unwrap_err()
            .to_string()
            .contains("--system"));
        let sel = Selection {
            selector: Some("app=web".into()),
            system: Some("etcd".into()),
            ..Default::default()
        };
        assert_eq!(
            select_clusters(&s, &cat, &sel, "db").unwrap()[0].owner_kind,
            OwnerKind::Selector
        );
        s.pods.clear();
        assert!(select_clusters(&s, &cat, &sel, "db")
            .unwrap_err()
            .to_string()
            .contains("no pods match"));
    }

    #[test]
    fn label_selectors() {
        let l = BTreeMap::from([
            ("app".to_string(), "etcd".to_string()),
            ("tier".to_string(), "db".to_string()),
        ]);
        let req = |k: &str, op: &str, v: &[&str]| LabelSelectorRequirement {
            key: k.into(),
            operator: op.into(),
            values: Some(v.iter().map(|s| s.to_string()).collect()),
        };
        let sel = |e: Vec<LabelSelectorRequirement>| LabelSelector {
            match_expressions: Some(e),
            ..Default::default()
        };
        assert!(selector_matches(
            &sel(vec![req("app", "In", &["etcd", "x"])]),
            &l
        ));
        assert!(!selector_matches(
            &sel(vec![req("app", "NotIn", &["etcd"])]),
            &l
        ));
        assert!(selector_matches(&sel(vec![req("tier", "Exists", &[])]), &l));
        assert!(!selector_matches(
            &sel(vec![req("tier", "DoesNotExist", &[])]),
            &l
        ));
        assert!(selector_matches(&LabelSelector::default(), &l));
    }
}
