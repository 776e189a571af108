//! Credentials for the systems' own APIs (Consul/Nomad/Vault tokens, NATS users): variables
//! read from a Secret or an env file, layered over the process environment. A Secret is named
//! by `--credentials-secret` or by the annotation `kubectl-raft.io/credentials-secret` on the
//! StatefulSet (or its pods), and read from the cluster's namespace; an env file by
//! `--credentials-file` (`KEY=VALUE` lines, the format of `kubectl create secret
//! --from-env-file`). Values are sent to the system, never printed: `Vars` has no Debug or
//! Display that shows them.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use tokio::sync::OnceCell;

use crate::errors::api_context;
use crate::model::ClusterTarget;
use crate::tls::{Tls, TlsChoices, TlsMaterial};

/// Variables from a Secret and/or a file, over the environment where that is allowed: `get`
/// asks them in that order. The user's own credentials (the environment and
/// `--credentials-file`) are read only for clusters the user named or with
/// `--credentials-from-env` (docs/security.md): a tenant's StatefulSet must not receive the
/// admin's tokens because it claims to be Consul.
#[derive(Clone, Default)]
pub struct Vars {
    values: BTreeMap<String, String>,
    /// Where `values` came from ("Secret db/nats-ops over file ops.env"), for messages.
    pub source: Option<String>,
    /// The names whose values came from a Secret (whose writer may not be the user).
    from_secret: BTreeSet<String>,
    /// Whether the process environment is read for what `values` lacks.
    pub env: bool,
}

impl std::fmt::Debug for Vars {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vars")
            .field("names", &self.values.keys().collect::<Vec<_>>())
            .field("source", &self.source)
            .field("env", &self.env)
            .finish()
    }
}

impl Vars {
    pub fn new(values: BTreeMap<String, String>, source: impl Into<String>) -> Self {
        Vars {
            values,
            source: Some(source.into()),
            from_secret: BTreeSet::new(),
            env: false,
        }
    }

    /// The process environment alone (a cluster the user named, `yield --local` in its pod).
    pub fn environment() -> Self {
        Vars {
            env: true,
            ..Default::default()
        }
    }

    /// The same values, reading the environment for what they lack, or not.
    pub fn with_env(mut self, env: bool) -> Self {
        self.env = env;
        self
    }

    /// These values over `under`'s (a Secret's over a file's): each name from the first that
    /// has it; the environment as `self` says.
    pub fn over(mut self, under: &Vars) -> Self {
        for (k, v) in &under.values {
            if !self.values.contains_key(k) {
                self.values.insert(k.clone(), v.clone());
                if under.from_secret.contains(k) {
                    self.from_secret.insert(k.clone());
                }
            }
        }
        self.source = match (self.source.take(), &under.source) {
            (Some(a), Some(b)) => Some(format!("{a} over {b}")),
            (a, b) => a.or_else(|| b.clone()),
        };
        self
    }

    /// The variable's value from the Secret or file, else (where allowed) from the
    /// environment; empty is unset.
    pub fn get(&self, name: &str) -> Option<String> {
        self.values
            .get(name)
            .cloned()
            .or_else(|| self.env.then(|| std::env::var(name).ok()).flatten())
            .filter(|v| !v.is_empty())
    }

    /// Whether `name`'s value came from a Secret: content to use, never a path to open (a
    /// Secret's writer could name the admin's own files).
    pub fn is_from_secret(&self, name: &str) -> bool {
        self.from_secret.contains(name) && self.values.get(name).is_some_and(|v| !v.is_empty())
    }

    /// "the environment", "Secret db/nats-ops (over the environment)", "Secret db/nats-ops",
    /// for messages.
    pub fn describe(&self) -> String {
        match (&self.source, self.env) {
            (None, true) => "the environment".into(),
            (None, false) => "nowhere (your environment and --credentials-file are read only for clusters you name, or with --credentials-from-env)".into(),
            (Some(s), true) => format!("{s} (over the environment)"),
            (Some(s), false) => s.clone(),
        }
    }
}

pub use crate::model::text::is_object_name;

