//! The API server's AdmissionReview (admission.k8s.io/v1), as far as the gate reads and answers
//! it: an eviction (`CREATE pods/eviction`). Anything else it is sent (a `DELETE pods`, which
//! the kubelet's final deletion and the StatefulSet controller also send) is allowed: the gate
//! decides evictions only. A refusal is a 429 with the gate's sentence, as a
//! PodDisruptionBudget's is when it allows no disruption, and like that one without a
//! Retry-After: evictors retry it in their own
//! loop (`kubectl drain` every 5 s, printing the reason each time, within its `--timeout`); a
//! Retry-After would make client-go retry it silently first (ten times, about 50 s, past that
//! timeout); a 5xx would make `kubectl drain` give up.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{json, Value};

use super::{Request, Verdict, LOCK_HOLDER_ANNOTATION};

/// What the gate reads of one review.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    /// An eviction or deletion of this pod.
    Pod {
        uid: String,
        request: Request,
        user: String,
    },
    /// Anything else the webhook was sent (a misconfigured rule): allowed, with why.
    Other { uid: String, what: String },
}

/// The parts of an AdmissionReview the gate reads, and nothing else: every other field (the
/// Eviction's other metadata, `oldObject`, `options`) is skipped as it is read, never held, so
/// a body parses in memory proportional to what is kept (the names and the annotations), not
/// to how deeply or widely the rest nests.
#[derive(Deserialize)]
struct Review {
    kind: Option<String>,
    request: Option<ReviewRequest>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct ReviewRequest {
    uid: Option<String>,
    #[serde(deserialize_with = "null_as_default")]
    operation: String,
    #[serde(deserialize_with = "null_as_default")]
    resource: Resource,
    #[serde(deserialize_with = "null_as_default")]
    sub_resource: String,
    #[serde(deserialize_with = "null_as_default")]
    namespace: String,
    #[serde(deserialize_with = "null_as_default")]
    name: String,
    dry_run: Option<bool>,
    #[serde(deserialize_with = "null_as_default")]
    user_info: UserInfo,
    object: Option<EvictionObject>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Resource {
    #[serde(deserialize_with = "null_as_default")]
    resource: String,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct UserInfo {
    #[serde(deserialize_with = "null_as_default")]
    username: String,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct EvictionObject {
    #[serde(deserialize_with = "null_as_default")]
    metadata: ObjectMetadata,
    #[serde(deserialize_with = "null_as_default")]
    delete_options: DeleteOptions,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ObjectMetadata {
    #[serde(deserialize_with = "null_as_default")]
    annotations: BTreeMap<String, String>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct DeleteOptions {
    #[serde(deserialize_with = "null_as_default")]
    dry_run: Vec<String>,
}

/// A field sent as `null` reads as absent (its default), as the API server's own decoding does.
fn null_as_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// Reads a review; an error says what is wrong with it (answered 400 by the server).
pub fn parse(body: &[u8]) -> Result<Parsed, String> {
    let v: Review =
        serde_json::from_slice(body).map_err(|e| format!("not an AdmissionReview: {e}"))?;
    if v.kind.as_deref() != Some("AdmissionReview") {
        return Err(format!(
            "not an AdmissionReview (kind {})",
            v.kind
                .as_deref()
                .map_or("null".into(), |k| format!("{k:?}"))
        ));
    }
    let mut r = v.request.unwrap_or_default();
    let uid = r
        .uid
        .take()
        .ok_or("an AdmissionReview without request.uid")?;
    let (op, resource, sub) = (&r.operation, &r.resource.resource, &r.sub_resource);
    let is_eviction = op == "CREATE" && resource == "pods" && sub == "eviction";
    if !is_eviction || r.namespace.is_empty() || r.name.is_empty() {
        let what = format!(
            "{op} {resource}{}",
            if sub.is_empty() {
                String::new()
            } else {
                format!("/{sub}")
            }
        );
        return Ok(Parsed::Other { uid, what });
    }
    // Names the API server accepted (DNS-1123 subdomains): anything else was never sent by
    // it, and never reaches a URL the gate builds.
    for (what, name) in [("namespace", &r.namespace), ("name", &r.name)] {
        if !crate::model::text::is_object_name(name) {
            return Err(format!("request.{what} {name:?} is not a Kubernetes name"));
        }
    }
    let mut object = r.object.take().unwrap_or_default();
    // `kubectl drain --dry-run=server` puts the dry run in the Eviction's own deleteOptions,
    // which the API server honours but does not copy into request.dryRun.
    let dry_run = r.dry_run.unwrap_or(false) || !object.delete_options.dry_run.is_empty();
    let lock_holder = object.metadata.annotations.remove(LOCK_HOLDER_ANNOTATION);
    Ok(Parsed::Pod {
        uid,
        request: Request {
            namespace: r.namespace,
            pod: r.name,
            dry_run,
            lock_holder,
        },
        user: r.user_info.username,
    })
}

/// The AdmissionReview that answers review `uid`.
pub fn answer(uid: &str, verdict: &Verdict) -> Value {
    let response = match verdict {
        Verdict::Allow(_) => json!({"uid": uid, "allowed": true}),
        Verdict::Warn(_, message)
        | Verdict::Would {
            message,
            warn: true,
            ..
        } => json!({"uid": uid, "allowed": true, "warnings": [message]}),
        Verdict::Would { warn: false, .. } => json!({"uid": uid, "allowed": true}),
        Verdict::Refuse(code, message) => json!({
            "uid": uid,
            "allowed": false,
            "status": {
                "status": "Failure",
                "code": 429,
                "reason": "TooManyRequests",
                "message": message,
                "details": {
                    "causes": [{"reason": code.reason(), "message": message}]
                }
            }
        }),
    };
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})
}

/// The answer to a review the gate does not handle: allowed (never refuse what it does not
/// recognise).
pub fn allow(uid: &str) -> Value {
    answer(uid, &Verdict::Allow(String::new()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gate::Code;
    use crate::plan::drain::BlockReason;

    fn eviction(dry_run: bool, holder: Option<&str>) -> Vec<u8> {
        let mut object = json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "etcd-1", "namespace": "db"}});
        if let Some(h) = holder {
            object["metadata"]["annotations"] = json!({ LOCK_HOLDER_ANNOTATION: h });
        }
        serde_json::to_vec(&json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": "u-1", "kind": {"group": "policy", "version": "v1", "kind": "Eviction"},
                "resource": {"group": "", "version": "v1", "resource": "pods"}, "subResource": "eviction",
                "name": "etcd-1", "namespace": "db", "operation": "CREATE",
                "userInfo": {"username": "system:serviceaccount:kube-system:cluster-autoscaler"},
                "object": object, "dryRun": dry_run
            }
        }))
        .unwrap()
    }

