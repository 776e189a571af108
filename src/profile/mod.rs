//! System profiles: how to recognise a Raft system and read its replicas' Raft facts.
//!
//! A profile is data (see `builtin.yaml` and docs/profiles.md). The code here only knows a
//! fixed vocabulary of facts (role, leader, term, indices, ...) and a few ways of reading
//! them out of an HTTP answer (JSON pointer, `key<TAB>value` lines, the status code), so a
//! new system is a new entry, not a new code path.

pub mod annotations;
pub mod extract;
pub mod prune;

use anyhow::{bail, Context, Result};
use k8s_openapi::api::core::v1::{Container, PodSpec};

const BUILTIN: &str = include_str!("builtin.yaml");

pub use crate::model::profile::*;

/// The set of profiles in force: the built-in ones plus the user's.
#[derive(Debug, Clone)]
pub struct Catalog {
    pub profiles: Vec<Profile>,
}

impl Catalog {
    /// A built-in profile's groups section, for tests.
    #[cfg(test)]
    pub fn builtin_groups(system: &str) -> GroupsSpec {
        Catalog::builtin()
            .get(system)
            .and_then(|p| p.groups.clone())
            .expect("a built-in profile with groups")
    }

    pub fn builtin() -> Self {
        let profiles = parse_profiles(BUILTIN).expect("built-in profiles are valid");
        Catalog { profiles }
    }

    /// The built-in profiles with a user's profiles added (`text`, read from `origin`); a
    /// user profile of the same name wins. Reading the file is the caller's business.
    pub fn with_user_profiles(text: &str, origin: &str) -> Result<Self> {
        let mut cat = Self::builtin();
        let user =
            parse_profiles(text).with_context(|| format!("parsing profiles file {origin}"))?;
        for p in user {
            cat.profiles.retain(|q| q.name != p.name);
            cat.profiles.push(p);
        }
        Ok(cat)
    }

    pub fn get(&self, name: &str) -> Option<&Profile> {
        self.profiles
            .iter()
            .find(|p| p.name.eq_ignore_ascii_case(name))
    }

    pub fn names(&self) -> Vec<&str> {
        self.profiles.iter().map(|p| p.name.as_str()).collect()
    }

    pub fn require(&self, name: &str) -> Result<&Profile> {
        match self.get(name) {
            Some(p) => Ok(p),
            None => bail!(
                "unknown system {name:?}: known systems are {}; describe another one with --profiles FILE or annotations (docs/profiles.md)",
                self.names().join(", ")
            ),
        }
    }

    /// The first profile whose detection rules match the pod spec.
    pub fn detect(&self, spec: &PodSpec) -> Option<&Profile> {
        self.profiles.iter().find(|p| p.matches(spec))
    }
}

pub fn parse_profiles(text: &str) -> Result<Vec<Profile>> {
    let profiles: Vec<Profile> =
        serde_saphyr::from_str(text).map_err(|e| anyhow::anyhow!("{e}"))?;
    for p in &profiles {
        p.validate()?;
    }
    Ok(profiles)
}

/// `parse_profiles` for text a tenant wrote (an annotation): parsed within a small budget of
/// YAML work (aliases, nodes, depth), so that a few kilobytes cannot expand into a profile of
/// tens of thousands of requests while being read.
pub fn parse_untrusted_profiles(text: &str) -> Result<Vec<Profile>> {
    let options = serde_saphyr::options! {
        budget: serde_saphyr::budget! {
            max_aliases: 16,
            max_anchors: 16,
            max_nodes: 4_000,
            max_events: 20_000,
            max_depth: 24,
            max_total_scalar_bytes: 64 * 1024,
            max_documents: 1,
        },
    };
    let profiles: Vec<Profile> =
        serde_saphyr::from_str_with_options(text, options).map_err(|e| anyhow::anyhow!("{e}"))?;
    for p in &profiles {
        p.validate()?;
    }
    Ok(profiles)
}

