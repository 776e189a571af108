//! kubectl-raft: a kubectl plugin for safe maintenance of Raft clusters on Kubernetes.

mod assess;
mod cli;
mod commands;
mod connect;
mod discovery;
mod errors;
mod observe;
mod profile;
mod render;
mod report;
mod transport;

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;

use crate::cli::{Cli, Command};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let result = runtime.block_on(async {
        match &cli.command {
            Command::Status(args) => commands::status::run(&cli.global, args, &mut out).await,
            Command::Systems(args) => commands::systems::run(args, &mut out),
        }
    });
    let _ = out.flush();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            // kubectl's style: one line "error: what: why: why", hints on their own lines.
            eprintln!("error: {}", error_chain(&e));
            ExitCode::FAILURE
        }
    }
}

/// The cause chain on one line, without the repeats some libraries produce when an error
/// already quotes its source ("read x: No such file: No such file").
fn error_chain(e: &anyhow::Error) -> String {
    let mut parts: Vec<String> = vec![];
    for cause in e.chain() {
        let msg = cause.to_string();
        if !parts.last().is_some_and(|prev| prev.ends_with(&msg)) {
            parts.push(msg);
        }
    }
    parts.join(": ")
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_chains_read_as_one_line_without_repeats() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "No such file");
        let e = anyhow::Error::new(io)
            .context("read x: No such file")
            .context("cannot load the kubeconfig");
        assert_eq!(
            error_chain(&e),
            "cannot load the kubeconfig: read x: No such file"
        );
        let broken = anyhow::Error::new(std::io::Error::from(std::io::ErrorKind::BrokenPipe))
            .context("writing");
        assert!(is_broken_pipe(&broken));
    }
}
