//! Credentials for the systems' own APIs (Consul/Nomad/Vault tokens, NATS users): variables
//! read from a Secret or an env file, layered over the process environment. A Secret is named
//! by `--credentials-secret` or by the annotation `kubectl-raft.io/credentials-secret` on the
//! StatefulSet (or its pods), and read from the cluster's namespace; an env file by
//! `--credentials-file` (`KEY=VALUE` lines, the format of `kubectl create secret
//! --from-env-file`). Values are sent to the system, never printed: `Vars` has no Debug or
//! Display that shows them.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use tokio::sync::OnceCell;

use crate::errors::api_context;
use crate::model::ClusterTarget;

/// Variables from a Secret or a file, over the environment: `get` asks them first.
#[derive(Clone, Default)]
pub struct Vars {
    values: BTreeMap<String, String>,
    /// Where `values` came from ("Secret db/nats-ops"), for messages.
    pub source: Option<String>,
}

impl std::fmt::Debug for Vars {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vars")
            .field("names", &self.values.keys().collect::<Vec<_>>())
            .field("source", &self.source)
            .finish()
    }
}

impl Vars {
    pub fn new(values: BTreeMap<String, String>, source: impl Into<String>) -> Self {
        Vars {
            values,
            source: Some(source.into()),
        }
    }

    /// The variable's value from the Secret or file, else from the environment; empty is unset.
    pub fn get(&self, name: &str) -> Option<String> {
        self.values
            .get(name)
            .cloned()
            .or_else(|| std::env::var(name).ok())
            .filter(|v| !v.is_empty())
    }

    /// "the environment" or "Secret db/nats-ops (over the environment)", for messages.
    pub fn describe(&self) -> String {
        match &self.source {
            None => "the environment".into(),
            Some(s) => format!("{s} (over the environment)"),
        }
    }
}

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

/// Where a cluster's credentials come from, set up once from the flags; Secrets are read
/// once each and kept for the run.
pub struct CredentialSource {
    client: kube::Client,
    /// --credentials-secret: the Secret of that name in each cluster's namespace.
    secret_flag: Option<String>,
    /// --credentials-file, read at start.
    file: Option<Vars>,
    /// One cell per (namespace, Secret): surveys of clusters that name the same Secret wait
    /// for one read; a failed read leaves the cell empty, so the next asks again.
    cache: Mutex<HashMap<SecretKey, Arc<OnceCell<Arc<Vars>>>>>,
}

/// A Secret by namespace and name.
type SecretKey = (String, String);

impl CredentialSource {
    pub fn new(
        client: kube::Client,
        secret_flag: Option<String>,
        file: Option<&Path>,
    ) -> Result<Self> {
        let file = file.map(read_file).transpose()?;
        Ok(CredentialSource {
            client,
            secret_flag,
            file,
            cache: Mutex::new(HashMap::new()),
        })
    }

    /// The cluster's credentials: the flag's file or Secret, else the Secret its annotation
    /// names, else the environment alone.
    pub async fn for_cluster(&self, target: &ClusterTarget) -> Result<Arc<Vars>> {
        if let Some(f) = &self.file {
            return Ok(Arc::new(f.clone()));
        }
        let (name, why) = match (&self.secret_flag, &target.credentials_secret) {
            (Some(n), _) => (n.clone(), "--credentials-secret".to_string()),
            (None, Some(n)) => (
                n.clone(),
                format!(
                    "the annotation {} on {}/{}",
                    crate::profile::annotations::CREDENTIALS_SECRET,
                    target.namespace,
                    target.name
                ),
            ),
            (None, None) => return Ok(Arc::new(Vars::default())),
        };
        let key = (target.namespace.clone(), name.clone());
        let cell = self
            .cache
            .lock()
            .expect("not poisoned")
            .entry(key)
            .or_default()
            .clone();
        cell.get_or_try_init(|| self.read_secret(&target.namespace, &name, &why))
            .await
            .cloned()
    }

    async fn read_secret(&self, namespace: &str, name: &str, why: &str) -> Result<Arc<Vars>> {
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
        let mut values = BTreeMap::new();
        for (k, v) in secret.data.unwrap_or_default() {
            let text = String::from_utf8(v.0).map_err(|_| {
                anyhow::anyhow!("the credentials Secret {namespace}/{name}: key {k:?} is not text")
            })?;
            values.insert(k, text);
        }
        Ok(Arc::new(Vars::new(
            values,
            format!("Secret {namespace}/{name}"),
        )))
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
            Vars::default().get("PATH").is_some(),
            "else the environment"
        );
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
