//! Which version runs when none is named (issue 30, item 2), through the real `orbit dev`:
//! versions registered out of order (2.0.0, then a hot fix 1.2.1 of the old line, then a
//! non-semantic `nightly`), a start without a version runs 2.0.0, a child step without a
//! version too, and `orbit workflow list` marks 2.0.0 as latest
//! (`orbit_definition::version`; docs/definitions.md, "Versions").

mod common;

use common::*;
use serde_json::{json, Value};
use std::process::Command;
use std::time::Duration;

const WITHIN: Duration = Duration::from_secs(30);

fn versioned(version: &str) -> String {
    format!(
        "name: versioned\nversion: \"{version}\"\nsteps:\n  - {{ id: v, compute: \"{version}\" }}\noutput: \"${{{{ steps.v.output }}}}\"\n"
    )
}

const PARENT: &str = r#"
name: parent
version: "1"
steps:
  - { id: child, workflow: versioned }
output: "${{ steps.child.output }}"
"#;

fn cli(server: &Server, args: &[&str]) -> (bool, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_orbit"));
    cmd.args(args).args(["--address", &server.address()]);
    run_bounded(&mut cmd, WITHIN)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_highest_version_runs_when_none_is_named_whatever_the_registration_order() {
    let dir = TempDir::new("versions");
    let server = Server::start(&dir.0.join("orbit.db"), &[]).await;
    let mut c = server.client().await;
    for v in ["2.0.0", "1.2.1", "nightly"] {
        register(&mut c, &versioned(v)).await;
    }
    register(&mut c, PARENT).await;

    let started = start(&mut c, "versioned", "v-1", json!({})).await.expect("start");
    assert_eq!(started.version, "2.0.0", "not the last registered (nightly, 1.2.1)");
    assert_eq!(result(&mut c, "v-1", WITHIN).await.1, json!("2.0.0"));
    start(&mut c, "parent", "p-1", json!({})).await.expect("start parent");
    assert_eq!(result(&mut c, "p-1", WITHIN).await.1, json!("2.0.0"), "a child step too");

    let (ok, out, err) = cli(&server, &["workflow", "list", "--output", "json"]);
    assert!(ok, "{err}");
    let listed: Value = serde_json::from_str(&out).expect("json");
    let latest: Vec<String> = listed["workflows"]
        .as_array()
        .expect("workflows")
        .iter()
        .filter(|w| w["name"] == "versioned")
        .map(|w| format!("{}={}", w["version"].as_str().unwrap_or(""), w["latest"]))
        .collect();
    assert_eq!(latest, ["2.0.0=true", "1.2.1=false", "nightly=false"]);
    let (ok, table, err) = cli(&server, &["workflow", "list"]);
    assert!(ok, "{err}");
    let row = table.lines().find(|l| l.contains("2.0.0")).expect("a 2.0.0 row");
    assert!(row.contains("yes"), "{table}");
}
