//! Rendering of `orbit execution describe`: one run's summary, units, pending work and
//! result, as JSON or as a `key: value` block followed by one table per non-empty section.

use orbit_api::v1::{ExecutionDescription, ExecutionInfo, FlowWait, PendingTask};
use orbit_server_kit::payload::proto_to_json;
use serde_json::{json, Value as Json};
use std::fmt::Write as _;

use super::convert::{
    info_json, payload, status_name, task_error_json, task_error_text, task_ref_text,
};
use super::output::{enum_name, or_dash, pretty, ts, ts_json, Fields, Table};

/// A description as JSON.
#[must_use]
pub fn description_json(d: &ExecutionDescription) -> Json {
    let units: Vec<Json> = d
        .units
        .iter()
        .map(|u| {
            json!({
                "key": u.key,
                "step": u.step,
                "status": enum_name(u.status().as_str_name(), "UNIT_STATUS_"),
                "attempt": u.attempt,
                "redelivery": u.redelivery,
                "idempotency_key": u.idempotency_key,
                "task": u.task,
                "last_error": u.last_error.as_ref().map_or(Json::Null, task_error_json),
                "updated_at": ts_json(u.updated_at.as_ref()),
            })
        })
        .collect();
    let tasks: Vec<Json> = d
        .pending_tasks
        .iter()
        .map(|t| {
            json!({
                "unit": t.unit,
                "task": task_ref_text(t.task.as_ref()),
                "attempt": t.attempt,
                "state": enum_name(t.state().as_str_name(), "PENDING_TASK_STATE_"),
                "worker_id": t.worker_id,
                "scheduled_at": ts_json(t.scheduled_at.as_ref()),
                "deadline": ts_json(t.deadline.as_ref()),
                "last_heartbeat_at": ts_json(t.last_heartbeat_at.as_ref()),
                "priority": t.priority,
                "concurrency_key": t.concurrency_key,
                "rate_limit_key": t.rate_limit_key,
                "waiting_on": waiting_on(t).map_or(Json::Null, Json::from),
                "labels": labels_json(t),
                "sticky_worker": t.sticky_worker,
            })
        })
        .collect();
    let timers: Vec<Json> = d
        .pending_timers
        .iter()
        .map(|t| {
            json!({
                "unit": t.unit,
                "kind": enum_name(t.kind().as_str_name(), "TIMER_KIND_"),
                "fire_at": ts_json(t.fire_at.as_ref()),
            })
        })
        .collect();
    let awaits: Vec<Json> = d
        .pending_awaits
        .iter()
        .map(|a| json!({"unit": a.unit, "signal": a.signal, "timeout_at": ts_json(a.timeout_at.as_ref())}))
        .collect();
    let children: Vec<Json> = d
        .pending_children
        .iter()
        .map(|c| {
            json!({
                "unit": c.unit,
                "child_execution_id": c.child_execution_id,
                "workflow": c.workflow,
                "version": c.version,
            })
        })
        .collect();
    let mut buffered: Vec<(&String, &u32)> = d.buffered_signals.iter().collect();
    buffered.sort();
    json!({
        "info": d.info.as_ref().map_or(Json::Null, info_json),
        "units": units,
        "pending_tasks": tasks,
        "pending_timers": timers,
        "pending_awaits": awaits,
        "pending_children": children,
        "buffered_signals": buffered.into_iter().map(|(k, v)| (k.clone(), json!(v))).collect::<serde_json::Map<_, _>>(),
        "output": payload(d.output.clone().map(proto_to_json)),
        "error": d.error.as_ref().map_or(Json::Null, task_error_json),
        "suspension": d.suspension.as_ref().map_or(Json::Null, |s| json!({
            "reason": s.reason,
            "entry_seq": s.entry_seq,
            "failures": s.failures,
        })),
        "waiting_for_slot": if d.waiting_for_slot.is_empty() {
            Json::Null
        } else {
            Json::from(d.waiting_for_slot.clone())
        },
    })
}

