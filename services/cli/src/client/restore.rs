//! `orbit execution reset ID (--to-step STEP | --to-seq SEQ)` and `orbit execution fork ID
//! --at SEQ --new-id NEW`: a run that goes on from an execution's state at an earlier point
//! — the same execution's next run (`WorkflowService.ResetExecution`) or a new execution
//! (`WorkflowService.ForkExecution`) — and the plan of what it keeps and runs again.
//!
//! Both print the server's plan (`RestorePlan`) the same way: the point, the units kept, the
//! units run again, the signals after the point and, with a target version, the checked
//! migration diff; then what was written (or, with `--dry-run`, that nothing was).

use clap::{ArgGroup, Args};
use orbit_api::v1::reset_execution_request::To;
use orbit_api::v1::{
    ForkExecutionRequest, ForkExecutionResponse, ResetExecutionRequest, ResetExecutionResponse,
    RestorePlan,
};
use serde_json::{json, Value as Json};
use std::fmt::Write as _;

use super::error::Failure;
use super::output::{print_json, print_text, Format};
use super::Client;

/// `orbit execution reset`: what the command was asked.
#[derive(Args, Debug)]
#[command(group(ArgGroup::new("point").required(true).args(["to_step", "to_seq"])))]
pub(crate) struct ResetArgs {
    /// The execution id.
    pub(crate) id: String,
    /// Go back to just before this main-body step first started in the current run: the
    /// step and everything started after it run again.
    #[arg(long, value_name = "STEP")]
    pub(crate) to_step: Option<String>,
    /// Go back to the state right after this history seq of the current run (see
    /// `execution history`).
    #[arg(long, value_name = "SEQ")]
    pub(crate) to_seq: Option<u64>,
    /// Leave out the signals the run received after the point (by default the new run
    /// receives them again, in order).
    #[arg(long)]
    pub(crate) drop_signals: bool,
    /// Migrate the new run to this version of its workflow right away (checked like
    /// `execution migrate`; default: the version in effect at the point).
    #[arg(long, value_name = "VERSION")]
    pub(crate) to_version: Option<String>,
    /// Why, recorded in the `WorkflowReset` and `RunRestored` events.
    #[arg(long, value_name = "TEXT", default_value = "")]
    pub(crate) reason: String,
    /// Makes a retry reset once (the same id with other arguments is refused).
    #[arg(long, value_name = "ID")]
    pub(crate) request_id: Option<String>,
    /// Only print the plan; write nothing.
    #[arg(long)]
    pub(crate) dry_run: bool,
}

/// `orbit execution fork`: what the command was asked.
#[derive(Args, Debug)]
pub(crate) struct ForkArgs {
    /// The source execution id.
    pub(crate) id: String,
    /// The last history seq of the source run the fork keeps (see `execution history`).
    #[arg(long, value_name = "SEQ", value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) at: u64,
    /// The new execution's id (forking to the same id again answers the existing fork).
    #[arg(long, value_name = "ID")]
    pub(crate) new_id: String,
    /// The source run (default: its current run).
    #[arg(long, value_name = "N", default_value_t = 0, hide_default_value = true)]
    pub(crate) run: u32,
    /// Migrate the fork to this version of the workflow right away (checked like
    /// `execution migrate`; default: the version in effect at SEQ).
    #[arg(long, value_name = "VERSION")]
    pub(crate) version: Option<String>,
    /// Why, recorded in the fork's `RunRestored` event.
    #[arg(long, value_name = "TEXT", default_value = "")]
    pub(crate) reason: String,
    /// Only print the plan; write nothing.
    #[arg(long)]
    pub(crate) dry_run: bool,
}

