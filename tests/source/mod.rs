//! What of a source file under src/ is production code, for the checks that read it
//! (tests/offline/architecture.rs, tests/offline/docs.rs).

/// `text` up to its test module (`#[cfg(test)]` followed by a `mod` line), which Rust's
/// convention puts last. A `#[cfg(test)]` item above it (a test-only helper) stays in: cutting
/// at the first `#[cfg(test)]` hid every line after such a helper from the checks.
pub fn production(text: &str) -> &str {
    let mut at = 0;
    let mut lines = text.split_inclusive('\n').peekable();
    while let Some(line) = lines.next() {
        if line.trim() == "#[cfg(test)]" {
            let next = lines.peek().map(|l| l.trim_start()).unwrap_or_default();
            if next.starts_with("mod ") || next.starts_with("pub mod ") {
                return &text[..at];
            }
        }
        at += line.len();
    }
    text
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_test_only_helper_does_not_end_the_code() {
        let text = "a\n#[cfg(test)]\nfn helper() {}\nb\n#[cfg(test)]\nmod tests {\nc\n}\n";
        assert_eq!(
            super::production(text),
            "a\n#[cfg(test)]\nfn helper() {}\nb\n"
        );
    }
}
