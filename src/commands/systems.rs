use std::io::Write;

use anyhow::Result;
use comfy_table::presets::NOTHING;
use comfy_table::Table;

use crate::cli::{Output, SystemsArgs};

pub fn run(args: &SystemsArgs, out: &mut dyn Write) -> Result<()> {
    let catalog = crate::survey::load_catalog(args.profiles.as_deref())?;
    match args.output {
        Output::Yaml => write!(
            out,
            "{}",
            serde_saphyr::to_string(&catalog.profiles).map_err(|e| anyhow::anyhow!("{e}"))?
        )?,
        Output::Json => writeln!(out, "{}", serde_json::to_string_pretty(&catalog.profiles)?)?,
        Output::Table | Output::Wide => {
            let mut t = Table::new();
            t.load_preset(NOTHING).set_header([
                "SYSTEM",
                "PORT",
                "HEALTH",
                "VOTERS FROM",
                "LIVE BY",
                "PROVEN",
                "RECOGNISED BY",
                "DESCRIPTION",
            ]);
            for p in &catalog.profiles {
                let ports = |spec: &crate::profile::PortSpec| {
                    spec.names
                        .iter()
                        .cloned()
                        .chain(spec.numbers.iter().map(|n| n.to_string()))
                        .collect::<Vec<_>>()
                        .join("|")
                };
                let mut port = ports(&p.port);
                if let Some(tls) = &p.tls_port {
                    port = format!("{port}, tls {}", ports(tls));
                }
                let by = p
                    .detect
                    .images
                    .iter()
                    .map(|i| format!("image *{i}*"))
                    .chain(p.detect.commands.iter().map(|c| format!("command {c}")))
                    .collect::<Vec<_>>()
                    .join(", ");
                // Where the voters come from: a member list with ids (each replica matched to
                // its entry), a count only, or nothing (the pods, with an assumption).
                let voters = match &p.membership {
                    Some(m) if m.size.is_some() => "a count",
                    Some(_) => "member list",
                    None => "none",
                };
                t.add_row([
                    p.name.clone(),
                    port,
                    p.health.request.path.clone(),
                    voters.to_string(),
                    p.liveness().as_str().to_string(),
                    p.proven.map_or("-", |x| x.as_str()).to_string(),
                    by,
                    p.description.clone(),
                ]);
            }
            for line in t.to_string().lines() {
                writeln!(out, "{}", line.trim_end())?;
            }
        }
    }
    Ok(())
}
