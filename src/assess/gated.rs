//! Whether evictions of a cluster's pods go through the gate, and what it last refused: the
//! API server's own rule (a webhook whose rules cover `CREATE pods/eviction` and whose
//! selectors match) applied to what `status` read. Pure: the objects come in a `GateView`.

use std::collections::BTreeMap;

use k8s_openapi::api::admissionregistration::v1::{
    RuleWithOperations, ValidatingWebhook, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::core::{Selector, SelectorExt};

use crate::model::{GateView, GATE_COMPONENT, GATE_MODE_ANNOTATION, GATE_WEBHOOK_SUFFIX};
use crate::report::{GateRefusal, GateReport, GateState};

/// The gate's state for the cluster in namespace `ns` whose pods are `pods`.
pub fn gate_report(ns: &str, pods: &[String], view: &GateView) -> GateReport {
    let mut report = GateReport {
        state: GateState::Unknown,
        webhook: None,
        failure_policy: None,
        mode: None,
        ready_endpoints: None,
        unknown_because: None,
        last_refusal: None,
    };
    match gated_by(ns, view) {
        Ok(Some((config, hook))) => {
            report.state = GateState::Gated;
            report.webhook = Some(config.to_string());
            report.mode = view
                .webhooks
                .iter()
                .flatten()
                .find(|c| c.metadata.name.as_deref() == Some(config))
                .and_then(|c| c.metadata.annotations.as_ref()?.get(GATE_MODE_ANNOTATION))
                .map(|m| crate::model::text::one_line(m, 20));
            report.failure_policy =
                Some(hook.failure_policy.clone().unwrap_or_else(|| "Fail".into()));
            report.ready_endpoints =
                service_of(hook).and_then(|s| view.ready_endpoints.get(&s)?.as_ref().ok().copied());
        }
        Ok(None) => report.state = GateState::NotGated,
        Err(why) => report.unknown_because = Some(why),
    }
    if let Some(Ok(events)) = view.refusals.get(ns) {
        report.last_refusal = last_refusal(events, pods);
    }
    report
}

/// The gate's webhooks among `configs` as `status` knows them (named `*.gate.kubectl-raft.io`,
/// covering evictions), with their configuration.
pub fn gate_webhooks(
    configs: &[ValidatingWebhookConfiguration],
) -> impl Iterator<Item = (&ValidatingWebhookConfiguration, &ValidatingWebhook)> {
    configs.iter().flat_map(|c| {
        c.webhooks
            .iter()
            .flatten()
            .filter(|h| h.name.ends_with(GATE_WEBHOOK_SUFFIX))
            .filter(|h| h.rules.iter().flatten().any(covers_evictions))
            .map(move |h| (c, h))
    })
}

/// The Service a webhook calls, as NAMESPACE/NAME (None: it calls a URL).
pub fn service_of(hook: &ValidatingWebhook) -> Option<String> {
    let s = hook.client_config.service.as_ref()?;
    Some(format!("{}/{}", s.namespace, s.name))
}

/// Whether the API server sends evictions in `ns` to the gate through `view`'s configuration,
/// which is the gate's own (every webhook in it is the gate's, whatever its name): the gate's
/// question of a review before it acts on it. Err when that cannot be told (labels unread,
/// matchConditions only the API server evaluates, no webhook of it covering evictions at all,
/// which the gate does not second-guess).
pub fn sends_evictions_of(ns: &str, view: &GateView) -> Result<bool, String> {
    gated_by_any(ns, view, true).map(|hook| hook.is_some())
}

/// The first gate webhook (by configuration name) that the API server would call for an
/// eviction in `ns`; Err when that cannot be told.
fn gated_by<'v>(
    ns: &str,
    view: &'v GateView,
) -> Result<Option<(&'v str, &'v ValidatingWebhook)>, String> {
    gated_by_any(ns, view, false)
}

