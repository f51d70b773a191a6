//! Pooled PostgreSQL connections: a bb8 manager whose connections carry their own prepared
//! statement cache, and the helpers every operation runs through.
//!
//! * **Statement cache.** tokio-postgres has none: [`PgConn::prepare`] prepares each SQL text
//!   once per connection (all missing ones at once, one round trip) and keeps the handles.
//!   A text made at run time (the one-statement commit) is prepared on its first use, in the
//!   round trip that runs it unprepared ([`PgConn::query_made`]).
//! * **Pipelining.** [`pipeline`] sends several statements without waiting for the answers in
//!   between: one round trip for `BEGIN; ...; COMMIT`. Statements are sent in the order
//!   given (each future is first polled in order); when one fails inside a transaction, the
//!   server refuses the rest and the trailing `COMMIT` becomes a rollback.
//! * **Broken connections.** A connection whose socket closed, or that was handed back in
//!   the middle of a transaction (its caller was dropped), is discarded by the pool; the
//!   server rolls such a transaction back when the socket goes. A check-out never hands out
//!   a closed connection (no round trip: it looks at the socket's state), so a restarted
//!   server heals the pool by itself.
//! * **Session settings** go in the startup packet: `idle_in_transaction_session_timeout`
//!   (a paused process cannot hold row locks for ever; the split services set it to the
//!   node timeout, see [`super::PgOptions::idle_in_transaction_timeout`]), no
//!   `lock_timeout`, and index access only ([`INDEX_ACCESS`]: plans are kept per
//!   connection, often made while the tables are still empty).

use super::config::Target;
use super::error::{connection_lost, PgErr, PgResult};
use crate::error::StoreError;
use futures_util::future::BoxFuture;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, Row, Statement};
use tokio_postgres_rustls::MakeRustlsConnect;

/// Planner settings of every session: key lookups by index, never a scan of a whole table.
///
/// Every statement is prepared once per connection and its generic plan is kept for the
/// connection's life. A connection opened on a young database plans against nearly empty
/// tables, where a sequential scan or a hash join is cheapest; that plan stayed after the
/// tables grew, until autovacuum's next visit invalidated it (measured: the owner's commit
/// statements at 2–2.5 ms each instead of 0.02–0.06 ms, a 3-step execution at 20–60 ms
/// instead of 8, after 4,000 executions on a database a minute old). Every hot-path
/// statement is written for its index (`plan_tests.rs`); these make the planner take it
/// whatever the statistics say. A statement with no index path still scans (`nodes`), at
/// a cost inflated past `jit_above_cost`: JIT is off, or such a 5-row heartbeat spent 34 ms
/// compiling (JIT is no help to statements of a millisecond anyway).
const INDEX_ACCESS: &str = "-c enable_seqscan=off -c enable_bitmapscan=off \
    -c enable_hashjoin=off -c enable_mergejoin=off -c jit=off";

/// One pooled connection.
pub(crate) struct PgConn {
    client: Client,
    statements: HashMap<&'static str, Statement>,
    /// Set while a transaction is open; a connection handed back with it set is discarded.
    in_transaction: bool,
}

