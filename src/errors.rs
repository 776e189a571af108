//! Turning Kubernetes API failures into messages that say what happened and what to do.

use std::error::Error;

use anyhow::anyhow;

/// An error the command has already explained on stderr: exit 1, print nothing more.
#[derive(Debug)]
pub struct Reported;

impl std::fmt::Display for Reported {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("reported")
    }
}

impl Error for Reported {}

/// What a survey was asked to look in, or for, and did not find. Typed, so that a caller that
/// looks again (the drain, once a cluster's namespace or StatefulSet was deleted) tells "gone"
/// from every other failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotFound {
    Namespace(String),
    Node(String),
    /// A StatefulSet asked for by name, and the names its namespace does have.
    StatefulSet {
        name: String,
        namespace: String,
        known: Vec<String>,
    },
}

impl std::fmt::Display for NotFound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotFound::Namespace(n) => write!(
                f,
                "namespace {n:?} not found (list them with `kubectl get namespaces`)"
            ),
            NotFound::Node(n) => write!(
                f,
                "node {n:?} not found (list them with `kubectl get nodes`)"
            ),
            NotFound::StatefulSet {
                name,
                namespace,
                known,
            } if known.is_empty() => write!(
                f,
                "statefulset {name:?} not found in namespace {namespace:?} (it has none)"
            ),
            NotFound::StatefulSet {
                name,
                namespace,
                known,
            } => write!(
                f,
                "statefulset {name:?} not found in namespace {namespace:?} (it has: {})",
                known.join(", ")
            ),
        }
    }
}

impl Error for NotFound {}

/// A cause chain on one line, without the repeats some libraries produce when an error
/// already quotes its source ("read x: No such file: No such file"). The one formatter for
/// every error the plugin prints.
pub fn join_causes<'a>(causes: impl Iterator<Item = &'a (dyn Error + 'static)>) -> String {
    let mut parts: Vec<String> = vec![];
    for cause in causes {
        let msg = cause.to_string();
        if !parts.last().is_some_and(|prev| prev.ends_with(&msg)) {
            parts.push(msg);
        }
    }
    parts.join(": ")
}

/// `join_causes` over an error and its sources.
pub fn chain(e: &(dyn Error + 'static)) -> String {
    let mut causes = vec![e];
    let mut cur = e;
    while let Some(c) = cur.source() {
        causes.push(c);
        cur = c;
    }
    join_causes(causes.into_iter())
}

/// `join_causes` over an anyhow error's context chain.
pub fn anyhow_chain(e: &anyhow::Error) -> String {
    join_causes(e.chain())
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_statefulset_names_the_ones_there_are() {
        let missing = |known: &[&str]| NotFound::StatefulSet {
            name: "nope".into(),
            namespace: "db".into(),
            known: known.iter().map(|k| k.to_string()).collect(),
        };
        assert_eq!(
            missing(&["etcd", "web"]).to_string(),
            "statefulset \"nope\" not found in namespace \"db\" (it has: etcd, web)"
        );
        assert_eq!(
            missing(&[]).to_string(),
            "statefulset \"nope\" not found in namespace \"db\" (it has none)"
        );
    }

    #[test]
    fn error_chains_read_as_one_line_without_repeats() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "No such file");
        let e = anyhow::Error::new(io)
            .context("read x: No such file")
            .context("cannot load the kubeconfig");
        assert_eq!(
            anyhow_chain(&e),
            "cannot load the kubeconfig: read x: No such file"
        );
    }
}
