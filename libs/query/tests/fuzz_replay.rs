//! Replays the `query` fuzz target's kept inputs (`fuzz/corpus/query/` seeds and
//! `fuzz/artifacts/query/` crash repros, see docs/fuzzing.md) through the target's checks,
//! so a crash the fuzzer found once stays fixed in a plain `cargo test`.

use orbit_query::{compile, parse_and_check, Catalog, Dialect, SearchType};
use std::path::PathBuf;

fn inputs() -> Vec<(PathBuf, Vec<u8>)> {
    let fuzz = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    let mut out = Vec::new();
    for dir in ["corpus", "artifacts"] {
        let Ok(entries) = std::fs::read_dir(fuzz.join(dir).join("query")) else { continue };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_file() {
                out.push((path.clone(), std::fs::read(&path).expect("read a fuzz input")));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn query_inputs_compile_or_fail_at_a_position_inside() {
    let catalog = Catalog::with_search([
        ("customer", SearchType::Keyword),
        ("note", SearchType::Text),
        ("attempts", SearchType::Int),
        ("amount", SearchType::Double),
        ("vip", SearchType::Bool),
        ("due", SearchType::Datetime),
        ("tags", SearchType::KeywordList),
    ]);
    let inputs = inputs();
    assert!(inputs.len() >= 10, "the seed corpus is there: {}", inputs.len());
    let (mut ok, mut refused) = (0, 0);
    for (path, bytes) in inputs {
        let Ok(input) = std::str::from_utf8(&bytes) else { continue };
        match parse_and_check(input, &catalog) {
            Err(e) => {
                refused += 1;
                assert!(e.position <= input.len(), "{}", path.display());
                assert!(input.is_char_boundary(e.position), "{}", path.display());
                assert!(e.line >= 1 && e.column >= 1, "{}", path.display());
            }
            Ok(checked) => {
                ok += 1;
                let sql = compile(&checked, Dialect::Postgres, 1);
                let n = sql.params.len();
                let text = format!("{} {}", sql.where_sql, sql.order_sql.unwrap_or_default());
                assert!(!text.contains('\''), "{}: {text}", path.display());
                assert_eq!(text.contains(&format!("${n}::")), n > 0, "{text}");
                assert!(!text.contains(&format!("${}::", n + 1)), "{text}");
                assert_eq!(compile(&checked, Dialect::Sqlite, 1).params, sql.params);
            }
        }
    }
    assert!(ok > 0 && refused > 0, "the seeds hold valid and invalid queries");
}
