//! Applying [`MIGRATIONS`](crate::migrations::MIGRATIONS) to a SQLite connection.
//!
//! Each pending migration runs in its own immediate transaction together with its
//! `schema_migrations` row, so a crash leaves either both or neither.

use super::conn::now_ms;
use super::rows::to_i64;
use super::sql;
use crate::error::Result;
use crate::migrations::{AppliedMigration, CREATE_SCHEMA_MIGRATIONS, MIGRATIONS};
use rusqlite::{params, Connection, TransactionBehavior};

/// The one dialect difference of the shared migration text (see `0001_init.sql`).
pub(crate) fn to_sqlite_dialect(sql: &str) -> String {
    sql.replace("BIGSERIAL PRIMARY KEY", "INTEGER PRIMARY KEY AUTOINCREMENT")
}

/// Apply pending migrations; returns the versions applied.
pub(crate) fn migrate(conn: &mut Connection) -> Result<Vec<u32>> {
    conn.execute_batch(CREATE_SCHEMA_MIGRATIONS)?;
    let mut applied = Vec::new();
    for m in MIGRATIONS {
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let done: i64 = tx.query_row(sql::MIGRATION_APPLIED, [m.version], |r| r.get(0))?;
        if done == 0 {
            tx.execute_batch(&to_sqlite_dialect(m.sql))?;
            tx.execute(
                sql::MIGRATION_RECORD,
                params![m.version, m.name, to_i64(now_ms(), "now")?],
            )?;
            applied.push(m.version);
        }
        tx.commit()?;
    }
    Ok(applied)
}

/// The recorded migrations by version; none when the table does not exist yet.
pub(crate) fn applied(conn: &Connection) -> Result<Vec<AppliedMigration>> {
    let exists: i64 = conn.query_row(sql::MIGRATION_TABLE_EXISTS, [], |r| r.get(0))?;
    if exists == 0 {
        return Ok(Vec::new());
    }
    let mut stmt = conn.prepare(sql::MIGRATION_LIST)?;
    let rows = stmt.query_map([], |r| {
        Ok(AppliedMigration { version: r.get(0)?, name: r.get(1)?, applied_at_ms: r.get(2)? })
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}