/// `KEY=VALUE` lines as `kubectl create secret --from-env-file` reads them: blank lines and
/// lines starting with `#` are skipped, the value is everything after the first `=`, kept as
/// written (no quotes removed).
pub fn parse_env_file(text: &str) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim_start();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            return Err(format!(
                "line {}: expected KEY=VALUE (the format of kubectl create secret --from-env-file)",
                n + 1
            ));
        };
        let key = key.trim();
        if key.is_empty()
            || !key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c))
        {
            return Err(format!(
                "line {}: {key:?} is not a variable name (letters, digits, _ - .)",
                n + 1
            ));
        }
        out.insert(key.to_string(), value.to_string());
    }
    Ok(out)
}

/// The variables of an env file (--credentials-file).
pub fn read_file(path: &Path) -> Result<Vars> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the credentials file {}", path.display()))?;
    let values = parse_env_file(&text)
        .map_err(|e| anyhow::anyhow!("the credentials file {}: {e}", path.display()))?;
    Ok(Vars::new(values, format!("file {}", path.display())))
}

/// The label a Secret must carry for a StatefulSet's annotation to make the plugin use it:
/// the Secret's own writer agrees to its keys being sent to the systems that name it. (The
/// annotation's writer, a tenant, could otherwise name a Secret of their namespace they may
/// not read themselves, and have the admin read it and send it to their pod.)
pub const SECRET_LABEL: &str = "kubectl-raft.io/credentials";

/// Where clusters' TLS comes from besides their annotation: a Secret the user named, the
/// user's own files (for clusters the user named, or all with --credentials-from-env), and
/// the choices for every cluster.
#[derive(Debug, Clone, Default)]
pub struct TlsSettings {
    /// --tls-secret: the Secret of that name in each cluster's namespace.
    pub secret: Option<String>,
    /// --tls-ca, --tls-cert, --tls-key.
    pub ca: Option<PathBuf>,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    pub choices: TlsChoices,
}

/// The keys of a TLS Secret: a `kubernetes.io/tls` Secret's, with cert-manager's CA.
pub const TLS_CA_KEY: &str = "ca.crt";
pub const TLS_CERT_KEY: &str = "tls.crt";
pub const TLS_KEY_KEY: &str = "tls.key";

impl TlsSettings {
    /// Whether the user's own files ask for TLS (a CA, a client certificate): `yield --local`
    /// then speaks HTTPS to its replica. `--tls-skip-verify` alone changes no scheme.
    pub fn gives_tls(&self) -> bool {
        self.ca.is_some() || self.cert.is_some()
    }

    /// The user's own TLS files, read now: a CA, a client certificate and key.
    pub fn read_files(&self) -> Result<Option<TlsMaterial>> {
        if self.ca.is_none() && self.cert.is_none() && self.key.is_none() {
            return Ok(None);
        }
        let read = |p: &Option<PathBuf>, what: &str| -> Result<Option<Vec<u8>>> {
            p.as_ref()
                .map(|p| {
                    std::fs::read(p).with_context(|| format!("reading {what} {}", p.display()))
                })
                .transpose()
        };
        let named: Vec<String> = [
            ("--tls-ca", &self.ca),
            ("--tls-cert", &self.cert),
            ("--tls-key", &self.key),
        ]
        .iter()
        .filter_map(|(f, p)| p.as_ref().map(|p| format!("{f} {}", p.display())))
        .collect();
        let material = TlsMaterial {
            ca: read(&self.ca, "the CA file (--tls-ca)")?,
            cert: read(&self.cert, "the client certificate file (--tls-cert)")?,
            key: read(&self.key, "the client key file (--tls-key)")?,
            source: format!("files {}", named.join(" ")),
        };
        // Checked now: a bad file is the user's, said once before anything is touched.
        Tls::new(Some(&material), &self.choices).map_err(|e| anyhow::anyhow!(e))?;
        Ok(Some(material))
    }
}