impl PgConn {
    /// The client, for pipelines built by the caller.
    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    /// The prepared statements for `sqls` (in that order), preparing the missing ones
    /// concurrently: at most one round trip.
    pub(crate) async fn prepare(&mut self, sqls: &[&'static str]) -> PgResult<Vec<Statement>> {
        let mut missing: Vec<&'static str> =
            sqls.iter().copied().filter(|s| !self.statements.contains_key(s)).collect();
        missing.sort_unstable();
        missing.dedup();
        if !missing.is_empty() {
            let client = &self.client;
            let prepared =
                futures_util::future::try_join_all(missing.iter().map(|s| client.prepare(s)))
                    .await?;
            self.statements.extend(missing.into_iter().zip(prepared));
        }
        sqls.iter()
            .map(|s| {
                self.statements.get(s).cloned().ok_or_else(|| {
                    PgErr::Store(StoreError::Storage("statement cache lost a statement".into()))
                })
            })
            .collect()
    }

    /// The prepared statement for one SQL text.
    pub(crate) async fn prepare_one(&mut self, sql: &'static str) -> PgResult<Statement> {
        let mut found = self.prepare(&[sql]).await?;
        found.pop().ok_or_else(|| PgErr::Store(StoreError::Storage("no statement".into())))
    }

    /// Whether `sql` is prepared on this connection.
    pub(crate) fn is_prepared(&self, sql: &'static str) -> bool {
        self.statements.contains_key(sql)
    }

    /// Runs `sql`, a text made at run time (see `commit.rs`), on its prepared statement.
    /// The first time on this connection it goes unprepared, with its parameters' `types`
    /// given (`query_typed`), and is prepared in the same round trip for the next time (a
    /// statement that does not prepare is only not kept). `types` is read only then.
    pub(crate) async fn query_made(
        &mut self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
        types: &[Type],
    ) -> Result<Vec<Row>, tokio_postgres::Error> {
        if let Some(stmt) = self.statements.get(sql) {
            return self.client.query(stmt, params).await;
        }
        let typed: Vec<(&(dyn ToSql + Sync), Type)> =
            params.iter().copied().zip(types.iter().cloned()).collect();
        // Sent in this order on the first poll: the statement (its own implicit transaction
        // or a step of the caller's), then the prepare.
        let (rows, prepared) = futures_util::future::join(
            self.client.query_typed(sql, &typed),
            self.client.prepare(sql),
        )
        .await;
        if let Ok(stmt) = prepared {
            self.statements.insert(sql, stmt);
        }
        rows
    }

    /// One statement, outside any explicit transaction.
    pub(crate) async fn query(
        &mut self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> PgResult<Vec<Row>> {
        let stmt = self.prepare_one(sql).await?;
        Ok(self.client.query(&stmt, params).await?)
    }

    /// Marks the start of a transaction (before `BEGIN` is sent).
    pub(crate) fn begin_marker(&mut self) {
        self.in_transaction = true;
    }

    /// Marks the transaction ended (its `COMMIT` or `ROLLBACK` was answered).
    pub(crate) fn end_marker(&mut self) {
        self.in_transaction = false;
    }

    /// Rolls back the open transaction; if that fails the connection stays marked and the
    /// pool discards it.
    pub(crate) async fn rollback(&mut self) {
        if self.client.batch_execute("ROLLBACK").await.is_ok() {
            self.in_transaction = false;
        }
    }
}

/// One statement of a pipeline: its rows, or the driver error.
pub(crate) type Step<'a> = BoxFuture<'a, StepResult>;

/// What a pipeline step ends with.
pub(crate) type StepResult = Result<Vec<Row>, tokio_postgres::Error>;

/// A prepared statement as a pipeline step.
pub(crate) fn step<'a>(
    client: &'a Client,
    stmt: &'a Statement,
    params: &'a [&'a (dyn ToSql + Sync)],
) -> Step<'a> {
    Box::pin(client.query(stmt, params))
}

/// A simple-protocol command (`BEGIN`, `COMMIT`, ...) as a pipeline step.
pub(crate) fn command<'a>(client: &'a Client, sql: &'static str) -> Step<'a> {
    Box::pin(async move { client.batch_execute(sql).await.map(|()| Vec::new()) })
}

