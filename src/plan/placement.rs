//! Where a replacement could start: the scheduler's hard rules that decide whether an
//! evicted member comes back elsewhere or sits Pending until its node returns. A volume
//! pinned to the node (a PersistentVolume with node affinity: local volumes, local-path
//! provisioners), the pod's node selector and required node affinity, required pod
//! anti-affinity against the members that stay, and taints, each checked against the nodes
//! that stay schedulable. Pure: the executor reads the objects, this decides.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{
    Node, NodeSelectorRequirement, NodeSelectorTerm, PersistentVolume, Pod, Taint, Toleration,
};

use crate::select::selector_matches;

/// Why no node but a drained one can run `pod`'s replacement, or None when one can.
/// `pods` are the pods of its namespace (for anti-affinity); `drained` the nodes going away.
pub fn replacement_blocker(
    pod: &Pod,
    pvs: &[PersistentVolume],
    nodes: &[Node],
    pods: &[Pod],
    drained: &BTreeSet<String>,
) -> Option<String> {
    let refs: Vec<&Pod> = pods.iter().collect();
    place(pod, pvs, nodes, &refs, drained).err()
}

/// For members leaving in this order: why each one's replacement could not start, given
/// that the replacements before it took a node each (the scheduler's first fit, by name).
/// Two members leaving a 3-node pool with one spare node: the first gets it, the second not.
pub fn replacement_blockers<'a>(
    leaving: impl IntoIterator<Item = &'a Pod>,
    pvs: &[PersistentVolume],
    nodes: &[Node],
    pods: &[Pod],
    drained: &BTreeSet<String>,
) -> BTreeMap<String, String> {
    // The replacements placed so far, each under its pod's name on the node it would get;
    // the world is the other pods (borrowed, not copied) and these.
    let mut moved: Vec<Pod> = vec![];
    let mut stuck = BTreeMap::new();
    let key = |p: &Pod| (p.metadata.namespace.clone(), p.metadata.name.clone());
    for p in leaving {
        let name = p.metadata.name.clone().unwrap_or_default();
        let gone: BTreeSet<_> = moved.iter().map(key).collect();
        let world: Vec<&Pod> = pods
            .iter()
            .filter(|x| !gone.contains(&key(x)))
            .chain(moved.iter())
            .collect();
        match place(p, pvs, nodes, &world, drained) {
            Ok(node) => {
                let mut m = p.clone();
                if let Some(spec) = m.spec.as_mut() {
                    spec.node_name = Some(node);
                }
                moved.push(m);
            }
            Err(why) => {
                stuck.insert(name, why);
            }
        }
    }
    stuck
}

/// Every member of a cluster whose replacement could not start off the drained nodes, with
/// why: those on the drained nodes in the planner's order (followers by name, the leader
/// last), each placed after the ones before it, and those already waiting unplaced. Without
/// the node list (no right to list nodes) nothing is known, so nobody is called stuck.
pub fn stuck_members(
    members: &[Pod],
    leader: Option<&str>,
    pvs: &[PersistentVolume],
    nodes: Option<&[Node]>,
    pods: &[Pod],
    drained: &BTreeSet<String>,
) -> BTreeMap<String, String> {
    let Some(nodes) = nodes else {
        return BTreeMap::new();
    };
    let name = |p: &Pod| p.metadata.name.clone().unwrap_or_default();
    let mut leaving: Vec<&Pod> = members
        .iter()
        .filter(|p| crate::model::pod_node(p).is_some_and(|n| drained.contains(n)))
        .collect();
    leaving.sort_by_key(|p| (Some(name(p).as_str()) == leader, name(p)));
    // Most clusters have nothing on the drained nodes: nothing to place (the copy of every
    // pod that placement works on is not made).
    let mut stuck = if leaving.is_empty() {
        BTreeMap::new()
    } else {
        replacement_blockers(leaving, pvs, nodes, pods, drained)
    };
    for p in members
        .iter()
        .filter(|p| crate::model::pod_node(p).is_none())
    {
        if let Some(why) = replacement_blocker(p, pvs, nodes, pods, drained) {
            stuck.insert(name(p), why);
        }
    }
    stuck
}

