//! `kubectl raft gate manifests`: what installs the gate (namespace, roles, Deployment, PDB,
//! Service, NetworkPolicy, webhook), rendered from one template (`manifests.yaml`) for an image,
//! a namespace, a mode and the control plane's addresses. docs/gate.yaml is this rendering for
//! the release image, and a test keeps them equal.

use super::Mode;

/// The template: docs/gate.yaml with its variable parts as `{{NAME}}`.
const TEMPLATE: &str = include_str!("manifests.yaml");

/// The gate's namespace when none is given (the one docs/rbac.yaml's
/// kubectl-raft-gate-reads-locks binds).
pub const DEFAULT_NAMESPACE: &str = "kubectl-raft-gate";

/// The port the gate serves its webhook on (HTTPS), and its metrics (plain HTTP).
pub const WEBHOOK_PORT: u16 = 8443;
pub const METRICS_PORT: u16 = 9090;

/// The fewest replicas: with one, its PDB (minAvailable 1) would block the drain of its node
/// for ever, and without the PDB every eviction of an opted-in namespace fails while it
/// restarts.
pub const MIN_REPLICAS: u16 = 2;

/// What the manifests are rendered for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestSettings {
    /// The image reference (`REGISTRY/kubectl-raft:v0.1.0`, or by digest).
    pub image: String,
    pub namespace: String,
    pub mode: Mode,
    pub replicas: u16,
    /// CIDRs the API server calls from, already checked (`a.b.c.d/n`, `x::/n`): the
    /// NetworkPolicy lets only them reach the webhook's port. Empty: no policy (the port is
    /// open to every pod), said in the output.
    pub allow_from: Vec<String>,
}

impl ManifestSettings {
    /// The release's defaults for `image`.
    pub fn for_image(image: &str) -> Self {
        ManifestSettings {
            image: image.into(),
            namespace: DEFAULT_NAMESPACE.into(),
            mode: Mode::Enforce,
            replicas: MIN_REPLICAS,
            allow_from: Vec::new(),
        }
    }

    /// The command line that prints these manifests, as the output's first comment says it.
    pub fn command_line(&self) -> String {
        let mut c = format!("kubectl raft gate manifests --image {}", self.image);
        if self.namespace != DEFAULT_NAMESPACE {
            c += &format!(" -n {}", self.namespace);
        }
        if self.mode != Mode::Enforce {
            c += &format!(" --mode {}", self.mode.as_str());
        }
        if self.replicas != MIN_REPLICAS {
            c += &format!(" --replicas {}", self.replicas);
        }
        for cidr in &self.allow_from {
            c += &format!(" --allow-from {cidr}");
        }
        c
    }

    /// The manifests, or what is wrong with the settings (each says what to give instead).
    pub fn render(&self) -> Result<String, String> {
        check_image(&self.image)?;
        check_namespace(&self.namespace)?;
        if self.replicas < MIN_REPLICAS {
            return Err(format!(
                "--replicas {}: the gate needs at least {MIN_REPLICAS} (with one, its PodDisruptionBudget blocks every drain of its node, and while it restarts every eviction of an opted-in namespace fails)",
                self.replicas
            ));
        }
        for cidr in &self.allow_from {
            // The edge checks the addresses; this keeps anything else out of the YAML.
            if cidr.is_empty()
                || !cidr
                    .chars()
                    .all(|c| c.is_ascii_hexdigit() || matches!(c, '.' | ':' | '/'))
            {
                return Err(format!("--allow-from {cidr:?} is not a CIDR"));
            }
        }
        let mut args = vec![
            "gate".to_string(),
            "serve".into(),
            format!("--namespace={}", self.namespace),
            "--via=direct".into(),
            format!("--metrics-listen=0.0.0.0:{METRICS_PORT}"),
        ];
        if self.mode != Mode::Enforce {
            args.push(format!("--mode={}", self.mode.as_str()));
        }
        let reads_locks = if self.namespace == DEFAULT_NAMESPACE {
            String::new()
        } else {
            format!(
                "\n# That RoleBinding names the ServiceAccount of {DEFAULT_NAMESPACE}; for this one, in {ns}:\n#   kubectl -n kubectl-raft create rolebinding kubectl-raft-gate-reads-locks-{ns} \\\n#     --role=kubectl-raft-gate-reads-locks --serviceaccount={ns}:kubectl-raft-gate",
                ns = self.namespace
            )
        };
        Ok(TEMPLATE
            .replace("{{COMMAND}}", &self.command_line())
            .replace("{{READS_LOCKS}}", &reads_locks)
            .replace("{{NETWORK_POLICY}}", &self.network_policy())
            .replace("{{ARGS}}", &args.join(", "))
            .replace("{{IMAGE}}", &self.image)
            .replace("{{REPLICAS}}", &self.replicas.to_string())
            .replace("{{NAMESPACE}}", &self.namespace))
    }

