//! What one commit changed in one execution, as change notifications carry it (issue 14:
//! reads only when their own thing changed).
//!
//! Readers waiting on an execution (a reply wait, a watch, a task's supervisor) used to
//! re-read the store on every change of it. A [`Change`] says what the commit did: the run,
//! the last event seq it appended, whether the run closed, the inbox entries it applied with
//! their replies, the units whose task rows it cancelled and the tokens of the results
//! handed to the owner that it recorded. A reader reads only when that is
//! its own thing, and takes a reply straight from the change: it is the very value the
//! commit recorded on the entry.
//!
//! In one process the hub carries the `Change` itself; across processes it is the
//! `orbit_changes` NOTIFY payload ([`Change::encode`] / [`Change::decode`]), built from the
//! same batch in the same transaction. A payload is limited to 8000 bytes by PostgreSQL:
//! a change that does not fit (large update replies) is sent as the bare execution id, and
//! a change without detail makes every reader read, as before.
//!
//! A commit that completes its run also carries the run's output ([`Completed`]), so a
//! watch of the result answers from the change without reading the history back: on the
//! split that read sat between the run's last commit and the client. It is the first thing
//! dropped when a payload would not fit.

use crate::batch::CommitBatch;
use crate::inbox::InboxReply;
use serde_json::{json, Value};
use std::sync::Arc;

/// Largest payload sent with detail; PostgreSQL refuses payloads of 8000 bytes or more.
pub const MAX_PAYLOAD_BYTES: usize = 7_900;

/// A change of one execution, with or without the detail of what changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// The execution.
    pub execution_id: String,
    /// What the commit did; `None` when unknown (too large for a payload, or published by a
    /// writer that does not say): readers then read.
    pub detail: Option<Arc<ChangeDetail>>,
}

/// What one commit did to one run of an execution.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChangeDetail {
    /// The run written.
    pub run: u32,
    /// Seq of the last event appended to that run; `None` when no event was appended.
    pub last_seq: Option<u64>,
    /// The run closed (a terminal event, or a closed status in the projection).
    pub closed: bool,
    /// Inbox entries applied, with the reply recorded on each.
    pub applied: Vec<(u64, Option<InboxReply>)>,
    /// Units whose task rows (queued or claimed) were cancelled.
    pub cancelled_units: Vec<String>,
    /// Tokens of the results handed to the owner that this commit recorded (their rows are
    /// done, see `CommitBatch::tasks_done`).
    pub done_tokens: Vec<String>,
    /// The run completed in this commit: its output. `None` for any other commit, a run
    /// that ended otherwise, or an output too large for a notification payload.
    pub completed: Option<Completed>,
}

/// A run's successful end, as a result watch reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completed {
    /// The `WorkflowCompleted` output.
    pub output: Value,
    /// Time of the run's last event in this commit (what a read of the history would call
    /// its close).
    pub closed_at_ms: u64,
}

impl Change {
    /// A change whose detail is unknown: every reader of the execution reads.
    #[must_use]
    pub fn unknown(execution_id: &str) -> Change {
        Change { execution_id: execution_id.to_string(), detail: None }
    }

    /// What committing `batch` changes.
    #[must_use]
    pub fn of_batch(batch: &CommitBatch) -> Change {
        let closed = batch.events.iter().any(|e| e.event.is_terminal())
            || batch.projection.as_ref().is_some_and(|p| p.status.is_closed());
        let detail = ChangeDetail {
            run: batch.run,
            last_seq: batch.events.iter().map(|e| e.seq).max(),
            closed,
            applied: batch.inbox_done.iter().map(|d| (d.seq, d.result.clone())).collect(),
            cancelled_units: batch.units_to_cancel.clone(),
            done_tokens: batch.tasks_done.clone(),
            completed: completed(batch),
        };
        Change { execution_id: batch.execution_id.clone(), detail: Some(Arc::new(detail)) }
    }

