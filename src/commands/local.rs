//! `kubectl-raft yield --local`: the in-pod handover of a preStop hook
//! ([`crate::live::hook::hand_over_here`]), its lines printed: what it did on stdout, why it
//! failed on stderr (exit 1).

use std::io::Write;

use anyhow::Result;

use crate::errors::Reported;
use crate::live::hook::hand_over_here;
use crate::live::nodes::Stderr;
use crate::live::progress::Progress;
use crate::live::yield_::{LocalSettings, YieldSettings};

pub async fn run(
    settings: &YieldSettings,
    local: &LocalSettings,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<()> {
    let (report, result) = hand_over_here(settings, local, &Stderr(Progress::new())).await;
    for line in &report.said {
        writeln!(out, "{line}")?;
    }
    result?;
    match report.failed {
        None => Ok(()),
        Some(why) => {
            writeln!(err, "{why}")?;
            Err(Reported.into())
        }
    }
}
