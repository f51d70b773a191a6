//! A fresh PostgreSQL database per test on the server named by `ORBIT_TEST_DATABASE_URL`
//! (`scripts/pg.sh start && eval "$(scripts/pg.sh env)"`), dropped when the test ends.
//!
//! Without the variable the PostgreSQL tests fail, saying how to start the server: they
//! never pass by skipping.

// Tests read their environment (ORBIT_PYTHON, the database URL) and the wall clock
// (unique names, deadlines of real processes) directly.
#![allow(clippy::disallowed_methods)]
#![allow(dead_code)] // each test binary uses a different part

use orbit_store::{Migrations, PgOptions, PgStore, Store};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use tokio::sync::OnceCell;

/// The admin URL of the test server.
pub fn admin_url() -> String {
    match std::env::var("ORBIT_TEST_DATABASE_URL") {
        Ok(url) if !url.trim().is_empty() => url,
        _ => panic!(
            "ORBIT_TEST_DATABASE_URL is not set, so the PostgreSQL tests have no server. \
             From the repository root run `scripts/pg.sh start && eval \"$(scripts/pg.sh env)\"` \
             and run the tests again (scripts/test.sh does this itself)."
        ),
    }
}

/// The test server's CA certificate (`ORBIT_TEST_PG_CA`, printed by `scripts/pg.sh env`).
pub fn ca_file() -> std::path::PathBuf {
    match std::env::var("ORBIT_TEST_PG_CA") {
        Ok(path) if !path.trim().is_empty() => path.into(),
        _ => panic!(
            "ORBIT_TEST_PG_CA is not set: run `eval \"$(scripts/pg.sh env)\"` after \
             `scripts/pg.sh start`"
        ),
    }
}

/// `admin` with its database replaced by `db` (the query string is kept).
pub fn url_for(admin: &str, db: &str) -> String {
    let (base, query) = match admin.split_once('?') {
        Some((b, q)) => (b, format!("?{q}")),
        None => (admin, String::new()),
    };
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let authority_end = base[scheme_end..].find('/').map_or(base.len(), |i| scheme_end + i);
    format!("{}/{db}{query}", &base[..authority_end])
}

/// `url` with `key=value` added to its query string.
pub fn with_param(url: &str, key: &str, value: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}{key}={value}")
}

/// Options for test stores: a small pool.
pub fn options() -> PgOptions {
    PgOptions { pool_size: 8, application_name: "orbit-store-tests".into(), ..PgOptions::default() }
}

/// Runs SQL on the admin database.
pub async fn admin_execute(sql: &str) {
    let (client, connection) = tokio_postgres::connect(&admin_url(), tokio_postgres::NoTls)
        .await
        .expect("connect to the test server (is `scripts/pg.sh start` running?)");
    let driver = tokio::spawn(connection);
    client.batch_execute(sql).await.unwrap_or_else(|e| panic!("{sql}: {e:?}"));
    drop(client);
    let _ = driver.await;
}

/// One database, created on first use and dropped (best effort) on drop.
pub struct PgBackend {
    name: String,
    url: String,
    created: OnceCell<()>,
}

static NEXT: AtomicU32 = AtomicU32::new(0);

impl PgBackend {
    /// A backend for the test `case` (the database is created by the first `open`).
    pub fn new(case: &str) -> PgBackend {
        let admin = admin_url();
        // Identifiers are cut at 63 bytes: keep the case short, the suffix unique.
        let short: String = case.chars().take(30).collect();
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let name = format!("orbit_t_{short}_{}_{n}", std::process::id());
        let url = url_for(&admin, &name);
        PgBackend { name, url, created: OnceCell::new() }
    }

    /// The database's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The database's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Creates the database (once).
    pub async fn create(&self) {
        self.created
            .get_or_init(|| async {
                admin_execute(&format!("CREATE DATABASE \"{}\"", self.name)).await;
            })
            .await;
    }

    /// A store on the database, not migrated.
    pub async fn connect(&self) -> PgStore {
        self.create().await;
        PgStore::connect(&self.url, options()).await.expect("connect to the test database")
    }
}

impl Drop for PgBackend {
    fn drop(&mut self) {
        if self.created.get().is_none() {
            return;
        }
        let sql = format!("DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)", self.name);
        // Drop runs inside the test's runtime: use a thread with a runtime of its own.
        let _ = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else {
                return;
            };
            rt.block_on(async {
                let Ok((client, connection)) =
                    tokio_postgres::connect(&admin_url(), tokio_postgres::NoTls).await
                else {
                    return;
                };
                let driver = tokio::spawn(connection);
                let _ = client.batch_execute(&sql).await;
                drop(client);
                let _ = driver.await;
            });
        })
        .join();
    }
}

#[async_trait::async_trait]
impl crate::support::Backend for PgBackend {
    async fn open(&self) -> Arc<dyn Store> {
        let store = self.connect().await;
        store.migrate().await.expect("migrate the test database");
        Arc::new(store)
    }

    async fn execute(&self, sql: &str) {
        self.create().await;
        let (client, connection) = tokio_postgres::connect(&self.url, tokio_postgres::NoTls)
            .await
            .expect("connect to the test database");
        let driver = tokio::spawn(connection);
        client.batch_execute(sql).await.unwrap_or_else(|e| panic!("{sql}: {e:?}"));
        drop(client);
        let _ = driver.await;
    }
}
