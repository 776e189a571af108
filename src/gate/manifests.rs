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
        let values = [
            ("COMMAND", self.command_line()),
            ("READS_LOCKS", reads_locks),
            ("NETWORK_POLICY", self.network_policy()),
            ("ARGS", args.join(", ")),
            ("IMAGE", yaml_scalar(&self.image)),
            ("REPLICAS", self.replicas.to_string()),
            ("NAMESPACE", yaml_scalar(&self.namespace)),
            ("NS", self.namespace.clone()),
        ];
        fill(TEMPLATE, &values)
    }

    /// The NetworkPolicy: the webhook's port from `allow_from` only, the metrics port from
    /// anywhere; without `allow_from`, the policy commented out with what to fill in.
    fn network_policy(&self) -> String {
        let ns = yaml_scalar(&self.namespace);
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
            .map(|c| format!("    - ipBlock: {{cidr: \"{c}\"}}\n"))
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

/// `template` with each `{{NAME}}` replaced by its value, in one pass: a value is never read
/// again for placeholders. A placeholder without a value is an error (a template and its
/// renderer out of step).
fn fill(template: &str, values: &[(&str, String)]) -> Result<String, String> {
    let mut out = String::with_capacity(template.len() + 1024);
    let mut rest = template;
    while let Some(i) = rest.find("{{") {
        out.push_str(&rest[..i]);
        let after = &rest[i + 2..];
        let end = after
            .find("}}")
            .ok_or("the manifests' template has an unclosed {{")?;
        let name = &after[..end];
        let value = values
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v)
            .ok_or_else(|| {
                format!("the manifests' template names {{{{{name}}}}}, which has no value")
            })?;
        out.push_str(value);
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

/// `s` as a YAML value that every YAML reader (1.1 as kubectl's, 1.2) takes as this string:
/// plain when it cannot be read as anything else, else double-quoted (JSON's quoting is
/// YAML's).
fn yaml_scalar(s: &str) -> String {
    const WORDS: &[&str] = &["y", "yes", "n", "no", "true", "false", "on", "off", "null"];
    let plain = s.starts_with(|c: char| c.is_ascii_alphabetic())
        && !s.ends_with(':')
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/' | ':' | '@'))
        && !WORDS.contains(&s.to_ascii_lowercase().as_str());
    if plain {
        s.to_string()
    } else {
        serde_json::Value::String(s.to_string()).to_string()
    }
}

/// An image reference as the container runtime takes it: `[HOST[:PORT]/]PATH[:TAG][@ALGO:HEX]`
/// (the distribution reference grammar, lower-case path components, a tag of at most 128).
fn is_image_reference(image: &str) -> bool {
    let (rest, digest) = match image.split_once('@') {
        Some((r, d)) => (r, Some(d)),
        None => (image, None),
    };
    if let Some(d) = digest {
        let Some((algo, hex)) = d.split_once(':') else {
            return false;
        };
        let algo_ok = !algo.is_empty()
            && algo
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "+._-".contains(c))
            && algo.starts_with(|c: char| c.is_ascii_alphanumeric());
        if !algo_ok || hex.len() < 32 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
            return false;
        }
    }
    let slash = rest.rfind('/').map_or(0, |i| i + 1);
    let (name, tag) = match rest[slash..].rfind(':') {
        Some(i) => (&rest[..slash + i], Some(&rest[slash + i + 1..])),
        None => (rest, None),
    };
    if let Some(t) = tag {
        let ok = (1..=128).contains(&t.len())
            && t.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
            && t.chars()
                .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c));
        if !ok {
            return false;
        }
    }
    let parts: Vec<&str> = name.split('/').collect();
    let host = parts.len() > 1 && (parts[0].contains(['.', ':']) || parts[0] == "localhost");
    let host_ok = |h: &str| {
        let (h, port) = match h.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (h, None),
        };
        !h.is_empty()
            && h.chars()
                .all(|c| c.is_ascii_alphanumeric() || ".-".contains(c))
            && h.starts_with(|c: char| c.is_ascii_alphanumeric())
            && port.is_none_or(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()))
    };
    let component_ok = |c: &str| {
        !c.is_empty()
            && c.chars()
                .all(|x| x.is_ascii_lowercase() || x.is_ascii_digit() || "._-".contains(x))
            && c.starts_with(|x: char| x.is_ascii_lowercase() || x.is_ascii_digit())
            && c.ends_with(|x: char| x.is_ascii_lowercase() || x.is_ascii_digit())
    };
    let (first, path) = if host {
        (host_ok(parts[0]), &parts[1..])
    } else {
        (true, &parts[..])
    };
    first && !path.is_empty() && path.iter().all(|c| component_ok(c))
}

/// An image reference as a container's `image:` takes it.
fn check_image(image: &str) -> Result<(), String> {
    if is_image_reference(image) {
        Ok(())
    } else {
        Err(format!(
            "--image {image:?} is not an image reference (e.g. registry.example.com/kubectl-raft:v0.1.0, built by krew/release.sh --image and pushed to your registry: README, \"Install\")"
        ))
    }
}

/// Namespaces the gate's must not be: the manifests declare it (Pod Security `restricted`)
/// and `kubectl delete -f` removes it with everything in it.
const NOT_THE_GATES: &[&str] = &[
    // kubectl raft's locks (live::lock::DEFAULT_NAMESPACE, docs/rbac.yaml's).
    "kubectl-raft",
    "default",
    "kube-system",
    "kube-public",
    "kube-node-lease",
];

