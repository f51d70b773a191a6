//! SQLite connections and how work reaches them without blocking the async runtime.
//!
//! * One **writer** connection lives on a dedicated OS thread; write jobs are sent to it over
//!   a channel and answered through a oneshot. All writes are therefore serialised, which is
//!   what makes SQLite's claims and fencing race-free.
//! * **Group commit.** The writer takes every job waiting in its channel (up to
//!   [`MAX_GROUP`]) and runs them in ONE transaction, each inside its own savepoint (a failed
//!   job rolls back only itself), then commits once — one fsync for the whole group — and
//!   only then answers each caller. Under load groups grow, so throughput rises with load
//!   instead of queueing behind one fsync per call; alone, a job commits at once.
//! * A few **reader** connections (`query_only`) serve reads on tokio's blocking pool; in
//!   WAL mode they read committed data concurrently with the writer.
//!
//! A write job, once sent, runs to completion even if the awaiting caller is dropped: the
//! caller may not learn the outcome, but the transaction is never left half done.

use crate::error::{Result, StoreError};
use rusqlite::config::DbConfig;
use rusqlite::{Connection, OpenFlags};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;
use tokio::sync::oneshot;

/// How long a connection waits on a lock held by another connection (another process on
/// the same file, or the checkpointer) before failing with `SQLITE_BUSY`.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Prepared statements each connection keeps (see `open_connection`).
const STATEMENT_CACHE: usize = 256;

/// Jobs run together in one transaction at most.
const MAX_GROUP: usize = 512;

/// Answers a caller once its group's commit is known.
type Reply = Box<dyn FnOnce(Result<()>) + Send>;

/// A job of a group: runs on the writer connection (an error: the group's transaction could
/// not begin, and the job runs nothing) and returns how to answer its caller.
type GroupedJob = Box<dyn FnOnce(Result<&mut Connection>) -> Reply + Send>;

enum Job {
    /// Runs inside the group transaction, in its own savepoint.
    Grouped(GroupedJob),
    /// Runs on its own, outside any group (migrations manage their own transactions).
    Alone(Box<dyn FnOnce(&mut Connection) + Send>),
}

impl From<rusqlite::Error> for StoreError {
    /// A lock another process held past the busy timeout (several processes on one file)
    /// is transient: `Unavailable`, retried by the caller. Everything else is `Storage`.
    fn from(e: rusqlite::Error) -> Self {
        use rusqlite::ErrorCode::{DatabaseBusy, DatabaseLocked};
        match &e {
            rusqlite::Error::SqliteFailure(f, _)
                if matches!(f.code, DatabaseBusy | DatabaseLocked) =>
            {
                StoreError::Unavailable(format!("sqlite: {e} (held past {BUSY_TIMEOUT:?})"))
            }
            _ => StoreError::Storage(format!("sqlite: {e}")),
        }
    }
}

fn open_connection(path: &Path, read_only: bool) -> Result<Connection> {
    let flags = if read_only {
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX
    } else {
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
    };
    let conn = Connection::open_with_flags(path, flags)?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    // Every statement the hot path runs stays prepared: rusqlite's default cache holds 16,
    // fewer than a commit, a claim and the group's savepoints use between them, so the
    // least recent were parsed again on every commit.
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    // The query planner stability guarantee: a plan never depends on a bound value, so a
    // cached statement is never compiled again for new bindings. Without it, SQLite (3.47
    // and later, the bundled 3.50 here) reads a bound `LIMIT ?n` while planning and marks
    // the statement to be re-prepared whenever that parameter is bound again: every claim
    // (`TASK_CLAIMABLE`), every inbox read and every flow claim (`JUDGE`, whose compile
    // took three quarters of the writer's time under `orbit bench --mode fairness`) was
    // parsed and planned anew on each run. The plans are then the ones a statement gets
    // before any binding, which are the ones the plan tests check.
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)?;
    if read_only {
        conn.pragma_update(None, "query_only", true)?;
    } else {
        // WAL: readers do not block the writer. FULL: a commit is on disk before it returns,
        // because an acknowledged command must be durable.
        let mode: String =
            conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(StoreError::Storage(format!("sqlite: journal_mode is {mode}, not wal")));
        }
        conn.pragma_update(None, "synchronous", "FULL")?;
        // Savepoint journals in memory: each job runs in a savepoint (see `run_group`), and
        // a step's commit touches enough pages that its journal spilled to a new temporary
        // file (create, unlink, a write per page) on every commit. Nothing durable lives
        // there: it only serves rolling a failed job back inside the open transaction.
        conn.pragma_update(None, "temp_store", "MEMORY")?;
        // No checkpoint inside a commit: the `Checkpointer` thread does them beside the
        // writer (see there).
        conn.pragma_update(None, "wal_autocheckpoint", 0)?;
    }
    Ok(conn)
}

