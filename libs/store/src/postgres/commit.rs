//! [`CommitBatch`]es on PostgreSQL: any number of batches in one transaction, usually in
//! ONE round trip.
//!
//! **One round trip, one statement** (the owner's usual commit). The rows the batches
//! expect are told from the batches themselves (`predict::predict`: the fenced epoch, the run
//! and last seq the first event continues, absent rows for a start, the inbox entries
//! applied), so the writes can be planned before anything is read. Such a call is one
//! segment (`predict` refuses an execution twice), sent as ONE statement ([`composed`]),
//! its own transaction (no `BEGIN`/`COMMIT`): [`sql::COMMIT_LOCK_CHECK`] as the CTE `chk`,
//! which locks what the two-round-trip path locks and fails when a row differs from the
//! expectation, then every write and the NOTIFYs as CTEs joined with chk's row, so none
//! writes before the check passed. A failed statement wrote nothing, and the commit is done
//! again the careful way ([`PgStore::commits_redone`](super::PgStore::commits_redone)
//! counts those). The statement's text depends only on which kinds of writes are present:
//! made once per shape, prepared once per connection, in the round trip of its first use.
//!
//! **Two round trips** (anything `predict` cannot tell, and the redo):
//! 1. `BEGIN`, then, pipelined: the owners rows of every execution of the call `FOR SHARE`
//!    (the fence: a takeover's epoch bump waits until this transaction ends), their
//!    `executions` rows `FOR NO KEY UPDATE` (run and last seq; commits of one execution
//!    queue here) and the pending inbox entries the batches apply `FOR UPDATE`, each in a
//!    stable order so two commits never deadlock.
//! 2. Every check of the batch contract runs in memory on what was read (see `plan.rs`),
//!    batch after batch, exactly in the order the SQLite backend checks; a refusal rolls back
//!    before anything was written.
//! 3. Pipelined: one multi-row (`UNNEST`) statement per kind of write, the NOTIFYs, and
//!    `COMMIT`. If a statement fails (a concurrent writer created the same execution or
//!    owner row), the server refuses the rest and the `COMMIT` becomes a rollback.
//!
//! Statements are prepared once per connection; on a fresh connection that is one more
//! round trip, once.

use super::conn::{all_ok, command, pipeline, step, PgConn};
use super::error::{connection_lost, PgErr, PgResult};
use super::plan::{plan, Plan, Read, TaskKey, Write, WriteKind};
use super::predict::{predict, Guard, CHECK_PARAMS};
use super::rows::get;
use super::sql;
use crate::batch::{CommitBatch, CommitOutcome};
use crate::error::StoreError;
use crate::slots;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::Row;

/// The statements the two-round-trip commit uses (and whose parameter types the first use
/// of a composed statement on a connection borrows): the locks, the check and every kind of
/// write, prepared together once per connection.
const LOCKS: [&str; 5] = [
    sql::COMMIT_LOCK_OWNERS,
    sql::COMMIT_LOCK_EXECUTIONS,
    sql::COMMIT_LOCK_INBOX,
    sql::COMMIT_LOCK_CHECK,
    sql::COMMIT_DEFINITION_COUNTS,
];

/// The commit's own statements on this connection, prepared on first use.
async fn prepared(conn: &mut PgConn) -> PgResult<Statements> {
    let sqls: Vec<&'static str> =
        LOCKS.into_iter().chain(WriteKind::ALL.map(|k| k.statement().0)).collect();
    let prepared = conn.prepare(&sqls).await?;
    Ok(sqls.into_iter().zip(prepared).collect())
}

/// The prepared commit statements, by SQL text.
type Statements = HashMap<&'static str, tokio_postgres::Statement>;

fn stmt<'s>(
    statements: &'s Statements,
    sql: &'static str,
) -> PgResult<&'s tokio_postgres::Statement> {
    statements
        .get(sql)
        .ok_or_else(|| PgErr::Store(StoreError::Storage("commit statement missing".into())))
}

