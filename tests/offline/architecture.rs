//! The floors, checked mechanically. Every top-level module of `src/` stands on one floor, and
//! an import may only run sideways or down:
//!
//! 0. **data and decisions** — the model, profiles, selection, assessment, planning, reports,
//!    rendering: no I/O at all (no runtime, no client, no files, no network);
//! 1. **executors** — the drain and rollout library: acts only through its own traits
//!    (`ClusterOps`, `NodeOps`) and speaks only through `Events`/`Sink`; it may use the async
//!    runtime's clock and channels but reaches no I/O module;
//! 2. **I/O** — the transport, observation, the survey, the Kubernetes adapters (`live`);
//! 3. **the edge** — `cli` (clap's types) and the verbs in `commands`; nothing below reads
//!    clap's structs, as in ripgrep's `HiArgs`.
//!
//! The module graph also has no circles.

use crate::source;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The floors, bottom first, by module path under src/.
const FLOORS: &[(&str, &[&str])] = &[
    (
        "data and decisions",
        &[
            "model", "errors", "profile", "select", "report", "assess", "plan", "actions",
            "render", "watch",
        ],
    ),
    ("executors", &["drain", "gate"]),
    (
        "I/O",
        &[
            "connect",
            "credentials",
            "preflight",
            "transport",
            "tls",
            "nats",
            "observe",
            "groups",
            "handover",
            "survey",
            "live",
            "verbose",
            "golden",
        ],
    ),
    // build: the build script (src/build.rs), which asks git for the commit.
    ("the edge", &["cli", "commands", "main", "lib", "build"]),
];

/// Crates and paths whose mere use means I/O, and the floors that may use them.
const IO_PATHS: &[(&str, usize)] = &[
    ("kube::Client", 2),
    ("kube::api", 2),
    ("kube::runtime", 2),
    ("kube::client", 2),
    // The executors wait on the runtime's clock and channels.
    ("tokio", 1),
    ("hyper", 2),
    ("hyper_util", 2),
    ("std::fs", 2),
    ("std::net", 2),
    ("std::process", 2),
];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn floor_of(module: &str) -> Option<usize> {
    FLOORS.iter().position(|(_, ms)| ms.contains(&module))
}

/// Module name (first path segment under src/) -> its source text, with test modules and
/// comment lines left out (a doc comment that names a path imports nothing).
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
            // Tests may do as they like: whole test files, and a file's test module.
            if rel
                .file_name()
                .is_some_and(|f| f.to_string_lossy().ends_with("tests.rs"))
            {
                continue;
            }
            let text = std::fs::read_to_string(&p).unwrap();
            let code = source::production(&text);
            let code: String = code
                .lines()
                .filter(|l| !l.trim_start().starts_with("//"))
                .map(|l| format!("{l}\n"))
                .collect();
            out.entry(module).or_default().push_str(&code);
        }
    }
    out
}