/// A description as text: the summary block, then a titled table per non-empty section.
#[must_use]
pub fn description_text(d: &ExecutionDescription) -> String {
    let mut fields = summary(d.info.as_ref().unwrap_or(&ExecutionInfo::default()));
    if d.output.is_some() {
        fields.add("output", pretty(&payload(d.output.clone().map(proto_to_json))));
    }
    if let Some(error) = &d.error {
        fields.add("error", task_error_text(error));
        let details = payload(error.details.clone().map(proto_to_json));
        if !details.is_null() {
            fields.add("details", pretty(&details));
        }
    }
    if let Some(s) = &d.suspension {
        fields.add(
            "suspended",
            format!(
                "inbox entry {} failed {} times: {} (orbit execution resume|terminate)",
                s.entry_seq, s.failures, s.reason
            ),
        );
    }
    if !d.waiting_for_slot.is_empty() {
        let waiting = format!(
            "a slot of concurrency key {} (held by another execution; starts when it closes)",
            d.waiting_for_slot
        );
        fields.add("waiting", waiting);
    }
    let mut out = fields.render();

    let mut units = Table::new(&["UNIT", "STATUS", "ATTEMPT", "TASK", "UPDATED", "LAST ERROR"]);
    for u in &d.units {
        units.row(vec![
            u.key.clone(),
            enum_name(u.status().as_str_name(), "UNIT_STATUS_"),
            format!("{}{}", u.attempt, if u.redelivery { " (redelivery)" } else { "" }),
            or_dash(&u.task).to_owned(),
            ts(u.updated_at.as_ref()),
            u.last_error.as_ref().map_or_else(|| "-".to_owned(), task_error_text),
        ]);
    }
    section(&mut out, "units", &units);

    let mut tasks = Table::new(&[
        "UNIT",
        "TASK",
        "ATTEMPT",
        "STATE",
        "PRIORITY",
        "WORKER",
        "DEADLINE",
        "FLOW CONTROL",
    ]);
    for t in &d.pending_tasks {
        tasks.row(vec![
            t.unit.clone(),
            task_ref_text(t.task.as_ref()),
            t.attempt.to_string(),
            enum_name(t.state().as_str_name(), "PENDING_TASK_STATE_"),
            if t.priority == 0 { "-".to_owned() } else { t.priority.to_string() },
            or_dash(&t.worker_id).to_owned(),
            ts(t.deadline.as_ref()),
            flow_text(t),
        ]);
    }
    section(&mut out, "pending tasks", &tasks);

    let mut timers = Table::new(&["UNIT", "KIND", "FIRES AT"]);
    for t in &d.pending_timers {
        timers.row(vec![
            or_dash(&t.unit).to_owned(),
            enum_name(t.kind().as_str_name(), "TIMER_KIND_"),
            ts(t.fire_at.as_ref()),
        ]);
    }
    section(&mut out, "pending timers", &timers);

    let mut awaits = Table::new(&["UNIT", "SIGNAL", "TIMES OUT AT"]);
    for a in &d.pending_awaits {
        awaits.row(vec![a.unit.clone(), a.signal.clone(), ts(a.timeout_at.as_ref())]);
    }
    section(&mut out, "waiting for signals", &awaits);

    let mut children = Table::new(&["UNIT", "CHILD EXECUTION", "WORKFLOW"]);
    for c in &d.pending_children {
        children.row(vec![
            c.unit.clone(),
            c.child_execution_id.clone(),
            format!("{}@{}", c.workflow, c.version),
        ]);
    }
    section(&mut out, "running children", &children);

    let mut signals = Table::new(&["SIGNAL", "BUFFERED"]);
    let mut buffered: Vec<_> = d.buffered_signals.iter().collect();
    buffered.sort();
    for (name, count) in buffered {
        signals.row(vec![name.clone(), count.to_string()]);
    }
    section(&mut out, "buffered signals", &signals);
    out
}

