//! Errors a user can act on (issue 13, item 8), through the real `orbit dev` and CLI: an
//! expression error names the step and field and, for the int/double mismatch, says how to
//! write it; a refused definition lists every problem, in the status message and in the
//! CLI; `orbit execution start --wait` prints the result and what follows on separate lines.

mod common;

use common::*;
use orbit_api::v1 as pb;
use orbit_api::v1::workflow_service_client::WorkflowServiceClient;
use orbit_server_kit::OrbitError;
use serde_json::{json, Value};
use std::process::Command;
use std::time::Duration;
use tonic::transport::Channel;

const STEP: Duration = Duration::from_secs(20);
const CLI: Duration = Duration::from_secs(60);

/// No task, no worker: a timer, then a compute step whose expression mixes a JSON number
/// (a double) with an integer literal.
const MIXED: &str = r#"
name: mixed
version: "1"
steps:
  - { id: nap, sleep: 10ms }
  - id: total
    needs: [nap]
    compute: { sum: "${{ input.amount + 1 }}" }
output: "${{ steps.total.output }}"
"#;

/// Completes with a nested output, so the printed result spans several lines.
const NAP: &str = r#"
name: nap
version: "1"
steps:
  - { id: nap, sleep: 10ms }
output: '${{ {"a": 1, "b": [1, 2]} }}'
"#;

/// `n` steps naming undeclared tasks: `n` problems.
fn problems(n: usize) -> String {
    let mut doc = String::from("name: broken\nversion: \"1\"\ntasks: { real: {} }\nsteps:\n");
    for i in 0..n {
        doc.push_str(&format!("  - {{ id: s{i}, task: missing{i} }}\n"));
    }
    doc
}

async fn refused(c: &mut WorkflowServiceClient<Channel>, doc: &str) -> tonic::Status {
    let request = pb::RegisterWorkflowRequest { document: doc.into(), format: 0 };
    let status = c.register_workflow(request).await.expect_err("invalid");
    assert_eq!(code(&status), "INVALID_DEFINITION", "{status:?}");
    status
}

