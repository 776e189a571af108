//! `kubectl raft version` and `kubectl raft completion SHELL`.

use std::io::Write;

use anyhow::{anyhow, Result};
use clap::CommandFactory;
use serde::Serialize;

use crate::cli::{Cli, Output, VersionArgs};

/// The Kubernetes API the client types were built for (k8s-openapi's `v1_34` feature).
pub const KUBERNETES_API: &str = "v1.34";

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Version {
    pub version: &'static str,
    /// `KUBECTL_RAFT_GIT_COMMIT` at build time (the release script sets it; src/build.rs sets
    /// it to the checkout's HEAD), else "unknown".
    pub git_commit: &'static str,
    pub kubernetes_api: &'static str,
}

pub fn version() -> Version {
    Version {
        version: env!("CARGO_PKG_VERSION"),
        git_commit: option_env!("KUBECTL_RAFT_GIT_COMMIT").unwrap_or("unknown"),
        kubernetes_api: KUBERNETES_API,
    }
}

pub fn run(args: &VersionArgs, out: &mut dyn Write) -> Result<()> {
    let v = version();
    match args.output {
        Output::Json => writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?,
        Output::Yaml => write!(
            out,
            "{}",
            serde_saphyr::to_string(&v).map_err(|e| anyhow!("{e}"))?
        )?,
        Output::Table | Output::Wide => writeln!(
            out,
            "kubectl-raft {} (git commit {}, Kubernetes API {})",
            v.version, v.git_commit, v.kubernetes_api
        )?,
    }
    Ok(())
}

/// The completion script for `shell`, for the binary `kubectl-raft`.
pub fn completion(shell: clap_complete::Shell, out: &mut dyn Write) {
    clap_complete::generate(shell, &mut Cli::command(), "kubectl-raft", out);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kubernetes_api_is_the_one_k8s_openapi_is_built_for() {
        let manifest = include_str!("../../Cargo.toml");
        let feature = format!(
            "\"v{}\"",
            KUBERNETES_API.trim_start_matches('v').replace('.', "_")
        );
        assert!(
            manifest.contains(&format!("features = [{feature}]")),
            "Cargo.toml's k8s-openapi feature is not {feature}"
        );
    }
}
