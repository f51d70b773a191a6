//! The inbox protocol: every message another party leaves for an execution's owner, and
//! every reply the owner records on it, as types, serialised here and nowhere else.
//!
//! An inbox row is `(seq, execution_id, kind, token?, payload JSON, result JSON?)`. The
//! `kind` column is [`InboxMessage::kind`]; the payload is the variant's body as JSON; the
//! token column carries a worker result's task token. Writers build an [`InboxMessage`]
//! (the frontend for signals, cancels, operator actions and worker results, the store
//! itself for `dispatched`, `timer` and `uncertain`, the owner's commit for `cancel` and
//! `child_closed`); the owner decodes each row with [`InboxMessage::decode`], which refuses
//! an unknown kind or a malformed payload with `INVALID_ARGUMENT` (never a default), and
//! records an [`InboxReply`] on it.
//!
//! The JSON shapes are the ones rows were written with before the protocol was typed, so
//! entries already in a database decode (an old `timer` reply `{"ok": true}` does not, but
//! nobody waits for those).
//!
//! Where SQL must name a kind (claims write `dispatched`, firing writes `timer`, releasing
//! claims writes `uncertain`, a parked execution lets `resume` and `terminate` through), the
//! backends bind [`InboxKind::as_str`] as a parameter.

use orbit_codes::ErrorCode;
use orbit_engine::{CommandError, Status, TaskError};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Defines [`InboxKind`] and [`InboxMessage`] from one list, so a kind's name, its variant
/// and its body type cannot disagree.
macro_rules! inbox_kinds {
    ($($(#[$doc:meta])* $variant:ident($body:ident) => $text:literal,)+) => {
        /// The kind column of an inbox row.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum InboxKind {
            $($(#[$doc])* $variant,)+
        }

        impl InboxKind {
            /// Every kind.
            pub const ALL: &'static [InboxKind] = &[$(InboxKind::$variant,)+];

            /// The stored name.
            #[must_use]
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(InboxKind::$variant => $text,)+
                }
            }

            /// Parses a stored name.
            #[must_use]
            pub fn parse(s: &str) -> Option<InboxKind> {
                match s {
                    $($text => Some(InboxKind::$variant),)+
                    _ => None,
                }
            }
        }

        /// A message for an execution's owner.
        #[derive(Debug, Clone, PartialEq)]
        pub enum InboxMessage {
            $($(#[$doc])* $variant($body),)+
        }

        impl InboxMessage {
            /// The kind column.
            #[must_use]
            pub fn kind(&self) -> InboxKind {
                match self {
                    $(InboxMessage::$variant(_) => InboxKind::$variant,)+
                }
            }

            /// The payload column.
            #[must_use]
            pub fn payload(&self) -> Value {
                let value = match self {
                    $(InboxMessage::$variant(body) => serde_json::to_value(body),)+
                };
                // Bodies are plain structs of strings, numbers and JSON values.
                value.unwrap_or(Value::Null)
            }

            /// The stored payload column: the body serialised straight to JSON text (what
            /// every writer stores, without an intermediate [`Value`]).
            pub fn payload_text(&self) -> String {
                let text = match self {
                    $(InboxMessage::$variant(body) => serde_json::to_string(body),)+
                };
                text.unwrap_or_else(|_| "null".to_string())
            }

            fn decode_body(kind: InboxKind, payload: &Value) -> serde_json::Result<InboxMessage> {
                Ok(match kind {
                    $(InboxKind::$variant => InboxMessage::$variant($body::deserialize(payload)?),)+
                })
            }
        }
    };
}

inbox_kinds! {
    /// A signal for the workflow (`SignalExecution`).
    Signal(Signal) => "signal",
    /// A cancel request (`CancelExecution`, or a winding-down parent for its children).
    Cancel(Cancel) => "cancel",
    /// A worker completed an attempt.
    Complete(Complete) => "complete",
    /// A worker failed an attempt.
    Fail(Fail) => "fail",
    /// A worker's heartbeat for an attempt.
    Heartbeat(Heartbeat) => "heartbeat",
    /// A frontend claimed a task for a worker (written by the claim itself).
    Dispatched(Dispatched) => "dispatched",
    /// The session running an attempt was lost or went silent.
    Uncertain(Uncertain) => "uncertain",
    /// A durable timer fired: decide again.
    Timer(Timer) => "timer",
    /// A child execution closed (written by the child's commit).
    ChildClosed(ChildClosed) => "child_closed",
    /// An operator resumes a parked execution.
    Resume(Resume) => "resume",
    /// An operator terminates an execution.
    Terminate(Terminate) => "terminate",
    /// An update (`UpdateExecution`): a signal with a reply.
    Update(Update) => "update",
    /// An operator migrates the execution to another version of its workflow
    /// (`MigrateExecution`, see `orbit_engine::migrate`).
    Migrate(Migrate) => "migrate",
    /// An operator resets the execution to an earlier point of its current run
    /// (`ResetExecution`, see `orbit_engine::restore`).
    Reset(Reset) => "reset",
    /// The store granted a workflow-level concurrency slot the execution asked for
    /// (written by the commit that freed or gave it, see `crate::slots`).
    SlotGranted(SlotGranted) => "slot_granted",
}

/// A granted workflow-level concurrency slot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotGranted {
    /// The scoped key.
    pub key: String,
}

/// A reset: the current run ends and the next goes on from its state at a point.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reset {
    /// Back to just before this main-body step first started...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_step: Option<String>,
    /// ...or to the state after this seq (exactly one of the two is set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_seq: Option<u64>,
    /// Whether the signals received after the point are left out of the new run.
    #[serde(default)]
    pub drop_signals: bool,
    /// A version to migrate the new run to right away (checked like a migration).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_version: Option<String>,
    /// The operator's reason (recorded in `WorkflowReset` and `RunRestored`).
    #[serde(default)]
    pub reason: String,
    /// The caller's idempotency id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

/// A migration to another version of the execution's workflow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Migrate {
    /// The version to run from now on.
    pub to_version: String,
    /// The operator's reason, for the logs.
    #[serde(default)]
    pub reason: String,
    /// The caller's idempotency id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

/// An update.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Update {
    /// Update name.
    pub name: String,
    /// Argument.
    #[serde(default)]
    pub args: Value,
    /// The caller's idempotency id (`UpdateExecutionRequest.request_id`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

/// A signal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Signal {
    /// Signal name.
    pub name: String,
    /// Payload.
    #[serde(default)]
    pub payload: Value,
    /// The caller's idempotency id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

/// A cancel request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cancel {
    /// Why.
    #[serde(default = "cancelled")]
    pub reason: String,
    /// The caller's idempotency id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

fn cancelled() -> String {
    "cancelled".into()
}

/// A worker's output. The token travels in the row's token column.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Complete {
    /// The attempt's token.
    #[serde(default, skip_serializing)]
    pub token: String,
    /// The output.
    #[serde(default)]
    pub output: Value,
}

/// A worker's failure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fail {
    /// The attempt's token.
    #[serde(default, skip_serializing)]
    pub token: String,
    /// The error.
    pub error: TaskError,
}

