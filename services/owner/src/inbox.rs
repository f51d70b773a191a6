//! Inbox entries → engine commands. The inbox is how every other service talks to an
//! execution's owner; the messages and their stored form are `orbit_store::inbox` (the one
//! protocol module). This module maps a decoded message to what the owner does with it.

use orbit_engine::{Command, CommandError, ErrorCode};
use orbit_store::{InboxEntry, InboxMessage};

/// What an inbox entry asks of the owner.
#[derive(Debug)]
pub(crate) enum Request {
    /// Apply this command; for a `child_closed`, the child it comes from (see
    /// [`check_child`]).
    Command(Box<Command>, Option<String>),
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
    /// Run another version of its workflow from now on, if the checked diff says it is
    /// safe for its state (see `migrate`).
    Migrate { to_version: String, reason: String },
    /// Go on in the next run from the current run's state at an earlier point (see
    /// `reset`).
    Reset(orbit_store::inbox::Reset),
}

/// Decodes an entry; an unknown kind or a malformed payload is refused (`INVALID_ARGUMENT`).
pub(crate) fn request(entry: &InboxEntry) -> Result<Request, CommandError> {
    let message = InboxMessage::decode(&entry.kind, entry.token.as_deref(), &entry.payload)?;
    let command = match message {
        InboxMessage::Timer(_) => return Ok(Request::Tick),
        InboxMessage::Resume(_) => return Ok(Request::Control(Control::Resume)),
        InboxMessage::Terminate(t) => {
            return Ok(Request::Control(Control::Terminate { reason: t.reason }))
        }
        InboxMessage::Migrate(m) => {
            let migrate = Control::Migrate { to_version: m.to_version, reason: m.reason };
            return Ok(Request::Control(migrate));
        }
        InboxMessage::Reset(r) => return Ok(Request::Control(Control::Reset(r))),
        InboxMessage::Dispatched(d) => Command::Dispatched {
            step: d.step,
            token: d.token,
            // Rows written before claims carried the worker's id name the frontend.
            worker_id: if d.worker_id.is_empty() { d.claimed_by } else { d.worker_id },
            session: d.session,
        },
        InboxMessage::Complete(c) => Command::Complete { token: c.token, output: c.output },
        InboxMessage::Fail(f) => Command::Fail { token: f.token, error: f.error },
        InboxMessage::Heartbeat(h) => Command::Heartbeat { token: h.token, details: h.details },
        InboxMessage::Uncertain(u) => Command::Uncertain { token: u.token, reason: u.reason },
        InboxMessage::Signal(s) => Command::Signal { name: s.name, payload: s.payload },
        InboxMessage::Cancel(c) => Command::Cancel { reason: c.reason },
        InboxMessage::SlotGranted(g) => Command::SlotGranted { key: g.key },
        InboxMessage::Update(u) => {
            Command::Update { name: u.name, args: u.args, update_id: u.request_id }
        }
        InboxMessage::ChildClosed(c) => {
            let command = Command::ChildClosed {
                step: c.step,
                status: c.status,
                output: c.output,
                error: c.error,
            };
            return Ok(Request::Command(Box::new(command), Some(c.child_id)));
        }
    };
    Ok(Request::Command(Box::new(command), None))
}

/// A `child_closed` entry must come from the child the unit waits for: the child id in the
/// entry is the one the parent's own history started for that unit (never derived from a
/// caller-supplied id), so a forged child cannot resolve another execution's step.
pub(crate) fn check_child(
    state: &orbit_engine::State,
    cmd: &Command,
    child: Option<&str>,
) -> Result<(), CommandError> {
    let Command::ChildClosed { step, .. } = cmd else { return Ok(()) };
    let child = child.unwrap_or_default();
    let waits_for = state.unit(step).and_then(|u| match &u.wait {
        Some(orbit_engine::state::Wait::Child(id)) => Some(id.as_str()),
        _ => None,
    });
    if waits_for == Some(child) {
        Ok(())
    } else {
        Err(CommandError::new(
            ErrorCode::InvalidArgument,
            format!("child_closed from `{child}`: unit `{step}` does not wait for that child"),
        ))
    }
}
