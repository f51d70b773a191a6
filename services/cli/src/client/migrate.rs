//! `orbit execution migrate ID --to VERSION [--dry-run]`: the checked diff of the
//! execution's version against another, and the migration when every difference is safe
//! for the execution's state (`WorkflowService.MigrateExecution`).

use orbit_api::v1::{MigrateExecutionRequest, MigrateExecutionResponse};
use serde_json::json;
use std::fmt::Write as _;

use super::error::Failure;
use super::output::{print_json, print_text, Format};
use super::Client;

/// What the command was asked.
pub(crate) struct Migration {
    pub(crate) id: String,
    pub(crate) to: String,
    pub(crate) dry_run: bool,
    pub(crate) reason: String,
    pub(crate) request_id: Option<String>,
}

/// Asks for the diff (and the migration unless `dry_run`) and prints it.
pub(crate) async fn migrate(
    mut client: Client,
    format: Format,
    m: Migration,
) -> Result<(), Failure> {
    let request = MigrateExecutionRequest {
        execution_id: m.id,
        to_version: m.to,
        dry_run: m.dry_run,
        reason: m.reason,
        request_id: m.request_id.unwrap_or_default(),
    };
    let response = client.migrate_execution(request).await?.into_inner();
    match format {
        Format::Json => print_json(&response_json(&response)),
        Format::Human => print_text(&response_text(&response, m.dry_run)),
    }
    Ok(())
}

fn response_json(r: &MigrateExecutionResponse) -> serde_json::Value {
    let changes: Vec<_> = r
        .changes
        .iter()
        .map(|c| {
            json!({"kind": c.kind, "step": c.step, "detail": c.detail, "safe": c.safe,
                "reason": c.reason})
        })
        .collect();
    json!({
        "from_version": r.from_version,
        "to_version": r.to_version,
        "safe": r.safe,
        "migrated": r.migrated,
        "seq": r.seq,
        "run": r.run,
        "changes": changes,
        "renames": r.renames,
        "cancelled": r.cancelled,
    })
}

fn response_text(r: &MigrateExecutionResponse, dry_run: bool) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{} -> {}", r.from_version, r.to_version);
    if r.changes.is_empty() {
        out.push_str("  no differences\n");
    }
    for c in &r.changes {
        let mark = if c.safe { "safe  " } else { "UNSAFE" };
        let _ = writeln!(out, "  {mark} {:<22} {}: {} ({})", c.kind, c.step, c.detail, c.reason);
    }
    for unit in &r.cancelled {
        let _ = writeln!(out, "  cancels running unit {unit}");
    }
    let verdict = match (dry_run, r.migrated, r.safe) {
        (true, _, true) => "dry run: safe, nothing written".to_string(),
        (true, _, false) => "dry run: UNSAFE, a migration would be refused".to_string(),
        (false, true, _) => format!("migrated (seq {}, run {})", r.seq, r.run),
        (false, false, _) => "already runs this version: nothing written".to_string(),
    };
    let _ = writeln!(out, "{verdict}");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use orbit_api::v1::MigrationChange;

    fn change(kind: &str, step: &str, safe: bool) -> MigrationChange {
        MigrationChange {
            kind: kind.into(),
            step: step.into(),
            detail: "d".into(),
            safe,
            reason: "r".into(),
        }
    }

    #[test]
    fn the_text_says_what_differs_and_what_happened() {
        let r = MigrateExecutionResponse {
            from_version: "1".into(),
            to_version: "2".into(),
            changes: vec![change("added", "d", true), change("renamed", "a", false)],
            safe: false,
            ..MigrateExecutionResponse::default()
        };
        let text = response_text(&r, true);
        assert!(text.starts_with("1 -> 2\n"), "{text}");
        assert!(text.contains("safe   added"), "{text}");
        assert!(text.contains("UNSAFE renamed"), "{text}");
        assert!(text.ends_with("dry run: UNSAFE, a migration would be refused\n"), "{text}");
        let done = MigrateExecutionResponse { migrated: true, seq: 9, run: 1, safe: true, ..r };
        assert!(response_text(&done, false).ends_with("migrated (seq 9, run 1)\n"));
        let json = response_json(&done);
        assert_eq!(json["changes"][1]["kind"], "renamed");
        assert_eq!(json["seq"], 9);
    }
}