/// The rows every commit locks: the executions' ids (owners and executions rows) and the
/// inbox seqs applied, each sorted so two commits never deadlock; and the workflows whose
/// versions a start counts (read, not locked: a registration racing the commit is
/// concurrent with the start either way).
struct Locked {
    ids: Vec<String>,
    seqs: Vec<i64>,
    workflows: Vec<String>,
}

impl Locked {
    fn of(batches: &[CommitBatch]) -> Locked {
        let mut ids: Vec<String> = batches.iter().map(|b| b.execution_id.clone()).collect();
        ids.sort_unstable();
        ids.dedup();
        // A seq beyond i64 cannot be stored: no such entry (the plan refuses it).
        let mut seqs: Vec<i64> = batches
            .iter()
            .flat_map(|b| b.inbox_done.iter().filter_map(|d| i64::try_from(d.seq).ok()))
            .collect();
        seqs.sort_unstable();
        seqs.dedup();
        let mut workflows: Vec<String> = batches
            .iter()
            .filter(|b| b.versions_seen.is_some())
            .filter_map(|b| b.new_execution.as_ref().map(|r| r.workflow.clone()))
            .collect();
        workflows.sort_unstable();
        workflows.dedup();
        Locked { ids, seqs, workflows }
    }
}

/// Applies the batches atomically: all of them, or none.
///
/// The usual owner commit goes in one round trip: the rows it expects are predicted from
/// the batches (`predict::predict`), and the locks, the check and the writes are ONE statement
/// ([`composed`]). When it fails (the check or a write), nothing was written and the commit
/// is done again in two round trips, which read first and refuse with the exact error.
pub(crate) async fn commit_all(
    conn: &mut PgConn,
    batches: &[CommitBatch],
    redone: &AtomicU64,
) -> PgResult<Vec<CommitOutcome>> {
    if batches.is_empty() {
        return Ok(Vec::new());
    }
    let locked = Locked::of(batches);
    // Slot operations read under their keys' locks first: the careful path.
    let predicted = predict(batches).filter(|_| one_round_trip_allowed() && !slots::any(batches));
    if let Some((read, guard)) = predicted {
        if let Some((planned, sql)) = plan(batches, read)
            .ok()
            .and_then(|p| composed(&p.writes, locked.ids.len() == 1).map(|sql| (p, sql)))
        {
            let sent = OneStatement { sql, guard: &guard, planned };
            if let Some(done) = one_round_trip(conn, &locked, sent, batches).await? {
                return Ok(done);
            }
            redone.fetch_add(1, Ordering::Relaxed);
            crate::measure::count(
                crate::measure::Tx::CommitRedone,
                crate::measure::Backend::Postgres,
            );
        }
    }
    let statements = prepared(conn).await?;
    two_round_trips(conn, &statements, &locked, batches).await
}

/// TEST-ONLY, compiled in only with the `test-hooks` feature:
/// `ORBIT_PG_COMMIT_TWO_ROUND_TRIPS=1` makes every commit take the two round trips, so a test
/// can pause a process between them while it holds its locks (`cluster_owner_loss.rs`); any
/// other build always predicts.
#[cfg(feature = "test-hooks")]
pub(crate) const TWO_ROUND_TRIPS_ENV: &str = "ORBIT_PG_COMMIT_TWO_ROUND_TRIPS";

fn one_round_trip_allowed() -> bool {
    #[cfg(feature = "test-hooks")]
    {
        static FORCED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        #[allow(clippy::disallowed_methods)] // The hook's only input, in test builds only.
        !*FORCED.get_or_init(|| std::env::var_os(TWO_ROUND_TRIPS_ENV).is_some_and(|v| v == "1"))
    }
    #[cfg(not(feature = "test-hooks"))]
    {
        true
    }
}

