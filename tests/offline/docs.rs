//! The documentation keeps up with the code: docs/troubleshooting.md lists every error the
//! source can print and every refusal and blocker reason; every built-in system has a page.

use crate::source;

use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The string literal at the start of `s` (which begins with `"`), with Rust's escapes and
/// line continuations resolved; None if `s` does not start with one.
fn literal(s: &str) -> Option<String> {
    let mut chars = s.strip_prefix('"')?.chars().peekable();
    let mut out = String::new();
    while let Some(c) = chars.next() {
        match c {
            '"' => return Some(out),
            '\\' => match chars.next()? {
                '\n' => {
                    while chars.peek().is_some_and(|c| c.is_whitespace()) {
                        chars.next();
                    }
                }
                'n' => out.push('\n'),
                other => out.push(other),
            },
            c => out.push(c),
        }
    }
    None
}

/// The longest piece of a format string between its `{...}` placeholders.
fn longest_fixed_part(format: &str) -> String {
    let mut parts = vec![String::new()];
    let mut depth = 0;
    for c in format.chars() {
        match c {
            '{' => {
                depth += 1;
                if depth == 1 {
                    parts.push(String::new());
                }
            }
            '}' if depth > 0 => depth -= 1,
            c if depth == 0 => parts.last_mut().unwrap().push(c),
            _ => {}
        }
    }
    parts
        .into_iter()
        .map(|p| p.trim().to_string())
        .max_by_key(|p| p.len())
        .unwrap_or_default()
}

