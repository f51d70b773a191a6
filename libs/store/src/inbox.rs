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

/// The owner's reply to an entry, recorded on it in the commit that applied it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InboxReply {
    /// Applied: the history's last seq and the run afterwards; `applied` is false when a
    /// worker result was recorded as stale (kept, changed nothing).
    Applied {
        /// Last seq of the history after the entry.
        seq: u64,
        /// The run.
        run: u32,
        /// False for a result recorded as `StaleResultIgnored`.
        applied: bool,
    },
    /// A parked execution resumed.
    Resumed {
        /// The entry it was parked on (0: none).
        entry_seq: u64,
        /// The failures counted before it was parked.
        failures: u32,
    },
    /// An execution terminated (or found already terminated: `terminated: false`).
    Terminated {
        /// Seq of its `WorkflowFailed`.
        seq: u64,
        /// Whether this entry terminated it.
        terminated: bool,
    },
    /// An update was accepted: seq of its `UpdateAccepted`, and its reply.
    Updated {
        /// Seq of the `UpdateAccepted`.
        seq: u64,
        /// The run.
        run: u32,
        /// The handler's reply.
        result: Value,
    },
    /// The execution was migrated (`seq`: its `DefinitionMigrated`; 0 when it already ran
    /// `to_version`, nothing recorded), with the checked diff.
    Migrated {
        /// Seq of the `DefinitionMigrated` (0: nothing to do).
        seq: u64,
        /// The run.
        run: u32,
        /// The version it ran before.
        from_version: String,
        /// The version it runs now.
        to_version: String,
        /// The plan (`orbit_engine::migrate::Plan` as JSON).
        plan: Value,
    },
    /// The execution was reset: `run` is the new run, `seq` its `RunRestored`.
    Reset {
        /// Seq of the new run's `RunRestored`.
        seq: u64,
        /// The new run.
        run: u32,
        /// The restore plan (`orbit_engine::restore::Restore` as JSON), with the
        /// migration's plan under `migration` when the reset also migrated.
        plan: Value,
    },
    /// Refused, with the API code the caller receives.
    Refused {
        /// The code.
        code: ErrorCode,
        /// Why.
        message: String,
    },
}

/// A refusal as stored: `{"error": {"code", "message"}}`.
#[derive(Serialize, Deserialize)]
struct StoredError {
    code: ErrorCode,
    message: String,
}

/// The stored shapes of [`InboxReply`], tried in this order.
#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum StoredReply {
    Refused { error: StoredError },
    Resumed { ok: bool, entry_seq: u64, failures: u32 },
    Terminated { ok: bool, seq: u64, terminated: bool },
    Applied { ok: bool, seq: u64, run: u32, applied: bool },
    // Before `Updated`, which any row with `ok`, `seq` and `run` matches (a missing `update`
    // reads as null); a missing `migration` is an error, so other rows pass on.
    Migrated { ok: bool, seq: u64, run: u32, migration: StoredMigration },
    // Before `Updated` for the same reason; `reset.through_seq` is required.
    Reset { ok: bool, seq: u64, run: u32, reset: StoredReset },
    // After `Applied`: a missing `update` would read as null, so an `Applied` row must match
    // first (it has `applied`, which this shape lacks).
    Updated { ok: bool, seq: u64, run: u32, update: Value },
}

/// The stored body of [`InboxReply::Reset`].
#[derive(Serialize, Deserialize)]
struct StoredReset {
    through_seq: u64,
    plan: Value,
}

/// The stored body of [`InboxReply::Migrated`].
#[derive(Serialize, Deserialize)]
struct StoredMigration {
    from_version: String,
    to_version: String,
    plan: Value,
}

impl InboxReply {
    /// The refusal of a command.
    #[must_use]
    pub fn refused(e: CommandError) -> InboxReply {
        InboxReply::Refused { code: e.code, message: e.message }
    }

    /// The stored JSON.
    #[must_use]
    pub fn to_json(&self) -> Value {
        let stored = match self.clone() {
            InboxReply::Applied { seq, run, applied } => {
                StoredReply::Applied { ok: true, seq, run, applied }
            }
            InboxReply::Resumed { entry_seq, failures } => {
                StoredReply::Resumed { ok: true, entry_seq, failures }
            }
            InboxReply::Terminated { seq, terminated } => {
                StoredReply::Terminated { ok: true, seq, terminated }
            }
            InboxReply::Updated { seq, run, result } => {
                StoredReply::Updated { ok: true, seq, run, update: result }
            }
            InboxReply::Migrated { seq, run, from_version, to_version, plan } => {
                let migration = StoredMigration { from_version, to_version, plan };
                StoredReply::Migrated { ok: true, seq, run, migration }
            }
            InboxReply::Reset { seq, run, plan } => {
                let through_seq = plan["through_seq"].as_u64().unwrap_or(0);
                StoredReply::Reset { ok: true, seq, run, reset: StoredReset { through_seq, plan } }
            }
            InboxReply::Refused { code, message } => {
                StoredReply::Refused { error: StoredError { code, message } }
            }
        };
        serde_json::to_value(stored).unwrap_or(Value::Null)
    }

    /// Reads a stored reply.
    ///
    /// # Errors
    /// A description of what does not fit (an unknown code included).
    pub fn from_json(value: &Value) -> Result<InboxReply, String> {
        let stored = StoredReply::deserialize(value)
            .map_err(|_| format!("not an inbox reply: {}", truncate(value)))?;
        Ok(match stored {
            StoredReply::Refused { error } => {
                InboxReply::Refused { code: error.code, message: error.message }
            }
            StoredReply::Resumed { entry_seq, failures, .. } => {
                InboxReply::Resumed { entry_seq, failures }
            }
            StoredReply::Terminated { seq, terminated, .. } => {
                InboxReply::Terminated { seq, terminated }
            }
            StoredReply::Applied { seq, run, applied, .. } => {
                InboxReply::Applied { seq, run, applied }
            }
            StoredReply::Updated { seq, run, update, .. } => {
                InboxReply::Updated { seq, run, result: update }
            }
            StoredReply::Migrated { seq, run, migration, .. } => InboxReply::Migrated {
                seq,
                run,
                from_version: migration.from_version,
                to_version: migration.to_version,
                plan: migration.plan,
            },
            StoredReply::Reset { seq, run, reset, .. } => {
                InboxReply::Reset { seq, run, plan: reset.plan }
            }
        })
    }
}

/// A stored reply column read back; a reply that does not decode is a corrupt row.
pub(crate) fn stored_reply(value: Option<Value>) -> crate::Result<Option<InboxReply>> {
    value
        .map(|v| InboxReply::from_json(&v))
        .transpose()
        .map_err(|e| crate::StoreError::corrupt("inbox reply", e))
}

fn truncate(value: &Value) -> String {
    let text = value.to_string();
    match text.char_indices().nth(200) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}

#[cfg(test)]
#[path = "inbox_tests.rs"]
mod tests;