/// A predicted commit: its plan, and the check and statement that send it.
struct OneStatement<'a> {
    sql: &'static str,
    guard: &'a Guard,
    planned: Plan,
}

/// The predicted commit as its one statement: `Some` outcomes when it committed, `None`
/// when it failed (the check found other rows, or a write failed), having written nothing.
async fn one_round_trip(
    conn: &mut PgConn,
    locked: &Locked,
    sent: OneStatement<'_>,
    batches: &[CommitBatch],
) -> PgResult<Option<Vec<CommitOutcome>>> {
    let OneStatement { sql, guard, planned } = sent;
    let Plan { writes, outcomes: result, task_keys } = planned;
    let ordered: Vec<&Write> = in_composed_order(&writes).collect();
    let refs: Vec<&(dyn ToSql + Sync)> =
        ordered.iter().flat_map(|w| w.params.iter().map(|p| p.as_ref() as _)).collect();
    let check = guard.params(&locked.ids, &locked.seqs);
    let params: Vec<&(dyn ToSql + Sync)> = check.into_iter().chain(refs).collect();
    // Once per connection and shape: the parameter types of the statement's parts.
    let types = if conn.is_prepared(sql) {
        Vec::new()
    } else {
        param_types(&prepared(conn).await?, &ordered)?
    };
    // Its own transaction, but marked all the same: a caller dropped before the answer
    // leaves a connection the pool discards.
    conn.begin_marker();
    let rows = match conn.query_made(sql, &params, &types).await {
        Ok(rows) => rows,
        // The pool discards the connection; whether it committed is unknown, as for any
        // commit whose answer is lost.
        Err(e) if connection_lost(&e) => return Err(PgErr::Db(e)),
        Err(_) => {
            // The server rolled the statement back.
            conn.end_marker();
            return Ok(None);
        }
    };
    conn.end_marker();
    let tasks = writes.iter().any(|w| w.kind == WriteKind::InsertTasks);
    finish(rows.iter().filter(|_| tasks), result, task_keys, batches).map(Some)
}

/// The composed statement's parameter types: the check's, then each write's, as the server
/// prepared their own statements.
fn param_types(statements: &Statements, writes: &[&Write]) -> PgResult<Vec<Type>> {
    let mut types = stmt(statements, sql::COMMIT_LOCK_CHECK)?.params().to_vec();
    for w in writes {
        types.extend_from_slice(stmt(statements, w.sql())?.params());
    }
    Ok(types)
}