/// Where a cluster's credentials come from, set up once from the flags; Secrets are read
/// once each and kept for the run.
pub struct CredentialSource {
    client: kube::Client,
    /// --credentials-secret: the Secret of that name in each cluster's namespace.
    secret_flag: Option<String>,
    /// --credentials-file, read at start: the user's own, like the environment.
    file: Option<Vars>,
    /// --credentials-from-env: the user's own credentials (the environment and the file) for
    /// every cluster, named or not.
    from_env: bool,
    /// One cell per (namespace, Secret): surveys of clusters that name the same Secret wait
    /// for one read; a failed read leaves the cell empty, so the next asks again.
    cache: Mutex<HashMap<SecretKey, Arc<OnceCell<Arc<ReadSecret>>>>>,
    /// --tls-secret and the choices for every cluster.
    tls: TlsSettings,
    /// --tls-ca, --tls-cert, --tls-key, read at start: the user's own, like the environment.
    tls_files: Option<TlsMaterial>,
}

/// A Secret by namespace and name.
type SecretKey = (String, String);

/// A Secret as read: its variables, and whether it carries [`SECRET_LABEL`].
struct ReadSecret {
    vars: Vars,
    labelled: bool,
    /// Its values as bytes (a TLS Secret's), all of them.
    raw: BTreeMap<String, Vec<u8>>,
    /// A key whose value is not text, if any: an error for credentials only (a TLS Secret from
    /// cert-manager may hold a binary keystore beside its PEMs).
    not_text: Option<String>,
}

impl CredentialSource {
    pub fn new(
        client: kube::Client,
        secret_flag: Option<String>,
        file: Option<&Path>,
        from_env: bool,
    ) -> Result<Self> {
        let file = file.map(read_file).transpose()?;
        Ok(CredentialSource {
            client,
            secret_flag,
            file,
            from_env,
            cache: Mutex::new(HashMap::new()),
            tls: TlsSettings::default(),
            tls_files: None,
        })
    }

    /// The same source with TLS for the clusters' replicas: `tls`'s files are read now.
    pub fn with_tls(mut self, tls: TlsSettings) -> Result<Self> {
        self.tls_files = tls.read_files()?;
        self.tls = tls;
        Ok(self)
    }

    /// The cluster's TLS: the Secret `--tls-secret` names; else, for a cluster the user
    /// named or with --credentials-from-env, the user's own files (--tls-ca, ...); else the
    /// Secret its annotation kubectl-raft.io/tls-secret names when that Secret is labelled
    /// [`SECRET_LABEL`]; else none (its HTTPS ports are then refused on the routes that
    /// verify, unless --tls-skip-verify).
    pub async fn tls_for_cluster(&self, target: &ClusterTarget) -> Result<Arc<Tls>> {
        let own = self.from_env || target.named;
        let material = match (&self.tls.secret, &self.tls_files, &target.tls_secret) {
            (Some(n), _, _) => Some(self.tls_secret(target, n, "--tls-secret", false).await?),
            // The user's own files, for a cluster the user named: over its annotation.
            (None, Some(files), _) if own => Some(files.clone()),
            (None, _, Some(n)) => {
                let why = format!(
                    "the annotation {} on {}/{}",
                    crate::profile::annotations::TLS_SECRET,
                    target.namespace,
                    target.name
                );
                Some(self.tls_secret(target, n, &why, true).await?)
            }
            (None, _, None) => None,
        };
        Tls::new(material.as_ref(), &self.tls.choices)
            .map(Arc::new)
            .map_err(|e| anyhow::anyhow!(e))
    }

    async fn tls_secret(
        &self,
        target: &ClusterTarget,
        name: &str,
        why: &str,
        from_annotation: bool,
    ) -> Result<TlsMaterial> {
        if !is_object_name(name) {
            anyhow::bail!(
                "{name:?} (named by {why}) is not a Secret name: lower-case letters, digits, '-' and '.', at most 253 characters; nothing was read"
            );
        }
        let read = self.secret(&target.namespace, name, why).await?;
        if from_annotation && !read.labelled {
            anyhow::bail!(
                "the TLS Secret {}/{name} (named by {why}) is not labelled {SECRET_LABEL}=true, so it was not used: a StatefulSet's annotation may name only a Secret whose own writer agreed to its use (`kubectl label secret {name} -n {} {SECRET_LABEL}=true`), or name it yourself with --tls-secret",
                target.namespace,
                target.namespace
            );
        }
        let get = |k: &str| read.raw.get(k).cloned().filter(|v| !v.is_empty());
        let material = TlsMaterial {
            ca: get(TLS_CA_KEY),
            cert: get(TLS_CERT_KEY),
            key: get(TLS_KEY_KEY),
            source: format!("Secret {}/{name}", target.namespace),
        };
        if material.ca.is_none() && material.cert.is_none() {
            anyhow::bail!(
                "the TLS Secret {}/{name} (named by {why}) has neither {TLS_CA_KEY} nor {TLS_CERT_KEY}: it needs {TLS_CA_KEY} (the CA that signed the replicas' certificates), and {TLS_CERT_KEY} with {TLS_KEY_KEY} where the replicas require a client certificate",
                target.namespace
            );
        }
        Ok(material)
    }