/// A worker's heartbeat.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Heartbeat {
    /// The attempt's token.
    #[serde(default, skip_serializing)]
    pub token: String,
    /// Progress details, recorded when present.
    #[serde(default)]
    pub details: Option<Value>,
}

/// A claim: which worker, through which frontend and session, took which offer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Dispatched {
    /// The task row.
    pub task_id: u64,
    /// The unit key.
    pub step: String,
    /// Attempt number.
    pub attempt: u32,
    /// Offer number.
    pub offer: u32,
    /// The claim's token (also in the token column).
    #[serde(default)]
    pub token: String,
    /// The claiming frontend node.
    #[serde(default)]
    pub claimed_by: String,
    /// The worker session.
    #[serde(default)]
    pub session: String,
    /// The worker's declared id.
    #[serde(default)]
    pub worker_id: String,
}

/// An attempt whose outcome is unknown.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Uncertain {
    /// The attempt's token.
    #[serde(default, skip_serializing)]
    pub token: String,
    /// Why (`SESSION_LOST`, `HEARTBEAT_TIMEOUT`).
    #[serde(default = "session_lost")]
    pub reason: String,
}

fn session_lost() -> String {
    "SESSION_LOST".into()
}

/// A fired timer (or a request to decide again).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Timer {
    /// The timer's key.
    #[serde(default)]
    pub key: String,
    /// The run that set it.
    #[serde(default)]
    pub run: u32,
    /// When it was due, epoch milliseconds.
    #[serde(default)]
    pub fire_at: u64,
    /// What it carried.
    #[serde(default)]
    pub payload: Value,
}

/// A child's end, for the parent's unit that waits for it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChildClosed {
    /// The parent's unit.
    pub step: String,
    /// The child execution.
    pub child_id: String,
    /// Its final status (an unknown name is refused).
    pub status: Status,
    /// Its output, when completed.
    #[serde(default)]
    pub output: Option<Value>,
    /// Its error, when failed.
    #[serde(default)]
    pub error: Option<TaskError>,
}

/// Unpark a parked execution.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Resume {}