/// Reads (and locks) first, checks the batches against what was read, then writes.
async fn two_round_trips(
    conn: &mut PgConn,
    statements: &Statements,
    locked: &Locked,
    batches: &[CommitBatch],
) -> PgResult<Vec<CommitOutcome>> {
    // Round trip 1: begin, lock and read.
    conn.begin_marker();
    let read = {
        let client = conn.client();
        let p_ids: [&(dyn ToSql + Sync); 1] = [&locked.ids];
        let p_seqs: [&(dyn ToSql + Sync); 1] = [&locked.seqs];
        let p_workflows: [&(dyn ToSql + Sync); 1] = [&locked.workflows];
        let mut steps = vec![command(client, "BEGIN")];
        for (sql, params) in [
            (sql::COMMIT_LOCK_OWNERS, &p_ids),
            (sql::COMMIT_LOCK_EXECUTIONS, &p_ids),
            (sql::COMMIT_LOCK_INBOX, &p_seqs),
        ] {
            steps.push(step(client, stmt(statements, sql)?, params));
        }
        // Only when a start asks for it: no statement more for any other commit.
        if !locked.workflows.is_empty() {
            let counts = stmt(statements, sql::COMMIT_DEFINITION_COUNTS)?;
            steps.push(step(client, counts, &p_workflows));
        }
        all_ok(pipeline(steps).await).and_then(|rows| read_state(&rows))
    };
    let read = match read {
        Ok(r) => r,
        Err(e) => {
            conn.rollback().await;
            return Err(e);
        }
    };
    // Workflow-level slots (issue 27): locked, read, decided and written in this
    // transaction; their inbox entries ride with the batches' own.
    let with_slots;
    let batches = if slots::any(batches) {
        match slot_writes(conn, batches).await {
            Ok(b) => {
                with_slots = b;
                &with_slots[..]
            }
            Err(e) => {
                conn.rollback().await;
                return Err(e);
            }
        }
    } else {
        batches
    };

    // The contract, checked in memory.
    let Plan { writes, outcomes: result, task_keys } = match plan(batches, read) {
        Ok(p) => p,
        Err(e) => {
            conn.rollback().await;
            return Err(PgErr::Store(e));
        }
    };

    // Round trip 2: every write, the notifications and the commit.
    let refs = write_params(&writes);
    let mut outcomes = {
        let client = conn.client();
        let mut steps = Vec::with_capacity(writes.len() + 1);
        push_writes(&mut steps, client, statements, &writes, &refs)?;
        pipeline(steps).await
    };
    let committed = outcomes.pop().unwrap_or_else(|| Ok(Vec::new()));
    match &committed {
        Err(e) if connection_lost(e) => {} // the pool discards the connection
        _ => conn.end_marker(),
    }
    let rows = all_ok(outcomes)?;
    committed?;
    let tasks = rows.iter().zip(&writes).filter(|(_, w)| w.kind == WriteKind::InsertTasks);
    finish(tasks.flat_map(|(rows, _)| rows), result, task_keys, batches)
}

/// Takes the advisory lock of every key the batches touch (in key order), reads their rows,
/// plans (`crate::slots::plan`) and writes the slot rows; returns the batches with the
/// grants' and cancels' inbox entries. Runs inside the commit's transaction: a commit that
/// fails afterwards rolls all of it back.
async fn slot_writes(conn: &mut PgConn, batches: &[CommitBatch]) -> PgResult<Vec<CommitBatch>> {
    let keys = slots::keys_of(batches);
    let client = conn.client();
    for key in &keys {
        client
            .execute("SELECT pg_advisory_xact_lock(hashtext('orbit.slot/' || $1))", &[key])
            .await?;
    }
    let rows = client
        .query(
            "SELECT ticket, slot_key, execution_id, held, slot_limit FROM execution_slots \
             WHERE slot_key = ANY($1) ORDER BY ticket",
            &[&keys],
        )
        .await?;
    let mut read = Vec::with_capacity(rows.len());
    for r in &rows {
        read.push(slots::SlotRow {
            ticket: get(r, 0, "slot ticket")?,
            key: get(r, 1, "slot key")?,
            execution_id: get(r, 2, "slot execution")?,
            held: get(r, 3, "slot held")?,
            limit: u32::try_from(get::<i64>(r, 4, "slot limit")?).unwrap_or(u32::MAX),
        });
    }
    let writes = slots::plan(batches, read);
    if !writes.delete.is_empty() {
        let (keys, ids): (Vec<String>, Vec<String>) = writes.delete.iter().cloned().unzip();
        client
            .execute(
                "DELETE FROM execution_slots s USING UNNEST($1::text[], $2::text[]) AS d(k, e) \
                 WHERE s.slot_key = d.k AND s.execution_id = d.e",
                &[&keys, &ids],
            )
            .await?;
    }
    if !writes.grant.is_empty() {
        let (keys, ids): (Vec<String>, Vec<String>) = writes.grant.iter().cloned().unzip();
        client
            .execute(
                "UPDATE execution_slots s SET held = TRUE FROM UNNEST($1::text[], $2::text[]) \
                 AS g(k, e) WHERE s.slot_key = g.k AND s.execution_id = g.e",
                &[&keys, &ids],
            )
            .await?;
    }
    if !writes.insert.is_empty() {
        let keys: Vec<&str> = writes.insert.iter().map(|r| r.key.as_str()).collect();
        let ids: Vec<&str> = writes.insert.iter().map(|r| r.execution_id.as_str()).collect();
        let held: Vec<bool> = writes.insert.iter().map(|r| r.held).collect();
        let limits: Vec<i64> = writes.insert.iter().map(|r| i64::from(r.limit)).collect();
        // WITH ORDINALITY keeps the plan's order, so tickets follow the start order.
        client
            .execute(
                "INSERT INTO execution_slots (slot_key, execution_id, held, slot_limit, created_at) \
                 SELECT k, e, h, l, (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT \
                 FROM UNNEST($1::text[], $2::text[], $3::bool[], $4::bigint[]) \
                 WITH ORDINALITY AS i(k, e, h, l, n) ORDER BY n",
                &[&keys, &ids, &held, &limits],
            )
            .await?;
    }
    crate::measure::slots_queued(writes.queued);
    Ok(slots::with_entries(batches, &writes))
}

