//! PostgreSQL checks that need the backend's insides: the session settings of pooled
//! connections, and that a connection abandoned inside a transaction never goes back into
//! the pool. They use the server of `ORBIT_TEST_DATABASE_URL` (see `scripts/pg.sh`) and
//! fail, saying so, without it.

use super::{PgOptions, PgStore};

#[allow(clippy::disallowed_methods)] // The test database comes from scripts/pg.sh's environment.
pub(super) fn url() -> String {
    std::env::var("ORBIT_TEST_DATABASE_URL").unwrap_or_else(|_| {
        panic!(
            "ORBIT_TEST_DATABASE_URL is not set: run `scripts/pg.sh start && eval \
             \"$(scripts/pg.sh env)\"` first"
        )
    })
}

async fn store() -> PgStore {
    PgStore::connect(&url(), PgOptions { pool_size: 2, ..PgOptions::default() }).await.unwrap()
}

/// The split services set the idle-in-transaction limit to their node timeout.
#[tokio::test]
async fn the_idle_in_transaction_limit_is_configurable() {
    let opts = PgOptions {
        pool_size: 1,
        idle_in_transaction_timeout: std::time::Duration::from_millis(1500),
        ..PgOptions::default()
    };
    let store = PgStore::connect(&url(), opts).await.unwrap();
    let conn = store.inner.pool.get().await.unwrap();
    let rows =
        conn.client().simple_query("SHOW idle_in_transaction_session_timeout").await.unwrap();
    let value = rows.iter().find_map(|m| match m {
        tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_string),
        _ => None,
    });
    assert_eq!(value.as_deref(), Some("1500ms"));
}

#[tokio::test]
async fn pooled_connections_carry_the_session_settings() {
    let store = store().await;
    let mut conn = store.inner.pool.get().await.unwrap();
    let show = |name: &'static str| format!("SHOW {name}");
    for (setting, want) in [
        ("idle_in_transaction_session_timeout", "10s"),
        ("lock_timeout", "0"),
        ("application_name", "orbit"),
        // Plans are kept per connection, often made on empty tables: index access only.
        ("enable_seqscan", "off"),
        ("enable_bitmapscan", "off"),
        ("enable_hashjoin", "off"),
        ("enable_mergejoin", "off"),
        ("jit", "off"),
    ] {
        let rows = conn.client().simple_query(&show(setting)).await.unwrap();
        let value = rows.iter().find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_string),
            _ => None,
        });
        assert_eq!(value.as_deref(), Some(want), "{setting}");
    }
    // The statement cache prepares once: the server holds one statement for the text.
    let count =
        "SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE 'SELECT pg_advisory_xact_lock%'";
    conn.prepare_one(super::sql::MIGRATION_LOCK).await.unwrap();
    conn.prepare_one(super::sql::MIGRATION_LOCK).await.unwrap();
    let rows = conn.client().query(count, &[]).await.unwrap();
    assert_eq!(rows[0].get::<_, i64>(0), 1);
}

#[tokio::test]
async fn a_connection_abandoned_in_a_transaction_is_discarded() {
    let store = store().await;
    let before = {
        let mut conn = store.inner.pool.get().await.unwrap();
        let pid = conn.client().simple_query("SELECT pg_backend_pid()").await.unwrap();
        conn.begin_marker();
        conn.client().batch_execute("BEGIN").await.unwrap();
        // The caller is dropped here, before COMMIT.
        format!("{pid:?}")
    };
    let conn = store.inner.pool.get().await.unwrap();
    let after = conn.client().simple_query("SELECT pg_backend_pid()").await.unwrap();
    assert_ne!(before, format!("{after:?}"), "a new connection, not the one left in BEGIN");
    let state = conn.client().simple_query("SELECT 1").await;
    assert!(state.is_ok());
}