    /// A Secret of the namespace, read once for the run (until `forget`).
    async fn secret(&self, namespace: &str, name: &str, why: &str) -> Result<Arc<ReadSecret>> {
        let key = (namespace.to_string(), name.to_string());
        let cell = self
            .cache
            .lock()
            .expect("not poisoned")
            .entry(key)
            .or_default()
            .clone();
        cell.get_or_try_init(|| self.read_secret(namespace, name, why))
            .await
            .cloned()
    }

    /// Forgets every Secret read: the next survey reads them again (a long-running process, the
    /// eviction gate, sees a rotated token or a label taken away at its next decision).
    pub fn forget(&self) {
        self.cache.lock().expect("not poisoned").clear();
    }

    /// The cluster's credentials, first to last: the Secret `--credentials-secret` names, or
    /// (without it) the Secret its annotation names when that Secret is labelled
    /// [`SECRET_LABEL`]; then, for a cluster the user named or with --credentials-from-env,
    /// the user's own: `--credentials-file`, then the environment.
    pub async fn for_cluster(&self, target: &ClusterTarget) -> Result<Arc<Vars>> {
        let own = self.from_env || target.named;
        let mine = match (&self.file, own) {
            (Some(f), true) => f.clone(),
            _ => Vars::default(),
        }
        .with_env(own);
        let (name, why, from_annotation) = match (&self.secret_flag, &target.credentials_secret) {
            (Some(n), _) => (n.clone(), "--credentials-secret".to_string(), false),
            (None, Some(n)) => (
                n.clone(),
                format!(
                    "the annotation {} on {}/{}",
                    crate::profile::annotations::CREDENTIALS_SECRET,
                    target.namespace,
                    target.name
                ),
                true,
            ),
            (None, None) => return Ok(Arc::new(mine)),
        };
        if !is_object_name(&name) {
            anyhow::bail!(
                "{name:?} (named by {why}) is not a Secret name: lower-case letters, digits, '-' and '.', at most 253 characters; nothing was read"
            );
        }
        let read = self.secret(&target.namespace, &name, &why).await?;
        if from_annotation && !read.labelled {
            anyhow::bail!(
                "the Secret {}/{name} (named by {why}) is not labelled {SECRET_LABEL}=true, so it was not used: a StatefulSet's annotation may name only a Secret whose own writer agreed to its use (`kubectl label secret {name} -n {} {SECRET_LABEL}=true`), or name it yourself with --credentials-secret",
                target.namespace,
                target.namespace
            );
        }
        if let Some(k) = &read.not_text {
            anyhow::bail!(
                "the credentials Secret {}/{name}: key {k:?} is not text",
                target.namespace
            );
        }
        Ok(Arc::new(read.vars.clone().with_env(own).over(&mine)))
    }