    /// The NetworkPolicy: the webhook's port from `allow_from` only, the metrics port from
    /// anywhere; without `allow_from`, the policy commented out with what to fill in.
    fn network_policy(&self) -> String {
        let ns = &self.namespace;
        if self.allow_from.is_empty() {
            return format!(
                "# Recommended: only the control plane may call the gate's webhook port. Its addresses
# differ per platform (docs/gate.md, \"Only the API server\"): print these manifests again with
# --allow-from CIDR (repeatable), which writes this policy.
# apiVersion: networking.k8s.io/v1
# kind: NetworkPolicy
# metadata:
#   name: kubectl-raft-gate
#   namespace: {ns}
# spec:
#   podSelector:
#     matchLabels: {{app.kubernetes.io/name: kubectl-raft-gate}}
#   policyTypes: [Ingress]
#   ingress:
#   - from:
#     - ipBlock: {{cidr: 10.0.0.0/24}}   # your control plane
#     ports:
#     - {{port: {WEBHOOK_PORT}}}
#   - ports:
#     - {{port: {METRICS_PORT}}}
"
            );
        }
        let blocks: String = self
            .allow_from
            .iter()
            .map(|c| format!("    - ipBlock: {{cidr: {c}}}\n"))
            .collect();
        format!(
            "# Only the control plane (--allow-from) may call the gate's webhook port; its metrics port
# is open to every pod (your Prometheus). A wrong address here makes the API server's calls
# fail: every eviction of an opted-in namespace is then answered 500 (docs/gate.md).
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: kubectl-raft-gate
  namespace: {ns}
spec:
  podSelector:
    matchLabels: {{app.kubernetes.io/name: kubectl-raft-gate}}
  policyTypes: [Ingress]
  ingress:
  - from:
{blocks}    ports:
    - {{port: {WEBHOOK_PORT}}}
  - ports:
    - {{port: {METRICS_PORT}}}
"
        )
    }
}

/// An image reference as a container's `image:` takes it, and nothing that could leave the
/// YAML scalar it is put in.
fn check_image(image: &str) -> Result<(), String> {
    let ok = !image.is_empty()
        && !image.starts_with(['-', '.', '/', ':', '@'])
        && image
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/' | ':' | '@'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "--image {image:?} is not an image reference (e.g. registry.example.com/kubectl-raft:v0.1.0, built by krew/release.sh --image and pushed to your registry: README, \"Install\")"
        ))
    }
}

