//! `orbit test`: unit tests for workflow definitions, with no server and no worker.
//!
//! Runs a definition in the engine's simulator with what a fixtures file scripts (the start
//! input, each task's outputs and failures, signals and cancellation with their arrival
//! time, slow workers), prints the history and checks the `expect:` block. Exit codes are
//! stable so a CI job can rely on them; docs/testing.md describes the fixtures format.
//! The pieces: [`fixtures`] (the file, parsed with a path on every error), [`simulate`]
//! (drives `orbit_engine::sim::Sim`), [`report`] (printing and checking).

mod fixtures;
mod report;
mod simulate;

use clap::{Args, ValueEnum};
use orbit_definition::Definition;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Every expectation held.
const PASSED: u8 = 0;
/// The run did not match an expectation (`TEST_FAILED`).
const MISMATCH: u8 = 1;
/// A file could not be read or is invalid (`INVALID_ARGUMENT`, `INVALID_DEFINITION`,
/// `INVALID_FIXTURE`); nothing was simulated.
const BAD_INPUT: u8 = 2;

/// `orbit test FILE [--fixtures F]`.
#[derive(Args, Debug)]
#[command(after_long_help = "\
Examples:
  orbit test examples/definitions/hello.yaml --fixtures examples/tests/hello.greets.yaml
  orbit test order-saga.yaml --fixtures order-saga.declined.yaml --output json

Exit codes:
  0  every expectation of the fixtures' `expect:` block held (or there was none)
  1  TEST_FAILED: an expectation did not hold; the differences are printed
  2  INVALID_ARGUMENT (a file cannot be read), INVALID_DEFINITION (a definition is
     invalid; every problem is listed), INVALID_FIXTURE (the fixtures file is invalid;
     the message names the path in the file)

Errors go to stderr as `error: <CODE>: <message>`. See docs/testing.md.")]
pub struct TestArgs {
    /// The workflow definition to test (YAML or JSON).
    file: PathBuf,
    /// The fixtures file (YAML or JSON): input, task outcomes, signals, `expect:`.
    /// Without it the workflow runs with input `{}` and every task fails `NO_FIXTURE`.
    #[arg(long, value_name = "FILE")]
    fixtures: Option<PathBuf>,
    /// How to print: `human` (the history, then PASS or FAIL with the differences) or
    /// `json` (one document with `passed`, `mismatches` and every execution's history).
    #[arg(long, value_enum, default_value_t = Format::Human, value_name = "FORMAT")]
    output: Format,
}

/// The output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Format {
    Human,
    Json,
}

/// Why a test could not run: a stable code and a message.
struct Problem {
    code: &'static str,
    message: String,
}

fn read(path: &Path) -> Result<String, Problem> {
    std::fs::read_to_string(path).map_err(|e| Problem {
        code: "INVALID_ARGUMENT",
        message: format!("cannot read {}: {e}", path.display()),
    })
}

fn definition(path: &Path) -> Result<Definition, Problem> {
    orbit_definition::parse(&read(path)?).map_err(|errors| {
        let lines: Vec<String> = errors.errors().iter().map(|e| format!("  {e}")).collect();
        Problem {
            code: "INVALID_DEFINITION",
            message: format!("{}:\n{}", path.display(), lines.join("\n")),
        }
    })
}

/// Runs `orbit test` and returns its exit code.
#[must_use]
pub fn run(args: &TestArgs) -> ExitCode {
    match test(args) {
        Ok(code) => ExitCode::from(code),
        Err(p) => {
            eprintln!("error: {}: {}", p.code, p.message);
            if args.output == Format::Json {
                let error = json!({"code": p.code, "message": p.message, "exit_code": BAD_INPUT});
                println!("{}", json!({ "error": error }));
            }
            ExitCode::from(BAD_INPUT)
        }
    }
}

fn test(args: &TestArgs) -> Result<u8, Problem> {
    let main = definition(&args.file)?;
    let (fixtures, base) = match &args.fixtures {
        Some(path) => {
            let parsed = fixtures::parse(&read(path)?).map_err(|e| Problem {
                code: "INVALID_FIXTURE",
                message: format!("{}: {}: {}", path.display(), e.path, e.message),
            })?;
            (parsed, path.parent().map(Path::to_path_buf).unwrap_or_default())
        }
        None => (fixtures::parse("").unwrap_or_default(), PathBuf::new()),
    };
    let others = fixtures
        .workflows
        .iter()
        .map(|w| definition(&base.join(w)))
        .collect::<Result<Vec<_>, _>>()?;
    if let (Some(path), Err(e)) = (&args.fixtures, fixtures::check_names(&fixtures, &main, &others))
    {
        let message = format!("{}: {}: {}", path.display(), e.path, e.message);
        return Err(Problem { code: "INVALID_FIXTURE", message });
    }
    let sim = simulate::simulate(&main, others, &fixtures);
    let mismatches = report::check(&fixtures.expect, &sim, &fixtures.execution_id);
    match args.output {
        Format::Human => print!("{}", report::text(&sim, &fixtures.execution_id, &mismatches)),
        Format::Json => {
            let doc = report::json(&sim, &fixtures.execution_id, &mismatches);
            println!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
        }
    }
    if mismatches.is_empty() {
        return Ok(PASSED);
    }
    eprintln!("error: TEST_FAILED: {} expectation(s) not met", mismatches.len());
    Ok(MISMATCH)
}
