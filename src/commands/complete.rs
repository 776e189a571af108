//! Dynamic shell completion through kubectl: kubectl 1.26+ completes `kubectl raft <TAB>` by
//! running `kubectl_complete-raft ARGS... CURRENT` and reading cobra's `__complete` protocol
//! (one `value<TAB>help` per line, then `:<directive>`). The same binary answers when it is
//! invoked under that name (a link to `kubectl-raft`) or as `kubectl-raft __complete ...`.
//!
//! Subcommands, flags and fixed values come from clap's own completion engine over the one
//! flag definition (`cli.rs`); StatefulSet, pod, node, namespace and context names come from
//! the cluster of the context the words typed so far name (`--kubeconfig`, `--context`, `-n`).
//! Completion never prints an error: a cluster that cannot be reached completes nothing.

use std::ffi::{OsStr, OsString};
use std::io::Write;
use std::path::Path;
use std::sync::mpsc::Receiver;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use clap::{CommandFactory, FromArgMatches};
use clap_complete::engine::{ArgValueCandidates, CompletionCandidate};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::api::ListParams;
use kube::{Api, ResourceExt};

use crate::cli::{Cli, GlobalArgs};
use crate::connect;
use crate::profile::Catalog;

/// The executable name kubectl looks for (`kubectl_complete-<plugin>`).
pub const COMPLETER_NAME: &str = "kubectl_complete-raft";
/// The hidden first argument that asks `kubectl-raft` itself for completions.
pub const COMPLETE_ARG: &str = "__complete";

/// cobra's ShellCompDirectiveNoFileComp: only these candidates, never file names.
const NO_FILE_COMP: u8 = 4;
/// One completion waits at most this long for the cluster (a shell must not hang on TAB).
const CLUSTER_TIMEOUT: Duration = Duration::from_secs(5);

/// The words to complete when this process was started for completion, else None.
pub fn request(argv: &[OsString]) -> Option<Vec<OsString>> {
    let stem = argv
        .first()
        .and_then(|a| Path::new(a).file_stem())
        .and_then(OsStr::to_str);
    if stem == Some(COMPLETER_NAME) {
        return Some(argv[1..].to_vec());
    }
    if argv.get(1).map(OsString::as_os_str) == Some(OsStr::new(COMPLETE_ARG)) {
        return Some(argv[2..].to_vec());
    }
    None
}

/// Prints the candidates for the last of `words` (the word being typed, possibly empty).
pub fn run(words: Vec<OsString>, out: &mut dyn Write) -> std::io::Result<()> {
    let _ = STARTED.set(Instant::now());
    let mut args: Vec<OsString> = vec!["kubectl-raft".into()];
    args.extend(words);
    if args.len() == 1 {
        args.push(OsString::new());
    }
    let index = args.len() - 1;
    let _ = CONNECTION.set(connection_of(&args[..index]));
    let mut cmd = with_dynamic_values(Cli::command());
    let cwd = std::env::current_dir().ok();
    let typing_a_flag = args[index].to_string_lossy().starts_with('-');
    let mut candidates =
        clap_complete::engine::complete(&mut cmd, args, index, cwd.as_deref()).unwrap_or_default();
    // As kubectl does: flags are offered once a `-` is typed, not mixed into the names.
    if !typing_a_flag {
        candidates.retain(|c| !is_flag(c));
    }
    for c in candidates {
        let value = c.get_value().to_string_lossy();
        match c.get_help().map(|h| h.to_string()) {
            Some(help) if !help.is_empty() => {
                let first_line = help.lines().next().unwrap_or_default();
                writeln!(out, "{value}\t{first_line}")?
            }
            _ => writeln!(out, "{value}")?,
        }
    }
    writeln!(out, ":{NO_FILE_COMP}")
}

fn is_flag(c: &CompletionCandidate) -> bool {
    c.get_value().to_string_lossy().starts_with('-')
}

/// The connection flags among the words typed before the one being completed.
fn connection_of(typed: &[OsString]) -> GlobalArgs {
    let matches = Cli::command()
        .ignore_errors(true)
        .try_get_matches_from(typed)
        .ok();
    let sub = matches
        .as_ref()
        .and_then(|m| m.subcommand().map(|(_, s)| s.clone()));
    sub.or(matches)
        .and_then(|m| GlobalArgs::from_arg_matches(&m).ok())
        .unwrap_or(GlobalArgs {
            kubeconfig: None,
            context: None,
            namespace: None,
            request_timeout: CLUSTER_TIMEOUT,
            as_user: None,
            as_group: vec![],
            as_uid: None,
            verbosity: 0,
        })
}

static CONNECTION: OnceLock<GlobalArgs> = OnceLock::new();

/// The clap definition with the dynamic value completers attached. They are attached here,
/// not in `cli.rs`, so that the flag definitions stay free of I/O.
fn with_dynamic_values(cmd: clap::Command) -> clap::Command {
    let names = |f: fn() -> Vec<CompletionCandidate>| ArgValueCandidates::new(f);
    cmd.mut_arg("namespace", |a| a.add(names(namespaces)))
        .mut_arg("context", |a| a.add(names(contexts)))
        .mut_subcommand("status", |c| {
            c.mut_arg("name", |a| a.add(names(statefulsets)))
                .mut_arg("node", |a| a.add(names(nodes)))
                .mut_arg("system", |a| a.add(names(systems)))
        })
        .mut_subcommand("yield", |c| {
            c.mut_arg("name", |a| a.add(names(statefulsets_and_pods)))
                .mut_arg("to", |a| a.add(names(pods)))
                .mut_arg("node", |a| a.add(names(nodes)))
                .mut_arg("system", |a| a.add(names(systems)))
        })
        .mut_subcommand("drain", |c| c.mut_arg("nodes", |a| a.add(names(nodes))))
}

