//! `orbit test` through the real binary: every fixture in `examples/tests/` passes against
//! its example definition (the ones docs/testing.md shows), together they exercise every
//! step kind, a wrong expectation exits 1 with a diff, and bad files exit 2 with a stable
//! code and the path of the problem.

mod common;

use common::run_bounded;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const WITHIN: Duration = Duration::from_secs(60);

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

/// Runs `orbit test def --fixtures fixtures [extra]`: (exit code, stdout, stderr).
fn orbit_test(def: &Path, fixtures: &Path, extra: &[&str]) -> (i32, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_orbit"));
    cmd.arg("test").arg(def).arg("--fixtures").arg(fixtures).args(extra);
    let out = cmd.output().expect("run orbit test");
    let code = out.status.code().unwrap_or(-1);
    (code, String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

/// `examples/tests/<definition>.<case>.yaml` tests `examples/definitions/<definition>.yaml`.
fn definition_of(fixture: &Path) -> PathBuf {
    let name = fixture.file_name().and_then(|n| n.to_str()).expect("file name");
    let stem = name.split('.').next().expect("definition name");
    examples().join("definitions").join(format!("{stem}.yaml"))
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write fixture");
    path
}

#[test]
fn every_example_fixture_passes_and_together_they_cover_every_step_kind() {
    let mut fixtures: Vec<PathBuf> = std::fs::read_dir(examples().join("tests"))
        .expect("examples/tests")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    fixtures.sort();
    assert!(fixtures.len() >= 9, "expected a fixture per step kind, found {fixtures:?}");
    let mut seen = BTreeSet::new();
    for fixture in &fixtures {
        let def = definition_of(fixture);
        let (code, stdout, stderr) = orbit_test(&def, fixture, &["--output", "json"]);
        assert_eq!(code, 0, "{}: exit {code}\n{stdout}\n{stderr}", fixture.display());
        let report: Value = serde_json::from_str(&stdout).expect("one JSON document");
        assert_eq!(report["passed"], true, "{}: {report}", fixture.display());
        for exec in report["executions"].as_object().expect("executions").values() {
            for run in exec["runs"].as_array().expect("runs") {
                for e in run.as_array().expect("events") {
                    seen.insert(e["event"]["type"].as_str().expect("type").to_owned());
                }
            }
        }
        // The human form of the same run passes too and prints the history.
        let (code, text, _) = orbit_test(&def, fixture, &[]);
        assert_eq!(code, 0, "{}", fixture.display());
        assert!(text.ends_with("PASS\n"), "{text}");
    }
    // One event that only each step kind produces: task, for_each, when, sleep, await and
    // signal, child, compensation, on handlers, on_signal, continue-as-new, attempt timeout,
    // cancellation.
    for kind in [
        "StepDispatched",
        "StepFanOut",
        "StepSkipped",
        "TimerFired",
        "SignalDelivered",
        "ChildStarted",
        "CompensationStarted",
        "HandlersStarted",
        "WorkflowContinuedAsNew",
        "RetryScheduled",
        "WorkflowCancelled",
    ] {
        assert!(seen.contains(kind), "no example fixture produces {kind}: {seen:?}");
    }
}

#[test]
fn a_wrong_expectation_exits_1_with_a_diff() {
    let dir = common::TempDir::new("orbit-test-mismatch");
    let fixture = write(
        &dir.0,
        "hello.wrong.yaml",
        "input: {name: Ada}\ntasks:\n  greet: {output: {greeting: 'Hello, Ada!'}}\n\
         expect:\n  status: FAILED\n  output: {greeting: 'Hi, Ada!'}\n  events: [StepFailed greet]\n",
    );
    let def = examples().join("definitions/hello.yaml");
    let (code, stdout, stderr) = orbit_test(&def, &fixture, &[]);
    assert_eq!(code, 1, "{stdout}\n{stderr}");
    assert!(stderr.contains("error: TEST_FAILED: 3 expectation(s) not met"), "{stderr}");
    assert!(stdout.contains("status: expected \"FAILED\", got \"COMPLETED\""), "{stdout}");
    assert!(
        stdout.contains("output.greeting: expected \"Hi, Ada!\", got \"Hello, Ada!\""),
        "{stdout}"
    );
    assert!(stdout.contains("`StepFailed greet` not found"), "{stdout}");
    // The history is printed before the verdict.
    assert!(stdout.contains("StepSucceeded"), "{stdout}");

    let (code, stdout, _) = orbit_test(&def, &fixture, &["--output", "json"]);
    assert_eq!(code, 1);
    let report: Value = serde_json::from_str(&stdout).expect("json");
    assert_eq!(report["passed"], false);
    assert_eq!(report["status"], "COMPLETED");
    let whats: Vec<_> =
        report["mismatches"].as_array().unwrap().iter().map(|m| m["what"].clone()).collect();
    assert_eq!(whats, ["status", "output", "events"]);
}

#[test]
fn an_unscripted_task_fails_with_no_fixture() {
    let dir = common::TempDir::new("orbit-test-unscripted");
    let fixture =
        write(&dir.0, "f.yaml", "input: {name: Ada}\nexpect: {error: {code: NO_FIXTURE}}\n");
    let def = examples().join("definitions/hello.yaml");
    let (code, stdout, stderr) = orbit_test(&def, &fixture, &[]);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(stdout.contains("no fixture for task `greet`"), "{stdout}");
}

#[test]
fn bad_files_exit_2_with_a_stable_code_and_the_path() {
    let dir = common::TempDir::new("orbit-test-bad");
    let def = examples().join("definitions/hello.yaml");
    let cases = [
        ("tasks:\n  greet: [{outptu: {}}]\n", "tasks.greet[0].outptu: unknown key"),
        ("signals: [{name: go, at: soon}]\n", "signals[0].at:"),
        ("tasks:\n  greet: {fail: {retryable: false}}\n", "tasks.greet.fail: needs `code`"),
        ("expect: {status: DONE}\n", "expect.status: unknown status `DONE`"),
        ("input: [unclosed\n", "(document): not valid YAML"),
        // Names the definitions do not have would script nothing.
        ("tasks:\n  gret: {output: {}}\n", "tasks.gret: no task `gret` in the definitions"),
        ("steps:\n  compensate:gret: {output: {}}\n", "steps.compensate:gret: no step `gret`"),
        ("signals: [{name: go}]\n", "signals[0].name: `hello` declares no signal `go`"),
    ];
    for (text, expected) in cases {
        let fixture = write(&dir.0, "bad.yaml", text);
        let (code, stdout, stderr) = orbit_test(&def, &fixture, &[]);
        assert_eq!(code, 2, "{text}: {stdout}\n{stderr}");
        assert!(stderr.starts_with("error: INVALID_FIXTURE: "), "{text}: {stderr}");
        assert!(stderr.contains(expected), "{text}: {stderr}");
    }
    let fixture = write(&dir.0, "ok.yaml", "input: {name: Ada}\n");
    let broken =
        write(&dir.0, "broken.yaml", "name: b\nversion: '1'\nsteps:\n  - id: a\n    task: nope\n");
    let (code, stdout, stderr) = orbit_test(&broken, &fixture, &["--output", "json"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.starts_with("error: INVALID_DEFINITION: "), "{stderr}");
    let doc: Value = serde_json::from_str(&stdout).expect("json error");
    assert_eq!(doc["error"]["code"], "INVALID_DEFINITION");
    let (code, _, stderr) = orbit_test(&def, &dir.0.join("missing.yaml"), &[]);
    assert_eq!(code, 2);
    assert!(stderr.starts_with("error: INVALID_ARGUMENT: cannot read"), "{stderr}");
    // `run_bounded` is the shared way to run a command; it agrees on success here.
    let (ok, _, _) = run_bounded(
        Command::new(env!("CARGO_BIN_EXE_orbit"))
            .arg("test")
            .arg(&def)
            .arg("--fixtures")
            .arg(examples().join("tests/hello.greets.yaml")),
        WITHIN,
    );
    assert!(ok);
}

/// Updates in a fixture: sent at their time, their handler's steps answered by `tasks:`,
/// the reply recorded; one refused by its validator is a `note:`, and an update the
/// workflow does not declare is a fixture error with its path.
#[test]
fn fixtures_send_updates() {
    let dir = common::TempDir::new("orbit-test-updates");
    let def = write(
        &dir.0,
        "stock.yaml",
        r#"
name: stock
version: "1"
signals: { go: {} }
tasks:
  stock.reserve:
    input: { type: object, required: [sku], properties: { sku: { type: string } } }
updates:
  reserve:
    input: { type: object, required: [sku], properties: { sku: { type: string } } }
    validator: "${{ args.sku != '' }}"
    steps:
      - { id: hold, task: stock.reserve, input: { sku: "${{ args.sku }}" } }
    reply: "${{ {'held': steps.hold.output.id} }}"
steps:
  - { id: w, await: go }
output: "${{ steps.w.output }}"
"#,
    );
    let fixture = write(
        &dir.0,
        "stock.yaml.fixtures",
        "tasks:\n  stock.reserve: {output: {id: r-1}}\n\
         updates:\n  - {name: reserve, input: {sku: a}, update_id: u1, at: 1s}\n  \
         - {name: reserve, input: {sku: ''}, at: 2s}\n\
         signals: [{name: go, payload: {ok: true}, at: 1m}]\n\
         expect:\n  status: COMPLETED\n  output: {ok: true}\n  \
         events: [UpdateAccepted, StepSucceeded update:reserve@4:hold, UpdateCompleted, SignalReceived]\n",
    );
    let (code, stdout, stderr) = orbit_test(&def, &fixture, &[]);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(stdout.contains("update `reserve` at +2s refused"), "{stdout}");
    assert!(stdout.contains("r-1"), "the reply is in the history: {stdout}");

    let unknown = write(&dir.0, "unknown.yaml", "updates: [{name: reserv}]\n");
    let (code, stdout, stderr) = orbit_test(&def, &unknown, &[]);
    assert_eq!(code, 2, "{stdout}\n{stderr}");
    assert!(stderr.contains("updates[0].name: `stock` declares no update `reserv`"), "{stderr}");
}