/// Every message the non-test source builds with bail!, anyhow! or .context, or writes in an
/// error type's `Display`: (file:line, the message's format string).
fn error_messages() -> Vec<(String, String)> {
    let mut files = vec![];
    rust_files(&repo().join("src"), &mut files);
    let openers = [
        "bail!(",
        "anyhow!(",
        ".context(",
        ".context(format!(",
        "with_context(|| format!(",
    ];
    let mut found = vec![];
    for file in files {
        // Test modules (tests.rs, prop_tests.rs) say what they like.
        if file
            .file_name()
            .is_some_and(|n| n.to_string_lossy().ends_with("tests.rs"))
        {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        let code = source::production(&text);
        let name = file.strip_prefix(repo()).unwrap().display().to_string();
        for opener in openers {
            for (at, _) in code.match_indices(opener) {
                let rest = code[at + opener.len()..].trim_start();
                if let Some(msg) = literal(rest) {
                    let line = code[..at].lines().count();
                    found.push((format!("{name}:{line}"), msg));
                }
            }
        }
        found.extend(error_displays(code, &name));
    }
    found
}

/// The messages an error type's `Display` writes (`write!(f, "...")`), for each type of `code`
/// that is a `std::error::Error`: a typed error's sentences are in its `Display`.
fn error_displays(code: &str, file: &str) -> Vec<(String, String)> {
    let errors: Vec<&str> = code
        .lines()
        .filter_map(|l| {
            let l = l.trim_start();
            let rest = l
                .strip_prefix("impl std::error::Error for ")
                .or_else(|| l.strip_prefix("impl Error for "))?;
            rest.split([' ', '{']).next()
        })
        .collect();
    let mut found = vec![];
    for error in errors {
        for opener in [
            format!("fmt::Display for {error} {{"),
            format!("impl Display for {error} {{"),
        ] {
            let Some(start) = code.find(&opener) else {
                continue;
            };
            // The impl block ends at the first closing brace at the start of a line.
            let body = &code[start..];
            let body = &body[..body.find("\n}").unwrap_or(body.len())];
            for (at, _) in body.match_indices("write!(") {
                let rest = body[at + "write!(".len()..].trim_start();
                let Some(rest) = rest.strip_prefix("f,") else {
                    continue;
                };
                if let Some(msg) = literal(rest.trim_start()) {
                    let line = code[..start + at].lines().count();
                    found.push((format!("{file}:{line}"), msg));
                }
            }
        }
    }
    found
}

fn squeeze(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn troubleshooting() -> String {
    squeeze(&std::fs::read_to_string(repo().join("docs/troubleshooting.md")).unwrap())
}

#[test]
fn troubleshooting_lists_every_error_message() {
    let doc = troubleshooting();
    let messages = error_messages();
    assert!(
        messages.len() > 40,
        "only {} messages found",
        messages.len()
    );
    let missing: Vec<String> = messages
        .iter()
        .filter_map(|(at, msg)| {
            let key = squeeze(&longest_fixed_part(msg));
            // Short pieces ("{e}", "pod {}") are prefixes of a cause shown after them.
            (key.len() >= 12 && !doc.contains(&key))
                .then(|| format!("{at}: {key:?}  (from {msg:?})"))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "docs/troubleshooting.md lacks these messages:\n{}",
        missing.join("\n")
    );
}

/// The variants of `pub enum NAME` in a source file.
fn variants(file: &str, name: &str) -> Vec<String> {
    let text = std::fs::read_to_string(repo().join(file)).unwrap();
    let start = text
        .find(&format!("pub enum {name} {{"))
        .unwrap_or_else(|| panic!("no enum {name} in {file}"));
    let body = &text[start..];
    let body = &body[body.find('{').unwrap() + 1..body.find('}').unwrap()];
    // A variant is the last line of each comma-separated piece (doc comments come before it).
    body.split(',')
        .filter_map(|v| v.lines().map(str::trim).rfind(|l| !l.is_empty()))
        .filter(|v| !v.starts_with("//"))
        .map(str::to_string)
        .collect()
}

#[test]
fn troubleshooting_explains_every_refusal_and_blocker() {
    let doc = troubleshooting();
    for (file, name) in [
        ("src/plan.rs", "RefusalReason"),
        ("src/plan/drain.rs", "BlockReason"),
    ] {
        let all = variants(file, name);
        assert!(all.len() >= 5, "{name}: {all:?}");
        for v in all {
            assert!(
                doc.contains(&format!("`{v}`")),
                "docs/troubleshooting.md does not explain {name}::{v}"
            );
        }
    }
}

#[test]
fn every_builtin_system_has_a_page() {
    let builtin = std::fs::read_to_string(repo().join("src/profile/builtin.yaml")).unwrap();
    let names: Vec<&str> = builtin
        .lines()
        .filter_map(|l| l.strip_prefix("- name: "))
        .map(str::trim)
        .collect();
    assert!(names.len() >= 4, "{names:?}");
    let index = std::fs::read_to_string(repo().join("docs/systems/README.md")).unwrap();
    for name in names {
        let page = repo().join(format!("docs/systems/{name}.md"));
        assert!(
            page.exists(),
            "no page {} for the built-in system {name}",
            page.display()
        );
        assert!(
            index.contains(&format!("({name}.md)")),
            "docs/systems/README.md does not link {name}.md"
        );
    }
}

/// The built-in systems' names (src/profile/builtin.yaml), as prose writes them: lower case,
/// a dash as a space (clickhouse-keeper → "clickhouse keeper").
fn builtin_systems() -> Vec<String> {
    let builtin = std::fs::read_to_string(repo().join("src/profile/builtin.yaml")).unwrap();
    let names: Vec<String> = builtin
        .lines()
        .filter_map(|l| l.strip_prefix("- name: "))
        .map(|n| n.trim().replace('-', " "))
        .collect();
    assert!(names.len() >= 9, "{names:?}");
    names
}

/// The built-in systems `text` does not name.
fn unnamed_systems(text: &str) -> Vec<String> {
    let text = text.to_lowercase();
    builtin_systems()
        .into_iter()
        .filter(|n| !text.contains(n.as_str()))
        .collect()
}

#[test]
fn the_readme_names_every_builtin_system() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    // In its opening, before the first section: what a reader sees first.
    let opening = readme.split("\n## ").next().unwrap();
    assert_eq!(
        unnamed_systems(opening),
        Vec::<String>::new(),
        "README.md's opening"
    );
}

#[test]
fn the_krew_manifest_names_every_builtin_system() {
    let manifest = std::fs::read_to_string(repo().join("krew/raft.yaml")).unwrap();
    assert_eq!(
        unnamed_systems(&manifest),
        Vec::<String>::new(),
        "krew/raft.yaml"
    );
}

#[test]
fn the_top_level_help_names_every_builtin_system_and_verb() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kubectl-raft"))
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8(out.stdout).unwrap();
    assert_eq!(unnamed_systems(&help), Vec::<String>::new(), "{help}");
    for verb in ["status", "yield", "drain", "restart", "gate manifests"] {
        assert!(
            help.contains(&format!("kubectl raft {verb}")),
            "--help shows no `kubectl raft {verb}`:\n{help}"
        );
    }
}