fn systems() -> Vec<CompletionCandidate> {
    Catalog::builtin()
        .profiles
        .into_iter()
        .map(|p| CompletionCandidate::new(p.name))
        .collect()
}

fn contexts() -> Vec<CompletionCandidate> {
    let g = CONNECTION.get();
    let config = match g.and_then(|g| g.kubeconfig.as_ref()) {
        Some(path) => kube::config::Kubeconfig::read_from(path),
        None => kube::config::Kubeconfig::read(),
    };
    config
        .map(|kc| {
            kc.contexts
                .into_iter()
                .map(|c| CompletionCandidate::new(c.name))
                .collect()
        })
        .unwrap_or_default()
}

fn statefulsets() -> Vec<CompletionCandidate> {
    collect(&[list_in_background("StatefulSet", |client, ns| {
        Api::<StatefulSet>::namespaced(client, &ns)
    })])
}

fn pods() -> Vec<CompletionCandidate> {
    collect(&[list_in_background("pod", |client, ns| {
        Api::<Pod>::namespaced(client, &ns)
    })])
}

/// Both lists at once, on the one connection.
fn statefulsets_and_pods() -> Vec<CompletionCandidate> {
    collect(&[
        list_in_background("StatefulSet", |client, ns| {
            Api::<StatefulSet>::namespaced(client, &ns)
        }),
        list_in_background("pod", |client, ns| Api::<Pod>::namespaced(client, &ns)),
    ])
}

fn nodes() -> Vec<CompletionCandidate> {
    collect(&[list_in_background("node", |client, _| {
        Api::<Node>::all(client)
    })])
}

fn namespaces() -> Vec<CompletionCandidate> {
    collect(&[list_in_background("namespace", |client, _| {
        Api::<Namespace>::all(client)
    })])
}

/// When every answer from the cluster must be in: CLUSTER_TIMEOUT after the completion
/// started, whatever blocks (a credential plugin waiting for a login, a dead API server).
fn deadline() -> Instant {
    *STARTED.get_or_init(Instant::now) + CLUSTER_TIMEOUT
}

static STARTED: OnceLock<Instant> = OnceLock::new();

/// A list run on a thread of its own, so that nothing it blocks on (the connection, an exec
/// credential plugin that runs synchronously) can hold the shell past the deadline.
fn list_in_background<K>(
    what: &'static str,
    api: impl FnOnce(kube::Client, String) -> Api<K> + Send + 'static,
) -> Receiver<Vec<CompletionCandidate>>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + 'static,
{
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(from_cluster(what, api));
    });
    rx
}

/// What the lists answered by the deadline; the rest is left out (the process exits after
/// answering, ending any thread still blocked).
fn collect(lists: &[Receiver<Vec<CompletionCandidate>>]) -> Vec<CompletionCandidate> {
    lists
        .iter()
        .flat_map(|rx| {
            rx.recv_timeout(deadline().saturating_duration_since(Instant::now()))
                .unwrap_or_default()
        })
        .collect()
}

/// The one runtime and the one connection every completer of this process shares (a
/// completion that offers StatefulSets and pods connects once, not twice). None when there
/// is no cluster to ask; a kube Client lives on the runtime that made it, hence both here.
fn cluster() -> Option<&'static (tokio::runtime::Runtime, kube::Client, String)> {
    static CLUSTER: OnceLock<Option<(tokio::runtime::Runtime, kube::Client, String)>> =
        OnceLock::new();
    CLUSTER
        .get_or_init(|| {
            let g = CONNECTION.get()?.clone();
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            // One client; a credential plugin gets no terminal to prompt on.
            let config = runtime
                .block_on(async {
                    tokio::time::timeout(
                        CLUSTER_TIMEOUT,
                        connect::config(&g.connect_options(), false),
                    )
                    .await
                })
                .ok()?
                .ok()?;
            let ns = g
                .namespace
                .clone()
                .unwrap_or_else(|| config.default_namespace.clone());
            let client = {
                let _entered = runtime.enter();
                kube::Client::try_from(config).ok()?
            };
            Some((runtime, client, ns))
        })
        .as_ref()
}

/// The names `api` lists in the cluster the typed flags name (the namespace: `-n`, else the
/// context's), each with `what` as its help; nothing when the cluster does not answer in time.
fn from_cluster<K>(
    what: &'static str,
    api: impl FnOnce(kube::Client, String) -> Api<K>,
) -> Vec<CompletionCandidate>
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let Some((runtime, client, ns)) = cluster() else {
        return vec![];
    };
    let list = api(client.clone(), ns.clone());
    let names = runtime.block_on(async move {
        tokio::time::timeout(CLUSTER_TIMEOUT, list.list_metadata(&ListParams::default()))
            .await
            .ok()
            .and_then(Result::ok)
            .map(|l| l.items.iter().map(|o| o.name_any()).collect::<Vec<_>>())
            .unwrap_or_default()
    });
    names
        .into_iter()
        .map(|n| CompletionCandidate::new(n).help(Some(what.into())))
        .collect()
}