/// Why a queued attempt is held back by flow control, briefly (`CONCURRENCY`,
/// `RATE_LIMIT`), or `None` when it is not.
fn waiting_on(t: &PendingTask) -> Option<String> {
    match t.waiting_on() {
        FlowWait::Unspecified => None,
        wait => Some(enum_name(wait.as_str_name(), "FLOW_WAIT_")),
    }
}

/// The required worker labels, keys sorted.
fn labels_json(t: &PendingTask) -> Json {
    let sorted: std::collections::BTreeMap<&String, &String> = t.labels.iter().collect();
    json!(sorted)
}

/// What flow control says of a pending task, in words: what it waits on, the concurrency
/// key it holds, the rate limit it takes from, the worker labels it requires and the
/// worker it sticks to; `-` when none applies.
fn flow_text(t: &PendingTask) -> String {
    let mut parts = Vec::new();
    match t.waiting_on() {
        FlowWait::Concurrency => parts.push("waiting on its concurrency limit".to_owned()),
        FlowWait::RateLimit => parts.push("waiting on its rate limit".to_owned()),
        FlowWait::Unspecified => {}
    }
    if !t.concurrency_key.is_empty() {
        parts.push(format!("concurrency key {}", t.concurrency_key));
    }
    if !t.rate_limit_key.is_empty() {
        parts.push(format!("rate limit {}", t.rate_limit_key));
    }
    if !t.labels.is_empty() {
        let mut pairs: Vec<String> = t.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        pairs.sort();
        parts.push(format!("on {}", pairs.join(",")));
    }
    if !t.sticky_worker.is_empty() {
        parts.push(format!("sticky to {}", t.sticky_worker));
    }
    if parts.is_empty() {
        "-".to_owned()
    } else {
        parts.join("; ")
    }
}

/// The `key: value` lines of an execution summary.
fn summary(info: &ExecutionInfo) -> Fields {
    let mut f = Fields::new();
    f.add("execution", &info.execution_id)
        .add("run", info.run)
        .add("workflow", format!("{}@{}", info.workflow, info.version))
        .add("hash", &info.definition_hash)
        .add("status", status_name(info.status()));
    if info.root_id != info.execution_id {
        f.add_nonempty("root", &info.root_id);
    }
    f.add_nonempty("parent", &info.parent_id)
        .add_nonempty("schedule", &info.schedule_id)
        .add("created", ts(info.created_at.as_ref()))
        .add("updated", ts(info.updated_at.as_ref()));
    if info.closed_at.is_some() {
        f.add("closed", ts(info.closed_at.as_ref()));
    }
    f.add("last seq", info.last_seq);
    f
}

