//! Workflow definitions on SQLite: immutable per (name, version).

use super::conn::now_ms;
use super::rows::{self, to_i64};
use super::sql;
use crate::error::{Result, StoreError};
use crate::model::{DefinitionRow, PutOutcome};
use rusqlite::{params, Connection, OptionalExtension};

/// Insert, or compare with the stored hash.
pub(crate) fn put(
    conn: &mut Connection,
    name: &str,
    version: &str,
    hash: &str,
    document: &str,
) -> Result<PutOutcome> {
    // The writer runs every job in its own savepoint (see `conn.rs`): no nested one here.
    let tx: &Connection = conn;
    let existing: Option<String> = tx
        .prepare_cached(sql::DEFINITION_HASH)?
        .query_row(params![name, version], |r| r.get(0))
        .optional()?;
    let outcome = match existing {
        Some(h) if h == hash => PutOutcome::Unchanged,
        Some(h) => {
            return Err(StoreError::Conflict(format!(
                "definition {name}@{version} is registered with hash {h}, not {hash}"
            )))
        }
        None => {
            let now = to_i64(now_ms(), "now")?;
            tx.prepare_cached(sql::DEFINITION_INSERT)?
                .execute(params![name, version, hash, document, now])?;
            PutOutcome::Created
        }
    };
    Ok(outcome)
}

/// One version, or the latest registered one.
pub(crate) fn get(
    conn: &Connection,
    name: &str,
    version: Option<&str>,
) -> Result<Option<DefinitionRow>> {
    let found = match version {
        Some(v) => conn
            .prepare_cached(sql::DEFINITION_GET)?
            .query_row(params![name, v], |r| Ok(rows::definition(r)))
            .optional()?,
        None => conn
            .prepare_cached(sql::DEFINITION_LATEST)?
            .query_row(params![name], |r| Ok(rows::definition(r)))
            .optional()?,
    };
    found.transpose()
}

/// Every definition.
pub(crate) fn list(conn: &Connection) -> Result<Vec<DefinitionRow>> {
    let mut stmt = conn.prepare_cached(sql::DEFINITION_LIST)?;
    let mut found = stmt.query([])?;
    let mut out = Vec::new();
    while let Some(row) = found.next()? {
        out.push(rows::definition(row)?);
    }
    Ok(out)
}