    /// The NOTIFY payload: compact JSON; only `{"e": id}` when the detail is unknown or
    /// would make it longer than [`MAX_PAYLOAD_BYTES`].
    #[must_use]
    pub fn encode(&self) -> String {
        let bare = || json!({ "e": self.execution_id }).to_string();
        let Some(d) = &self.detail else { return bare() };
        let applied: Vec<Value> = d
            .applied
            .iter()
            .map(|(seq, reply)| json!([seq, reply.as_ref().map(InboxReply::to_json)]))
            .collect();
        let mut body = json!({
            "e": self.execution_id,
            "r": d.run,
            "s": d.last_seq,
            "c": d.closed,
            "a": applied,
            "u": d.cancelled_units,
            "t": d.done_tokens,
        });
        if let Some(c) = &d.completed {
            body["o"] = json!([c.output, c.closed_at_ms]);
            let text = body.to_string();
            if text.len() <= MAX_PAYLOAD_BYTES {
                return text;
            }
            // Too large with the output: the rest still fits, and the watch reads it.
            if let Some(o) = body.as_object_mut() {
                o.remove("o");
            }
        }
        let text = body.to_string();
        if text.len() <= MAX_PAYLOAD_BYTES {
            text
        } else {
            bare()
        }
    }

    /// Reads a payload. Anything that is not this module's JSON is taken as a bare execution
    /// id (what older versions sent), and a detail that does not read is dropped: both then
    /// make readers read.
    #[must_use]
    pub fn decode(payload: &str) -> Change {
        let Ok(Value::Object(o)) = serde_json::from_str::<Value>(payload) else {
            return Change::unknown(payload);
        };
        let Some(id) = o.get("e").and_then(Value::as_str) else {
            return Change::unknown(payload);
        };
        Change { execution_id: id.to_string(), detail: detail(&o).map(Arc::new) }
    }
}

fn detail(o: &serde_json::Map<String, Value>) -> Option<ChangeDetail> {
    let run = u32::try_from(o.get("r")?.as_u64()?).ok()?;
    let last_seq = match o.get("s")? {
        Value::Null => None,
        v => Some(v.as_u64()?),
    };
    let closed = o.get("c")?.as_bool()?;
    let mut applied = Vec::new();
    for pair in o.get("a")?.as_array()? {
        let [seq, reply] = pair.as_array()?.as_slice() else { return None };
        let reply = match reply {
            Value::Null => None,
            v => Some(InboxReply::from_json(v).ok()?),
        };
        applied.push((seq.as_u64()?, reply));
    }
    let strings = |key: &str| -> Option<Vec<String>> {
        o.get(key)?.as_array()?.iter().map(|u| u.as_str().map(str::to_string)).collect()
    };
    let cancelled_units = strings("u")?;
    let done_tokens = strings("t")?;
    // Absent from payloads of older releases (and when the output did not fit).
    let completed = match o.get("o") {
        None => None,
        Some(v) => match v.as_array()?.as_slice() {
            [output, at] => Some(Completed { output: output.clone(), closed_at_ms: at.as_u64()? }),
            _ => return None,
        },
    };
    Some(ChangeDetail { run, last_seq, closed, applied, cancelled_units, done_tokens, completed })
}