fn cli(address: &str) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_orbit"));
    cmd.env("ORBIT_ADDRESS", address);
    cmd
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expression_error_names_its_step_and_field_and_how_to_write_a_double() {
    let dir = TempDir::new("errors-expr");
    let server = Server::start(&dir.0.join("orbit.db"), &[]).await;
    let mut c = server.client().await;
    register(&mut c, MIXED).await;
    start(&mut c, "mixed", "mixed-1", json!({"amount": 3})).await.expect("start");
    let (status, error) = result(&mut c, "mixed-1", STEP).await;
    assert_eq!(status, pb::ExecutionStatus::Failed);
    let error = error.as_str().expect("an error").to_string();
    assert!(error.starts_with("EXPRESSION_ERROR: "), "the run's code: {error}");
    assert!(error.contains("step `total`"), "names the step: {error}");
    assert!(error.contains("compute.sum: ${{ input.amount + 1 }}"), "the field: {error}");
    assert!(error.contains("write `1.0` instead of `1`"), "how to fix it: {error}");

    // The same through the CLI, which exits 1 for a run that did not complete.
    let (ok, out, err) = run_bounded(
        cli(&server.address())
            .args(["execution", "start", "mixed", "--input", r#"{"amount": 5}"#])
            .arg("--wait"),
        CLI,
    );
    assert!(!ok, "a failed run exits non-zero: {out}{err}");
    assert!(out.lines().any(|l| l == "status: FAILED"), "{out}");
    let error_line =
        out.lines().find(|l| l.starts_with("error:")).unwrap_or_else(|| panic!("{out}"));
    assert!(
        error_line.contains("step `total` compute.sum") && error_line.contains("`1.0`"),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_definition_problem_is_listed_in_the_message_and_by_the_cli() {
    let dir = TempDir::new("errors-definition");
    let server = Server::start(&dir.0.join("orbit.db"), &[]).await;
    let mut c = server.client().await;
    // A plain client reading only the message sees every problem, one per line (before
    // issue 13: the first and "and 5 more").
    let status = refused(&mut c, &problems(6)).await;
    let message = status.message();
    let lines: Vec<&str> = message.lines().collect();
    assert_eq!(lines[0], "invalid definition: 6 problems:", "{message}");
    for i in 0..6 {
        assert!(lines[i + 1].starts_with(&format!("steps[{i}].task: ")), "{message}");
    }
    assert_eq!(lines.len(), 7, "{message}");
    // Past the 1 KiB status message bound, the message counts what it leaves out; the
    // details still hold one violation per problem.
    let doc = problems(12);
    let status = refused(&mut c, &doc).await;
    let message = status.message();
    let listed = message.lines().filter(|l| l.starts_with("steps[")).count();
    assert!(listed >= 6, "{message}");
    let more = format!("... and {} more (in the error details)", 12 - listed);
    assert_eq!(message.lines().last(), Some(more.as_str()), "{message}");
    let e = OrbitError::from_status(&status).expect("an Orbit error");
    assert_eq!(e.details.len(), 12, "{:?}", e.details);

    // The CLI prints each problem once, on its own line, under one headline.
    let path = dir.0.join("broken.yaml");
    std::fs::write(&path, &doc).expect("write");
    let (ok, out, err) =
        run_bounded(cli(&server.address()).args(["workflow", "register"]).arg(&path), CLI);
    assert!(!ok, "refused: {out}{err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines[0], "error: INVALID_DEFINITION: invalid definition: 12 problems:", "{err}");
    for i in 0..12 {
        let listed = lines.iter().filter(|l| l.contains(&format!("steps[{i}].task:"))).count();
        assert_eq!(listed, 1, "problem {i} once in:\n{err}");
    }
    assert_eq!(lines.len(), 13, "a headline and twelve problems:\n{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_wait_prints_the_result_and_what_follows_on_separate_lines() {
    let dir = TempDir::new("errors-wait");
    let server = Server::start(&dir.0.join("orbit.db"), &[]).await;
    let mut c = server.client().await;
    register(&mut c, NAP).await;
    let address = server.address();

    // stdout and stderr into one pipe, as on a terminal: events, then the result.
    let merged = format!(
        "'{}' execution start nap --wait --id wait-1 2>&1; echo after",
        env!("CARGO_BIN_EXE_orbit")
    );
    let (ok, out, err) =
        run_bounded(Command::new("sh").args(["-c", &merged]).env("ORBIT_ADDRESS", &address), CLI);
    assert!(ok, "{out}{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.last(), Some(&"after"), "the next output starts a line of its own:\n{out}");
    assert!(lines.contains(&"status: COMPLETED"), "{out}");
    let output_at = lines.iter().position(|l| *l == "output:").unwrap_or_else(|| panic!("{out}"));
    let block: Vec<&str> = lines[output_at + 1..lines.len() - 1].to_vec();
    let shown: Value =
        serde_json::from_str(&block.join("\n")).unwrap_or_else(|e| panic!("{e}: {block:?}"));
    assert_eq!(shown, json!({"a": 1, "b": [1, 2]}));
    for line in &lines {
        assert!(
            !line.contains("}#") && !line.contains("}status") && !line.contains("}after"),
            "two outputs ran together: {line:?} in\n{out}"
        );
    }

    // JSON: one document on stdout, ending with a newline.
    let (ok, out, err) = run_bounded(
        cli(&address)
            .args(["execution", "start", "nap", "--wait", "--id", "wait-2"])
            .args(["--output", "json"]),
        CLI,
    );
    assert!(ok, "{out}{err}");
    assert!(out.ends_with("}\n"), "{out:?}");
    let doc: Value = serde_json::from_str(&out).expect("one JSON document");
    assert_eq!(doc["result"]["output"], json!({"a": 1, "b": [1, 2]}));
}
