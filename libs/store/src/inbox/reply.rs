//! The owner's reply to an inbox entry ([`InboxReply`]), recorded on the entry in the commit
//! that applied it, and its JSON shape in the `result` column. A child of `inbox.rs`
//! (re-exported there).

use orbit_codes::ErrorCode;
use orbit_engine::CommandError;
use serde::{Deserialize, Serialize};
use serde_json::Value;

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
