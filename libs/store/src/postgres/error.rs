//! Driver errors, what they mean for a caller, and the bounded retry of transient conflicts.
//!
//! Inside the backend an operation fails with [`PgErr`]: either a driver error (whose
//! SQLSTATE still tells whether a retry may help) or an already decided [`StoreError`]. At
//! the trait boundary every error becomes a `StoreError`:
//! * lost or refused connections, server shutdown, too many connections: `Unavailable`;
//! * serialization failures and deadlocks (40001, 40P01) are retried by the backend's `run!`
//!   (in `mod.rs`) up to [`MAX_ATTEMPTS`] times, then `Unavailable`;
//! * unique violations that a concurrent writer caused: `ExecutionExists` for `executions`,
//!   `Fenced` for `owners`, `Conflict` otherwise;
//! * anything else: `Storage`.

use crate::error::StoreError;
use std::time::Duration;
use tokio_postgres::error::SqlState;

/// Attempts of one operation when it keeps hitting serialization failures or deadlocks.
pub(crate) const MAX_ATTEMPTS: u32 = 5;

/// An error inside the PostgreSQL backend.
#[derive(Debug)]
pub(crate) enum PgErr {
    /// From the driver or the server.
    Db(tokio_postgres::Error),
    /// Decided by the backend (a refused batch, a row that does not decode).
    Store(StoreError),
}

impl From<tokio_postgres::Error> for PgErr {
    fn from(e: tokio_postgres::Error) -> Self {
        PgErr::Db(e)
    }
}

impl From<StoreError> for PgErr {
    fn from(e: StoreError) -> Self {
        PgErr::Store(e)
    }
}

/// The backend's result type.
pub(crate) type PgResult<T> = std::result::Result<T, PgErr>;

impl PgErr {
    fn code(&self) -> Option<&SqlState> {
        match self {
            PgErr::Db(e) => e.code(),
            PgErr::Store(_) => None,
        }
    }

    /// A serialization failure or deadlock: the transaction was rolled back and running it
    /// again may succeed.
    pub(crate) fn is_conflict(&self) -> bool {
        matches!(self.code(), Some(c) if *c == SqlState::T_R_SERIALIZATION_FAILURE
            || *c == SqlState::T_R_DEADLOCK_DETECTED)
    }

    /// The connection is gone (or the server is going away): nothing more can run on it.
    pub(crate) fn is_connection_lost(&self) -> bool {
        match self {
            PgErr::Db(e) => connection_lost(e),
            // Includes a pool that found no connection in time: retrying would wait again.
            PgErr::Store(_) => false,
        }
    }

    /// The error a caller sees.
    pub(crate) fn into_store(self) -> StoreError {
        match self {
            PgErr::Store(e) => e,
            PgErr::Db(e) => db_to_store(&e),
        }
    }
}

/// Whether a driver error means the connection cannot be used any more.
pub(crate) fn connection_lost(e: &tokio_postgres::Error) -> bool {
    if e.is_closed() {
        return true;
    }
    if let Some(code) = e.code() {
        let c = code.code();
        // Class 08: connection exception; 57P01-03: the server shuts down or restarts;
        // 53300: too many connections; 25P03: the server ended an idle transaction.
        return c.starts_with("08") || matches!(c, "57P01" | "57P02" | "57P03" | "53300" | "25P03");
    }
    // No SQLSTATE: the driver's own kinds. Parameter and column conversion errors are bugs
    // or bad data, not a lost connection; the socket, TLS and protocol ones are.
    const LOST: [&str; 7] = [
        "error communicating with the server",
        "unexpected message from server",
        "error performing TLS handshake",
        "error connecting to server",
        "timeout waiting for server",
        "error parsing response from server",
        "error encoding message to server",
    ];
    let text = e.to_string();
    LOST.iter().any(|p| text.starts_with(p))
}

/// Maps a driver error to the store's closed error enum.
pub(crate) fn db_to_store(e: &tokio_postgres::Error) -> StoreError {
    let Some(db) = e.as_db_error() else {
        return if connection_lost(e) {
            StoreError::Unavailable(format!("postgres connection: {}", describe(e)))
        } else {
            StoreError::Storage(format!("postgres: {}", describe(e)))
        };
    };
    let code = db.code();
    let text = format!("{} (SQLSTATE {})", db.message(), code.code());
    if connection_lost(e) {
        return StoreError::Unavailable(format!("postgres: {text}"));
    }
    if *code == SqlState::T_R_SERIALIZATION_FAILURE || *code == SqlState::T_R_DEADLOCK_DETECTED {
        return StoreError::Unavailable(format!(
            "postgres: transaction kept conflicting after {MAX_ATTEMPTS} attempts: {text}"
        ));
    }
    if *code == SqlState::QUERY_CANCELED || *code == SqlState::LOCK_NOT_AVAILABLE {
        return StoreError::Unavailable(format!("postgres: {text}"));
    }
    if *code == SqlState::UNIQUE_VIOLATION {
        let detail = db.detail().unwrap_or(db.message()).to_string();
        return match db.constraint() {
            Some("executions_pkey") => StoreError::ExecutionExists(detail),
            Some("owners_pkey") => {
                StoreError::Fenced(format!("owner row created concurrently: {detail}"))
            }
            _ => StoreError::Conflict(detail),
        };
    }
    // A statement's own refusal (a cast of its message, see `sql::COMMIT_INSERT_TASKS`).
    if *code == SqlState::INVALID_TEXT_REPRESENTATION && db.message().contains(REFUSAL) {
        return StoreError::Conflict(db.message().to_string());
    }
    StoreError::Storage(format!("postgres: {text}"))
}

/// How the commit statements' own refusals start (`'orbit commit: …'::bigint`).
const REFUSAL: &str = "\"orbit commit: ";

/// The driver error with its source chain (tokio-postgres puts the cause in `source`).
fn describe(e: &tokio_postgres::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        let s_text = s.to_string();
        if !text.contains(&s_text) {
            text.push_str(": ");
            text.push_str(&s_text);
        }
        source = s.source();
    }
    text
}

/// Sleeps before attempt `attempt + 1`: 5, 10, 20, 40 ms, each with up to 100 % jitter.
#[allow(clippy::disallowed_methods)] // The clock's nanoseconds seed the jitter; not a time.
pub(crate) async fn backoff(attempt: u32) {
    let base = 5u64 << attempt.saturating_sub(1).min(4);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::from(d.subsec_nanos()));
    let jitter = nanos % (base * 1_000 + 1);
    tokio::time::sleep(Duration::from_micros(base * 1_000 + jitter)).await;
}