    async fn read_secret(&self, namespace: &str, name: &str, why: &str) -> Result<Arc<ReadSecret>> {
        let api: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
        let secret = api.get(name).await.map_err(|e| {
            api_context(
                e,
                "get",
                "secrets",
                &format!("in namespace {namespace:?} (named by {why})"),
            )
            .context(format!("reading the credentials Secret {name:?}"))
        })?;
        let labelled = secret
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(SECRET_LABEL))
            .is_some_and(|v| v == "true");
        let mut values = BTreeMap::new();
        let mut raw = BTreeMap::new();
        let mut not_text = None;
        for (k, v) in secret.data.unwrap_or_default() {
            match String::from_utf8(v.0.clone()) {
                Ok(text) => {
                    values.insert(k.clone(), text);
                }
                Err(_) => {
                    not_text.get_or_insert_with(|| k.clone());
                }
            }
            raw.insert(k, v.0);
        }
        let mut vars = Vars::new(values, format!("Secret {namespace}/{name}"));
        vars.from_secret = vars.values.keys().cloned().collect();
        Ok(Arc::new(ReadSecret {
            vars,
            labelled,
            raw,
            not_text,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_files_read_as_kubectl_reads_them() {
        let text = "# ops\n\nNATS_USER=sys\nNATS_PASSWORD=a=b c\n  VAULT_TOKEN=\n";
        let v = parse_env_file(text).unwrap();
        assert_eq!(v["NATS_USER"], "sys");
        assert_eq!(v["NATS_PASSWORD"], "a=b c", "everything after the first =");
        assert_eq!(v["VAULT_TOKEN"], "");
        assert_eq!(v.len(), 3);
    }

    #[test]
    fn a_line_without_equals_is_named() {
        let e = parse_env_file("A=1\nnonsense\n").unwrap_err();
        assert!(e.starts_with("line 2: expected KEY=VALUE"), "{e}");
        let e = parse_env_file("BAD KEY=1\n").unwrap_err();
        assert!(e.contains("\"BAD KEY\" is not a variable name"), "{e}");
    }

    #[test]
    fn values_win_over_the_environment_and_empty_is_unset() {
        let mut m = BTreeMap::new();
        m.insert("PATH".to_string(), "from-secret".to_string());
        m.insert("KRAFT_EMPTY".to_string(), String::new());
        let v = Vars::new(m, "Secret x/y");
        assert_eq!(v.get("PATH").as_deref(), Some("from-secret"));
        assert_eq!(v.get("KRAFT_EMPTY"), None);
        assert!(
            Vars::environment().get("PATH").is_some(),
            "else the environment"
        );
    }

    #[test]
    fn the_environment_is_read_only_where_allowed() {
        assert_eq!(Vars::default().get("PATH"), None);
        let v = Vars::new(BTreeMap::new(), "Secret x/y");
        assert_eq!(v.get("PATH"), None);
        assert!(v.with_env(true).get("PATH").is_some());
    }

    #[test]
    fn secret_names_are_object_names() {
        assert!(is_object_name("nats-ops"));
        assert!(is_object_name("a.b-1"));
        for bad in [
            "",
            "../../kube-system/x",
            "a/b",
            "A",
            "-a",
            "a-",
            "a..b",
            "x%2f",
        ] {
            assert!(!is_object_name(bad), "{bad}");
        }
    }

    #[test]
    fn a_secret_over_a_file_each_name_from_the_first_that_has_it() {
        let mut secret = Vars::new(
            BTreeMap::from([("NATS_CREDS".to_string(), "jwt".to_string())]),
            "Secret db/ops",
        );
        secret.from_secret.insert("NATS_CREDS".into());
        let file = Vars::new(
            BTreeMap::from([
                (
                    "NATS_CREDS".to_string(),
                    "/home/admin/sys.creds".to_string(),
                ),
                ("VAULT_TOKEN".to_string(), "s.file".to_string()),
            ]),
            "file ops.env",
        );
        let v = secret.over(&file);
        assert_eq!(v.get("NATS_CREDS").as_deref(), Some("jwt"));
        assert!(v.is_from_secret("NATS_CREDS"));
        assert_eq!(v.get("VAULT_TOKEN").as_deref(), Some("s.file"));
        assert!(
            !v.is_from_secret("VAULT_TOKEN"),
            "the file's value is the user's own"
        );
        assert_eq!(v.describe(), "Secret db/ops over file ops.env");
    }

    #[test]
    fn debug_never_shows_a_value() {
        let mut m = BTreeMap::new();
        m.insert("NATS_PASSWORD".to_string(), "hunter2".to_string());
        let shown = format!("{:?}", Vars::new(m, "file f"));
        assert!(
            shown.contains("NATS_PASSWORD") && !shown.contains("hunter2"),
            "{shown}"
        );
    }
}
