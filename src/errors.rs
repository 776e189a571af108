//! Turning Kubernetes API failures into messages that say what happened and what to do.

use anyhow::anyhow;

pub fn status_of(e: &kube::Error) -> Option<&kube::core::Status> {
    match e {
        kube::Error::Api(s) => Some(s),
        _ => None,
    }
}

pub fn is_not_found(e: &kube::Error) -> bool {
    status_of(e).is_some_and(|s| s.code == 404)
}

pub fn is_forbidden(e: &kube::Error) -> bool {
    status_of(e).is_some_and(|s| s.code == 403)
}

/// Wraps an API error with the verb and resource that failed; an RBAC refusal names the
/// permission to grant, an unreachable API server says so.
pub fn api_context(e: kube::Error, verb: &str, resource: &str, where_: &str) -> anyhow::Error {
    let place = if where_.is_empty() {
        String::new()
    } else {
        format!(" {where_}")
    };
    match status_of(&e) {
        Some(s) if s.code == 403 => anyhow!(
            "forbidden: cannot {verb} {resource}{place} ({}); grant `{verb}` on `{resource}` to this user \
             (check with `kubectl auth can-i {verb} {resource}`)",
            s.message
        ),
        Some(s) if s.code == 401 => anyhow!(
            "unauthorized: the API server refused the credentials of this kubeconfig ({}); log in again or pick another --context",
            s.message
        ),
        Some(s) => anyhow!("cannot {verb} {resource}{place}: {} ({})", s.message, s.code),
        None => anyhow::Error::new(e).context(format!(
            "cannot {verb} {resource}{place}: the API server did not answer (check --context, --kubeconfig and the network)"
        )),
    }
}