/// Adds every write, then `COMMIT`, to a pipeline.
fn push_writes<'a>(
    steps: &mut Vec<super::conn::Step<'a>>,
    client: &'a tokio_postgres::Client,
    statements: &'a Statements,
    writes: &[Write],
    refs: &'a [Vec<&'a (dyn ToSql + Sync)>],
) -> PgResult<()> {
    for (w, params) in writes.iter().zip(refs) {
        steps.push(step(client, stmt(statements, w.sql())?, params));
    }
    steps.push(command(client, "COMMIT"));
    Ok(())
}

/// Each write's parameters as the driver takes them.
fn write_params(writes: &[Write]) -> Vec<Vec<&(dyn ToSql + Sync)>> {
    writes
        .iter()
        .map(|w| w.params.iter().map(|p| p.as_ref() as &(dyn ToSql + Sync)).collect())
        .collect()
}

/// The outcomes of a committed plan: the ids of the inserted task rows go to the batch
/// that offered each, the rows inserted claimed (a token) to the batch that claimed them.
/// A row without an id (the one statement's when no offer was inserted) is skipped.
fn finish<'r>(
    task_rows: impl Iterator<Item = &'r Row>,
    mut result: Vec<CommitOutcome>,
    task_keys: Vec<Vec<TaskKey>>,
    batches: &[CommitBatch],
) -> PgResult<Vec<CommitOutcome>> {
    let mut inserted: HashMap<TaskKey, u64> = HashMap::new();
    let mut claimed: HashMap<String, crate::model::TaskRow> = HashMap::new();
    for row in task_rows {
        if get::<Option<i64>>(row, 0, "task id")?.is_none() {
            continue;
        }
        let t = super::rows::task(row)?;
        let key = (
            t.execution_id.clone(),
            i64::from(t.run),
            t.unit_key.clone(),
            i64::from(t.attempt),
            i64::from(t.offer),
        );
        inserted.insert(key, t.id);
        if let Some(token) = t.token.clone() {
            claimed.insert(token, t);
        }
    }
    for ((outcome, keys), batch) in result.iter_mut().zip(task_keys).zip(batches) {
        outcome.task_ids = keys.into_iter().filter_map(|k| inserted.remove(&k)).collect();
        outcome.claimed =
            batch.task_claims.iter().filter_map(|c| claimed.remove(&c.token)).collect();
    }
    Ok(result)
}