/// Commits between two checkpoint requests; about SQLite's default autocheckpoint (1,000
/// pages) at a step's ~20 pages per commit.
const CHECKPOINT_EVERY: u32 = 48;

/// Checkpoints with their bulk off the writer.
///
/// SQLite's automatic checkpoint runs inside the commit that crosses its threshold, on the
/// writer: that commit, and every caller waiting behind it, paid the copy of ~1,000 pages
/// and two fsyncs (WAL, then the database file), several milliseconds on the hot path
/// (docs/benchmarks.md, "orbit dev latency"). Now a thread of its own runs a PASSIVE
/// checkpoint every [`CHECKPOINT_EVERY`] commits, concurrently with the writer's commits
/// (WAL mode lets a checkpointer and a writer work at once; PASSIVE never waits for
/// readers). It cannot finish the job alone: the writer keeps appending meanwhile, and the
/// WAL starts over only once a checkpoint has copied every frame. So after each one the
/// writer, between two groups (their callers already answered), checkpoints the few frames
/// appended meanwhile; its next transaction then starts the WAL over, as after an automatic
/// checkpoint. Durability is unchanged: a commit is durable once its WAL frames are synced,
/// which the writer does before answering; checkpoints only bound the WAL's size.
struct Checkpointer {
    requests: mpsc::SyncSender<()>,
    /// Set by the thread after each checkpoint; the writer then does the rest.
    done: Arc<AtomicBool>,
    commits: u32,
}

impl Checkpointer {
    /// Starts the thread; it ends when the writer (the only sender) is gone.
    fn start(path: &Path) -> Result<Checkpointer> {
        let conn = open_connection(path, false)?;
        let (requests, rx) = mpsc::sync_channel::<()>(1);
        let done = Arc::new(AtomicBool::new(false));
        let finished = Arc::clone(&done);
        std::thread::Builder::new()
            .name("orbit-sqlite-checkpoint".into())
            .spawn(move || {
                while rx.recv().is_ok() {
                    // A checkpoint that cannot copy everything now (a reader on an old
                    // snapshot, a busy lock) is completed by a later one; an error here only
                    // leaves the WAL longer for a while.
                    let _ = checkpoint(&conn);
                    finished.store(true, Ordering::Release);
                }
            })
            .map_err(|e| StoreError::Storage(format!("spawn sqlite checkpointer: {e}")))?;
        Ok(Checkpointer { requests, done, commits: 0 })
    }

    /// Called on the writer after each committed group, its callers answered.
    fn committed(&mut self, writer: &Connection) {
        if self.done.swap(false, Ordering::Acquire) {
            let _ = checkpoint(writer);
        }
        self.commits += 1;
        if self.commits >= CHECKPOINT_EVERY {
            self.commits = 0;
            // Full: one is pending already, which will see these frames too.
            let _ = self.requests.try_send(());
        }
    }
}

fn checkpoint(conn: &Connection) -> rusqlite::Result<()> {
    conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))
}

/// The writer thread's handle: sends jobs, the thread runs them in order.
pub(crate) struct Writer {
    jobs: mpsc::Sender<Job>,
}

impl Writer {
    /// Open the writer connection on its own thread (creating the file if needed).
    pub(crate) async fn start(path: PathBuf) -> Result<Writer> {
        let (jobs, rx) = mpsc::channel::<Job>();
        let (ready_tx, ready_rx) = oneshot::channel::<Result<()>>();
        std::thread::Builder::new()
            .name("orbit-sqlite-writer".into())
            .spawn(move || {
                let opened = open_connection(&path, false)
                    .and_then(|conn| Ok((conn, Checkpointer::start(&path)?)));
                let (mut conn, mut checkpointer) = match opened {
                    Ok(c) => c,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                let _ = ready_tx.send(Ok(()));
                // Ends when every `Writer` handle (the sender) is dropped.
                while let Ok(job) = rx.recv() {
                    if run_group(&mut conn, job, &rx) {
                        checkpointer.committed(&conn);
                    }
                }
            })
            .map_err(|e| StoreError::Storage(format!("spawn sqlite writer: {e}")))?;
        ready_rx.await.map_err(|_| StoreError::Storage("sqlite writer died".into()))??;
        Ok(Writer { jobs })
    }

    /// Run `f` on the writer connection, as part of a group commit, and wait until its
    /// group is durable. `f` must leave nothing behind when it fails (it runs in a savepoint
    /// that is rolled back on error).
    pub(crate) async fn run<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        let job = Job::Grouped(Box::new(move |conn: Result<&mut Connection>| {
            let result = conn.and_then(|conn| in_savepoint(conn, f));
            Box::new(move |committed: Result<()>| {
                let _ = tx.send(committed.and(result));
            })
        }));
        self.jobs.send(job).map_err(|_| StoreError::Storage("sqlite writer stopped".into()))?;
        rx.await.map_err(|_| StoreError::Storage("sqlite writer dropped a job".into()))?
    }

