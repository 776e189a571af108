//! `kubectl-raft gate serve`: the eviction gate's webhook, wired from its flags
//! (`gate::Gate` over `live::gate::KubeGate`, served by `live::webhook`).

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};

use crate::cli::{GateArgs, GateCommand, GateManifestsArgs, GateServeArgs, GlobalArgs};
use crate::gate::Gate;
use crate::live::callers::CallerSettings;
use crate::live::certs::{CertSettings, Lifetimes};
use crate::live::gate::KubeGate;
use crate::live::webhook::{serve, Limits, ServeSettings, Shutdown};
use crate::survey::Surveyor;

pub async fn run(g: &GlobalArgs, args: &GateArgs, out: &mut impl std::io::Write) -> Result<()> {
    match &args.command {
        GateCommand::Serve(a) => serve_gate(g, a).await,
        GateCommand::Manifests(a) => manifests(g, a, out),
    }
}

/// `gate manifests`: printed, nothing sent to the cluster.
fn manifests(g: &GlobalArgs, a: &GateManifestsArgs, out: &mut impl std::io::Write) -> Result<()> {
    let settings = crate::cli::gate_manifest_settings(g, a);
    let yaml = settings
        .render()
        .map_err(|why| anyhow::anyhow!("{why}; nothing was printed"))?;
    if settings.allow_from.is_empty() {
        eprintln!(
            "warning: no --allow-from: the gate's webhook port is open to every pod (its NetworkPolicy is printed as a comment); give the control plane's addresses (docs/gate.md, \"Only the API server\")"
        );
    }
    if settings.namespace != crate::gate::manifests::DEFAULT_NAMESPACE {
        eprintln!(
            "note: docs/rbac.yaml lets the gate of {} read the locks; bind it for {} too (the command is in the manifests' first comment)",
            crate::gate::manifests::DEFAULT_NAMESPACE,
            settings.namespace
        );
    }
    out.write_all(yaml.as_bytes())
        .and_then(|()| out.flush())
        .context("writing the manifests")?;
    Ok(())
}

/// The parts of the replica slots the gate keeps apart for each cluster (`ClusterShares`).
const GATE_SHARE_PARTS: usize = 4;

async fn serve_gate(g: &GlobalArgs, a: &GateServeArgs) -> Result<()> {
    if a.cert_renew_before >= a.cert_validity {
        anyhow::bail!(
            "--cert-renew-before ({}) must be shorter than --cert-validity ({}): the certificate would be issued again at every check",
            humantime::format_duration(a.cert_renew_before),
            humantime::format_duration(a.cert_validity)
        );
    }
    let mut surveyor = Surveyor::new(&crate::cli::gate_survey_settings(g, a)).await?;
    surveyor.check_namespace = false;
    // Each cluster's decisions take at most a quarter of the replica slots (--max-inflight;
    // at least 2) and one of the two large answers: a cluster whose replicas hang, or whose
    // reviews come in a flood, leaves the rest to the other clusters' decisions.
    surveyor.shares = Some(crate::transport::ClusterShares::new(GATE_SHARE_PARTS));
    let surveyor = Arc::new(surveyor);
    let namespace = g
        .namespace
        .clone()
        .unwrap_or_else(|| surveyor.conn.default_namespace.clone());
    if namespace == a.lock_namespace {
        let warning = format!(
            "warning: the gate keeps its records in {namespace:?}, the namespace of kubectl raft's locks, where whoever may take a lock can erase or plant them; run it in a namespace of its own (-n; gate manifests: kubectl-raft-gate)"
        );
        tracing::warn!("{warning}");
        eprintln!("{warning}");
    }
    let callers = a.client_ca.as_ref().map(|ca| CallerSettings {
        ca: ca.clone(),
        names: a.client_names.clone(),
    });
    match &callers {
        None => tracing::info!(
            "no --client-ca: whoever reaches the gate's port may post reviews (docs/gate.md, \"Only the API server\")"
        ),
        Some(c) if c.names.is_empty() => {
            let warning = format!(
                "warning: every client certificate {} signed is taken as the API server's; if that CA signs users' certificates too, name the API server's with --client-name",
                c.ca.display()
            );
            tracing::warn!("{warning}");
            eprintln!("{warning}");
        }
        Some(_) => {}
    }
    let mut names = vec![
        format!("{}.{namespace}.svc", a.service),
        format!("{}.{namespace}.svc.cluster.local", a.service),
    ];
    names.extend(a.tls_names.iter().cloned());
    let client = surveyor.conn.client.clone();
    let settings = crate::cli::gate_settings(a);
    let ops = KubeGate {
        surveyor,
        lock_namespace: a.lock_namespace.clone(),
        records_namespace: namespace.clone(),
        transfer_timeout: settings.transfer_timeout,
        watched: Default::default(),
        webhook: (!a.webhook.is_empty()).then(|| a.webhook.clone()),
    };
    let serve_settings = ServeSettings {
        listen: a.listen,
        certs: CertSettings {
            namespace,
            secret: a.tls_secret.clone(),
            names,
            webhook: (!a.webhook.is_empty()).then(|| a.webhook.clone()),
            lifetimes: Lifetimes {
                validity: a.cert_validity,
                renew_before: a.cert_renew_before,
            },
        },
        cert_check_every: a.cert_check_every,
        shutdown: Shutdown {
            delay: a.shutdown_delay,
            // A decision ends within --decide-within; a little more for its answer.
            drain_within: settings.decide_within + Duration::from_secs(2),
        },
        limits: Limits::default(),
        callers,
        metrics_listen: a.metrics_listen,
    };
    serve(Gate::new(ops, settings), client, serve_settings).await
}
