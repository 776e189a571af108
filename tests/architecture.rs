//! The floors, checked mechanically: pure modules (the data floor, selection, assessment,
//! planning, reports, rendering, profiles) have no import path to anything that does I/O
//! (the transport, observation, the survey, the Kubernetes client, the async runtime, files).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Modules that must stay pure, by their path under src/.
const PURE: &[&str] = &[
    "model", "select", "assess", "plan", "report", "actions", "render", "profile", "watch",
];
/// Modules that do I/O.
const IO: &[&str] = &[
    "transport",
    "observe",
    "survey",
    "connect",
    "commands",
    "errors",
    "credentials",
    "nats",
    "groups",
    "handover",
    "preflight",
];
/// Crates and paths whose mere use means I/O.
const IO_PATHS: &[&str] = &[
    "kube::Client",
    "kube::api",
    "kube::runtime",
    "kube::client",
    "tokio",
    "hyper",
    "hyper_util",
    "std::fs",
    "std::net",
    "std::process",
];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Module name (first path segment under src/) -> its source text, test modules left out.
fn modules() -> BTreeMap<String, String> {
    let mut out: BTreeMap<String, String> = BTreeMap::new();
    let mut stack = vec![src()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            if p.extension().and_then(|x| x.to_str()) != Some("rs") {
                continue;
            }
            let rel = p.strip_prefix(src()).unwrap();
            let first = rel
                .components()
                .next()
                .unwrap()
                .as_os_str()
                .to_string_lossy();
            let module = first.trim_end_matches(".rs").to_string();
            // Tests may do as they like: stop at the first #[cfg(test)].
            if rel.ends_with("tests.rs") {
                continue;
            }
            let text = std::fs::read_to_string(&p).unwrap();
            let code = text.split("#[cfg(test)]").next().unwrap().to_string();
            out.entry(module).or_default().push_str(&code);
        }
    }
    out
}

/// The crate modules a module's code refers to (`crate::X`), and the external paths it uses.
fn references(code: &str) -> (BTreeSet<String>, Vec<String>) {
    let mut internal = BTreeSet::new();
    for (i, _) in code.match_indices("crate::") {
        let rest = &code[i + 7..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if !name.is_empty() {
            internal.insert(name);
        }
        // `use crate::{a, b}`
        if rest.starts_with('{') {
            let group = &rest[1..rest.find('}').unwrap_or(rest.len())];
            for part in group.split(',') {
                let n: String = part
                    .trim()
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if !n.is_empty() {
                    internal.insert(n);
                }
            }
        }
    }
    let external = IO_PATHS
        .iter()
        .filter(|p| {
            code.lines().any(|l| {
                let l = l.trim();
                !l.starts_with("//")
                    && (l.contains(&format!("{p}::"))
                        || l.contains(&format!("use {p};"))
                        || l.contains(&format!("{p},"))
                        || l.contains(&format!("{p}}}"))
                        || l.contains(&format!("{p}!")))
            })
        })
        .map(|p| p.to_string())
        .collect();
    (internal, external)
}

#[test]
fn pure_modules_have_no_import_path_to_io() {
    let mods = modules();
    for p in PURE {
        assert!(mods.contains_key(*p), "src/{p} exists");
    }
    let graph: BTreeMap<String, (BTreeSet<String>, Vec<String>)> = mods
        .iter()
        .map(|(m, code)| (m.clone(), references(code)))
        .collect();
    let mut failures = vec![];
    for start in PURE {
        // Everything reachable from a pure module must be pure and use no I/O path.
        let mut seen = BTreeSet::new();
        let mut todo = vec![(start.to_string(), vec![start.to_string()])];
        while let Some((m, path)) = todo.pop() {
            if !seen.insert(m.clone()) {
                continue;
            }
            if IO.contains(&m.as_str()) {
                failures.push(format!("{} reaches I/O module {m}", path.join(" -> ")));
                continue;
            }
            let Some((internal, external)) = graph.get(&m) else {
                continue;
            };
            for x in external {
                failures.push(format!("{} uses {x}", path.join(" -> ")));
            }
            for next in internal {
                let mut p = path.clone();
                p.push(next.clone());
                todo.push((next.clone(), p));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "impure paths:\n{}",
        failures.join("\n")
    );
}

#[test]
fn the_checker_sees_an_io_import() {
    let (internal, external) =
        references("use crate::transport::Transport;\nuse kube::api::Api;\nuse tokio::time;");
    assert!(internal.contains("transport"));
    assert_eq!(external, vec!["kube::api", "tokio"]);
}
