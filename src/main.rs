//! kubectl-raft: a kubectl plugin for safe maintenance of Raft clusters on Kubernetes. The
//! binary parses the command line and hands it to the library (`src/lib.rs`).

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;

use kubectl_raft::cli::{Cli, Command};
use kubectl_raft::{commands, errors, render};

fn main() -> ExitCode {
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if let Some(words) = commands::complete::request(&argv) {
        // Completion answers on stdout in cobra's protocol and never fails the shell.
        let _ = commands::complete::run(words, &mut std::io::stdout().lock());
        return ExitCode::SUCCESS;
    }
    let cli = Cli::parse_from(argv);
    // A server logs what it decides: the gate at level 2 at least.
    let level = match cli.command {
        Command::Gate(_) => cli.global.verbosity.max(2),
        _ => cli.global.verbosity,
    };
    kubectl_raft::verbose::init(level);
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
    // Everything printed passes through render::Clean: what replicas say cannot steer the
    // terminal.
    let stdout = std::io::stdout();
    let mut out = render::Clean(stdout.lock());
    let mut err = render::Clean(std::io::stderr());
    let result = runtime.block_on(async {
        match &cli.command {
            Command::Status(args) => {
                commands::status::run(&cli.global, args, &mut out, &mut err).await
            }
            Command::Yield(args) => {
                commands::yield_::run(&cli.global, args, &mut out, &mut err).await
            }
            Command::Drain(args) => {
                commands::drain::run(&cli.global, args, &mut out, &mut err).await
            }
            Command::Restart(args) => {
                commands::restart::run(&cli.global, args, &mut out, &mut err).await
            }
            Command::Completion(args) => {
                commands::version::completion(args.shell, &mut out);
                Ok(())
            }
            Command::Version(args) => commands::version::run(args, &mut out),
            Command::Systems(args) => commands::systems::run(args, &mut out),
            Command::CopyTo(args) => commands::copy::run(args, &mut err),
            Command::Gate(args) => commands::gate::run(&cli.global, args, &mut out).await,
        }
    });
    let _ = out.flush();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) if e.is::<errors::Reported>() => ExitCode::FAILURE,
        Err(e) => {
            // kubectl's style: one line "error: what: why: why", hints on their own lines.
            eprintln!("error: {}", render::clean(&errors::anyhow_chain(&e)));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broken_pipes_are_recognised_through_context() {
        let broken = anyhow::Error::new(std::io::Error::from(std::io::ErrorKind::BrokenPipe))
            .context("writing");
        assert!(is_broken_pipe(&broken));
    }
}
