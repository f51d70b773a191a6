//! PostgreSQL checks that need the backend's insides: the session settings of pooled
//! connections, that a connection abandoned inside a transaction never goes back into the
//! pool, and that the one-statement commit is composed right for every shape. They use the
//! server of `ORBIT_TEST_DATABASE_URL` (see `scripts/pg.sh`) and fail, saying so, without
//! it.

use super::commit::{composed, in_composed_order};
use super::plan::{Write, WriteKind};
use super::{sql, PgOptions, PgStore};
use crate::roles::Migrations;

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

/// The one-statement commit joins the check where each write reads its rows: its first
/// `UNNEST(`, which must be the write's source (right after `FROM` or `USING`).
#[test]
fn every_commit_write_reads_its_rows_from_its_first_unnest() {
    for kind in WriteKind::ALL {
        let flat = kind.statement().0.split_whitespace().collect::<Vec<_>>().join(" ");
        let at = flat.find("UNNEST(").unwrap_or_else(|| panic!("{kind:?}: no UNNEST: {flat}"));
        let before = &flat[..at];
        assert!(before.ends_with("FROM ") || before.ends_with("USING "), "{kind:?}: {flat}");
    }
}

/// Every shape's statement prepares, and takes the check's parameters, then each write's
/// own, in the order the commit sends them (the first use of a shape on a connection sends
/// it unprepared with these types). Writes of two segments (a kind again, or out of order)
/// make no statement.
#[tokio::test]
async fn composed_statements_take_the_parameters_of_their_parts() {
    let admin_url = url();
    let name = format!("orbit_t_composed_{}", std::process::id());
    let (admin, connection) =
        tokio_postgres::connect(&admin_url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);
    admin.batch_execute(&format!("DROP DATABASE IF EXISTS {name}")).await.unwrap();
    admin.batch_execute(&format!("CREATE DATABASE {name}")).await.unwrap();
    let db_url = format!("{}/{name}", admin_url.rsplit_once('/').unwrap().0);
    let store = PgStore::connect(&db_url, PgOptions { pool_size: 1, ..PgOptions::default() })
        .await
        .unwrap();
    store.migrate().await.unwrap();
    let conn = store.inner.pool.get().await.unwrap();
    let client = conn.client();
    let all = (1usize << WriteKind::ALL.len()) - 1;
    let mut shapes: Vec<usize> = vec![all];
    for kind in WriteKind::ALL {
        shapes.extend([kind.bit(), all & !kind.bit()]);
    }
    for shape in shapes {
        let writes: Vec<Write> = WriteKind::ALL
            .into_iter()
            .filter(|k| shape & k.bit() != 0)
            .map(|kind| Write { params: Vec::new(), kind })
            .collect();
        let mut want = client.prepare(sql::COMMIT_LOCK_CHECK).await.unwrap().params().to_vec();
        for w in in_composed_order(&writes) {
            want.extend_from_slice(client.prepare(w.sql()).await.unwrap().params());
        }
        for one in [false, true] {
            let text = composed(&writes, one).unwrap();
            let stmt =
                client.prepare(text).await.unwrap_or_else(|e| panic!("{shape:#b}: {e}\n{text}"));
            assert_eq!(stmt.params(), want, "{shape:#b}, one execution {one}:\n{text}");
            assert_eq!(composed(&writes, one), Some(text), "made once per shape");
        }
        assert_ne!(composed(&writes, true), composed(&writes, false));
    }
    let w = |kind| Write { params: Vec::new(), kind };
    assert_eq!(composed(&[w(WriteKind::InsertEvents), w(WriteKind::InsertEvents)], false), None);
    assert_eq!(composed(&[w(WriteKind::Notify), w(WriteKind::InsertEvents)], true), None);
    drop(conn);
    drop(store);
    admin.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).await.unwrap();
}