/// `gated_by`, with every webhook taken for the gate's when `own` (the gate's own
/// configuration), and then Err when none of them covers evictions.
fn gated_by_any<'v>(
    ns: &str,
    view: &'v GateView,
    own: bool,
) -> Result<Option<(&'v str, &'v ValidatingWebhook)>, String> {
    let configs = view.webhooks.as_ref().map_err(Clone::clone)?;
    let covering: Vec<(&str, &ValidatingWebhook)> = configs
        .iter()
        .flat_map(|c| {
            let name = c.metadata.name.as_deref().unwrap_or("");
            c.webhooks.iter().flatten().map(move |h| (name, h))
        })
        .filter(|(_, h)| own || h.name.ends_with(GATE_WEBHOOK_SUFFIX))
        .filter(|(_, h)| h.rules.iter().flatten().any(covers_evictions))
        .collect();
    if own && covering.is_empty() {
        return Err("no webhook of the gate's configuration covers evictions".into());
    }
    let mut hooks: Vec<(&str, &ValidatingWebhook)> = covering
        .into_iter()
        // An eviction is an Eviction object with no labels of its own: the API server matches
        // objectSelector against it, not against the pod.
        .filter(|(_, h)| matches(h.object_selector.as_ref(), Some(&BTreeMap::new())) == Some(true))
        .collect();
    hooks.sort_by_key(|(name, _)| *name);
    let labels = view.namespaces.get(ns).and_then(|l| l.as_ref().ok());
    let mut unknown = None;
    for (name, hook) in hooks {
        match matches(hook.namespace_selector.as_ref(), labels) {
            // CEL conditions (which evictor, which pod) are the API server's to evaluate:
            // some evictions go to the gate, some may not.
            Some(true)
                if hook
                    .match_conditions
                    .as_ref()
                    .is_some_and(|c| !c.is_empty()) =>
            {
                unknown = Some(format!(
                    "webhook {name} sends evictions to the gate only under its matchConditions"
                ))
            }
            Some(true) => return Ok(Some((name, hook))),
            Some(false) => {}
            None => {
                unknown = Some(match view.namespaces.get(ns) {
                    Some(Err(why)) => why.clone(),
                    _ => format!("namespace {ns:?}'s labels were not read"),
                })
            }
        }
    }
    unknown.map_or(Ok(None), Err)
}

/// Whether a rule sends `CREATE pods/eviction` (core group) to the webhook.
fn covers_evictions(r: &RuleWithOperations) -> bool {
    let has = |list: &Option<Vec<String>>, any: &[&str]| {
        list.iter().flatten().any(|x| any.contains(&x.as_str()))
    };
    has(&r.operations, &["CREATE", "*"])
        && has(&r.api_groups, &["", "*"])
        && has(&r.api_versions, &["v1", "*"])
        && has(&r.resources, &["pods/eviction", "pods/*", "*/eviction", "*/*"])
        // An eviction is namespaced: a rule for cluster-scoped objects only never sends it.
        && r.scope.as_deref() != Some("Cluster")
}

/// Whether `selector` (none: everything) matches `labels`; None when it is not everything
/// and the labels are unknown, or it does not parse (the API server would have refused it).
fn matches(
    selector: Option<&LabelSelector>,
    labels: Option<&BTreeMap<String, String>>,
) -> Option<bool> {
    let Some(s) = selector else {
        return Some(true);
    };
    let s = Selector::try_from(s.clone()).ok()?;
    if s.selects_all() {
        return Some(true);
    }
    labels.map(|l| s.matches(l))
}

/// The newest of the gate's Warning Events on one of `pods`.
fn last_refusal(events: &[Event], pods: &[String]) -> Option<GateRefusal> {
    events
        .iter()
        .filter(|e| e.reporting_component.as_deref() == Some(GATE_COMPONENT))
        .filter(|e| e.type_.as_deref() == Some("Warning"))
        .filter(|e| {
            e.involved_object
                .name
                .as_ref()
                .is_some_and(|n| pods.contains(n))
        })
        .filter_map(|e| Some((when(e)?, e)))
        .max_by(|a, b| a.0.cmp(&b.0))
        .map(|(at, e)| GateRefusal {
            pod: e.involved_object.name.clone().unwrap_or_default(),
            reason: e.reason.clone().unwrap_or_default(),
            message: e.message.clone().unwrap_or_default(),
            at: at.to_string(),
            count: e
                .series
                .as_ref()
                .and_then(|s| s.count)
                .or(e.count)
                .map_or(1, |c| c.max(1) as u32),
        })
}