    #[test]
    fn an_eviction_review_names_the_pod_the_user_and_the_dry_run() {
        let Parsed::Pod { uid, request, user } = parse(&eviction(true, None)).unwrap() else {
            panic!("an eviction")
        };
        assert_eq!(uid, "u-1");
        assert_eq!(
            (request.namespace.as_str(), request.pod.as_str()),
            ("db", "etcd-1")
        );
        assert!(request.dry_run);
        assert_eq!(user, "system:serviceaccount:kube-system:cluster-autoscaler");
    }

    #[test]
    fn an_eviction_carries_the_lock_holder_its_sender_names() {
        let Parsed::Pod { request, .. } = parse(&eviction(false, Some("alice@h pid 1"))).unwrap()
        else {
            panic!("an eviction")
        };
        assert_eq!(request.lock_holder.as_deref(), Some("alice@h pid 1"));
    }

    #[test]
    fn a_review_of_something_else_is_not_read_as_an_eviction() {
        let body = serde_json::to_vec(&json!({"kind": "AdmissionReview", "request": {"uid": "u", "operation": "UPDATE", "resource": {"resource": "pods"}}})).unwrap();
        assert_eq!(
            parse(&body).unwrap(),
            Parsed::Other {
                uid: "u".into(),
                what: "UPDATE pods".into()
            }
        );
    }