/// Asks for the reset's plan (and the reset unless `--dry-run`) and prints it.
pub(crate) async fn reset(
    mut client: Client,
    format: Format,
    args: ResetArgs,
) -> Result<(), Failure> {
    let to = match (args.to_step, args.to_seq) {
        (Some(step), _) => To::Step(step),
        (None, Some(seq)) => To::Seq(seq),
        // clap's `point` group requires one of the two.
        (None, None) => return Err(Failure::Usage("name --to-step or --to-seq".into())),
    };
    let request = ResetExecutionRequest {
        execution_id: args.id.clone(),
        to: Some(to.clone()),
        drop_signals: args.drop_signals,
        to_version: args.to_version.clone().unwrap_or_default(),
        reason: args.reason,
        request_id: args.request_id.unwrap_or_default(),
        dry_run: args.dry_run,
    };
    let response = client.reset_execution(request).await?.into_inner();
    match format {
        Format::Json => print_json(&reset_json(&args.id, &response)),
        Format::Human => {
            print_text(&reset_text(&to, args.drop_signals, args.to_version.as_deref(), &response))
        }
    }
    Ok(())
}

/// Asks for the fork's plan (and the fork unless `--dry-run`) and prints it.
pub(crate) async fn fork(
    mut client: Client,
    format: Format,
    args: ForkArgs,
) -> Result<(), Failure> {
    let request = ForkExecutionRequest {
        execution_id: args.id.clone(),
        run: args.run,
        at_seq: args.at,
        new_execution_id: args.new_id,
        version: args.version.clone().unwrap_or_default(),
        reason: args.reason,
        dry_run: args.dry_run,
    };
    let response = client.fork_execution(request).await?.into_inner();
    match format {
        Format::Json => print_json(&fork_json(&args.id, &response)),
        Format::Human => {
            let version = args.version.as_deref();
            print_text(&fork_text(&args.id, args.run, version, args.dry_run, &response));
        }
    }
    Ok(())
}

fn plan_json(plan: &RestorePlan) -> Json {
    let changes: Vec<_> = plan
        .changes
        .iter()
        .map(|c| {
            json!({"kind": c.kind, "step": c.step, "detail": c.detail, "safe": c.safe,
                "reason": c.reason})
        })
        .collect();
    json!({
        "through_seq": plan.through_seq,
        "kept": plan.kept,
        "forgotten": plan.forgotten,
        "signals_after": plan.signals_after,
        "version": plan.version,
        "changes": changes,
        "safe": plan.safe,
    })
}

fn reset_json(id: &str, r: &ResetExecutionResponse) -> Json {
    json!({
        "execution_id": id,
        "plan": plan_json(&r.plan.clone().unwrap_or_default()),
        "reset": r.reset,
        "run": r.run,
        "seq": r.seq,
    })
}

fn fork_json(source: &str, r: &ForkExecutionResponse) -> Json {
    json!({
        "source_execution_id": source,
        "plan": plan_json(&r.plan.clone().unwrap_or_default()),
        "created": r.created,
        "execution_id": r.execution_id,
        "version": r.version,
    })
}

/// Units as one comma-separated list, or `none`.
fn units(list: &[String]) -> String {
    if list.is_empty() {
        "none".to_owned()
    } else {
        list.join(", ")
    }
}

/// The plan's lines after the point: version, kept, run again, signals, the migration.
fn plan_lines(out: &mut String, plan: &RestorePlan, to_version: Option<&str>, signals: &str) {
    let _ = writeln!(out, "version:       {}", plan.version);
    let _ = writeln!(out, "kept:          {}", units(&plan.kept));
    let _ = writeln!(out, "run again:     {}", units(&plan.forgotten));
    let _ = writeln!(out, "signals after: {}{signals}", plan.signals_after);
    let Some(to) = to_version.filter(|v| *v != plan.version) else { return };
    let verdict = if plan.safe { "safe" } else { "UNSAFE: refused (MIGRATION_UNSAFE)" };
    let _ = writeln!(out, "migration:     {} -> {to}, {verdict}", plan.version);
    if plan.changes.is_empty() {
        out.push_str("  no differences\n");
    }
    for c in &plan.changes {
        let mark = if c.safe { "safe  " } else { "UNSAFE" };
        let _ = writeln!(out, "  {mark} {:<22} {}: {} ({})", c.kind, c.step, c.detail, c.reason);
    }
}