/// A namespace's name: a DNS-1123 label, and one the gate may own.
fn check_namespace(ns: &str) -> Result<(), String> {
    if !(crate::model::text::is_object_name(ns) && !ns.contains('.') && ns.len() <= 63) {
        return Err(format!(
            "-n {ns:?} is not a namespace name (lower-case letters, digits and '-', at most 63)"
        ));
    }
    if NOT_THE_GATES.contains(&ns) {
        return Err(format!(
            "-n {ns}: the manifests declare the gate's namespace as its own (Pod Security restricted, and `kubectl delete -f` removes it with all it holds); give a namespace of its own (default {DEFAULT_NAMESPACE})"
        ));
    }
    Ok(())
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
            y.contains("  - from:\n    - ipBlock: {cidr: \"10.0.0.0/24\"}\n    - ipBlock: {cidr: \"fd00::/64\"}\n    ports:\n    - {port: 8443}\n"),
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
        for bad in [
            "",
            "a b",
            "x\n  command: [sh]",
            "-x",
            "r/k:v1}",
            "\"q\"",
            "reg/kubectl-raft:",
            "Reg/Kubectl-Raft:v1",
            "r/k@sha256:xyz",
            "r/k:-v1",
        ] {
            let e = ManifestSettings::for_image(bad).render().unwrap_err();
            assert!(e.contains("is not an image reference"), "{bad:?}: {e}");
        }
    }

    #[test]
    fn a_digest_reference_is_taken() {
        let s = ManifestSettings::for_image(
            "r.example:5000/k/kubectl-raft@sha256:0123456789abcdef0123456789abcdef",
        );
        assert!(rendered(&s).contains(
            "image: r.example:5000/k/kubectl-raft@sha256:0123456789abcdef0123456789abcdef\n"
        ));
    }

    #[test]
    fn references_with_a_registry_port_a_tag_and_a_digest_are_taken() {
        for good in [
            "kubectl-raft",
            "localhost:5000/kubectl-raft:v0.1.0",
            "registry.example.com/team/kubectl-raft:v0.1.0-rc.1",
            "ghcr.io/kubectl-raft/kubectl-raft@sha256:0123456789abcdef0123456789abcdef",
            "r.example/k:v1@sha256:0123456789abcdef0123456789abcdef",
        ] {
            assert!(is_image_reference(good), "{good}");
        }
    }

    #[test]
    fn a_value_yaml_would_read_as_something_else_is_quoted() {
        for (v, want) in [
            ("2024", "\"2024\""),
            ("no", "\"no\""),
            ("On", "\"On\""),
            ("null", "\"null\""),
            ("1e3", "\"1e3\""),
            ("::/0", "\"::/0\""),
            ("gates", "gates"),
            ("r.example/k:v1", "r.example/k:v1"),
        ] {
            assert_eq!(yaml_scalar(v), want, "{v}");
        }
    }

    #[test]
    fn a_namespace_of_digits_stays_a_string_in_every_object() {
        let mut s = ManifestSettings::for_image("r/k:v1");
        s.namespace = "2024".into();
        let y = rendered(&s);
        assert!(!y.contains("namespace: 2024"), "{y}");
        assert!(y.contains("namespace: \"2024\""), "{y}");
        for doc in documents(&y) {
            if let Some(ns) = doc["metadata"].get("namespace") {
                assert_eq!(ns, "2024", "{doc}");
            }
        }
    }

    /// Each YAML document of `y`, parsed (comments-only documents skipped).
    fn documents(y: &str) -> Vec<serde_json::Value> {
        y.split("\n---\n")
            .filter(|d| {
                d.lines()
                    .any(|l| !l.trim().is_empty() && !l.starts_with('#'))
            })
            .map(|d| serde_saphyr::from_str(d).unwrap_or_else(|e| panic!("{e}: {d}")))
            .collect()
    }

    #[test]
    fn every_document_parses_and_is_an_object_of_its_kind() {
        let mut s = ManifestSettings::for_image("localhost:5000/kubectl-raft:v1");
        s.allow_from = vec!["::/0".into(), "10.0.0.0/8".into()];
        s.mode = Mode::Audit;
        let docs = documents(&rendered(&s));
        let kinds: Vec<&str> = docs.iter().map(|d| d["kind"].as_str().unwrap()).collect();
        assert_eq!(
            kinds,
            [
                "Namespace",
                "ServiceAccount",
                "ClusterRole",
                "ClusterRoleBinding",
                "Role",
                "RoleBinding",
                "Deployment",
                "Service",
                "PodDisruptionBudget",
                "NetworkPolicy",
                "ValidatingWebhookConfiguration"
            ]
        );
        let policy = &docs[9];
        assert_eq!(
            policy["spec"]["ingress"][0]["from"][0]["ipBlock"]["cidr"],
            "::/0"
        );
        let container = &docs[6]["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(container["image"], "localhost:5000/kubectl-raft:v1");
        assert_eq!(
            container["args"].as_array().unwrap().last().unwrap(),
            "--mode=audit"
        );
    }

    #[test]
    fn a_value_with_a_placeholder_in_it_is_not_filled_again() {
        let out = fill(
            "a: {{A}}\nb: {{B}}\n",
            &[("A", "{{B}}".into()), ("B", "x".into())],
        )
        .unwrap();
        assert_eq!(out, "a: {{B}}\nb: x\n");
    }

    #[test]
    fn the_namespaces_the_gate_must_not_own_are_refused() {
        for ns in ["kubectl-raft", "kube-system", "default"] {
            let mut s = ManifestSettings::for_image("r/k:v1");
            s.namespace = ns.into();
            let e = s.render().unwrap_err();
            assert!(e.contains("a namespace of its own"), "{ns}: {e}");
        }
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