/// Runs the steps pipelined: every step is first polled (so sent) in order, then all are
/// awaited together. Returns each step's outcome, in order.
pub(crate) async fn pipeline(steps: Vec<Step<'_>>) -> Vec<StepResult> {
    let mut slots: Vec<(Step<'_>, Option<StepResult>)> =
        steps.into_iter().map(|s| (s, None)).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (fut, out) in slots.iter_mut() {
            if out.is_none() {
                match Pin::new(fut).poll(cx) {
                    Poll::Ready(r) => *out = Some(r),
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    slots.into_iter().map(|(_, out)| out.unwrap_or_else(|| Ok(Vec::new()))).collect()
}

/// The first error of a pipeline's outcomes, else the rows of each step.
pub(crate) fn all_ok(outcomes: Vec<StepResult>) -> PgResult<Vec<Vec<Row>>> {
    outcomes.into_iter().map(|o| o.map_err(PgErr::from)).collect()
}

/// How to open a connection: the parsed target with the session settings, and TLS.
#[derive(Clone)]
pub(crate) struct Connector {
    config: tokio_postgres::Config,
    tls: MakeRustlsConnect,
}

impl Connector {
    /// A connector for `target` with `tls`; the session settings are added to the startup
    /// options, with `idle_in_transaction` as the server's limit for a session sitting idle
    /// inside a transaction.
    pub(crate) fn new(
        target: &Target,
        tls: MakeRustlsConnect,
        idle_in_transaction: Duration,
    ) -> Connector {
        let mut config = target.config.clone();
        // 0 would mean "no limit" to the server: never let a rounding make it so.
        let idle_ms = idle_in_transaction.as_millis().max(1);
        let settings = format!(
            "-c idle_in_transaction_session_timeout={idle_ms} -c lock_timeout=0 {INDEX_ACCESS}"
        );
        let options = match config.get_options() {
            Some(o) if !o.trim().is_empty() => format!("{o} {settings}"),
            _ => settings,
        };
        config.options(options);
        Connector { config, tls }
    }

    /// The driver's configuration (for a connection whose messages the caller drives).
    pub(crate) fn config(&self) -> &tokio_postgres::Config {
        &self.config
    }

    /// The TLS connector.
    pub(crate) fn tls(&self) -> MakeRustlsConnect {
        self.tls.clone()
    }

    /// A fresh client whose connection runs on its own task until the socket closes.
    pub(crate) async fn client(&self) -> Result<Client, tokio_postgres::Error> {
        let (client, connection) = self.config.connect(self.tls.clone()).await?;
        tokio::spawn(async move {
            // Ends when the socket closes or the client is dropped; the client then reports
            // `is_closed`, which is how the pool learns of it.
            let _ = connection.await;
        });
        Ok(client)
    }
}

/// Opens connections for the pool.
pub(crate) struct PgManager(Connector);

impl bb8::ManageConnection for PgManager {
    type Connection = PgConn;
    type Error = PgErr;

    async fn connect(&self) -> PgResult<PgConn> {
        let client = self.0.client().await?;
        Ok(PgConn { client, statements: HashMap::new(), in_transaction: false })
    }

    async fn is_valid(&self, conn: &mut PgConn) -> PgResult<()> {
        // No round trip: a closed socket is the failure that matters (server restart).
        if conn.client.is_closed() {
            return Err(PgErr::Store(StoreError::Unavailable("connection closed".into())));
        }
        Ok(())
    }

    fn has_broken(&self, conn: &mut PgConn) -> bool {
        conn.in_transaction || conn.client.is_closed()
    }
}

/// Keeps the last connection error the pool saw, so a check-out that times out can say why.
#[derive(Debug, Clone, Default)]
struct LastError(Arc<Mutex<Option<String>>>);

impl bb8::ErrorSink<PgErr> for LastError {
    fn sink(&self, e: PgErr) {
        let text = match e {
            PgErr::Db(e) => connect_error(&e).to_string(),
            PgErr::Store(e) => e.to_string(),
        };
        if let Ok(mut last) = self.0.lock() {
            *last = Some(text);
        }
    }

    fn boxed_clone(&self) -> Box<dyn bb8::ErrorSink<PgErr>> {
        Box::new(self.clone())
    }
}

/// The connection pool.
pub(crate) struct Pool {
    pool: bb8::Pool<PgManager>,
    last_error: LastError,
    timeout: Duration,
}

/// A checked-out connection.
pub(crate) type Pooled<'a> = bb8::PooledConnection<'a, PgManager>;

impl Pool {
    /// A pool of at most `size` connections. One connection is opened at once, so a bad
    /// address, TLS setup or password fails here with the server's own reason.
    pub(crate) async fn open(
        connector: Connector,
        size: u32,
        timeout: Duration,
    ) -> crate::error::Result<Pool> {
        let manager = PgManager(connector);
        let first = match bb8::ManageConnection::connect(&manager).await {
            Ok(conn) => conn,
            Err(PgErr::Db(e)) => return Err(connect_error(&e)),
            Err(PgErr::Store(e)) => return Err(e),
        };
        let last_error = LastError::default();
        let pool = bb8::Pool::builder()
            .max_size(size.max(1))
            // The connection used last goes out first (bb8's default is the one idle
            // longest): calls one after another keep to one warm server session, whose
            // cached plans, caches and CPU are hot, instead of visiting every pooled
            // connection in turn (issue 25: the split's commit mean went from 0.9-1.4 ms
            // to 0.8-1.2 ms, docs/benchmarks.md).
            .queue_strategy(bb8::QueueStrategy::Lifo)
            .min_idle(None)
            .connection_timeout(timeout)
            .test_on_check_out(true)
            .idle_timeout(Some(Duration::from_secs(300)))
            .error_sink(Box::new(last_error.clone()))
            .build_unchecked(manager);
        // The first connection joins the pool (there is room: it is empty).
        let _ = pool.add(first);
        Ok(Pool { pool, last_error, timeout })
    }

    /// A connection, or `Unavailable` when none could be had within the connect timeout.
    pub(crate) async fn get(&self) -> PgResult<Pooled<'_>> {
        match self.pool.get().await {
            Ok(conn) => Ok(conn),
            Err(bb8::RunError::User(PgErr::Db(e))) => Err(PgErr::Store(connect_error(&e))),
            Err(bb8::RunError::User(e)) => Err(e),
            Err(bb8::RunError::TimedOut) => {
                let why = self.last_error.0.lock().ok().and_then(|l| l.clone());
                Err(PgErr::Store(StoreError::Unavailable(format!(
                    "no database connection within {:?}{}",
                    self.timeout,
                    why.map(|w| format!(" (last error: {w})")).unwrap_or_default()
                ))))
            }
        }
    }
}

/// A failed connection attempt as the caller sees it.
pub(crate) fn connect_error(e: &tokio_postgres::Error) -> StoreError {
    let text = match e.as_db_error() {
        Some(db) => format!("{} (SQLSTATE {})", db.message(), db.code().code()),
        None => {
            let mut text = e.to_string();
            let mut source = std::error::Error::source(e);
            while let Some(s) = source {
                let s_text = s.to_string();
                if !text.contains(&s_text) {
                    text = format!("{text}: {s_text}");
                }
                source = s.source();
            }
            text
        }
    };
    if text.starts_with("error performing TLS handshake") {
        // A certificate that does not verify is a setup problem, not a passing one.
        return StoreError::Storage(format!(
            "cannot connect to PostgreSQL: {text} (check sslmode and the CA file)"
        ));
    }
    if connection_lost(e) || e.as_db_error().is_some() {
        StoreError::Unavailable(format!("cannot connect to PostgreSQL: {text}"))
    } else {
        StoreError::Storage(format!("cannot connect to PostgreSQL: {text}"))
    }
}