/// The crate modules a module's code refers to (`crate::X`), and the I/O paths it uses.
fn references(code: &str) -> (BTreeSet<String>, Vec<&'static str>) {
    let ident = |s: &str| -> String {
        s.trim()
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    let mut internal = BTreeSet::new();
    for (i, _) in code.match_indices("crate::") {
        let rest = &code[i + 7..];
        if let Some(group) = rest.strip_prefix('{') {
            // `use crate::{a, b::c}`
            let group = &group[..group.find('}').unwrap_or(group.len())];
            internal.extend(group.split(',').map(ident).filter(|n| !n.is_empty()));
        } else {
            let name = ident(rest);
            if !name.is_empty() {
                internal.insert(name);
            }
        }
    }
    let external = IO_PATHS
        .iter()
        .map(|(p, _)| *p)
        .filter(|p| {
            code.lines().any(|l| {
                l.contains(&format!("{p}::"))
                    || l.contains(&format!("use {p};"))
                    || l.contains(&format!("{p},"))
                    || l.contains(&format!("{p}}}"))
                    || l.contains(&format!("{p}!"))
            })
        })
        .collect();
    (internal, external)
}

fn graph() -> BTreeMap<String, (BTreeSet<String>, Vec<&'static str>)> {
    modules()
        .iter()
        .map(|(m, code)| {
            let (mut internal, external) = references(code);
            internal.remove(m);
            (m.clone(), (internal, external))
        })
        .collect()
}

#[test]
fn every_module_stands_on_one_floor() {
    let graph = graph();
    let unplaced: Vec<_> = graph.keys().filter(|m| floor_of(m).is_none()).collect();
    assert!(
        unplaced.is_empty(),
        "modules on no floor (add them to FLOORS): {unplaced:?}"
    );
    let missing: Vec<_> = FLOORS
        .iter()
        .flat_map(|(_, ms)| ms.iter())
        .filter(|m| !graph.contains_key(**m))
        .collect();
    assert!(
        missing.is_empty(),
        "FLOORS names modules src/ lacks: {missing:?}"
    );
}

#[test]
fn no_import_runs_up_a_floor() {
    let mut failures = vec![];
    for (m, (internal, _)) in graph() {
        let Some(own) = floor_of(&m) else { continue };
        for r in internal {
            if let Some(theirs) = floor_of(&r) {
                if theirs > own {
                    failures.push(format!(
                        "{m} ({}) imports {r} ({})",
                        FLOORS[own].0, FLOORS[theirs].0
                    ));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "imports running up:\n{}",
        failures.join("\n")
    );
}

#[test]
fn no_module_below_the_edge_uses_an_io_path_its_floor_may_not() {
    let mut failures = vec![];
    for (m, (_, external)) in graph() {
        let Some(own) = floor_of(&m) else { continue };
        for x in external {
            let lowest = IO_PATHS.iter().find(|(p, _)| *p == x).unwrap().1;
            if own < lowest {
                failures.push(format!("{m} ({}) uses {x}", FLOORS[own].0));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "I/O below its floor:\n{}",
        failures.join("\n")
    );
}

#[test]
fn the_module_graph_has_no_circles() {
    let graph = graph();
    // Depth-first search with colours: reaching a module still on the path is a circle.
    fn visit<'a>(
        m: &'a str,
        graph: &'a BTreeMap<String, (BTreeSet<String>, Vec<&'static str>)>,
        path: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
        circles: &mut Vec<String>,
    ) {
        if done.contains(m) {
            return;
        }
        if let Some(at) = path.iter().position(|p| *p == m) {
            let mut c = path[at..].to_vec();
            c.push(m);
            circles.push(c.join(" -> "));
            return;
        }
        path.push(m);
        if let Some((internal, _)) = graph.get(m) {
            for r in internal {
                visit(r, graph, path, done, circles);
            }
        }
        path.pop();
        done.insert(m);
    }
    let mut circles = vec![];
    let mut done = BTreeSet::new();
    for m in graph.keys() {
        visit(m, &graph, &mut vec![], &mut done, &mut circles);
    }
    assert!(
        circles.is_empty(),
        "import circles:\n{}",
        circles.join("\n")
    );
}

#[test]
fn only_the_edge_reads_clap() {
    let edge = &FLOORS.last().unwrap().1;
    let offenders: Vec<_> = modules()
        .into_iter()
        .filter(|(m, code)| !edge.contains(&m.as_str()) && code.contains("clap::"))
        .map(|(m, _)| m)
        .collect();
    assert!(offenders.is_empty(), "clap below the edge: {offenders:?}");
}

#[test]
fn the_checker_sees_an_io_import() {
    let (internal, external) = references(
        "use crate::transport::Transport;\nuse crate::{model, plan::Plan};\nuse kube::api::Api;\nuse tokio::time;",
    );
    assert_eq!(
        internal.into_iter().collect::<Vec<_>>(),
        vec!["model", "plan", "transport"]
    );
    assert_eq!(external, vec!["kube::api", "tokio"]);
}

#[test]
fn the_checker_skips_comments() {
    let code = modules();
    let model = code.get("model").expect("src/model exists");
    assert!(!model.lines().any(|l| l.trim_start().starts_with("//")));
}
