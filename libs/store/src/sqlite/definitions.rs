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

/// One version, or the latest (`orbit_definition::version::latest`).
pub(crate) fn get(
    conn: &Connection,
    name: &str,
    version: Option<&str>,
) -> Result<Option<DefinitionRow>> {
    let latest;
    let version = match version {
        Some(v) => v,
        None => match crate::VersionRow::latest(versions(conn, name)?) {
            Some(v) => {
                latest = v.version;
                &latest
            }
            None => return Ok(None),
        },
    };
    let found = conn
        .prepare_cached(sql::DEFINITION_GET)?
        .query_row(params![name, version], |r| Ok(rows::definition(r)))
        .optional()?;
    found.transpose()
}

/// The versions of `name` with their hashes, in registration order.
pub(crate) fn versions(conn: &Connection, name: &str) -> Result<Vec<crate::VersionRow>> {
    let mut stmt = conn.prepare_cached(sql::DEFINITION_VERSIONS)?;
    let found = stmt.query_map(params![name], |r| {
        Ok(crate::VersionRow { version: r.get(0)?, definition_hash: r.get(1)? })
    })?;
    Ok(found.collect::<rusqlite::Result<Vec<_>>>()?)
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