/// Appends `\n<title>:\n<table>` unless the table is empty.
fn section(out: &mut String, title: &str, table: &Table) {
    if !table.is_empty() {
        let _ = write!(out, "\n{title}:\n{}", table.render());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use orbit_api::v1::{
        ExecutionStatus, PendingTaskState, TaskError, TaskRef, UnitStatus, UnitSummary,
    };
    use orbit_server_kit::payload::json_to_proto;

    fn failed() -> ExecutionDescription {
        ExecutionDescription {
            info: Some(ExecutionInfo {
                execution_id: "order-1".into(),
                run: 1,
                root_id: "order-1".into(),
                workflow: "orders".into(),
                version: "1".into(),
                status: ExecutionStatus::Failed.into(),
                last_seq: 9,
                ..ExecutionInfo::default()
            }),
            units: vec![UnitSummary {
                key: "charge".into(),
                step: "charge".into(),
                status: UnitStatus::Failed.into(),
                attempt: 3,
                task: "payments.charge".into(),
                last_error: Some(TaskError {
                    code: "CARD_DECLINED".into(),
                    message: "declined".into(),
                    ..TaskError::default()
                }),
                ..UnitSummary::default()
            }],
            error: Some(TaskError {
                code: "CARD_DECLINED".into(),
                message: "declined".into(),
                retryable: false,
                details: Some(json_to_proto(json!({"card": "visa"}))),
            }),
            ..ExecutionDescription::default()
        }
    }

    #[test]
    fn text_shows_summary_error_and_units() {
        let text = description_text(&failed());
        assert!(text.contains("status:    FAILED"), "{text}");
        assert!(text.contains("workflow:  orders@1"), "{text}");
        assert!(!text.contains("root:"), "{text}");
        assert!(text.contains("error:     CARD_DECLINED: declined"), "{text}");
        assert!(text.contains("\"card\": \"visa\""), "{text}");
        assert!(text.contains("\nunits:\nUNIT"), "{text}");
        assert!(!text.contains("pending tasks"), "{text}");
    }

    #[test]
    fn pending_tasks_show_priority_and_flow_control() {
        let queued = |unit: &str| PendingTask {
            unit: unit.into(),
            task: Some(TaskRef { name: "payments.charge".into(), version: "1".into() }),
            attempt: 1,
            state: PendingTaskState::Queued.into(),
            ..PendingTask::default()
        };
        let d = ExecutionDescription {
            pending_tasks: vec![
                PendingTask {
                    priority: 2,
                    concurrency_key: "tenant-7".into(),
                    rate_limit_key: "payments-api".into(),
                    waiting_on: FlowWait::RateLimit.into(),
                    ..queued("charge")
                },
                PendingTask {
                    concurrency_key: "tenant-7".into(),
                    waiting_on: FlowWait::Concurrency.into(),
                    ..queued("refund")
                },
                queued("ship"),
                PendingTask {
                    labels: [("pool".to_string(), "gpu".to_string())].into(),
                    sticky_worker: "w-1".into(),
                    ..queued("render")
                },
            ],
            ..failed()
        };
        let text = description_text(&d);
        assert!(text.contains("PRIORITY"), "{text}");
        assert!(
            text.contains(
                "waiting on its rate limit; concurrency key tenant-7; rate limit payments-api"
            ),
            "{text}"
        );
        assert!(text.contains("waiting on its concurrency limit; concurrency key tenant-7"));
        let ship = text.lines().find(|l| l.starts_with("ship")).expect("ship row");
        assert!(ship.ends_with(" -"), "{ship}");
        let value = description_json(&d);
        let tasks = &value["pending_tasks"];
        assert_eq!(tasks[0]["priority"], 2);
        assert_eq!(tasks[0]["waiting_on"], "RATE_LIMIT");
        assert_eq!(tasks[0]["rate_limit_key"], "payments-api");
        assert_eq!(tasks[1]["waiting_on"], "CONCURRENCY");
        assert_eq!(tasks[1]["concurrency_key"], "tenant-7");
        assert_eq!(tasks[2]["waiting_on"], Json::Null);
        assert!(text.contains("on pool=gpu; sticky to w-1"), "{text}");
        assert_eq!(tasks[3]["labels"], json!({"pool": "gpu"}));
        assert_eq!(tasks[3]["sticky_worker"], "w-1");
        assert_eq!(tasks[2]["concurrency_key"], "");
    }

    #[test]
    fn a_run_waiting_for_a_workflow_slot_says_which_key() {
        let d = ExecutionDescription { waiting_for_slot: "billing/acme".into(), ..failed() };
        let text = description_text(&d);
        assert!(text.contains("waiting:   a slot of concurrency key billing/acme"), "{text}");
        assert_eq!(description_json(&d)["waiting_for_slot"], "billing/acme");
        assert_eq!(description_json(&failed())["waiting_for_slot"], Json::Null);
    }

    #[test]
    fn json_names_enums_briefly() {
        let value = description_json(&failed());
        assert_eq!(value["info"]["status"], "FAILED");
        assert_eq!(value["units"][0]["status"], "FAILED");
        assert_eq!(value["error"]["details"], json!({"card": "visa"}));
        assert_eq!(value["output"], Json::Null);
    }
}