    /// The eviction review with `field` of its request set to `value`, read.
    fn eviction_with(field: &str, value: Value) -> Parsed {
        let mut v: Value = serde_json::from_slice(&eviction(false, None)).unwrap();
        v["request"][field] = value;
        parse(&serde_json::to_vec(&v).unwrap()).unwrap()
    }

    #[test]
    fn a_pods_creation_is_not_an_eviction() {
        let parsed = eviction_with("subResource", json!(""));
        assert!(matches!(parsed, Parsed::Other { .. }), "{parsed:?}");
    }

    #[test]
    fn another_operation_on_pods_eviction_is_not_an_eviction() {
        let parsed = eviction_with("operation", json!("UPDATE"));
        assert!(matches!(parsed, Parsed::Other { .. }), "{parsed:?}");
    }

    #[test]
    fn another_resources_eviction_subresource_is_not_a_pods_eviction() {
        let parsed = eviction_with("resource", json!({"resource": "nodes"}));
        assert!(matches!(parsed, Parsed::Other { .. }), "{parsed:?}");
    }

    #[test]
    fn a_review_the_gate_does_not_handle_is_answered_allowed_with_its_uid() {
        let v = allow("u-9");
        assert_eq!(v["kind"], "AdmissionReview");
        assert_eq!(v["response"]["uid"], "u-9");
        assert_eq!(v["response"]["allowed"], true);
    }

    #[test]
    fn a_dry_run_in_the_evictions_own_options_is_a_dry_run() {
        let mut v: Value = serde_json::from_slice(&eviction(false, None)).unwrap();
        v["request"]["object"]["deleteOptions"] = json!({"dryRun": ["All"]});
        let Parsed::Pod { request, .. } = parse(&serde_json::to_vec(&v).unwrap()).unwrap() else {
            panic!("an eviction")
        };
        assert!(request.dry_run);
    }

    /// The kubelet's final deletion of a terminating member, and the StatefulSet controller's
    /// deletions, are DELETEs: refusing them would leave a member terminating for ever.
    #[test]
    fn a_deletion_is_not_an_eviction() {
        let mut v: Value = serde_json::from_slice(&eviction(false, None)).unwrap();
        v["request"]["operation"] = json!("DELETE");
        v["request"]["subResource"] = Value::Null;
        assert!(matches!(
            parse(&serde_json::to_vec(&v).unwrap()).unwrap(),
            Parsed::Other { .. }
        ));
    }

    #[test]
    fn an_eviction_without_a_name_is_not_decided() {
        let mut v: Value = serde_json::from_slice(&eviction(false, None)).unwrap();
        v["request"]["name"] = json!("");
        assert!(matches!(
            parse(&serde_json::to_vec(&v).unwrap()).unwrap(),
            Parsed::Other { .. }
        ));
    }

    /// What the gate does not read is skipped as it is read: a review whose other fields nest
    /// deeply or run long parses (serde_json's recursion limit still refuses a body nested past
    /// 128 levels, as an error, not a crash).
    #[test]
    fn fields_the_gate_does_not_read_are_skipped_not_held() {
        let mut v: Value = serde_json::from_slice(&eviction(false, None)).unwrap();
        v["request"]["oldObject"] = json!(vec![1u8; 200_000]);
        v["request"]["object"]["metadata"]["labels"] = json!({"a": "b".repeat(100_000)});
        assert!(matches!(
            parse(&serde_json::to_vec(&v).unwrap()).unwrap(),
            Parsed::Pod { .. }
        ));
        let deep = format!(
            "{{\"kind\":\"AdmissionReview\",\"x\":{}{}}}",
            "[".repeat(10_000),
            "]".repeat(10_000)
        );
        assert!(parse(deep.as_bytes()).is_err());
    }

