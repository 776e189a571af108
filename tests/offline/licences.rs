//! The supply chain, as far as it can be checked here: every crate in the lock file (the
//! plugin's, its tests', the world's spurctld) is under a licence this Apache-2.0 project may
//! ship, read from `cargo metadata --locked`. An advisory check (cargo-deny, cargo-audit) needs
//! a vulnerability database that this machine cannot fetch; docs/testing.md says so.

use std::collections::BTreeSet;

/// Licences whose terms let an Apache-2.0 binary carry the crate (permissive, or MPL-2.0's
/// file-level copyleft, whose sources crates.io publishes).
const ALLOWED: &[&str] = &[
    "Apache-2.0",
    "MIT",
    "BSD-1-Clause",
    "BSD-2-Clause",
    "BSD-3-Clause",
    "ISC",
    "Zlib",
    "Unicode-3.0",
    "Unicode-DFS-2016",
    "Unlicense",
    "CDLA-Permissive-2.0",
    "BSL-1.0",
    "0BSD",
    "MPL-2.0",
];

/// Whether an SPDX expression (`A OR B`, `A AND (B OR C)`, `A WITH exception`, and the old
/// `A/B` for OR) is satisfied by licences in `ALLOWED`; None when it cannot be read.
fn satisfied(expr: &str) -> Option<bool> {
    let spaced = expr
        .replace('/', " OR ")
        .replace('(', " ( ")
        .replace(')', " ) ");
    let tokens: Vec<&str> = spaced.split_whitespace().collect();
    let mut at = 0;
    let v = or(&tokens, &mut at)?;
    (at == tokens.len()).then_some(v)
}

fn or(t: &[&str], at: &mut usize) -> Option<bool> {
    let mut v = and(t, at)?;
    while t.get(*at) == Some(&"OR") {
        *at += 1;
        v |= and(t, at)?;
    }
    Some(v)
}

fn and(t: &[&str], at: &mut usize) -> Option<bool> {
    let mut v = one(t, at)?;
    while t.get(*at) == Some(&"AND") {
        *at += 1;
        v &= one(t, at)?;
    }
    Some(v)
}

fn one(t: &[&str], at: &mut usize) -> Option<bool> {
    let v = match *t.get(*at)? {
        "(" => {
            *at += 1;
            let v = or(t, at)?;
            (t.get(*at) == Some(&")")).then_some(())?;
            v
        }
        "AND" | "OR" | "WITH" | ")" => return None,
        id => ALLOWED.contains(&id),
    };
    *at += 1;
    // An exception (`WITH LLVM-exception`) only grants more.
    if t.get(*at) == Some(&"WITH") {
        *at += 2;
    }
    Some(v)
}

#[test]
fn every_crate_in_the_lock_file_is_under_a_licence_the_project_may_ship() {
    let out = std::process::Command::new(env!("CARGO"))
        .args(["metadata", "--locked", "--format-version", "1"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "cargo metadata --locked: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let m: serde_json::Value = serde_json::from_slice(&out.stdout).expect("cargo metadata's JSON");
    let packages = m["packages"].as_array().expect("packages");
    assert!(packages.len() > 100, "the lock file's crates were read");
    let refused: BTreeSet<String> = packages
        .iter()
        .filter(|p| match p["license"].as_str() {
            Some(l) => satisfied(l) != Some(true),
            None => true,
        })
        .map(|p| format!("{} {}: {}", p["name"], p["version"], p["license"]))
        .collect();
    assert!(
        refused.is_empty(),
        "crates under a licence not in tests/offline/licences.rs's ALLOWED (or none): {refused:#?}"
    );
}

#[test]
fn a_licence_outside_the_list_is_refused_even_beside_an_allowed_one() {
    assert_eq!(satisfied("MIT AND GPL-3.0-only"), Some(false));
    assert_eq!(satisfied("GPL-3.0-only"), Some(false));
    assert_eq!(satisfied("(MIT OR Apache-2.0) AND Unicode-3.0"), Some(true));
    assert_eq!(
        satisfied("MIT OR Apache-2.0 OR LGPL-2.1-or-later"),
        Some(true)
    );
    assert_eq!(satisfied("Apache-2.0 WITH LLVM-exception"), Some(true));
    assert_eq!(satisfied("MIT/Apache-2.0"), Some(true));
    assert_eq!(satisfied("MIT OR"), None);
    assert_eq!(satisfied("MIT OR OR"), None);
    assert_eq!(satisfied("Apache-2.0+"), Some(false));
}
