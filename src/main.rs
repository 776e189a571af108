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
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