    #[test]
    fn a_field_of_the_wrong_type_is_an_error_not_a_crash() {
        let mut v: Value = serde_json::from_slice(&eviction(false, None)).unwrap();
        v["request"]["name"] = json!(7);
        assert!(parse(&serde_json::to_vec(&v).unwrap()).is_err());
    }

    #[test]
    fn a_name_that_is_no_kubernetes_name_is_an_error() {
        for bad in [
            "etcd-0/../../secrets",
            "etcd-0?x=1",
            "Etcd-0",
            "etcd 0",
            "..",
            ".",
            "etcd..0",
            "-etcd-0",
            "etcd-0.",
        ] {
            let mut v: Value = serde_json::from_slice(&eviction(false, None)).unwrap();
            v["request"]["name"] = json!(bad);
            assert!(parse(&serde_json::to_vec(&v).unwrap()).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_body_that_is_no_review_is_an_error() {
        assert!(parse(b"{}").is_err());
        assert!(parse(b"not json").is_err());
    }

    #[test]
    fn a_refusal_is_a_429_with_the_reason_never_a_5xx() {
        let v = answer(
            "u-1",
            &Verdict::Refuse(
                Code::Blocked(BlockReason::QuorumAtRisk),
                "db/etcd: would leave 1".into(),
            ),
        );
        let r = &v["response"];
        assert_eq!(r["uid"], "u-1");
        assert_eq!(r["allowed"], false);
        assert_eq!(r["status"]["code"], 429);
        assert_eq!(r["status"]["reason"], "TooManyRequests");
        assert_eq!(r["status"]["message"], "db/etcd: would leave 1");
        assert_eq!(
            r["status"]["details"]["causes"][0]["reason"],
            "QuorumAtRisk"
        );
    }

    /// A Retry-After (`retryAfterSeconds`) makes client-go retry the eviction by itself, ten
    /// times, before the evictor sees the refusal: `kubectl drain` would print nothing for
    /// about 50 s and run past its `--timeout`. A PodDisruptionBudget's 429 when it allows no
    /// disruption carries none.
    #[test]
    fn a_refusal_asks_for_no_retry_after_as_a_pdbs_does_not() {
        let v = answer(
            "u-2",
            &Verdict::Refuse(Code::Busy, "db/etcd: being decided".into()),
        );
        let details = &v["response"]["status"]["details"];
        assert!(details.is_object(), "{v}");
        assert!(details.get("retryAfterSeconds").is_none(), "{details}");
    }

    #[test]
    fn an_allowed_eviction_is_answered_allowed_for_its_review() {
        let v = answer("u-9", &Verdict::Allow("ok".into()));
        assert_eq!(v["response"], json!({"uid": "u-9", "allowed": true}));
        assert_eq!(v["apiVersion"], "admission.k8s.io/v1");
    }

    #[test]
    fn a_warn_modes_would_be_refusal_is_allowed_with_it_as_a_warning() {
        let v = Verdict::Would {
            code: Code::Blocked(BlockReason::QuorumAtRisk),
            message: "kubectl-raft gate (warn mode) would refuse this eviction: no".into(),
            warn: true,
        };
        let r = &answer("u-1", &v)["response"];
        assert_eq!(r["allowed"], true);
        assert_eq!(r["warnings"][0], v.message());
    }

    #[test]
    fn an_audit_modes_would_be_refusal_is_allowed_without_a_warning() {
        let v = Verdict::Would {
            code: Code::Blocked(BlockReason::QuorumAtRisk),
            message: "kubectl-raft gate (audit mode) would refuse this eviction: no".into(),
            warn: false,
        };
        let r = &answer("u-1", &v)["response"];
        assert_eq!(r["allowed"], true);
        assert!(r.get("warnings").is_none(), "{r}");
    }
}
