//! Golden files (tests/golden): what a rendering must stay, byte for byte. `UPDATE_GOLDEN=1`
//! rewrites them on a developer's machine, never under CI (`CI` set): there a difference always
//! fails.

/// Compares `got` with tests/golden/NAME.
pub fn check(name: &str, got: &str) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        assert!(
            std::env::var_os("CI").is_none(),
            "UPDATE_GOLDEN is refused under CI: a golden file changes only by a developer's hand"
        );
        std::fs::write(&path, got).unwrap();
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (UPDATE_GOLDEN=1 writes it)", path.display()));
    assert_eq!(
        got,
        want,
        "{} differs (UPDATE_GOLDEN=1 to accept)",
        path.display()
    );
}
