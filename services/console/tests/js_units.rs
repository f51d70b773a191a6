//! The console's pure JavaScript (`assets/units.js`: the unit tree the execution page draws
//! nested) under `node --test` (`tests/units.test.mjs`). Node is needed, as for the browser
//! tests of `services/orbit/tests/console.rs`.

use std::process::Command;

#[test]
fn the_unit_tree_module_passes_its_node_tests() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new("node")
        .current_dir(dir)
        .args(["--test", "tests/units.test.mjs"])
        .output()
        .unwrap_or_else(|e| panic!("node is needed for the console's JS tests: {e}"));
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "node --test failed:\n{text}");
    assert!(text.contains("# pass 6"), "every test ran:\n{text}");
}
