//! Membership, owner takeover and orphaned claims on PostgreSQL.
//!
//! Liveness is judged by the database clock alone (heartbeats are written with it and
//! compared against it), so nodes with skewed clocks agree on who is alive. Takeover and
//! claim release are single statements that lock their rows: a takeover waits for commits
//! holding the old epoch (`FOR SHARE`) and two concurrent takeovers or releases of the same
//! rows never both succeed.

use super::conn::PgConn;
use super::error::PgResult;
use super::rows::{self, get, get_u64, to_i64};
use super::sql;
use crate::error::{Result, StoreError};
use crate::inbox::{InboxKind, InboxMessage, Uncertain, OPERATOR_KINDS};
use crate::model::{InboxEntry, NodeInfo, NodeRow, OrphanRoot, ResumedExecution, TaskRow};

/// Inserts or refreshes the node's row; returns the database's now.
pub(crate) async fn heartbeat(conn: &mut PgConn, n: &NodeInfo) -> PgResult<u64> {
    let found = conn
        .query(sql::NODE_HEARTBEAT, &[&n.node_id, &n.service, &n.incarnation, &n.addr, &n.sessions])
        .await?;
    let row =
        found.first().ok_or_else(|| StoreError::Storage("heartbeat returned nothing".into()))?;
    Ok(get_u64(row, 0, "node heartbeat_at")?)
}

/// A heartbeat, then every node with a heartbeat within `timeout_ms` (this one included),
/// by id: one statement.
pub(crate) async fn beat_live(
    conn: &mut PgConn,
    n: &NodeInfo,
    timeout_ms: u64,
) -> PgResult<Vec<NodeRow>> {
    let timeout = to_i64(timeout_ms, "timeout")?;
    let found = conn
        .query(
            sql::NODE_BEAT_LIVE,
            &[&n.node_id, &n.service, &n.incarnation, &n.addr, &n.sessions, &timeout],
        )
        .await?;
    Ok(rows::all(&found, rows::node)?)
}

/// Nodes with a heartbeat within `timeout_ms`, by id.
pub(crate) async fn live(
    conn: &mut PgConn,
    service: Option<&str>,
    timeout_ms: u64,
) -> PgResult<Vec<NodeRow>> {
    let timeout = to_i64(timeout_ms, "timeout")?;
    let found = conn.query(sql::NODE_LIVE, &[&timeout, &service]).await?;
    Ok(rows::all(&found, rows::node)?)
}

/// Every node row, by id.
pub(crate) async fn list(conn: &mut PgConn) -> PgResult<Vec<NodeRow>> {
    let found = conn.query(sql::NODE_LIST, &[]).await?;
    Ok(rows::all(&found, rows::node)?)
}

/// Deletes a node's row.
pub(crate) async fn remove(conn: &mut PgConn, node_id: &str) -> PgResult<()> {
    conn.query(sql::NODE_REMOVE, &[&node_id]).await?;
    Ok(())
}

/// Pending entries of the executions `node_id` owns, plus those of `also`.
pub(crate) async fn pending_owned(
    conn: &mut PgConn,
    node_id: &str,
    also: &[String],
    limit: u32,
) -> PgResult<Vec<InboxEntry>> {
    let operator = OPERATOR_KINDS.map(InboxKind::as_str);
    let found = conn
        .query(sql::INBOX_PENDING_OWNED, &[&node_id, &also, &i64::from(limit), &&operator[..]])
        .await?;
    Ok(rows::all(&found, rows::inbox)?)
}

/// Open executions owned by `node_id`, by id.
pub(crate) async fn owned(conn: &mut PgConn, node_id: &str) -> PgResult<Vec<String>> {
    let found = conn.query(sql::OWNED_EXECUTIONS, &[&node_id]).await?;
    let ids: Result<Vec<String>> = found.iter().map(|r| get(r, 0, "execution id")).collect();
    Ok(ids?)
}