    /// Run `f` on the writer connection outside any group transaction.
    pub(crate) async fn run_alone<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        let job = Job::Alone(Box::new(move |conn| {
            let _ = tx.send(f(conn));
        }));
        self.jobs.send(job).map_err(|_| StoreError::Storage("sqlite writer stopped".into()))?;
        rx.await.map_err(|_| StoreError::Storage("sqlite writer dropped a job".into()))?
    }
}

/// Runs `first` and every grouped job already waiting, in one transaction. True when a
/// group transaction committed.
fn run_group(conn: &mut Connection, first: Job, rx: &mpsc::Receiver<Job>) -> bool {
    let mut group = Vec::new();
    let mut after = None;
    match first {
        Job::Alone(job) => {
            job(conn);
            return false;
        }
        Job::Grouped(job) => group.push(job),
    }
    let mut done = false;
    while group.len() < MAX_GROUP {
        match rx.try_recv() {
            Ok(Job::Grouped(job)) => group.push(job),
            Ok(Job::Alone(job)) => {
                after = Some(job);
                break;
            }
            Err(_) => break,
        }
    }
    // Without a transaction nothing runs: each caller gets the error (another process
    // holding the file past the busy timeout is `Unavailable`), and nothing was written.
    match conn.prepare_cached("BEGIN IMMEDIATE").and_then(|mut s| s.execute([])) {
        Ok(_) => {
            let replies: Vec<Reply> = group.into_iter().map(|job| job(Ok(&mut *conn))).collect();
            let committed =
                conn.prepare_cached("COMMIT").and_then(|mut s| s.execute([])).map(|_| ()).map_err(
                    |e| match StoreError::from(e) {
                        StoreError::Storage(m) => StoreError::Storage(format!("commit: {m}")),
                        transient => transient,
                    },
                );
            if committed.is_err() {
                let _ = conn.execute_batch("ROLLBACK");
            }
            done = committed.is_ok();
            for reply in replies {
                reply(committed.clone());
            }
        }
        Err(e) => {
            let failed = StoreError::from(e);
            for job in group {
                job(Err(failed.clone()))(Err(failed.clone()));
            }
        }
    }
    if let Some(job) = after {
        job(conn);
    }
    done
}

/// Runs `f` in a savepoint: released on success, rolled back on error. Savepoints nest:
/// a job may run a part of itself in one, to keep the rest when that part fails.
pub(crate) fn in_savepoint<T>(
    conn: &mut Connection,
    f: impl FnOnce(&mut Connection) -> Result<T>,
) -> Result<T> {
    conn.prepare_cached("SAVEPOINT orbit_job")?.execute([])?;
    let result = f(conn);
    if result.is_err() {
        conn.prepare_cached("ROLLBACK TO orbit_job")?.execute([])?;
    }
    conn.prepare_cached("RELEASE orbit_job")?.execute([])?;
    result
}

/// A small pool of read-only connections used from the blocking thread pool.
pub(crate) struct Readers {
    conns: Arc<Vec<Mutex<Connection>>>,
    next: AtomicUsize,
}

impl Readers {
    /// Open `count` (at least one) read-only connections. The file must already exist.
    pub(crate) async fn open(path: PathBuf, count: usize) -> Result<Readers> {
        let conns = tokio::task::spawn_blocking(move || {
            (0..count.max(1))
                .map(|_| open_connection(&path, true).map(Mutex::new))
                .collect::<Result<Vec<_>>>()
        })
        .await
        .map_err(|e| StoreError::Storage(format!("open sqlite readers: {e}")))??;
        Ok(Readers { conns: Arc::new(conns), next: AtomicUsize::new(0) })
    }

    /// Run `f` on a reader connection on the blocking pool.
    pub(crate) async fn run<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T> + Send + 'static,
    {
        let conns = Arc::clone(&self.conns);
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        tokio::task::spawn_blocking(move || {
            let n = conns.len();
            // Prefer an idle connection; otherwise wait for the round-robin one. The lock is
            // only ever held on this blocking thread, never across an await.
            let idle = (0..n).find_map(|i| conns[(start + i) % n].try_lock().ok());
            let guard = match idle {
                Some(g) => g,
                None => conns[start % n]
                    .lock()
                    .map_err(|_| StoreError::Storage("sqlite reader poisoned".into()))?,
            };
            f(&guard)
        })
        .await
        .map_err(|e| StoreError::Storage(format!("sqlite read task: {e}")))?
    }
}

/// The store's clock for bookkeeping columns (heartbeats, claims, applied rows), epoch
/// milliseconds: SQLite's counterpart of PostgreSQL's `now()`, the database's own clock, so
/// it is not the services' injectable `Clock`; it reads the same system clock.
pub(crate) fn now_ms() -> u64 {
    orbit_clock::system_clock()
}
