//! How a schedule prints: one JSON document (`--output json`) or `key: value` lines.

use orbit_api::v1::recurrence::Trigger as MoreTrigger;
use orbit_api::v1::schedule_spec::Trigger;
use orbit_api::v1::Schedule;
use prost_types::Duration;
use serde_json::{json, Value as Json};

use crate::client::output::{or_dash, print_json, print_text, ts, ts_json, Fields, Format};

fn enum_text(full: &str, prefix: &str) -> String {
    full.strip_prefix(prefix).unwrap_or(full).to_owned()
}

/// A schedule as one JSON document.
pub(super) fn schedule_json(s: &Schedule) -> Json {
    let spec = s.spec.clone().unwrap_or_default();
    let action = s.action.clone().unwrap_or_default();
    let state = s.state.clone().unwrap_or_default();
    let recurrence = |cron: Option<&String>, iv: Option<&Duration>, offset: Option<&Duration>| {
        match (cron, iv) {
            (Some(c), _) => json!({"cron": c}),
            (None, iv) => json!({
                "every": iv.map(ToString::to_string),
                "offset": offset.map(ToString::to_string),
            }),
        }
    };
    let mut recurrences = Vec::new();
    match &spec.trigger {
        Some(Trigger::Cron(c)) => recurrences.push(recurrence(Some(c), None, None)),
        Some(Trigger::Interval(d)) => {
            recurrences.push(recurrence(None, Some(d), spec.offset.as_ref()))
        }
        None => {}
    }
    for r in &spec.more {
        match &r.trigger {
            Some(MoreTrigger::Cron(c)) => recurrences.push(recurrence(Some(c), None, None)),
            Some(MoreTrigger::Interval(d)) => {
                recurrences.push(recurrence(None, Some(d), r.offset.as_ref()));
            }
            None => {}
        }
    }
    json!({
        "schedule_id": s.schedule_id,
        "spec": {
            "recurrences": recurrences,
            "timezone": if spec.timezone.is_empty() { "UTC" } else { spec.timezone.as_str() },
            "jitter": spec.jitter.as_ref().map(ToString::to_string),
            "overlap": enum_text(spec.overlap().as_str_name(), "OVERLAP_POLICY_"),
            "catch_up": enum_text(spec.catch_up().as_str_name(), "CATCH_UP_POLICY_"),
            "catch_up_window": spec.catch_up_window.as_ref().map(ToString::to_string),
            "start_at": ts_json(spec.start_at.as_ref()),
            "end_at": ts_json(spec.end_at.as_ref()),
            "pause_on_failure": spec.pause_on_failure,
            "remaining_actions": spec.remaining_actions,
        },
        "action": {
            "workflow": action.workflow,
            "version": action.version,
            "input": crate::client::convert::payload(action.input.map(orbit_server_kit::payload::proto_to_json)),
        },
        "state": {
            "paused": state.paused,
            "note": state.note,
            "next_fire_at": ts_json(state.next_fire_at.as_ref()),
            "last_fire_at": ts_json(state.last_fire_at.as_ref()),
            "last_execution_id": state.last_execution_id,
            "fired_count": state.fired_count,
            "skipped_count": state.skipped_count,
            "last_error": state.last_error,
            "remaining_actions": state.remaining_actions,
            "buffered_count": state.buffered_count,
        },
        "created_at": ts_json(s.created_at.as_ref()),
        "updated_at": ts_json(s.updated_at.as_ref()),
    })
}

fn schedule_text(s: &Schedule) -> String {
    let doc = schedule_json(s);
    let state = s.state.clone().unwrap_or_default();
    let action = s.action.clone().unwrap_or_default();
    Fields::new()
        .add("schedule", &s.schedule_id)
        .add(
            "workflow",
            format!(
                "{}{}",
                action.workflow,
                if action.version.is_empty() {
                    String::new()
                } else {
                    format!("@{}", action.version)
                }
            ),
        )
        .add("spec", doc["spec"]["recurrences"].to_string())
        .add("timezone", doc["spec"]["timezone"].as_str().unwrap_or("UTC"))
        .add("overlap", doc["spec"]["overlap"].as_str().unwrap_or("-"))
        .add("catch up", doc["spec"]["catch_up"].as_str().unwrap_or("-"))
        .add("paused", if state.paused { "yes" } else { "no" })
        .add_nonempty("note", &state.note)
        .add("next fire", ts(state.next_fire_at.as_ref()))
        .add("last fire", ts(state.last_fire_at.as_ref()))
        .add("last execution", or_dash(&state.last_execution_id))
        .add("fired", state.fired_count)
        .add("skipped", state.skipped_count)
        .add_nonempty("last error", &state.last_error)
        .render()
}

pub(super) fn print_schedule(format: Format, s: &Schedule, extra: Option<(&str, Json)>) {
    match format {
        Format::Json => {
            let mut doc = json!({"schedule": schedule_json(s)});
            if let Some((k, v)) = extra {
                doc[k] = v;
            }
            print_json(&doc);
        }
        Format::Human => print_text(&schedule_text(s)),
    }
}