/// End an execution FAILED with code `TERMINATED`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Terminate {
    /// The operator's reason.
    #[serde(default)]
    pub reason: String,
    /// The caller's idempotency id (a batch's `batch:<id>`): a second entry with it answers
    /// with the first one's reply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

/// The kinds an operator sends, which a parked execution's owner still applies (it skips
/// every other entry of a parked execution).
/// A migration is one: a new version is how an operator repairs an execution a bad
/// definition parked.
/// A reset is one too: going back to before what parked it is a repair.
pub const OPERATOR_KINDS: [InboxKind; 4] =
    [InboxKind::Resume, InboxKind::Terminate, InboxKind::Migrate, InboxKind::Reset];

impl InboxMessage {
    /// The token column: a worker result's (or a claim's) task token.
    #[must_use]
    pub fn token(&self) -> Option<&str> {
        match self {
            InboxMessage::Complete(Complete { token, .. })
            | InboxMessage::Fail(Fail { token, .. })
            | InboxMessage::Heartbeat(Heartbeat { token, .. })
            | InboxMessage::Uncertain(Uncertain { token, .. })
            | InboxMessage::Dispatched(Dispatched { token, .. }) => Some(token),
            _ => None,
        }
    }

    /// The caller's idempotency id of a signal, cancel, update, migrate, reset or terminate, kept in the row's `request_id`
    /// column as well as the payload: the store answers a second entry with the same
    /// `(execution, kind, request_id)` with the first one's seq (see
    /// [`Inbox::enqueue_inbox`](crate::roles::Inbox::enqueue_inbox)).
    #[must_use]
    pub fn request_id(&self) -> Option<&str> {
        match self {
            InboxMessage::Signal(Signal { request_id, .. })
            | InboxMessage::Update(Update { request_id, .. })
            | InboxMessage::Migrate(Migrate { request_id, .. })
            | InboxMessage::Reset(Reset { request_id, .. })
            | InboxMessage::Cancel(Cancel { request_id, .. })
            | InboxMessage::Terminate(Terminate { request_id, .. }) => request_id.as_deref(),
            _ => None,
        }
    }

    /// Whether an earlier entry's stored payload (`payload_text` of the message that wrote
    /// it, same kind and request id) is this same request: equal as JSON values (key order
    /// aside). [`StoreError::RequestIdReused`](crate::StoreError::RequestIdReused) otherwise,
    /// naming the request id; nothing may be written then.
    ///
    /// # Errors
    /// The request id was used for another request.
    pub fn check_repeat(&self, earlier_payload: &str) -> crate::Result<()> {
        let same = serde_json::from_str::<Value>(earlier_payload)
            .ok()
            .zip(serde_json::from_str::<Value>(&self.payload_text()).ok())
            .is_some_and(|(a, b)| a == b);
        if same {
            return Ok(());
        }
        Err(crate::StoreError::RequestIdReused(format!(
            "request_id `{}` was used for another {} with a different name or payload; \
             a retry must repeat the request exactly, a new request needs a new request_id",
            self.request_id().unwrap_or_default(),
            self.kind().as_str()
        )))
    }

    fn token_mut(&mut self) -> Option<&mut String> {
        match self {
            InboxMessage::Complete(Complete { token, .. })
            | InboxMessage::Fail(Fail { token, .. })
            | InboxMessage::Heartbeat(Heartbeat { token, .. })
            | InboxMessage::Uncertain(Uncertain { token, .. })
            | InboxMessage::Dispatched(Dispatched { token, .. }) => Some(token),
            _ => None,
        }
    }

    /// Decodes a stored row. The token column wins over a token in the payload.
    ///
    /// # Errors
    /// `INVALID_ARGUMENT` for an unknown kind, a payload that does not fit the kind, or a
    /// worker result without a token.
    pub fn decode(
        kind: &str,
        token: Option<&str>,
        payload: &Value,
    ) -> Result<InboxMessage, CommandError> {
        let refuse = |m: String| CommandError::new(ErrorCode::InvalidArgument, m);
        let parsed =
            InboxKind::parse(kind).ok_or_else(|| refuse(format!("unknown inbox kind `{kind}`")))?;
        let mut message = InboxMessage::decode_body(parsed, payload)
            .map_err(|e| refuse(format!("malformed `{kind}` entry: {e}")))?;
        if let Some(slot) = message.token_mut() {
            if let Some(token) = token {
                token.clone_into(slot);
            }
            if slot.is_empty() {
                return Err(refuse(format!("`{kind}` entry without a token")));
            }
        }
        Ok(message)
    }
}

mod reply;
pub(crate) use reply::stored_reply;
pub use reply::InboxReply;

#[cfg(test)]
#[path = "inbox_tests.rs"]
mod tests;
