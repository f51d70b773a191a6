//! The database of a split service, chosen by the URL's scheme, and its wake-ups.
//!
//! * `postgres://` / `postgresql://`: [`orbit_store::PgStore`]; LISTEN/NOTIFY brings the
//!   other processes' commits as [`Wakeup`]s.
//! * `sqlite:` (one machine only): [`orbit_store::SqliteStore`] on a file every process
//!   opens. SQLite's file locks serialize the writers of all processes, so claims, fencing
//!   and takeovers stay atomic; there are no cross-process notifications, so every 100 ms
//!   a `Reconnected` tells each service to look again (`Changed` is left to the readers'
//!   fallbacks).

pub use orbit_store::{Channel, Wakeup};
use orbit_store::{PgOptions, PgStore, SqliteStore, Store, StoreError};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// How often the SQLite backend plays the notifications it cannot receive.
const SQLITE_TICK: Duration = Duration::from_millis(100);

/// Receives wake-ups.
pub type Handler = Arc<dyn Fn(Wakeup) + Send + Sync>;

/// How to reach the database.
#[derive(Debug, Clone)]
pub struct DatabaseOptions {
    pub url: String,
    pub ca_file: Option<PathBuf>,
    pub pool_size: u32,
    /// Shown in the database's session list (`orbit-owner-1`).
    pub application_name: String,
    /// PostgreSQL ends a session idle inside a transaction for this long (the node
    /// timeout: a paused node's row locks must not outlive its liveness).
    pub idle_in_transaction_timeout: Duration,
    /// Only check the schema; never apply migrations (`--no-migrate`).
    pub no_migrate: bool,
}

/// A connected database: migrated and checked by [`Database::connect`], untouched by
/// [`Database::open`].
pub struct Database {
    pub store: Arc<dyn Store>,
    kind: Kind,
}

enum Kind {
    Sqlite,
    Postgres(PgStore),
}

/// Why [`Database::connect`] failed.
#[derive(Debug)]
pub enum ConnectError {
    /// The flags are wrong; retrying will not help.
    Config(String),
    /// The database cannot be reached or migrated now (it may be starting).
    Unreachable(String),
    /// The schema is not one this binary may run on (`crate::migrate`); retrying will not
    /// help until an operator migrates or upgrades.
    Schema(String),
}

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnectError::Config(m) | ConnectError::Unreachable(m) | ConnectError::Schema(m) => {
                f.write_str(m)
            }
        }
    }
}

/// The file a `sqlite:` URL names: `sqlite:///abs/path.db`, `sqlite://rel.db`, `sqlite:rel.db`.
pub fn sqlite_path(url: &str) -> Option<PathBuf> {
    let rest = url.strip_prefix("sqlite:")?;
    let path = rest.strip_prefix("//").unwrap_or(rest);
    (!path.is_empty()).then(|| PathBuf::from(path))
}

impl Database {
    /// Connects and prepares the schema (`crate::migrate::prepare`): applies pending
    /// migrations unless `no_migrate` (safe when many processes start at once), refuses a
    /// schema this binary does not understand.
    ///
    /// # Errors
    /// A URL this build cannot use ([`ConnectError::Config`]: retrying will not help), a
    /// database that cannot be reached or migrated now, or a schema mismatch
    /// ([`ConnectError::Schema`]).
    pub async fn connect(o: &DatabaseOptions) -> Result<Database, ConnectError> {
        let database = Database::open(o).await?;
        crate::migrate::prepare(database.store.as_ref(), o.no_migrate).await.map_err(
            |e| match e {
                crate::migrate::SchemaError::Mismatch(m) => ConnectError::Schema(m.to_string()),
                crate::migrate::SchemaError::Store(e) => ConnectError::Unreachable(e.to_string()),
            },
        )?;
        Ok(database)
    }

    /// Connects without touching the schema (`orbit migrate` reads and applies it itself).
    ///
    /// # Errors
    /// As [`Database::connect`], without the schema check.
    pub async fn open(o: &DatabaseOptions) -> Result<Database, ConnectError> {
        if let Some(path) = sqlite_path(&o.url) {
            if o.ca_file.is_some() {
                tracing::warn!("--database-ca-file applies to PostgreSQL only; ignored");
            }
            tracing::info!(path = %path.display(), application = %o.application_name, pool_size = o.pool_size, "opening the shared SQLite file (one machine only; --pool-size is not used)");
            let store = SqliteStore::open(&path).await.map_err(|e| {
                ConnectError::Unreachable(format!("sqlite {}: {e}", path.display()))
            })?;
            return Ok(Database { store: Arc::new(store), kind: Kind::Sqlite });
        }
        if o.url.starts_with("postgres://") || o.url.starts_with("postgresql://") {
            let options = PgOptions {
                pool_size: o.pool_size,
                ca_file: o.ca_file.clone(),
                application_name: o.application_name.clone(),
                idle_in_transaction_timeout: o.idle_in_transaction_timeout,
                ..PgOptions::default()
            };
            return match PgStore::connect(&o.url, options).await {
                Ok(pg) => Ok(Database { store: Arc::new(pg.clone()), kind: Kind::Postgres(pg) }),
                // A malformed URL or an unreadable CA file: retrying will not help.
                Err(StoreError::InvalidArgument(m)) => Err(ConnectError::Config(m)),
                Err(e) => Err(ConnectError::Unreachable(e.to_string())),
            };
        }
        Err(ConnectError::Config(
            "--database-url must start with postgres://, postgresql:// or sqlite:".into(),
        ))
    }

    /// Delivers the wake-ups of `channels` to `handler` until `shutdown`.
    pub fn listen(
        &self,
        channels: &[Channel],
        handler: Handler,
        shutdown: CancellationToken,
    ) -> JoinHandle<()> {
        match &self.kind {
            Kind::Postgres(pg) => pg.listen_to(channels, handler, shutdown),
            Kind::Sqlite => tokio::spawn(async move {
                loop {
                    tokio::select! {
                        () = shutdown.cancelled() => break,
                        () = tokio::time::sleep(SQLITE_TICK) => {}
                    }
                    // "Notifications may have been missed": each service looks again.
                    handler(Wakeup::Reconnected);
                }
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::sqlite_path;
    use std::path::PathBuf;

    #[test]
    fn sqlite_urls_name_a_file() {
        assert_eq!(sqlite_path("sqlite:///tmp/o.db"), Some(PathBuf::from("/tmp/o.db")));
        assert_eq!(sqlite_path("sqlite://o.db"), Some(PathBuf::from("o.db")));
        assert_eq!(sqlite_path("sqlite:o.db"), Some(PathBuf::from("o.db")));
        assert_eq!(sqlite_path("sqlite:"), None);
        assert_eq!(sqlite_path("postgres://h/db"), None);
    }
}