/// The run's output when `batch` completes it.
fn completed(batch: &CommitBatch) -> Option<Completed> {
    let output = batch.events.iter().find_map(|e| match &e.event {
        orbit_engine::Event::WorkflowCompleted { output } => Some(output.clone()),
        _ => None,
    })?;
    let closed_at_ms = batch.events.last().map_or(0, |e| e.timestamp_ms);
    Some(Completed { output, closed_at_ms })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::{InboxDone, ProjectionUpdate};
    use orbit_codes::ErrorCode;
    use orbit_engine::{CompensationOutcome, Event, HistoryEvent, Origin, Status};

    fn detailed(d: ChangeDetail) -> Change {
        Change { execution_id: "ex-1 {\"odd\"}".into(), detail: Some(Arc::new(d)) }
    }

    #[test]
    fn a_change_survives_its_payload() {
        let change = detailed(ChangeDetail {
            run: 2,
            last_seq: Some(17),
            closed: true,
            applied: vec![
                (5, Some(InboxReply::Applied { seq: 17, run: 2, applied: false })),
                (6, None),
                (7, Some(InboxReply::Updated { seq: 9, run: 2, result: json!({"n": [1, 2]}) })),
                (
                    8,
                    Some(InboxReply::Refused {
                        code: ErrorCode::ExecutionFinished,
                        message: "x".into(),
                    }),
                ),
            ],
            cancelled_units: vec!["a".into(), "b/c".into()],
            done_tokens: vec!["0123abcd".into()],
            completed: Some(Completed { output: json!({"total": [1, "x"]}), closed_at_ms: 1_700 }),
        });
        assert_eq!(Change::decode(&change.encode()), change);
        let nothing = detailed(ChangeDetail { run: 1, ..ChangeDetail::default() });
        assert_eq!(Change::decode(&nothing.encode()), nothing);
    }

    #[test]
    fn a_change_too_large_for_a_payload_goes_without_detail() {
        let big = json!({ "blob": "x".repeat(MAX_PAYLOAD_BYTES) });
        let change = detailed(ChangeDetail {
            run: 1,
            applied: vec![(3, Some(InboxReply::Updated { seq: 4, run: 1, result: big }))],
            ..ChangeDetail::default()
        });
        let payload = change.encode();
        assert!(payload.len() < 8000, "{} bytes", payload.len());
        assert_eq!(Change::decode(&payload), Change::unknown("ex-1 {\"odd\"}"));
    }

    #[test]
    fn other_payloads_are_bare_ids_without_detail() {
        assert_eq!(Change::decode("e1"), Change::unknown("e1"));
        assert_eq!(Change::decode("{not json"), Change::unknown("{not json"));
        assert_eq!(Change::decode(r#"{"e":"e1"}"#), Change::unknown("e1"));
        // A detail that does not read (an unknown reply shape) is dropped, not guessed.
        let odd = r#"{"e":"e1","r":1,"s":null,"c":false,"a":[[1,{"what":1}]],"u":[],"t":[]}"#;
        assert_eq!(Change::decode(odd), Change::unknown("e1"));
    }

    #[test]
    fn a_batch_says_what_it_did() {
        let event =
            |seq, event| HistoryEvent { seq, timestamp_ms: 0, origin: Origin::Decided, event };
        let batch = CommitBatch {
            execution_id: "e".into(),
            run: 3,
            events: vec![
                event(4, Event::CompensationCompleted {}),
                event(5, Event::WorkflowTimedOut { compensation: CompensationOutcome::None }),
            ],
            projection: Some(ProjectionUpdate {
                status: Status::Cancelled,
                updated_at_ms: 0,
                closed_at_ms: Some(0),
                delete_after_ms: None,
                failed_step: None,
                error_code: None,
            }),
            inbox_done: vec![InboxDone { seq: 9, result: None }],
            units_to_cancel: vec!["u".into()],
            tasks_done: vec!["tok".into()],
            ..CommitBatch::default()
        };
        let d = Change::of_batch(&batch).detail.expect("detail");
        assert_eq!(
            *d,
            ChangeDetail {
                run: 3,
                last_seq: Some(5),
                closed: true,
                applied: vec![(9, None)],
                cancelled_units: vec!["u".into()],
                done_tokens: vec!["tok".into()],
                completed: None,
            }
        );
        let done = CommitBatch {
            execution_id: "e".into(),
            run: 1,
            events: vec![
                HistoryEvent {
                    seq: 7,
                    timestamp_ms: 40,
                    origin: Origin::Recorded,
                    event: Event::StepSucceeded {
                        step: "s".into(),
                        attempt: Some(1),
                        output: json!(1),
                    },
                },
                event(8, Event::WorkflowCompleted { output: json!({"ok": true}) }),
            ],
            ..CommitBatch::default()
        };
        let d = Change::of_batch(&done).detail.expect("detail");
        assert_eq!(d.completed, Some(Completed { output: json!({"ok": true}), closed_at_ms: 0 }));
        let quiet = Change::of_batch(&CommitBatch { run: 1, ..CommitBatch::default() });
        assert_eq!(quiet.detail.expect("detail").last_seq, None);
    }
}