impl Profile {
    pub fn validate(&self) -> Result<()> {
        if self.name.trim().is_empty() {
            bail!("a profile has no name");
        }
        // Printed at the head of every report line: letters, digits, '-', '.', '_' only.
        let name_ok = self.name.len() <= 63
            && self
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-._".contains(c));
        if !name_ok {
            bail!(
                "a profile's name {:?} must be at most 63 letters, digits, '-', '.' or '_'",
                crate::model::text::one_line(&self.name, 40)
            );
        }
        if self.port.names.is_empty() && self.port.numbers.is_empty() {
            bail!("profile {}: `port` needs a name or a number", self.name);
        }
        if self
            .tls_port
            .as_ref()
            .is_some_and(|t| t.names.is_empty() && t.numbers.is_empty())
        {
            bail!("profile {}: `tls_port` needs a name or a number", self.name);
        }
        for r in self.http_requests() {
            let p = &r.path;
            if !p.starts_with('/') {
                bail!("profile {}: path {p:?} must start with '/'", self.name);
            }
            if p.chars()
                .any(|c| c.is_whitespace() || crate::model::text::is_unprintable(c))
            {
                bail!(
                    "profile {}: path {p:?} has a space or a control character: encode it (%20)",
                    self.name
                );
            }
            if escapes_its_pod(p) {
                bail!(
                    "profile {}: path {p:?} has a '.' or '..' segment (or one encoded): a request must stay on the replica's own port",
                    self.name
                );
            }
            if r.max_bytes
                .is_some_and(|m| m > crate::model::MAX_ANSWER_BYTES_CEILING)
            {
                bail!(
                    "profile {}: {p}: max_bytes {} is above the ceiling of {} bytes (64 MiB)",
                    self.name,
                    r.max_bytes.unwrap_or_default(),
                    crate::model::MAX_ANSWER_BYTES_CEILING
                );
            }
        }
        let transfers = self
            .transfer
            .iter()
            .flat_map(|t| t.targeted.iter().chain(t.untargeted.iter()));
        for t in transfers {
            if t.nats.is_none() && !t.request.path.starts_with('/') {
                bail!(
                    "profile {}: a transfer needs an HTTP `request` with a path starting with '/', or a `nats` request",
                    self.name
                );
            }
        }
        if let Some(TransferRequest {
            send_to: SendTo::Leader,
            request,
            nats,
            ..
        }) = self.transfer.as_ref().and_then(|t| t.targeted.as_ref())
        {
            let text = match nats {
                Some(n) => n.body.clone().unwrap_or_default(),
                None => format!("{}{}", request.path, request.body.as_deref().unwrap_or("")),
            };
            if !text.contains("{target_id}") {
                bail!(
                    "profile {}: a targeted transfer sent to the leader must name the target with {{target_id}} in its path or body",
                    self.name
                );
            }
        }
        if let Some(m) = &self.membership {
            if m.size.is_none() && (m.list.is_empty() || !m.list.starts_with('/')) {
                bail!(
                    "profile {}: membership needs `list` (a JSON pointer to the members) or `size`",
                    self.name
                );
            }
        }
        if let Some(g) = &self.groups {
            for (kind, k) in &g.kinds {
                let wildcards = k.each.matches('*').count();
                if !k.each.starts_with('/') || wildcards == 0 || wildcards != k.names.len() {
                    bail!(
                        "profile {}: groups {kind}: `each` must be a pointer with a `*` per entry of `names` ({} `*`, {} names)",
                        self.name,
                        wildcards,
                        k.names.len()
                    );
                }
                if let Some(i) = k.stepdown.as_ref().and_then(|s| s.account) {
                    if i >= k.names.len() {
                        bail!(
                            "profile {}: groups {kind}: stepdown account {i} is not one of the names",
                            self.name
                        );
                    }
                }
            }
        }
        for r in &self.requests {
            for (fact, f) in &r.fields {
                let ways =
                    f.json.is_some() as u8 + f.key.is_some() as u8 + f.status.is_some() as u8;
                if ways != 1 {
                    bail!(
                        "profile {}: request {}: field {fact:?} needs exactly one of json, key, status",
                        self.name,
                        r.name
                    );
                }
            }
        }
        Ok(())
    }

    /// Every HTTP request the profile can send to a replica: checks, fact requests, the
    /// member list, transfers.
    pub fn http_requests(&self) -> Vec<&HttpRequest> {
        let mut out: Vec<&HttpRequest> = self.health.chain().map(|c| &c.request).collect();
        out.extend(
            self.ready
                .iter()
                .flat_map(|c| c.chain())
                .map(|c| &c.request),
        );
        out.extend(self.requests.iter().map(|r| &r.request));
        out.extend(self.membership.iter().map(|m| &m.request));
        out.extend(
            self.transfer
                .iter()
                .flat_map(|t| t.targeted.iter().chain(t.untargeted.iter()))
                .filter(|t| t.nats.is_none())
                .map(|t| &t.request),
        );
        out
    }

