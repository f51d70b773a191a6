//! Applying [`MIGRATIONS`](crate::migrations::MIGRATIONS) to a PostgreSQL database.
//!
//! One transaction holds `pg_advisory_xact_lock(MIGRATION_LOCK_KEY)` for its whole length:
//! processes that start together queue on the lock, and each finds the versions the one
//! before it recorded, so every migration is applied exactly once. The migration texts are
//! the shared ones (`BIGSERIAL` is native here); each is recorded in `schema_migrations` in
//! the same transaction, so a crash leaves both or neither.

use super::conn::PgConn;
use super::error::{PgErr, PgResult};
use super::sql;
use crate::migrations::{AppliedMigration, CREATE_SCHEMA_MIGRATIONS, MIGRATIONS};

/// The advisory lock key of migrations ("orbitmig" as ASCII bytes).
const MIGRATION_LOCK_KEY: i64 = 0x6f72_6269_746d_6967;

/// Applies the pending migrations; returns the versions this call applied.
pub(crate) async fn migrate(conn: &mut PgConn) -> PgResult<Vec<u32>> {
    conn.begin_marker();
    let result = apply(conn).await;
    match result {
        Ok(applied) => {
            conn.client().batch_execute("COMMIT").await?;
            conn.end_marker();
            Ok(applied)
        }
        Err(e) => {
            conn.rollback().await;
            Err(e)
        }
    }
}

async fn apply(conn: &mut PgConn) -> PgResult<Vec<u32>> {
    let client = conn.client();
    client.batch_execute("BEGIN").await?;
    client.query(sql::MIGRATION_LOCK, &[&MIGRATION_LOCK_KEY]).await?;
    client.batch_execute(CREATE_SCHEMA_MIGRATIONS).await?;
    let done: Vec<i64> = client
        .query(sql::MIGRATION_VERSIONS, &[])
        .await?
        .iter()
        .map(|r| r.try_get(0))
        .collect::<Result<_, _>>()?;
    let mut applied = Vec::new();
    for m in MIGRATIONS {
        let version = i64::from(m.version);
        if done.contains(&version) {
            continue;
        }
        client.batch_execute(m.sql).await?;
        client.query(sql::MIGRATION_RECORD, &[&version, &m.name]).await?;
        applied.push(m.version);
    }
    Ok(applied)
}

/// The recorded migrations by version; none when the table does not exist yet. One
/// statement (a missing table is its error, not a second query): readiness runs this every
/// 30 s on every node, which counts in an idle cluster's transactions (issue 14).
pub(crate) async fn applied(conn: &mut PgConn) -> PgResult<Vec<AppliedMigration>> {
    // Prepared once per connection (an unprepared text costs a second round trip, and a
    // transaction of its own for the server's counters).
    let rows = match conn.query(sql::MIGRATION_LIST, &[]).await {
        Ok(rows) => rows,
        Err(PgErr::Db(e))
            if e.code() == Some(&tokio_postgres::error::SqlState::UNDEFINED_TABLE) =>
        {
            return Ok(Vec::new())
        }
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    for row in rows {
        out.push(AppliedMigration {
            version: row.try_get(0)?,
            name: row.try_get(1)?,
            applied_at_ms: row.try_get(2)?,
        });
    }
    Ok(out)
}