/// The rows of round trip 1 as the plan's input.
fn read_state(rows: &[Vec<tokio_postgres::Row>]) -> PgResult<Read> {
    let mut read = Read::default();
    let (Some(owners), Some(execs), Some(inbox)) = (rows.get(1), rows.get(2), rows.get(3)) else {
        return Err(PgErr::Store(StoreError::Storage("commit read lost a result".into())));
    };
    for r in owners {
        let epoch: i64 = get(r, 1, "owner epoch")?;
        let epoch = u64::try_from(epoch).map_err(|_| StoreError::corrupt("owner epoch", epoch))?;
        read.owners.insert(get(r, 0, "owner execution_id")?, epoch);
    }
    for r in execs {
        let (run, seq): (i64, i64) = (get(r, 1, "execution run")?, get(r, 2, "last_seq")?);
        let run = u32::try_from(run).map_err(|_| StoreError::corrupt("execution run", run))?;
        let seq = u64::try_from(seq).map_err(|_| StoreError::corrupt("last_seq", seq))?;
        read.executions.insert(get(r, 0, "execution id")?, (run, seq));
    }
    for r in inbox {
        let seq: i64 = get(r, 0, "inbox seq")?;
        let seq = u64::try_from(seq).map_err(|_| StoreError::corrupt("inbox seq", seq))?;
        read.pending.insert(seq, get(r, 1, "inbox execution_id")?);
    }
    for r in rows.get(4).into_iter().flatten() {
        read.definitions.insert(get(r, 0, "definition name")?, get(r, 1, "definition count")?);
    }
    Ok(read)
}

/// The ONE statement of a segment's writes in the one-round-trip commit, or `None` for the
/// writes of more than one segment. [`sql::COMMIT_LOCK_CHECK`] is the CTE `chk`, then each
/// write is a CTE whose rows are joined with chk's single row, so nothing is written before
/// the locks are held and the check passed (a failed check fails the whole statement).
/// Parameters: the check's, then each write's, in order. Data-modifying CTEs run to the end
/// whether read or not; the NOTIFYs, a plain `SELECT`, are counted by the final select,
/// which returns the inserted task rows (one all-NULL row when none was inserted), or else
/// chk's row.
///
/// The text depends only on the kinds present and on whether the commit is of `one`
/// execution: made once per shape and kept for the process (at most 2^15 of them, a handful
/// in practice), so a connection prepares it once.
///
/// A commit of one execution (every commit at one execution in flight, the critical path)
/// names it as `($1::text[])[1]` where the check locks its owners and executions rows and
/// where the progress update finds its row, not `= ANY($1::text[])` and a join with the
/// `UNNEST`: a generic plan counts 10 elements in any array parameter, which made the
/// generic plan of the commit that ends an execution look three times dearer than a
/// custom one (129.8 against 40.9), so PostgreSQL planned that statement again on every
/// call (0.6 ms, more than it took to run). Keyed by an element, the generic plan costs
/// as much as a custom one (43.9) and is taken from the sixth call on.
///
/// CTEs see the rows as they were before the statement, and run in no order PostgreSQL
/// promises. A segment writes no row twice (see `plan.rs`), with one exception, which is
/// ordered: an offer already queued is locked by the insert's `ON CONFLICT DO UPDATE` (the
/// hand-off refusal), an error for a row another CTE wrote already, so the CTEs that write
/// task rows join the count of the inserted ones, which makes the insert run first. That
/// equals the segment's order (done, cancel, then the offers: an offer already there is
/// skipped, whatever its state).
pub(crate) fn composed(writes: &[Write], one: bool) -> Option<&'static str> {
    static SHAPES: [OnceLock<&'static str>; 2 << WriteKind::ALL.len()] =
        [const { OnceLock::new() }; 2 << WriteKind::ALL.len()];
    let mut shape = 0;
    for w in writes {
        // Each kind at most once, in order: one segment.
        if shape >= w.kind.bit() {
            return None;
        }
        shape |= w.kind.bit();
    }
    if one {
        shape |= ONE_EXECUTION;
    }
    Some(SHAPES.get(shape)?.get_or_init(|| String::leak(compose(shape))))
}

/// The bit of a shape (see [`composed`]) that says the commit is of one execution.
const ONE_EXECUTION: usize = 1 << WriteKind::ALL.len();

/// The execution of a one-execution commit, where the array of its ids would be.
const THE_ONE: &str = "($1::text[])[1]";

