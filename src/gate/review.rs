//! The API server's AdmissionReview (admission.k8s.io/v1), as far as the gate reads and answers
//! it: an eviction (`CREATE pods/eviction`). Anything else it is sent (a `DELETE pods`, which
//! the kubelet's final deletion and the StatefulSet controller also send) is allowed: the gate
//! decides evictions only. A refusal is a 429 with the gate's sentence and a Retry-After:
//! evictors retry it; a 5xx would make `kubectl drain` give up.

use serde_json::{json, Value};

use super::{Request, Verdict, LOCK_HOLDER_ANNOTATION};

/// How long an evictor is asked to wait before retrying (kubectl drain retries every 5 s).
pub const RETRY_AFTER_SECONDS: u64 = 5;

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

/// Reads a review; an error says what is wrong with it (answered 400 by the server).
pub fn parse(body: &[u8]) -> Result<Parsed, String> {
    let v: Value =
        serde_json::from_slice(body).map_err(|e| format!("not an AdmissionReview: {e}"))?;
    if v["kind"] != "AdmissionReview" {
        return Err(format!("not an AdmissionReview (kind {})", v["kind"]));
    }
    let r = &v["request"];
    let uid = r["uid"]
        .as_str()
        .ok_or("an AdmissionReview without request.uid")?
        .to_string();
    let s = |p: &str| {
        r.pointer(p)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let (op, resource, sub) = (s("/operation"), s("/resource/resource"), s("/subResource"));
    let (namespace, name) = (s("/namespace"), s("/name"));
    let is_eviction = op == "CREATE" && resource == "pods" && sub == "eviction";
    if !is_eviction || namespace.is_empty() || name.is_empty() {
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
    // `kubectl drain --dry-run=server` puts the dry run in the Eviction's own deleteOptions,
    // which the API server honours but does not copy into request.dryRun.
    let in_body = r
        .pointer("/object/deleteOptions/dryRun")
        .and_then(Value::as_array)
        .is_some_and(|d| !d.is_empty());
    let dry_run = r["dryRun"].as_bool().unwrap_or(false) || in_body;
    let lock_holder = r
        .pointer("/object/metadata/annotations")
        .and_then(|a| a.get(LOCK_HOLDER_ANNOTATION))
        .and_then(Value::as_str)
        .map(str::to_string);
    Ok(Parsed::Pod {
        uid,
        request: Request {
            namespace,
            pod: name,
            dry_run,
            lock_holder,
        },
        user: s("/userInfo/username"),
    })
}

/// The AdmissionReview that answers review `uid`.
pub fn answer(uid: &str, verdict: &Verdict) -> Value {
    let response = match verdict {
        Verdict::Allow(_) => json!({"uid": uid, "allowed": true}),
        Verdict::Refuse(code, message) => json!({
            "uid": uid,
            "allowed": false,
            "status": {
                "status": "Failure",
                "code": 429,
                "reason": "TooManyRequests",
                "message": message,
                "details": {
                    "causes": [{"reason": code.reason(), "message": message}],
                    "retryAfterSeconds": RETRY_AFTER_SECONDS
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

    #[test]
    fn a_body_that_is_no_review_is_an_error() {
        assert!(parse(b"{}").is_err());
        assert!(parse(b"not json").is_err());
    }

    #[test]
    fn a_refusal_is_a_429_with_the_reason_and_a_retry_after_never_a_5xx() {
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
        assert_eq!(
            r["status"]["details"]["retryAfterSeconds"],
            RETRY_AFTER_SECONDS
        );
    }

    #[test]
    fn an_allowed_eviction_is_answered_allowed_for_its_review() {
        let v = answer("u-9", &Verdict::Allow("ok".into()));
        assert_eq!(v["response"], json!({"uid": "u-9", "allowed": true}));
        assert_eq!(v["apiVersion"], "admission.k8s.io/v1");
    }
}
