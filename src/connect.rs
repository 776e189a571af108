//! Connecting to the cluster the way kubectl does: --kubeconfig, then $KUBECONFIG, then
//! ~/.kube/config; --context; the context's namespace unless -n says otherwise.

use anyhow::{bail, Context, Result};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use std::path::PathBuf;
use std::time::Duration;

/// Where the API server is and how long one request may take: kubectl's --kubeconfig,
/// --context, -n and --request-timeout (`cli` maps the flags onto it).
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    /// The kubeconfig file; None: $KUBECONFIG, then ~/.kube/config, then in-cluster.
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context; None: its current context.
    pub context: Option<String>,
    /// None: the context's namespace.
    pub namespace: Option<String>,
    /// The limit on one API request; zero: none.
    pub request_timeout: Duration,
    /// Whom to act as (kubectl's --as, --as-group, --as-uid).
    pub impersonate: Impersonate,
}

/// Whom the API server is asked to act as: a user, with groups and a UID, or nobody else.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Impersonate {
    pub user: Option<String>,
    pub groups: Vec<String>,
    pub uid: Option<String>,
}

impl Default for ConnectOptions {
    /// kubectl's defaults, with kubectl-raft's 30 s request limit.
    fn default() -> Self {
        ConnectOptions {
            kubeconfig: None,
            context: None,
            namespace: None,
            request_timeout: Duration::from_secs(30),
            impersonate: Impersonate::default(),
        }
    }
}

pub struct Connection {
    /// For the API: retries what kube-rs retries (429, 503, 504) with backoff.
    pub client: Client,
    /// For requests to replicas through pods/proxy: no retries of its own, because a 503
    /// there is usually the replica's own answer ("no leader") or the API server saying it
    /// could not reach the pod, and either must be shown at once, not retried into a timeout.
    pub probe_client: Client,
    /// For long-lived watches (`status --watch`): no read timeout.
    pub watch_client: Client,
    /// The namespace to use when neither -n nor -A is given.
    pub default_namespace: String,
}

/// Whether kubectl would find a kubeconfig file without --kubeconfig.
fn kubeconfig_present() -> bool {
    if std::env::var_os("KUBECONFIG").is_some_and(|v| !v.is_empty()) {
        return true;
    }
    std::env::var_os("HOME").is_some_and(|h| std::path::Path::new(&h).join(".kube/config").exists())
}

pub async fn connect(g: &ConnectOptions) -> Result<Connection> {
    let config = config(g, true).await?;
    let default_namespace = config.default_namespace.clone();
    let mut probe_config = config.clone();
    probe_config.default_retry = false;
    // A watch is quiet for as long as nothing changes: --request-timeout would cut it. The
    // server ends each watch itself within minutes (timeoutSeconds), and the watcher renews it.
    let mut watch_config = config.clone();
    watch_config.read_timeout = None;
    let build = |c: Config| {
        Client::try_from(c).context("cannot build a Kubernetes client from the kubeconfig")
    };
    Ok(Connection {
        client: build(config)?,
        probe_client: build(probe_config)?,
        watch_client: build(watch_config)?,
        default_namespace,
    })
}

/// `uri` without a `user:password@` part.
fn without_userinfo(uri: &http::Uri) -> http::Uri {
    let Some(auth) = uri.authority() else {
        return uri.clone();
    };
    let Some((_, host)) = auth.as_str().rsplit_once('@') else {
        return uri.clone();
    };
    let mut parts = uri.clone().into_parts();
    parts.authority = host.parse().ok();
    http::Uri::from_parts(parts).unwrap_or_else(|_| uri.clone())
}

/// The client configuration the flags name. Not `interactive`: an exec credential plugin
/// gets no terminal (kubeconfig `interactiveMode: Never`), so it cannot prompt, as a shell's
/// TAB completion requires.
pub async fn config(g: &ConnectOptions, interactive: bool) -> Result<Config> {
    let options = KubeConfigOptions {
        context: g.context.clone(),
        ..Default::default()
    };
    let mut config = match &g.kubeconfig {
        Some(path) => {
            let kc = Kubeconfig::read_from(path)
                .with_context(|| format!("cannot load kubeconfig {}", path.display()))?;
            Config::from_custom_kubeconfig(kc, &options)
                .await
                .with_context(|| format!("cannot use kubeconfig {}", path.display()))?
        }
        None if g.context.is_some() || kubeconfig_present() => Config::from_kubeconfig(&options)
            .await
            .context("cannot load the kubeconfig ($KUBECONFIG or ~/.kube/config)")?,
        None => Config::incluster().context(
            "cannot find a cluster: no kubeconfig ($KUBECONFIG or ~/.kube/config) and not running in a pod; \
             pass --kubeconfig PATH",
        )?,
    };
    // A user:password in the server's address is no credential kube-rs sends (kubectl sends
    // it as Basic auth), and the address is printed by `-v=6` with every request: dropped.
    config.cluster_url = without_userinfo(&config.cluster_url);
    let timeout = (!g.request_timeout.is_zero()).then_some(g.request_timeout);
    config.read_timeout = timeout;
    config.write_timeout = timeout;
    // Connecting never waits longer than 10 s, even with --request-timeout 0 (no limit).
    let ten = std::time::Duration::from_secs(10);
    config.connect_timeout = Some(timeout.map_or(ten, |t| t.min(ten)));
    // As kubectl merges its flags over the kubeconfig's `as`, `as-groups` and `as-uid`: a flag
    // given (an empty one is not) replaces that field only. kube sends them as
    // Impersonate-User, -Group and -Uid headers with every request.
    let Impersonate { user, groups, uid } = &g.impersonate;
    if let Some(user) = user.as_ref().filter(|u| !u.is_empty()) {
        config.auth_info.impersonate = Some(user.clone());
    }
    if !groups.is_empty() {
        config.auth_info.impersonate_groups = Some(groups.clone());
    }
    if let Some(uid) = uid.as_ref().filter(|u| !u.is_empty()) {
        config.auth_info.impersonate_uid = Some(uid.clone());
    }
    let a = &config.auth_info;
    if a.impersonate.is_none() && (a.impersonate_groups.is_some() || a.impersonate_uid.is_some()) {
        bail!("--as-group and --as-uid need --as USER, as kubectl's do: the groups and UID are those of the user impersonated");
    }
    if !interactive {
        if let Some(exec) = config.auth_info.exec.as_mut() {
            exec.interactive_mode = Some(kube::config::ExecInteractiveMode::Never);
        }
    }
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_in_the_servers_address_is_dropped() {
        let u: http::Uri = "https://admin:s3cret@k8s.example:6443/base"
            .parse()
            .unwrap();
        assert_eq!(
            without_userinfo(&u).to_string(),
            "https://k8s.example:6443/base"
        );
        let plain: http::Uri = "https://k8s.example:6443".parse().unwrap();
        assert_eq!(without_userinfo(&plain), plain);
    }
}
