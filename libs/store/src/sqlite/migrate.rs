//! Applying [`MIGRATIONS`](crate::migrations::MIGRATIONS) to a SQLite connection.
//!
//! Each pending migration runs in its own immediate transaction together with its
//! `schema_migrations` row, so a crash leaves either both or neither.

use super::conn::now_ms;
use super::rows::to_i64;
use super::sql;
use crate::error::Result;
use crate::migrations::{CREATE_SCHEMA_MIGRATIONS, MIGRATIONS};
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

/// The recorded versions, ascending.
pub(crate) fn applied(conn: &Connection) -> Result<Vec<u32>> {
    let mut stmt = conn.prepare_cached("SELECT version FROM schema_migrations ORDER BY version")?;
    let mut found = stmt.query([])?;
    let mut out = Vec::new();
    while let Some(row) = found.next()? {
        let v: i64 = row.get(0)?;
        out.push(u32::try_from(v).unwrap_or(u32::MAX));
    }
    Ok(out)
}