    pub fn matches(&self, spec: &PodSpec) -> bool {
        spec.containers.iter().any(|c| self.matches_container(c))
    }

    pub fn matches_container(&self, c: &Container) -> bool {
        let d = &self.detect;
        let image = image_name(c.image.as_deref().unwrap_or_default()).to_ascii_lowercase();
        if d.not_images
            .iter()
            .any(|i| image.contains(&i.to_ascii_lowercase()))
        {
            return false;
        }
        if d.images
            .iter()
            .any(|i| image.contains(&i.to_ascii_lowercase()))
        {
            return true;
        }
        let cmd = c
            .command
            .as_ref()
            .and_then(|v| v.first())
            .or_else(|| c.args.as_ref().and_then(|v| v.first()));
        if let Some(cmd) = cmd {
            let base = cmd.rsplit('/').next().unwrap_or(cmd);
            if d.commands.iter().any(|x| x == base) {
                return true;
            }
        }
        if d.images.is_empty() && d.commands.is_empty() && !d.ports.is_empty() {
            let exposed: Vec<i32> = c.ports.iter().flatten().map(|p| p.container_port).collect();
            return d.ports.iter().all(|p| exposed.contains(p));
        }
        false
    }
}

/// `registry.example:5000/org/etcd:v3.4@sha256:..` -> `etcd`
pub fn image_name(image: &str) -> &str {
    let no_digest = image.split('@').next().unwrap_or(image);
    let last = no_digest.rsplit('/').next().unwrap_or(no_digest);
    last.split(':').next().unwrap_or(last)
}

/// Which container port a spec names on a pod: by name first, then by number; the first
/// number is used even when the pod spec does not declare it (ports need not be declared).
pub fn resolve_port(spec: &PodSpec, port: &PortSpec) -> Option<u16> {
    let declared = spec
        .containers
        .iter()
        .flat_map(|c| c.ports.iter().flatten());
    for name in &port.names {
        if let Some(p) = declared
            .clone()
            .find(|p| p.name.as_deref() == Some(name.as_str()))
        {
            return u16::try_from(p.container_port).ok();
        }
    }
    for n in &port.numbers {
        if declared.clone().any(|p| p.container_port == *n) {
            return u16::try_from(*n).ok();
        }
    }
    port.numbers.first().and_then(|n| u16::try_from(*n).ok())
}

/// Whether the pod declares one of the ports a spec names (by name or by number).
pub fn declares_port(spec: &PodSpec, port: &PortSpec) -> bool {
    spec.containers
        .iter()
        .flat_map(|c| c.ports.iter().flatten())
        .any(|p| {
            p.name.as_ref().is_some_and(|n| port.names.contains(n))
                || port.numbers.contains(&p.container_port)
        })
}

/// The profile as one StatefulSet's pods serve it: `scheme` is its `kubectl-raft.io/scheme`
/// annotation, `spec` its pods' spec (None where none is known: the preStop hook, which asks
/// for https when it has TLS files). Without an annotation, pods that name a port as the
/// profile's TLS port and none as its plain one are served over HTTPS there (Consul's Helm
/// chart with `tls.httpsOnly`, its default, names only `https`; Vault's names its port
/// `https` when TLS is on). With https, the profile's TLS port, unless the pods declare its
/// plain port and not the TLS one (that port then serves TLS); a profile without a TLS port
/// serves TLS on `port` itself (etcd).
pub fn served(mut p: Profile, spec: Option<&PodSpec>, scheme: Option<Scheme>) -> Profile {
    let declares = |port: &PortSpec| spec.is_some_and(|s| declares_port(s, port));
    let names = |port: &PortSpec| {
        spec.is_some_and(|s| {
            let named = PortSpec {
                names: port.names.clone(),
                numbers: vec![],
            };
            declares_port(s, &named)
        })
    };
    let tls_only = p
        .tls_port
        .as_ref()
        .is_some_and(|t| names(t) && !names(&p.port));
    p.scheme = scheme.unwrap_or(if tls_only { Scheme::Https } else { p.scheme });
    if p.scheme == Scheme::Https {
        // The plain port serves TLS only where the pods declare it and not the TLS port.
        let plain_is_tls = |t: &PortSpec| declares(&p.port) && !declares(t);
        if let Some(t) = p.tls_port.clone().filter(|t| !plain_is_tls(t)) {
            p.port = t;
        }
    }
    p
}