/// The one statement's CTEs in order: a segment's, but the offers before the writes that
/// wait for them (see [`composed`]); a CTE may read only those before it.
const COMPOSED_ORDER: [WriteKind; WriteKind::ALL.len()] = {
    use WriteKind::*;
    [
        InsertExecutions,
        InsertOwners,
        InsertEvents,
        UpdateExecutions,
        InsertTasks,
        TasksDone,
        CancelUnits,
        InsertInbox,
        UpsertTimers,
        DeleteTimers,
        InboxDone,
        DeleteSearch,
        InsertSearch,
        Notify,
    ]
};

/// A segment's writes in the order of the one statement's CTEs (and parameters).
pub(crate) fn in_composed_order(writes: &[Write]) -> impl Iterator<Item = &Write> {
    COMPOSED_ORDER.iter().filter_map(|k| writes.iter().find(|w| w.kind == *k))
}

fn compose(shape: usize) -> String {
    let has = |kind: WriteKind| shape & kind.bit() != 0;
    let one = shape & ONE_EXECUTION != 0;
    let check = if one {
        sql::COMMIT_LOCK_CHECK.replace("= ANY($1::text[])", &format!("= {THE_ONE}"))
    } else {
        sql::COMMIT_LOCK_CHECK.to_string()
    };
    let mut text = format!("WITH chk AS MATERIALIZED ({check})");
    let mut offset = CHECK_PARAMS;
    for kind in COMPOSED_ORDER.into_iter().filter(|k| has(*k)) {
        let (statement, name) = kind.statement();
        // Its `$1` is its own first array, the ids of the rows it updates: the one.
        let statement = if one && kind == WriteKind::UpdateExecutions {
            format!("{statement} AND e.execution_id = {THE_ONE}")
        } else {
            statement.to_string()
        };
        let after_offers = has(WriteKind::InsertTasks)
            && matches!(kind, WriteKind::TasksDone | WriteKind::CancelUnits);
        let source = if after_offers {
            "chk, (SELECT count(*) FROM w_tasks) AS offered, UNNEST("
        } else {
            "chk, UNNEST("
        };
        // A write's rows come from its first `UNNEST(` (see `sql.rs`).
        let gated = renumber(&statement.replacen("UNNEST(", source, 1), offset);
        let materialized = if kind == WriteKind::Notify { "MATERIALIZED " } else { "" };
        text.push_str(&format!(",\n{name} AS {materialized}({gated})"));
        offset += placeholders(&statement);
    }
    let tasks = has(WriteKind::InsertTasks);
    text.push_str(if tasks { "\nSELECT t.* FROM chk" } else { "\nSELECT chk.* FROM chk" });
    if has(WriteKind::Notify) {
        text.push_str(" CROSS JOIN (SELECT count(*) FROM notified) AS n");
    }
    if tasks {
        text.push_str(" LEFT JOIN w_tasks t ON true");
    }
    text
}

/// `text` with every parameter `$n` as `$(n + offset)`.
fn renumber(text: &str, offset: usize) -> String {
    let mut parts = text.split('$');
    let mut out = parts.next().unwrap_or_default().to_string();
    for part in parts {
        let (number, rest) = leading_number(part);
        out.push('$');
        match number {
            Some(n) => out.push_str(&(n + offset).to_string()),
            None => out.push_str(&part[..part.len() - rest.len()]),
        }
        out.push_str(rest);
    }
    out
}

/// The highest parameter number in `text`.
fn placeholders(text: &str) -> usize {
    text.split('$').skip(1).filter_map(|part| leading_number(part).0).max().unwrap_or(0)
}

/// The number `part` (what follows a `$`) starts with, and the rest after its digits.
fn leading_number(part: &str) -> (Option<usize>, &str) {
    let (digits, rest) = part.split_at(part.bytes().take_while(u8::is_ascii_digit).count());
    (digits.parse().ok(), rest)
}