/// When an Event was last seen: its series' last observation, its own time, or (an older
/// writer) its last timestamp.
fn when(e: &Event) -> Option<k8s_openapi::jiff::Timestamp> {
    e.series
        .as_ref()
        .and_then(|s| s.last_observed_time.as_ref())
        .map(|t| t.0)
        .or_else(|| e.event_time.as_ref().map(|t| t.0))
        .or_else(|| e.last_timestamp.as_ref().map(|t| t.0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
    use serde_json::json;

    fn config(name: &str, hook: serde_json::Value) -> ValidatingWebhookConfiguration {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "webhooks": [hook],
        }))
        .unwrap()
    }

    fn gate_hook(selector: serde_json::Value) -> serde_json::Value {
        json!({
            "name": "evictions.gate.kubectl-raft.io",
            "admissionReviewVersions": ["v1"],
            "sideEffects": "NoneOnDryRun",
            "failurePolicy": "Fail",
            "namespaceSelector": selector,
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                       "resources": ["pods/eviction"]}],
            "clientConfig": {"url": "https://127.0.0.1:1/validate"},
        })
    }

    fn opted_in() -> serde_json::Value {
        json!({"matchLabels": {"kubectl-raft.io/gate": "enabled"}})
    }

    fn view(
        hooks: Vec<ValidatingWebhookConfiguration>,
        labels: &[(&str, &str)],
        events: Vec<Event>,
    ) -> GateView {
        let labels = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        GateView {
            webhooks: Ok(hooks),
            namespaces: [("db".to_string(), Ok(labels))].into(),
            refusals: [("db".to_string(), Ok(events))].into(),
            ready_endpoints: Default::default(),
        }
    }

    fn refusal(pod: &str, reason: &str, at: &str) -> Event {
        serde_json::from_value(json!({
            "metadata": {"name": format!("{pod}.{reason}"), "namespace": "db"},
            "involvedObject": {"kind": "Pod", "name": pod, "namespace": "db"},
            "reason": reason,
            "message": format!("{reason} for {pod}"),
            "type": "Warning",
            "reportingComponent": GATE_COMPONENT,
            "eventTime": at,
        }))
        .unwrap()
    }

    fn pods() -> Vec<String> {
        vec!["etcd-0".into(), "etcd-1".into(), "etcd-2".into()]
    }

    #[test]
    fn a_namespace_the_gate_webhook_selects_is_gated() {
        let v = view(
            vec![config("kubectl-raft-gate", gate_hook(opted_in()))],
            &[("kubectl-raft.io/gate", "enabled")],
            vec![],
        );
        let r = gate_report("db", &pods(), &v);
        assert_eq!(r.state, GateState::Gated);
        assert_eq!(r.webhook.as_deref(), Some("kubectl-raft-gate"));
        assert_eq!(r.failure_policy.as_deref(), Some("Fail"));
        assert_eq!(r.mode, None, "no gate said its mode yet");
    }

    #[test]
    fn the_mode_is_the_one_the_gate_wrote_on_its_configuration() {
        let mut c = config("kubectl-raft-gate", gate_hook(opted_in()));
        c.metadata.annotations =
            Some([(GATE_MODE_ANNOTATION.to_string(), "audit".to_string())].into());
        let v = view(vec![c], &[("kubectl-raft.io/gate", "enabled")], vec![]);
        assert_eq!(
            gate_report("db", &pods(), &v).mode.as_deref(),
            Some("audit")
        );
    }

    #[test]
    fn a_namespace_without_the_opt_in_label_is_not_gated() {
        let v = view(
            vec![config("kubectl-raft-gate", gate_hook(opted_in()))],
            &[("team", "db")],
            vec![],
        );
        assert_eq!(gate_report("db", &pods(), &v).state, GateState::NotGated);
    }

    #[test]
    fn a_webhook_that_is_not_the_gates_does_not_gate() {
        let mut hook = gate_hook(json!({}));
        hook["name"] = json!("evictions.example.com");
        let v = view(vec![config("other", hook)], &[], vec![]);
        assert_eq!(gate_report("db", &pods(), &v).state, GateState::NotGated);
    }

    #[test]
    fn a_gate_webhook_on_other_operations_does_not_gate_evictions() {
        let mut hook = gate_hook(json!({}));
        hook["rules"][0]["resources"] = json!(["pods"]);
        hook["rules"][0]["operations"] = json!(["DELETE"]);
        let v = view(vec![config("kubectl-raft-gate", hook)], &[], vec![]);
        assert_eq!(gate_report("db", &pods(), &v).state, GateState::NotGated);
    }

    /// kubectl drain's Evictions carry no labels: an objectSelector that asks for some is
    /// never met, whatever the pods' labels.
    #[test]
    fn an_object_selector_with_labels_never_matches_an_eviction() {
        let mut hook = gate_hook(json!({}));
        hook["objectSelector"] = json!({"matchLabels": {"app": "etcd"}});
        let v = view(vec![config("kubectl-raft-gate", hook)], &[], vec![]);
        assert_eq!(gate_report("db", &pods(), &v).state, GateState::NotGated);
    }

    #[test]
    fn unreadable_webhooks_leave_the_state_unknown_and_say_why() {
        let mut v = view(vec![], &[], vec![]);
        v.webhooks = Err("may not list validatingwebhookconfigurations".into());
        let r = gate_report("db", &pods(), &v);
        assert_eq!(r.state, GateState::Unknown);
        assert_eq!(
            r.unknown_because.as_deref(),
            Some("may not list validatingwebhookconfigurations")
        );
    }

    #[test]
    fn unreadable_namespace_labels_leave_a_selecting_webhook_unknown() {
        let mut v = view(
            vec![config("kubectl-raft-gate", gate_hook(opted_in()))],
            &[],
            vec![],
        );
        v.namespaces = [("db".to_string(), Err("may not get namespaces".to_string()))].into();
        let r = gate_report("db", &pods(), &v);
        assert_eq!(r.state, GateState::Unknown);
        assert_eq!(r.unknown_because.as_deref(), Some("may not get namespaces"));
    }

    #[test]
    fn a_webhook_for_every_namespace_gates_even_with_unread_labels() {
        let mut v = view(
            vec![config("kubectl-raft-gate", gate_hook(json!({})))],
            &[],
            vec![],
        );
        v.namespaces = [("db".to_string(), Err("may not get namespaces".to_string()))].into();
        assert_eq!(gate_report("db", &pods(), &v).state, GateState::Gated);
    }

    #[test]
    fn a_rule_for_cluster_scoped_objects_does_not_gate_evictions() {
        let mut hook = gate_hook(json!({}));
        hook["rules"][0]["scope"] = json!("Cluster");
        let v = view(vec![config("kubectl-raft-gate", hook)], &[], vec![]);
        assert_eq!(gate_report("db", &pods(), &v).state, GateState::NotGated);
    }

    #[test]
    fn a_rule_for_another_api_version_does_not_gate_evictions() {
        let mut hook = gate_hook(json!({}));
        hook["rules"][0]["apiVersions"] = json!(["v2"]);
        let v = view(vec![config("kubectl-raft-gate", hook)], &[], vec![]);
        assert_eq!(gate_report("db", &pods(), &v).state, GateState::NotGated);
    }

    /// Match conditions are CEL the API server evaluates per request: whether an eviction is
    /// sent cannot be told from here.
    #[test]
    fn a_webhook_with_match_conditions_leaves_the_state_unknown() {
        let mut hook = gate_hook(json!({}));
        hook["matchConditions"] =
            json!([{"name": "not-autoscaler", "expression": "request.userInfo.username != 'ca'"}]);
        let v = view(vec![config("kubectl-raft-gate", hook)], &[], vec![]);
        let r = gate_report("db", &pods(), &v);
        assert_eq!(r.state, GateState::Unknown);
        assert!(r.unknown_because.unwrap().contains("matchConditions"));
    }

    #[test]
    fn the_last_refusal_is_the_newest_warning_on_one_of_the_clusters_pods() {
        let v = view(
            vec![],
            &[],
            vec![
                refusal("etcd-1", "QuorumAtRisk", "2026-12-02T01:00:00Z"),
                refusal("etcd-2", "LockHeld", "2026-12-02T01:05:00Z"),
                // Another cluster's pod, newer: not this cluster's refusal.
                refusal("zk-0", "QuorumAtRisk", "2026-12-02T01:09:00Z"),
            ],
        );
        let r = gate_report("db", &pods(), &v).last_refusal.unwrap();
        assert_eq!((r.pod.as_str(), r.reason.as_str()), ("etcd-2", "LockHeld"));
        assert_eq!(r.at, "2026-12-02T01:05:00Z");
    }

    #[test]
    fn a_transfer_is_no_refusal() {
        let mut started = refusal("etcd-0", "TransferStarted", "2026-12-02T01:00:00Z");
        started.type_ = Some("Normal".into());
        let v = view(vec![], &[], vec![started]);
        assert_eq!(gate_report("db", &pods(), &v).last_refusal, None);
    }

    #[test]
    fn another_components_warning_is_not_the_gates() {
        let mut other = refusal("etcd-0", "BackOff", "2026-12-02T01:00:00Z");
        other.reporting_component = Some("kubelet".into());
        let v = view(vec![], &[], vec![other]);
        assert_eq!(gate_report("db", &pods(), &v).last_refusal, None);
    }

    /// The gate's own configuration counts whatever its webhooks are named: a user who renamed
    /// the webhook still has the gate decide what the API server sends it.
    #[test]
    fn the_gates_own_configuration_counts_under_any_webhook_name() {
        let mut hook = gate_hook(opted_in());
        hook["name"] = json!("evictions.raft.example.com");
        let own = view(vec![config("kubectl-raft-gate", hook)], &[], vec![]);
        assert_eq!(sends_evictions_of("db", &own), Ok(false));
        let mut hook = gate_hook(opted_in());
        hook["name"] = json!("evictions.raft.example.com");
        let selected = view(
            vec![config("kubectl-raft-gate", hook)],
            &[("kubectl-raft.io/gate", "enabled")],
            vec![],
        );
        assert_eq!(sends_evictions_of("db", &selected), Ok(true));
    }

    /// A configuration none of whose webhooks covers evictions is not the gate's to judge: it
    /// cannot tell, so it decides (never waves a review through on it).
    #[test]
    fn an_own_configuration_that_covers_no_eviction_cannot_tell() {
        let mut hook = gate_hook(opted_in());
        hook["rules"][0]["resources"] = json!(["pods"]);
        let v = view(vec![config("kubectl-raft-gate", hook)], &[], vec![]);
        assert!(sends_evictions_of("db", &v).is_err());
    }
}