/// The node that would take `pod`'s replacement (the first by name that allows it), or why
/// none would.
fn place(
    pod: &Pod,
    pvs: &[PersistentVolume],
    nodes: &[Node],
    pods: &[&Pod],
    drained: &BTreeSet<String>,
) -> Result<String, String> {
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
    let Some(spec) = pod.spec.as_ref() else {
        return Err("the pod has no spec".into());
    };
    let claims: BTreeSet<&str> = spec
        .volumes
        .iter()
        .flatten()
        .filter_map(|v| v.persistent_volume_claim.as_ref())
        .map(|c| c.claim_name.as_str())
        .collect();
    let pinned: Vec<(&PersistentVolume, &NodeSelectorTerm)> = pvs
        .iter()
        .filter(|pv| {
            pv.spec
                .as_ref()
                .and_then(|s| s.claim_ref.as_ref())
                .is_some_and(|c| {
                    c.namespace.as_deref() == Some(ns)
                        && c.name.as_deref().is_some_and(|n| claims.contains(n))
                })
        })
        .flat_map(|pv| {
            pv.spec
                .as_ref()
                .and_then(|s| s.node_affinity.as_ref())
                .and_then(|a| a.required.as_ref())
                .into_iter()
                .flat_map(|r| r.node_selector_terms.iter())
                .map(move |t| (pv, t))
        })
        .collect();
    let pv_names: BTreeSet<&str> = pinned
        .iter()
        .filter_map(|(pv, _)| pv.metadata.name.as_deref())
        .collect();

    // The pods its required anti-affinity could clash with: those of the namespaces its
    // terms name (its own by default), found once rather than for every node.
    let mut clash_ns: BTreeSet<&str> = BTreeSet::from([ns]);
    for term in spec
        .affinity
        .as_ref()
        .and_then(|a| a.pod_anti_affinity.as_ref())
        .and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .into_iter()
        .flatten()
    {
        clash_ns.extend(term.namespaces.iter().flatten().map(String::as_str));
    }
    let near: Vec<&Pod> = pods
        .iter()
        .copied()
        .filter(|p| clash_ns.contains(p.metadata.namespace.as_deref().unwrap_or_default()))
        .collect();
    let mut why_not: BTreeMap<String, String> = BTreeMap::new();
    let mut pv_allows_some = pv_names.is_empty();
    let mut nodes_by_name: Vec<&Node> = nodes.iter().collect();
    nodes_by_name.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    for node in nodes_by_name {
        let n = node.metadata.name.clone().unwrap_or_default();
        let pv_ok = pv_names.iter().all(|pv| {
            let terms: Vec<&NodeSelectorTerm> = pinned
                .iter()
                .filter(|(p, _)| p.metadata.name.as_deref() == Some(pv))
                .map(|(_, t)| *t)
                .collect();
            terms.iter().any(|t| term_matches(t, node))
        });
        if !pv_ok {
            continue; // Said once, below, for every node.
        }
        if !drained.contains(&n) {
            pv_allows_some = true;
        }
        if let Some(reason) = node_refuses(node, spec, name, ns, &near, nodes, drained) {
            why_not.insert(n, reason);
            continue;
        }
        return Ok(n);
    }
    if !pv_allows_some {
        let allowed: Vec<String> = nodes
            .iter()
            .filter(|node| pinned.iter().any(|(_, t)| term_matches(t, node)))
            .filter_map(|n| n.metadata.name.clone())
            .collect();
        return Err(format!(
            "its volume ({}) is pinned by node affinity to {}",
            pv_names.iter().copied().collect::<Vec<_>>().join(", "),
            if allowed.is_empty() {
                "no node that exists".to_string()
            } else {
                format!("node {}", allowed.join(", "))
            }
        ));
    }
    let reasons: Vec<String> = why_not
        .into_iter()
        .filter(|(n, _)| !drained.contains(n))
        .map(|(n, r)| format!("{n} {r}"))
        .collect();
    Err(if reasons.is_empty() {
        "no other node exists".to_string()
    } else {
        format!("no other node can run it ({})", reasons.join("; "))
    })
}

