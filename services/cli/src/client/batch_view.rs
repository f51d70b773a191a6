//! How a batch prints: one JSON document (`--output json`) or `key: value` lines, the
//! progress line of `orbit batch start --wait`, and a dry run's per-execution answers.

use orbit_api::v1::{batch_action, Batch, BatchItem, StartBatchResponse};
use orbit_server_kit::payload::proto_to_json;
use serde_json::{json, Value as Json};
use std::fmt::Write as _;

use super::output::{enum_name, print_json, print_text, ts, ts_json, Fields, Format};

fn state(b: &Batch) -> String {
    enum_name(b.state().as_str_name(), "BATCH_STATE_")
}

fn action_json(b: &Batch) -> Json {
    match b.action.as_ref().and_then(|a| a.action.as_ref()) {
        Some(batch_action::Action::Migrate(m)) => json!({"migrate": {"to_version": m.to_version}}),
        Some(batch_action::Action::Reset(r)) => json!({"reset": {
            "step": r.step, "drop_signals": r.drop_signals, "to_version": r.to_version
        }}),
        Some(batch_action::Action::Cancel(c)) => json!({"cancel": {"reason": c.reason}}),
        Some(batch_action::Action::Terminate(t)) => json!({"terminate": {"reason": t.reason}}),
        Some(batch_action::Action::Signal(sig)) => json!({"signal": {
            "name": sig.name,
            "payload": sig.payload.clone().map(proto_to_json).transpose().ok().flatten(),
        }}),
        Some(batch_action::Action::Delete(_)) => json!({"delete": {}}),
        None => Json::Null,
    }
}

/// A batch as one JSON document.
pub(super) fn batch_json(b: &Batch) -> Json {
    let selector = b.selector.clone().unwrap_or_default();
    let statuses: Vec<String> =
        selector.statuses().map(|s| enum_name(s.as_str_name(), "EXECUTION_STATUS_")).collect();
    json!({
        "batch_id": b.batch_id,
        "state": state(b),
        "selector": {
            "workflow": selector.workflow,
            "version": selector.version,
            "statuses": statuses,
            "query": selector.query,
        },
        "action": action_json(b),
        "rate_per_second": b.rate_per_second,
        "total": b.total,
        "done": b.done,
        "succeeded": b.succeeded,
        "failed": b.failed,
        "skipped": b.skipped,
        "cursor": b.cursor,
        "reason": b.reason,
        "created_at": ts_json(b.created_at.as_ref()),
        "updated_at": ts_json(b.updated_at.as_ref()),
    })
}

/// Prints a batch, with one more field (`created`, `cancelled`) in front when given.
pub(super) fn print_batch(format: Format, b: &Batch, extra: Option<(&str, Json)>) {
    match format {
        Format::Json => {
            let mut j = batch_json(b);
            if let Some((key, value)) = extra {
                j[key] = value;
            }
            print_json(&j);
        }
        Format::Human => {
            let j = batch_json(b);
            let mut f = Fields::new();
            f.add("batch", &b.batch_id).add("state", state(b));
            if let Some((key, value)) = extra {
                f.add(key, value);
            }
            f.add("workflow", j["selector"]["workflow"].as_str().unwrap_or_default());
            f.add_nonempty("version", j["selector"]["version"].as_str().unwrap_or_default());
            f.add_nonempty("query", j["selector"]["query"].as_str().unwrap_or_default());
            f.add("statuses", j["selector"]["statuses"].to_string());
            f.add("action", j["action"].to_string());
            f.add("rate", format!("{}/s", b.rate_per_second));
            f.add("progress", format!("{}/{}", b.done, b.total));
            f.add("succeeded", b.succeeded).add("failed", b.failed).add("skipped", b.skipped);
            f.add_nonempty("cursor", &b.cursor).add_nonempty("reason", &b.reason);
            f.add("created", ts(b.created_at.as_ref())).add("updated", ts(b.updated_at.as_ref()));
            print_text(&f.render());
        }
    }
}

/// The `--wait` progress line.
pub(super) fn progress(b: &Batch) -> String {
    format!(
        "batch {}: {} {}/{} done ({} succeeded, {} failed, {} skipped)",
        b.batch_id,
        state(b),
        b.done,
        b.total,
        b.succeeded,
        b.failed,
        b.skipped
    )
}

/// One item as JSON.
pub(super) fn item_json(i: &BatchItem) -> Json {
    json!({
        "execution_id": i.execution_id,
        "outcome": enum_name(i.outcome().as_str_name(), "BATCH_ITEM_OUTCOME_"),
        "code": i.code,
        "message": i.message,
        "seq": i.seq,
    })
}

/// A dry run as JSON.
pub(super) fn dry_run_json(r: &StartBatchResponse) -> Json {
    let items: Vec<Json> = r
        .dry_run_items
        .iter()
        .map(|i| {
            let changes: Vec<Json> = i
                .changes
                .iter()
                .map(|c| json!({"kind": c.kind, "step": c.step, "detail": c.detail, "safe": c.safe, "reason": c.reason}))
                .collect();
            json!({
                "execution_id": i.execution_id,
                "safe": i.safe,
                "from_version": i.from_version,
                "changes": changes,
                "code": i.code,
                "message": i.message,
            })
        })
        .collect();
    json!({"dry_run": true, "total": r.dry_run_total, "items": items})
}

/// A dry run for people: one line per execution, its unsafe differences under it.
pub(super) fn dry_run_text(r: &StartBatchResponse) -> String {
    let mut out = String::new();
    let (mut safe, mut not) = (0, 0);
    for i in &r.dry_run_items {
        if !i.code.is_empty() {
            not += 1;
            let _ = writeln!(out, "{}  {}: {}", i.execution_id, i.code, i.message);
            continue;
        }
        if let (Some(plan), true) = (&i.plan, i.safe) {
            safe += 1;
            let kept = plan.kept.join(", ");
            let again = plan.forgotten.join(", ");
            let _ = writeln!(
                out,
                "{}  reset through seq {} (version {}): kept [{kept}], run again [{again}] and what started after",
                i.execution_id, plan.through_seq, plan.version
            );
        } else if i.safe {
            safe += 1;
            let _ = writeln!(out, "{}  safe from version {}", i.execution_id, i.from_version);
        } else {
            not += 1;
            let _ = writeln!(out, "{}  UNSAFE from version {}", i.execution_id, i.from_version);
            for c in i.changes.iter().filter(|c| !c.safe) {
                let _ = writeln!(
                    out,
                    "    UNSAFE {:<22} {}: {} ({})",
                    c.kind, c.step, c.detail, c.reason
                );
            }
        }
    }
    let shown = r.dry_run_items.len();
    let _ = writeln!(
        out,
        "dry run: {} selected (showing {shown}): {safe} safe, {not} would fail or be skipped; nothing started",
        r.dry_run_total
    );
    out
}
