//! Inbox entries → engine commands. The inbox is how every other service talks to an
//! execution's owner; each kind has one payload shape, written by the frontend (results,
//! signals, cancels, session loss), the store (`dispatched`, at claim time), the scheduler
//! (`timer`) or another execution's commit (`child_closed`, `cancel`).

use orbit_engine::{Command, Status, TaskError};
use orbit_store::InboxEntry;
use serde_json::Value;

/// What an inbox entry asks of the owner.
#[derive(Debug)]
pub(crate) enum Request {
    /// Apply this command.
    Command(Box<Command>),
    /// Only decide again (a timer fired).
    Tick,
    /// An operator action of the poison quarantine (never runs the engine on the entry).
    Control(Control),
}

/// Operator actions on a parked (or any open) execution.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Control {
    /// Unpark: clear the mark and the count, apply the pending entries again.
    Resume,
    /// End it FAILED with code `TERMINATED`, without the decider.
    Terminate { reason: String },
}

/// Why an entry could not be understood; recorded as its result.
pub(crate) type Refusal = (&'static str, String);

fn text(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(str::to_string)
}

fn token(entry: &InboxEntry) -> Result<String, Refusal> {
    entry
        .token
        .clone()
        .or_else(|| text(&entry.payload, "token"))
        .ok_or(("INVALID_ARGUMENT", format!("{} entry without a token", entry.kind)))
}

/// Decodes an entry.
pub(crate) fn request(entry: &InboxEntry) -> Result<Request, Refusal> {
    let p = &entry.payload;
    let command = match entry.kind.as_str() {
        "timer" => return Ok(Request::Tick),
        "resume" => return Ok(Request::Control(Control::Resume)),
        "terminate" => {
            let reason = text(p, "reason").unwrap_or_default();
            return Ok(Request::Control(Control::Terminate { reason }));
        }
        "dispatched" => Command::Dispatched {
            step: text(p, "step")
                .ok_or(("INVALID_ARGUMENT", "dispatched without step".to_string()))?,
            token: token(entry)?,
            worker_id: text(p, "worker_id").or_else(|| text(p, "claimed_by")).unwrap_or_default(),
            session: text(p, "session").unwrap_or_default(),
        },
        "complete" => Command::Complete {
            token: token(entry)?,
            output: p.get("output").cloned().unwrap_or(Value::Null),
        },
        "fail" => {
            let error: TaskError =
                serde_json::from_value(p.get("error").cloned().unwrap_or(Value::Null))
                    .map_err(|e| ("INVALID_ARGUMENT", format!("fail entry: bad error: {e}")))?;
            Command::Fail { token: token(entry)?, error }
        }
        "heartbeat" => {
            Command::Heartbeat { token: token(entry)?, details: p.get("details").cloned() }
        }
        "uncertain" => Command::Uncertain {
            token: token(entry)?,
            reason: text(p, "reason").unwrap_or_else(|| "SESSION_LOST".into()),
        },
        "signal" => Command::Signal {
            name: text(p, "name")
                .ok_or(("INVALID_ARGUMENT", "signal without a name".to_string()))?,
            payload: p.get("payload").cloned().unwrap_or(Value::Null),
        },
        "cancel" => {
            Command::Cancel { reason: text(p, "reason").unwrap_or_else(|| "cancelled".into()) }
        }
        "child_closed" => Command::ChildClosed {
            step: text(p, "step")
                .ok_or(("INVALID_ARGUMENT", "child_closed without step".to_string()))?,
            status: status(&text(p, "status").unwrap_or_default()),
            output: p.get("output").cloned().filter(|v| !v.is_null()),
            error: p.get("error").cloned().and_then(|e| serde_json::from_value(e).ok()),
        },
        other => return Err(("INVALID_ARGUMENT", format!("unknown inbox kind `{other}`"))),
    };
    Ok(Request::Command(Box::new(command)))
}

/// A `child_closed` entry must come from the child the unit waits for: the child id in the
/// entry is the one the parent's own history started for that unit (never derived from a
/// caller-supplied id), so a forged child cannot resolve another execution's step.
pub(crate) fn check_child(
    state: &orbit_engine::State,
    entry: &InboxEntry,
    cmd: &Command,
) -> Result<(), Refusal> {
    let Command::ChildClosed { step, .. } = cmd else { return Ok(()) };
    let child = text(&entry.payload, "child_id").unwrap_or_default();
    let waits_for = state.unit(step).and_then(|u| match &u.wait {
        Some(orbit_engine::state::Wait::Child(id)) => Some(id.as_str()),
        _ => None,
    });
    if waits_for == Some(child.as_str()) {
        Ok(())
    } else {
        Err((
            "INVALID_ARGUMENT",
            format!("child_closed from `{child}`: unit `{step}` does not wait for that child"),
        ))
    }
}

/// Parses an API status name; unknown names read as failed.
pub(crate) fn status(name: &str) -> Status {
    match name {
        "COMPLETED" => Status::Completed,
        "CANCELLED" => Status::Cancelled,
        "TIMED_OUT" => Status::TimedOut,
        "RUNNING" => Status::Running,
        "COMPENSATING" => Status::Compensating,
        "CONTINUED_AS_NEW" => Status::ContinuedAsNew,
        _ => Status::Failed,
    }
}