fn reset_text(
    to: &To,
    drop_signals: bool,
    to_version: Option<&str>,
    r: &ResetExecutionResponse,
) -> String {
    let plan = r.plan.clone().unwrap_or_default();
    let mut out = String::new();
    let point = match to {
        To::Step(step) => format!("before step {step} first started"),
        To::Seq(seq) => format!("after seq {seq}"),
    };
    let _ = writeln!(out, "point:         {point} (events through seq {} kept)", plan.through_seq);
    let signals = match (plan.signals_after, drop_signals) {
        (0, _) => "",
        (_, false) => " (received again by the new run)",
        (_, true) => " (dropped)",
    };
    plan_lines(&mut out, &plan, to_version, signals);
    if r.reset {
        let _ = writeln!(out, "reset: run {}, RunRestored at seq {}", r.run, r.seq);
    } else {
        let _ = writeln!(out, "dry run: nothing written (run {} would be reset)", r.run);
    }
    out
}

fn fork_text(
    source: &str,
    run: u32,
    version: Option<&str>,
    dry_run: bool,
    r: &ForkExecutionResponse,
) -> String {
    let plan = r.plan.clone().unwrap_or_default();
    let mut out = String::new();
    let run = if run == 0 { "current run".to_owned() } else { format!("run {run}") };
    let _ = writeln!(
        out,
        "point:         {source}, {run}, after seq {} (events through seq {} kept)",
        plan.through_seq, plan.through_seq
    );
    let signals = if plan.signals_after == 0 { "" } else { " (not given to the fork)" };
    plan_lines(&mut out, &plan, version, signals);
    let (id, v) = (&r.execution_id, &r.version);
    let _ = match (dry_run, r.created) {
        (true, _) => writeln!(out, "dry run: nothing written ({id} would run version {v})"),
        (false, true) => writeln!(out, "forked: {id}, version {v}"),
        (false, false) => writeln!(out, "{id} exists already: nothing written (version {v})"),
    };
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use orbit_api::v1::MigrationChange;

    /// `orbit execution reset`'s arguments alone.
    #[derive(Parser, Debug)]
    struct Reset {
        #[command(flatten)]
        args: ResetArgs,
    }

    /// `orbit execution fork`'s arguments alone.
    #[derive(Parser, Debug)]
    struct Fork {
        #[command(flatten)]
        args: ForkArgs,
    }

    fn reset_args(args: &[&str]) -> Result<ResetArgs, clap::Error> {
        Reset::try_parse_from(std::iter::once("reset").chain(args.iter().copied())).map(|r| r.args)
    }

    fn fork_args(args: &[&str]) -> Result<ForkArgs, clap::Error> {
        Fork::try_parse_from(std::iter::once("fork").chain(args.iter().copied())).map(|f| f.args)
    }

    #[test]
    fn a_reset_names_exactly_one_point() {
        let a = reset_args(&["e1", "--to-step", "charge", "--dry-run", "--drop-signals"]).unwrap();
        assert_eq!((a.id.as_str(), a.to_step.as_deref(), a.to_seq), ("e1", Some("charge"), None));
        assert!(a.dry_run && a.drop_signals && a.to_version.is_none() && a.request_id.is_none());
        let a =
            reset_args(&["e1", "--to-seq", "7", "--to-version", "2", "--reason", "why"]).unwrap();
        assert_eq!(
            (a.to_seq, a.to_version.as_deref(), a.reason.as_str()),
            (Some(7), Some("2"), "why")
        );
        assert!(!a.dry_run && !a.drop_signals);
        let none = reset_args(&["e1"]).unwrap_err();
        assert_eq!(none.kind(), clap::error::ErrorKind::MissingRequiredArgument, "{none}");
        let both = reset_args(&["e1", "--to-step", "a", "--to-seq", "3"]).unwrap_err();
        assert_eq!(both.kind(), clap::error::ErrorKind::ArgumentConflict, "{both}");
        let bad = reset_args(&["e1", "--to-seq", "seven"]).unwrap_err();
        assert_eq!(bad.exit_code(), 2, "{bad}");
    }

    #[test]
    fn a_fork_needs_a_seq_and_a_new_id() {
        let a = fork_args(&["e1", "--at", "7", "--new-id", "copy"]).unwrap();
        assert_eq!((a.id.as_str(), a.at, a.new_id.as_str(), a.run), ("e1", 7, "copy", 0));
        assert!(!a.dry_run && a.version.is_none());
        let a = fork_args(&["e1", "--at", "7", "--new-id", "c", "--run", "2", "--version", "3"])
            .unwrap();
        assert_eq!((a.run, a.version.as_deref()), (2, Some("3")));
        for missing in [&["e1", "--at", "7"][..], &["e1", "--new-id", "c"]] {
            let err = fork_args(missing).unwrap_err();
            assert_eq!(err.kind(), clap::error::ErrorKind::MissingRequiredArgument, "{err}");
        }
        let zero = fork_args(&["e1", "--at", "0", "--new-id", "c"]).unwrap_err();
        assert_eq!(zero.kind(), clap::error::ErrorKind::ValueValidation, "{zero}");
    }

    fn plan() -> RestorePlan {
        RestorePlan {
            through_seq: 7,
            kept: vec!["a".into(), "b".into()],
            forgotten: vec!["charge".into(), "ship".into()],
            signals_after: 2,
            version: "1".into(),
            changes: Vec::new(),
            safe: true,
        }
    }

    #[test]
    fn the_reset_text_says_what_is_kept_and_run_again() {
        let dry = ResetExecutionResponse { plan: Some(plan()), reset: false, run: 1, seq: 0 };
        let text = reset_text(&To::Step("charge".into()), false, None, &dry);
        assert_eq!(
            text,
            "point:         before step charge first started (events through seq 7 kept)\n\
             version:       1\n\
             kept:          a, b\n\
             run again:     charge, ship\n\
             signals after: 2 (received again by the new run)\n\
             dry run: nothing written (run 1 would be reset)\n"
        );
        let done = ResetExecutionResponse { reset: true, run: 2, seq: 9, ..dry };
        let text = reset_text(&To::Seq(7), true, None, &done);
        assert!(text.starts_with("point:         after seq 7 (events through seq 7 kept)\n"));
        assert!(text.contains("signals after: 2 (dropped)\n"), "{text}");
        assert!(text.ends_with("reset: run 2, RunRestored at seq 9\n"), "{text}");
        let json = reset_json("e1", &done);
        assert_eq!(json["plan"]["forgotten"], json!(["charge", "ship"]));
        assert_eq!(
            (&json["reset"], &json["run"], &json["seq"]),
            (&json!(true), &json!(2), &json!(9))
        );
    }

    #[test]
    fn a_target_version_shows_the_checked_diff() {
        let change = MigrationChange {
            kind: "added".into(),
            step: "d".into(),
            detail: "new step".into(),
            safe: false,
            reason: "r".into(),
        };
        let p = RestorePlan { changes: vec![change], safe: false, ..plan() };
        let dry = ResetExecutionResponse { plan: Some(p), reset: false, run: 1, seq: 0 };
        let text = reset_text(&To::Seq(7), false, Some("2"), &dry);
        assert!(text.contains("migration:     1 -> 2, UNSAFE: refused (MIGRATION_UNSAFE)\n"));
        assert!(text.contains("  UNSAFE added"), "{text}");
        // The version in effect at the point is no migration.
        assert!(!reset_text(&To::Seq(7), false, Some("1"), &dry).contains("migration:"));
    }

    #[test]
    fn the_fork_text_names_the_source_and_the_outcome() {
        let dry = ForkExecutionResponse {
            plan: Some(plan()),
            created: false,
            execution_id: "copy".into(),
            version: "1".into(),
        };
        let text = fork_text("e1", 0, None, true, &dry);
        assert!(text.starts_with("point:         e1, current run, after seq 7"), "{text}");
        assert!(text.contains("signals after: 2 (not given to the fork)\n"), "{text}");
        assert!(text.ends_with("dry run: nothing written (copy would run version 1)\n"), "{text}");
        let done = ForkExecutionResponse { created: true, ..dry.clone() };
        assert!(fork_text("e1", 1, None, false, &done).ends_with("forked: copy, version 1\n"));
        let existed = fork_text("e1", 1, None, false, &dry);
        assert!(existed.ends_with("copy exists already: nothing written (version 1)\n"));
        assert_eq!(fork_json("e1", &done)["execution_id"], "copy");
    }
}
