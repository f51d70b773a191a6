//! Runs every document in `tests/invalid/`: each must be rejected with at least the errors
//! its header announces, one `# expect: CODE [path]` line each (no path: the document root).

use orbit_definition::{parse, ErrorCode};
use std::path::PathBuf;

#[test]
fn every_invalid_definition_reports_the_expected_errors() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/invalid");
    let mut files: Vec<PathBuf> =
        std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    assert!(files.len() >= 30, "the corpus should hold at least 30 cases, has {}", files.len());

    let mut failures = Vec::new();
    for file in &files {
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(file).unwrap();
        let expected: Vec<(ErrorCode, String)> = text
            .lines()
            .map_while(|l| l.strip_prefix("# expect:"))
            .map(|l| {
                let l = l.trim();
                let (code, path) = l.split_once(' ').unwrap_or((l, ""));
                let code =
                    ErrorCode::parse(code).unwrap_or_else(|| panic!("{name}: unknown code {code}"));
                (code, path.trim().to_string())
            })
            .collect();
        assert!(!expected.is_empty(), "{name}: no `# expect:` header");
        // JSON has no comments: the header lines are not part of the document.
        let document: String = if name.ends_with(".json") {
            text.lines().filter(|l| !l.starts_with("# expect:")).collect::<Vec<_>>().join("\n")
        } else {
            text.clone()
        };
        let errors = match parse(&document) {
            Ok(_) => {
                failures.push(format!("{name}: accepted"));
                continue;
            }
            Err(e) => e,
        };
        for (code, path) in &expected {
            if !errors.contains(*code, path) {
                failures.push(format!("{name}: expected {code} at `{path}`, got:\n{errors}"));
            }
        }
        for e in errors.errors() {
            assert!(!e.message.is_empty(), "{name}: empty message at {}", e.path);
            assert!(!e.message.contains('\n'), "{name}: one line per error: {e}");
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
