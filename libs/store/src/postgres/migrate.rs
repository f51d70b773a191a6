//! Applying [`MIGRATIONS`](crate::migrations::MIGRATIONS) to a PostgreSQL database.
//!
//! One transaction holds `pg_advisory_xact_lock(MIGRATION_LOCK_KEY)` for its whole length:
//! processes that start together queue on the lock, and each finds the versions the one
//! before it recorded, so every migration is applied exactly once. The migration texts are
//! the shared ones (`BIGSERIAL` is native here); each is recorded in `schema_migrations` in
//! the same transaction, so a crash leaves both or neither.

use super::conn::PgConn;
use super::error::PgResult;
use super::sql;
use crate::migrations::{CREATE_SCHEMA_MIGRATIONS, MIGRATIONS};

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

/// The recorded versions, ascending.
pub(crate) async fn applied(conn: &mut PgConn) -> PgResult<Vec<u32>> {
    let rows = conn.query(sql::MIGRATION_VERSIONS, &[]).await?;
    let mut versions = Vec::with_capacity(rows.len());
    for row in &rows {
        let v: i64 = row.try_get(0)?;
        versions.push(u32::try_from(v).unwrap_or(u32::MAX));
    }
    versions.sort_unstable();
    Ok(versions)
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