/// Why `node` cannot run the pod's replacement, or None when it can.
fn node_refuses(
    node: &Node,
    spec: &k8s_openapi::api::core::v1::PodSpec,
    name: &str,
    ns: &str,
    pods: &[&Pod],
    nodes: &[Node],
    drained: &BTreeSet<String>,
) -> Option<String> {
    let n = node.metadata.name.as_deref().unwrap_or_default();
    if drained.contains(n) {
        return Some("is being drained".into());
    }
    let ns_spec = node.spec.as_ref();
    if ns_spec.and_then(|s| s.unschedulable) == Some(true) {
        return Some("is cordoned".into());
    }
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True");
    if !ready {
        return Some("is not Ready".into());
    }
    if let Some(t) = ns_spec
        .and_then(|s| s.taints.as_ref())
        .into_iter()
        .flatten()
        .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
        .find(|t| !tolerated(t, spec.tolerations.as_deref().unwrap_or_default()))
    {
        return Some(format!(
            "has taint {}:{} that the pod does not tolerate",
            t.key, t.effect
        ));
    }
    let labels = node.metadata.labels.clone().unwrap_or_default();
    if let Some((k, v)) = spec
        .node_selector
        .iter()
        .flatten()
        .find(|(k, v)| labels.get(*k) != Some(*v))
    {
        return Some(format!("lacks the label {k}={v} of the pod's nodeSelector"));
    }
    let affinity = spec.affinity.as_ref();
    if let Some(req) = affinity
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
    {
        if !req
            .node_selector_terms
            .iter()
            .any(|t| term_matches(t, node))
        {
            return Some("does not match the pod's required node affinity".into());
        }
    }
    let terms = affinity
        .and_then(|a| a.pod_anti_affinity.as_ref())
        .and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_ref()
        });
    for term in terms.into_iter().flatten() {
        let Some(domain) = labels.get(&term.topology_key) else {
            continue;
        };
        let Some(sel) = &term.label_selector else {
            continue;
        };
        let same_ns = term
            .namespaces
            .as_ref()
            .filter(|v| !v.is_empty())
            .map_or_else(|| vec![ns.to_string()], |v| v.clone());
        let clash = pods.iter().find(|p| {
            p.metadata.name.as_deref() != Some(name)
                && same_ns
                    .iter()
                    .any(|x| Some(x.as_str()) == p.metadata.namespace.as_deref())
                && selector_matches(sel, p.metadata.labels.as_ref().unwrap_or(&BTreeMap::new()))
                && crate::model::pod_node(p).is_some_and(|pn| {
                    nodes
                        .iter()
                        .find(|x| x.metadata.name.as_deref() == Some(pn))
                        .and_then(|x| x.metadata.labels.as_ref())
                        .and_then(|l| l.get(&term.topology_key))
                        == Some(domain)
                })
        });
        if let Some(p) = clash {
            return Some(format!(
                "runs {} (required anti-affinity, topologyKey {})",
                p.metadata.name.as_deref().unwrap_or_default(),
                term.topology_key
            ));
        }
    }
    None
}

fn tolerated(t: &Taint, tolerations: &[Toleration]) -> bool {
    tolerations.iter().any(|tol| {
        let effect_ok = tol
            .effect
            .as_deref()
            .is_none_or(|e| e.is_empty() || e == t.effect);
        let key_ok = tol
            .key
            .as_deref()
            .is_none_or(|k| k.is_empty() || k == t.key);
        let value_ok = match tol.operator.as_deref() {
            Some("Exists") => true,
            _ => tol.value.as_deref().unwrap_or_default() == t.value.as_deref().unwrap_or_default(),
        };
        effect_ok && key_ok && value_ok
    })
}

/// A node selector term: all its requirements hold (labels and the metadata.name field).
fn term_matches(t: &NodeSelectorTerm, node: &Node) -> bool {
    let labels = node.metadata.labels.clone().unwrap_or_default();
    let mut fields = BTreeMap::new();
    fields.insert(
        "metadata.name".to_string(),
        node.metadata.name.clone().unwrap_or_default(),
    );
    let exprs: Vec<&NodeSelectorRequirement> = t.match_expressions.iter().flatten().collect();
    let field_exprs: Vec<&NodeSelectorRequirement> = t.match_fields.iter().flatten().collect();
    // An empty term matches no node.
    (!exprs.is_empty() || !field_exprs.is_empty())
        && exprs.iter().all(|r| requirement_holds(r, &labels))
        && field_exprs.iter().all(|r| requirement_holds(r, &fields))
}

fn requirement_holds(r: &NodeSelectorRequirement, labels: &BTreeMap<String, String>) -> bool {
    let values = r.values.clone().unwrap_or_default();
    let v = labels.get(&r.key);
    match r.operator.as_str() {
        "In" => v.is_some_and(|v| values.contains(v)),
        "NotIn" => v.is_none_or(|v| !values.contains(v)),
        "Exists" => v.is_some(),
        "DoesNotExist" => v.is_none(),
        "Gt" | "Lt" => {
            let (Some(have), Some(want)) = (
                v.and_then(|v| v.parse::<i64>().ok()),
                values.first().and_then(|w| w.parse::<i64>().ok()),
            ) else {
                return false;
            };
            if r.operator == "Gt" {
                have > want
            } else {
                have < want
            }
        }
        _ => false,
    }
}