/// The check a pod gets: `check`, or where the pod declares none of its ports, its `otherwise`
/// (and so on down the chain; the last is taken as it is).
pub fn check_for<'a>(
    check: &'a CheckSpec,
    default_port: &PortSpec,
    spec: &PodSpec,
) -> &'a CheckSpec {
    check
        .chain()
        .find(|c| {
            c.otherwise.is_none() || declares_port(spec, c.port.as_ref().unwrap_or(default_port))
        })
        .unwrap_or(check)
}

/// Whether a request path could leave the replica's port once joined to a pods/proxy URL:
/// a `.` or `..` segment, written plainly or percent-encoded, before any query.
pub fn escapes_its_pod(path: &str) -> bool {
    let path = path.split(['?', '#']).next().unwrap_or_default();
    let decoded = path
        .replace("%2e", ".")
        .replace("%2E", ".")
        .replace("%2f", "/")
        .replace("%2F", "/")
        .replace("%5c", "/")
        .replace("%5C", "/")
        .replace('\\', "/");
    decoded.split('/').any(|seg| seg == "." || seg == "..")
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ContainerPort;

    fn pod(image: &str, command: &[&str], ports: &[(&str, i32)]) -> PodSpec {
        PodSpec {
            containers: vec![Container {
                name: "main".into(),
                image: Some(image.into()),
                command: Some(command.iter().map(|s| s.to_string()).collect()),
                ports: Some(
                    ports
                        .iter()
                        .map(|(n, p)| ContainerPort {
                            name: Some(n.to_string()),
                            container_port: *p,
                            ..Default::default()
                        })
                        .collect(),
                ),
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    fn consul() -> Profile {
        Catalog::builtin().require("consul").unwrap().clone()
    }

    #[test]
    fn pods_that_declare_only_the_tls_port_are_served_over_https_there() {
        let spec = pod("hashicorp/consul:1.19.2", &["consul"], &[("https", 8501)]);
        let p = served(consul(), Some(&spec), None);
        assert_eq!(p.scheme, Scheme::Https);
        assert_eq!(resolve_port(&spec, &p.port), Some(8501));
    }

    #[test]
    fn pods_that_declare_both_ports_are_read_on_the_plain_one_without_an_annotation() {
        let spec = pod(
            "hashicorp/consul:1.19.2",
            &["consul"],
            &[("http", 8500), ("https", 8501)],
        );
        let p = served(consul(), Some(&spec), None);
        assert_eq!(p.scheme, Scheme::Http);
        assert_eq!(resolve_port(&spec, &p.port), Some(8500));
    }

    #[test]
    fn the_https_annotation_takes_the_tls_port_where_the_pods_declare_it() {
        let spec = pod(
            "hashicorp/consul:1.19.2",
            &["consul"],
            &[("http", 8500), ("https", 8501)],
        );
        let p = served(consul(), Some(&spec), Some(Scheme::Https));
        assert_eq!(p.scheme, Scheme::Https);
        assert_eq!(resolve_port(&spec, &p.port), Some(8501));
    }

    #[test]
    fn the_https_annotation_keeps_the_plain_port_where_no_tls_port_is_declared() {
        // The old advice: the HTTPS port named `http`.
        let spec = pod("hashicorp/consul:1.19.2", &["consul"], &[("http", 8501)]);
        let p = served(consul(), Some(&spec), Some(Scheme::Https));
        assert_eq!(p.scheme, Scheme::Https);
        assert_eq!(resolve_port(&spec, &p.port), Some(8501));
    }

    #[test]
    fn the_http_annotation_keeps_plain_http_beside_a_tls_only_pod() {
        let spec = pod("hashicorp/consul:1.19.2", &["consul"], &[("https", 8501)]);
        let p = served(consul(), Some(&spec), Some(Scheme::Http));
        assert_eq!(p.scheme, Scheme::Http);
    }

    #[test]
    fn the_https_annotation_takes_the_tls_port_where_the_pods_declare_no_port() {
        let spec = pod("hashicorp/consul:1.19.2", &["consul"], &[]);
        let p = served(consul(), Some(&spec), Some(Scheme::Https));
        assert_eq!(resolve_port(&spec, &p.port), Some(8501));
    }

    #[test]
    fn https_without_a_pod_spec_takes_the_profiles_tls_port() {
        let p = served(consul(), None, Some(Scheme::Https));
        assert_eq!(p.port.numbers, vec![8501]);
        let etcd = Catalog::builtin().require("etcd").unwrap().clone();
        let p = served(etcd, None, Some(Scheme::Https));
        assert_eq!((p.scheme, p.port.numbers), (Scheme::Https, vec![2379]));
    }

    #[test]
    fn a_vault_whose_port_is_named_https_is_served_over_https() {
        let vault = Catalog::builtin().require("vault").unwrap().clone();
        let spec = pod("hashicorp/vault:1.17", &["vault"], &[("https", 8200)]);
        let p = served(vault.clone(), Some(&spec), None);
        assert_eq!(p.scheme, Scheme::Https);
        assert_eq!(resolve_port(&spec, &p.port), Some(8200));
        let plain = pod("hashicorp/vault:1.17", &["vault"], &[("http", 8200)]);
        assert_eq!(served(vault, Some(&plain), None).scheme, Scheme::Http);
    }

    #[test]
    fn a_tls_port_with_neither_name_nor_number_is_refused() {
        let mut p = consul();
        p.tls_port = Some(PortSpec::default());
        let e = p.validate().unwrap_err().to_string();
        assert!(e.contains("`tls_port` needs a name or a number"), "{e}");
    }

    #[test]
    fn builtin_profiles_parse_and_validate() {
        let cat = Catalog::builtin();
        assert_eq!(
            cat.names(),
            [
                "etcd",
                "clickhouse-keeper",
                "rqlite",
                "consul",
                "nomad",
                "vault",
                "nats",
                "zookeeper",
                "spurctld"
            ]
        );
    }

    #[test]
    fn recognises_systems_by_image_and_command() {
        let cat = Catalog::builtin();
        let etcd = pod(
            "quay.io/coreos/etcd:v3.4.23",
            &["/usr/bin/etcd"],
            &[("client", 2379)],
        );
        assert_eq!(cat.detect(&etcd).unwrap().name, "etcd");
        let keeper = pod("clickhouse/clickhouse-keeper:26.3", &[], &[]);
        assert_eq!(cat.detect(&keeper).unwrap().name, "clickhouse-keeper");
        let by_cmd = pod("registry.local/custom:1", &["/opt/spur/bin/spurctld"], &[]);
        assert_eq!(cat.detect(&by_cmd).unwrap().name, "spurctld");
        let nginx = pod("nginx:1.27", &["nginx"], &[("http", 80)]);
        assert!(cat.detect(&nginx).is_none());
    }

    #[test]
    fn sidecars_named_after_a_system_are_not_that_system() {
        let cat = Catalog::builtin();
        let name = |spec: &PodSpec| cat.detect(spec).map(|p| p.name.clone());
        assert_eq!(
            name(&pod("hashicorp/consul:1.19.2", &["/bin/sh"], &[])).as_deref(),
            Some("consul")
        );
        // Consul's service-mesh sidecar, injected into an app's StatefulSet.
        assert_eq!(
            name(&pod(
                "hashicorp/consul-dataplane:1.5",
                &["consul-dataplane"],
                &[]
            )),
            None
        );
        assert_eq!(
            name(&pod("hashicorp/vault:1.17", &["vault"], &[])).as_deref(),
            Some("vault")
        );
        assert_eq!(
            name(&pod("hashicorp/vault-k8s:1.4", &["/vault-k8s"], &[])),
            None
        );
    }

    #[test]
    fn port_resolution_prefers_names_then_numbers() {
        let spec = pod("x", &[], &[("http-control", 9182), ("client", 2181)]);
        let keeper = Catalog::builtin()
            .get("clickhouse-keeper")
            .unwrap()
            .port
            .clone();
        assert_eq!(resolve_port(&spec, &keeper), Some(9182));
        let undeclared = pod("x", &[], &[]);
        assert_eq!(resolve_port(&undeclared, &keeper), Some(9123));
    }

    #[test]
    fn a_spurctld_without_its_health_listener_is_checked_by_its_rest_ping() {
        let spur = Catalog::builtin().get("spurctld").unwrap().clone();
        let snapshot = pod("spurctld", &[], &[("grpc", 6817), ("api", 6820)]);
        let check = check_for(&spur.health, &spur.port, &snapshot);
        assert_eq!(check.request.path, "/api/v1/ping");
        let port = check.port.as_ref().unwrap();
        assert_eq!(resolve_port(&snapshot, port), Some(6820));
    }

    #[test]
    fn a_spurctld_with_its_health_listener_is_checked_there() {
        let spur = Catalog::builtin().get("spurctld").unwrap().clone();
        let seed = pod("spurctld", &[], &[("api", 6820), ("health", 6823)]);
        assert_eq!(
            check_for(&spur.health, &spur.port, &seed).request.path,
            "/healthz"
        );
        let by_number = pod("spurctld", &[], &[("x", 6823)]);
        assert_eq!(
            check_for(&spur.ready.clone().unwrap(), &spur.port, &by_number)
                .request
                .path,
            "/readyz"
        );
    }

    #[test]
    fn image_names_lose_registry_tag_and_digest() {
        assert_eq!(image_name("reg:5000/org/etcd:v3@sha256:abc"), "etcd");
        assert_eq!(image_name("etcd"), "etcd");
    }

    #[test]
    fn user_profiles_replace_builtins_of_the_same_name() {
        let mine = "- name: etcd\n  description: mine\n  port: {numbers: [1234]}\n  health: {request: {path: /ok}}\n- name: kv\n  port: {numbers: [80]}\n  health: {request: {path: /h}}\n";
        let cat = Catalog::with_user_profiles(mine, "mine.yaml").unwrap();
        let etcd: Vec<&Profile> = cat.profiles.iter().filter(|p| p.name == "etcd").collect();
        assert_eq!(etcd.len(), 1, "one etcd profile, the user's");
        assert_eq!(etcd[0].port.numbers, vec![1234]);
        assert!(cat.get("kv").is_some());
        assert!(cat.get("zookeeper").is_some(), "other built-ins stay");
        let err = Catalog::with_user_profiles("- name: [", "bad.yaml").unwrap_err();
        assert!(format!("{err:#}").contains("bad.yaml"), "{err:#}");
    }

    /// The YAML blocks of docs/profiles.md: the annotations example describes a system, the
    /// profile format example parses and validates.
    #[test]
    fn the_documented_examples_parse() {
        let doc = include_str!("../../docs/profiles.md");
        let blocks: Vec<&str> = doc
            .split("```yaml\n")
            .skip(1)
            .map(|b| b.split("```").next().unwrap())
            .collect();
        assert_eq!(blocks.len(), 2, "docs/profiles.md has two YAML examples");
        #[derive(serde::Deserialize)]
        struct Meta {
            metadata: Annotated,
        }
        #[derive(serde::Deserialize)]
        struct Annotated {
            annotations: std::collections::BTreeMap<String, String>,
        }
        let meta: Meta = serde_saphyr::from_str(blocks[0]).expect("annotations example parses");
        match annotations::describe("mydb", &meta.metadata.annotations).unwrap() {
            annotations::Described::Profile(p) => {
                assert_eq!(p.port.numbers, vec![8080]);
                assert_eq!(p.health.request.path, "/healthz");
            }
            _ => panic!("the annotations describe a profile"),
        }
        let profiles = parse_profiles(blocks[1]).expect("profile example parses and validates");
        assert_eq!(profiles[0].name, "mydb");
    }

    #[test]
    fn bad_profiles_are_refused() {
        let bad = "- name: x\n  port: {}\n  health: {request: {path: /h}}\n";
        assert!(parse_profiles(bad)
            .unwrap_err()
            .to_string()
            .contains("port"));
        let unknown_field =
            "- name: x\n  port: {numbers: [1]}\n  health: {request: {path: /h}}\n  colour: red\n";
        assert!(parse_profiles(unknown_field).is_err());
    }

    #[test]
    fn groups_need_a_name_per_wildcard() {
        let groups = |each: &str, names: &str| {
            format!(
                "- name: x\n  port: {{numbers: [1]}}\n  health: {{request: {{path: /h}}}}\n  groups:\n    request: {{path: /g}}\n    kinds:\n      s: {{each: \"{each}\", names: {names}, leader: /l}}\n"
            )
        };
        assert!(parse_profiles(&groups("/a/*/b/*", "[/n, /n]")).is_ok());
        let e = parse_profiles(&groups("/a/*/b/*", "[/n]"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("a `*` per entry of `names` (2 `*`, 1 names)"),
            "{e}"
        );
        assert!(parse_profiles(&groups("/a", "[]")).is_err(), "no wildcard");
    }
}