/// A namespace's name: a DNS-1123 label.
fn check_namespace(ns: &str) -> Result<(), String> {
    if crate::model::text::is_object_name(ns) && !ns.contains('.') && ns.len() <= 63 {
        Ok(())
    } else {
        Err(format!(
            "-n {ns:?} is not a namespace name (lower-case letters, digits and '-', at most 63)"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rendered(s: &ManifestSettings) -> String {
        s.render().expect("renders")
    }

    #[test]
    fn nothing_of_the_template_is_left_unfilled() {
        let mut s = ManifestSettings::for_image("r.example/kubectl-raft:v1");
        s.namespace = "gates".into();
        s.allow_from = vec!["10.0.0.0/24".into()];
        let y = rendered(&s);
        assert!(!y.contains("{{"), "{y}");
        assert!(!y.contains("kubectl-raft-gate\n  namespace: kubectl-raft-gate"));
    }

    #[test]
    fn every_namespaced_object_is_in_the_given_namespace() {
        let mut s = ManifestSettings::for_image("r.example/kubectl-raft:v1");
        s.namespace = "gates".into();
        let y = rendered(&s);
        assert!(!y.contains("namespace: kubectl-raft-gate"), "{y}");
        assert!(y.contains("--namespace=gates"));
        assert!(y.contains("--serviceaccount=gates:kubectl-raft-gate"));
    }

    #[test]
    fn a_trial_mode_is_in_the_containers_args() {
        let mut s = ManifestSettings::for_image("r.example/kubectl-raft:v1");
        s.mode = Mode::Warn;
        assert!(rendered(&s).contains(
            "args: [gate, serve, --namespace=kubectl-raft-gate, --via=direct, --metrics-listen=0.0.0.0:9090, --mode=warn]"
        ));
        assert!(s.command_line().ends_with("--mode warn"));
    }

    #[test]
    fn enforce_names_no_mode() {
        let y = rendered(&ManifestSettings::for_image("r.example/kubectl-raft:v1"));
        assert!(!y.contains("--mode="), "{y}");
    }

    #[test]
    fn allow_from_writes_a_network_policy_for_the_webhook_port() {
        let mut s = ManifestSettings::for_image("r.example/kubectl-raft:v1");
        s.allow_from = vec!["10.0.0.0/24".into(), "fd00::/64".into()];
        let y = rendered(&s);
        assert!(y.contains("\nkind: NetworkPolicy\n"), "{y}");
        assert!(
            y.contains("  - from:\n    - ipBlock: {cidr: 10.0.0.0/24}\n    - ipBlock: {cidr: fd00::/64}\n    ports:\n    - {port: 8443}\n"),
            "{y}"
        );
    }

    #[test]
    fn without_allow_from_the_network_policy_is_only_a_comment() {
        let y = rendered(&ManifestSettings::for_image("r.example/kubectl-raft:v1"));
        assert!(!y.contains("\nkind: NetworkPolicy"), "{y}");
        assert!(y.contains("# kind: NetworkPolicy"));
    }

    #[test]
    fn an_image_that_would_leave_its_scalar_is_refused() {
        for bad in ["", "a b", "x\n  command: [sh]", "-x", "r/k:v1}", "\"q\""] {
            let e = ManifestSettings::for_image(bad).render().unwrap_err();
            assert!(e.contains("is not an image reference"), "{bad:?}: {e}");
        }
    }

    #[test]
    fn a_digest_reference_is_taken() {
        let s = ManifestSettings::for_image("r.example:5000/k/kubectl-raft@sha256:0123abcd");
        assert!(rendered(&s).contains("image: r.example:5000/k/kubectl-raft@sha256:0123abcd\n"));
    }

    #[test]
    fn a_namespace_that_is_not_a_label_is_refused() {
        let mut s = ManifestSettings::for_image("r/k:v1");
        s.namespace = "a.b".into();
        assert!(s.render().unwrap_err().contains("is not a namespace name"));
    }

    #[test]
    fn one_replica_is_refused() {
        let mut s = ManifestSettings::for_image("r/k:v1");
        s.replicas = 1;
        assert!(s.render().unwrap_err().contains("at least 2"));
    }

    #[test]
    fn a_cidr_with_yaml_in_it_is_refused() {
        let mut s = ManifestSettings::for_image("r/k:v1");
        s.allow_from = vec!["10.0.0.0/8}, {cidr: 0.0.0.0/0".into()];
        assert!(s.render().unwrap_err().contains("is not a CIDR"));
    }
}