/// Root trees of owners without a live heartbeat that still have work.
pub(crate) async fn orphaned_roots(
    conn: &mut PgConn,
    timeout_ms: u64,
    limit: u32,
) -> PgResult<Vec<OrphanRoot>> {
    let timeout = to_i64(timeout_ms, "timeout")?;
    let found = conn.query(sql::ORPHANED_ROOTS, &[&timeout, &i64::from(limit)]).await?;
    let roots: Result<Vec<_>> = found
        .iter()
        .map(|r| Ok(OrphanRoot { root_id: get(r, 0, "root id")?, node_id: get(r, 1, "node id")? }))
        .collect();
    Ok(roots?)
}

/// Moves the tree's rows still held by `from_node` to `to_node` at the next epoch.
pub(crate) async fn take_over_root(
    conn: &mut PgConn,
    root_id: &str,
    from_node: &str,
    to_node: &str,
) -> PgResult<Vec<(String, u64)>> {
    let found = conn.query(sql::TAKE_OVER_ROOT, &[&root_id, &from_node, &to_node]).await?;
    let taken: Result<Vec<_>> =
        found.iter().map(|r| Ok((get(r, 0, "execution id")?, get_u64(r, 1, "epoch")?))).collect();
    Ok(taken?)
}

/// The next page of `node_id`'s owners rows to the next epoch (see
/// `OwnerWrites::resume_node`): one statement.
pub(crate) async fn resume_node(
    conn: &mut PgConn,
    node_id: &str,
    after: &str,
    limit: u32,
) -> PgResult<Vec<ResumedExecution>> {
    let found = conn.query(sql::RESUME_NODE, &[&node_id, &after, &i64::from(limit)]).await?;
    let resumed: Result<Vec<_>> = found
        .iter()
        .map(|r| {
            Ok(ResumedExecution {
                execution_id: get(r, 0, "execution id")?,
                epoch: get_u64(r, 1, "epoch")?,
                open: get(r, 2, "open")?,
                child_started: get(r, 3, "child started")?,
            })
        })
        .collect();
    Ok(resumed?)
}

/// Cancels every row `claimer` still holds, with one `uncertain` entry per row.
pub(crate) async fn release_claims(
    conn: &mut PgConn,
    claimer: &str,
    reason: &str,
) -> PgResult<Vec<TaskRow>> {
    let message =
        InboxMessage::Uncertain(Uncertain { token: String::new(), reason: reason.into() });
    let (kind, payload) = (message.kind().as_str(), message.payload_text());
    let found = conn.query(sql::RELEASE_CLAIMS, &[&claimer, &payload, &kind]).await?;
    Ok(rows::all(&found, rows::task)?)
}

/// Cancels the rows among `tokens` that `claimer` still holds, with one `uncertain` entry
/// per row.
pub(crate) async fn hand_back_claims(
    conn: &mut PgConn,
    claimer: &str,
    tokens: &[String],
    reason: &str,
) -> PgResult<Vec<TaskRow>> {
    let message =
        InboxMessage::Uncertain(Uncertain { token: String::new(), reason: reason.into() });
    let (kind, payload) = (message.kind().as_str(), message.payload_text());
    let found = conn.query(sql::HAND_BACK_CLAIMS, &[&claimer, &payload, &kind, &tokens]).await?;
    Ok(rows::all(&found, rows::task)?)
}

/// Moves the rows among `tokens` still claimed for `worker_id` to `claimer` and `session`.
pub(crate) async fn adopt_claims(
    conn: &mut PgConn,
    worker_id: &str,
    tokens: &[String],
    claimer: &str,
    session: &str,
) -> PgResult<Vec<TaskRow>> {
    let found = conn.query(sql::ADOPT_CLAIMS, &[&worker_id, &tokens, &claimer, &session]).await?;
    Ok(rows::all(&found, rows::task)?)
}

/// Claimers of claimed rows with no live node.
pub(crate) async fn orphaned_claimers(conn: &mut PgConn, timeout_ms: u64) -> PgResult<Vec<String>> {
    let timeout = to_i64(timeout_ms, "timeout")?;
    let found = conn.query(sql::ORPHANED_CLAIMERS, &[&timeout]).await?;
    let ids: Result<Vec<String>> = found.iter().map(|r| get(r, 0, "claimer")).collect();
    Ok(ids?)
}
