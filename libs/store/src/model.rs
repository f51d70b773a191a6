//! Plain row types the [`Store`](crate::Store) role traits read and write.
//!
//! They mirror the tables of `migrations/0001_init.sql` but carry domain types (`u64`
//! milliseconds, `serde_json::Value`, `Option` for nullable columns); backends convert at the
//! edge and reject stored values that do not fit (negative times, bad JSON) as
//! [`StoreError::Storage`](crate::StoreError::Storage).

use orbit_engine::Status;
use serde_json::Value;

/// Whether [`Definitions::put_definition`](crate::Definitions::put_definition) wrote a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PutOutcome {
    /// A new (name, version) was registered.
    Created,
    /// The same (name, version, hash) was already registered: nothing changed.
    Unchanged,
}

/// A registered workflow definition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DefinitionRow {
    /// Workflow name.
    pub name: String,
    /// Version label, unique per name.
    pub version: String,
    /// Hash of the canonical document.
    pub definition_hash: String,
    /// The document as registered.
    pub document: String,
    /// Registration time, epoch milliseconds.
    pub created_at_ms: u64,
}

/// One registered version of a workflow, without its document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionRow {
    /// Version label.
    pub version: String,
    /// Hash of the canonical document.
    pub definition_hash: String,
}

impl VersionRow {
    /// The latest of `versions` (in registration order) by
    /// [`orbit_definition::version::latest`].
    #[must_use]
    pub fn latest(mut versions: Vec<VersionRow>) -> Option<VersionRow> {
        let i = Self::latest_index(&versions)?;
        Some(versions.swap_remove(i))
    }

    /// [`latest`](Self::latest) of a borrowed list: its position.
    #[must_use]
    pub fn latest_index(versions: &[VersionRow]) -> Option<usize> {
        let labels: Vec<&str> = versions.iter().map(|v| v.version.as_str()).collect();
        orbit_definition::version::latest(&labels)
    }
}

/// The `executions` projection of one execution (its latest run).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutionRow {
    /// Execution id.
    pub execution_id: String,
    /// Current run (1-based; continue-as-new increments it).
    pub run: u32,
    /// Root of the execution tree (itself for a top-level execution).
    pub root_id: String,
    /// Parent execution, for a child.
    pub parent_id: Option<String>,
    /// Workflow name.
    pub workflow: String,
    /// Workflow version.
    pub version: String,
    /// Hash of the definition the execution runs.
    pub definition_hash: String,
    /// Projected status (stored as its name; a name the engine does not know is a corrupt
    /// row, never a default).
    pub status: Status,
    /// The schedule that started it, if any.
    pub schedule_id: Option<String>,
    /// Creation time, epoch milliseconds.
    pub created_at_ms: u64,
    /// Last projection update, epoch milliseconds.
    pub updated_at_ms: u64,
    /// When the execution reached a terminal status.
    pub closed_at_ms: Option<u64>,
    /// Seq of the last event of the current run (0 before the first).
    pub last_seq: u64,
    /// The step whose failure failed the run (FAILED or TIMED_OUT runs only).
    pub failed_step: Option<String>,
    /// The code of the error a FAILED or TIMED_OUT run ended with.
    pub error_code: Option<String>,
}

/// A stored status name read back: the engine's names only (an unknown one is a corrupt
/// row, never a default).
pub(crate) fn parse_status(name: &str) -> crate::Result<Status> {
    Status::parse(name).ok_or_else(|| crate::StoreError::corrupt("execution status", name))
}

/// Filter and page for [`ExecutionReads::list_executions`](crate::ExecutionReads::list_executions).
/// Executions are listed newest first, or in the query's `ORDER BY` (any system
/// attribute, then `execution_id`; NULLs last in both directions).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ExecutionFilter {
    /// Only this status.
    pub status: Option<Status>,
    /// Only this workflow name.
    pub workflow: Option<String>,
    /// Only children of this execution.
    pub parent_id: Option<String>,
    /// Only executions started by this schedule.
    pub schedule_id: Option<String>,
    /// Page size; 0 means the default (100). Capped at 1000.
    pub page_size: u32,
    /// The `next_page_token` of the previous page.
    pub page_token: Option<String>,
    /// A checked list query (`orbit-query`), ANDed with the filters above; each backend
    /// compiles it for its dialect. Its `ORDER BY` may name any system attribute (a search
    /// attribute is refused with `InvalidArgument`).
    pub query: Option<orbit_query::Checked>,
}

/// One page of executions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutionPage {
    /// The executions, newest first.
    pub executions: Vec<ExecutionRow>,
    /// Token for the next page; `None` on the last page.
    pub next_page_token: Option<String>,
}

/// Keyset paging of [`ExecutionFilter`], the same on every backend: one extra row is
/// fetched to learn whether another page follows, and the page token names the last row.
/// In creation order (the default, or `ORDER BY created`) the token is
/// `<created_at>:<execution_id>`; in another order ([`ListOrder::Keyset`]) it is
/// `<attribute>:<value>:<execution_id>`, the value `n` (NULL), `i<integer>` or
/// `t<hex of the text>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PageWindow {
    /// Rows in the page.
    pub size: u32,
    /// Rows to fetch (`size + 1`).
    pub limit: i64,
    /// The keyset to continue after, if any (creation order).
    pub after_created: Option<i64>,
    /// See `after_created`.
    pub after_id: Option<String>,
    /// The keyset to continue after in another order.
    pub after: Option<orbit_query::Keyset>,
    /// The order the page runs in.
    pub order: ListOrder,
}

/// The order of a list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ListOrder {
    /// By (`created_at`, `execution_id`), newest first unless `ascending`.
    Created {
        /// Oldest first.
        ascending: bool,
    },
    /// By a system attribute other than `created`, then `execution_id`
    /// (`orbit_query::compile_page`).
    Keyset(&'static orbit_query::SystemAttr),
}

impl ExecutionFilter {
    /// The page this filter asks for.
    pub(crate) fn window(&self) -> crate::Result<PageWindow> {
        let size = match self.page_size {
            0 => 100,
            n => n.min(1000),
        };
        let order = self.order()?;
        let mut window = PageWindow {
            size,
            limit: i64::from(size) + 1,
            after_created: None,
            after_id: None,
            after: None,
            order,
        };
        let Some(token) = self.page_token.as_deref() else { return Ok(window) };
        let bad = || crate::StoreError::InvalidArgument(format!("bad page token {token:?}"));
        match order {
            ListOrder::Created { .. } => {
                let (created, id) = token.split_once(':').ok_or_else(bad)?;
                window.after_created = Some(created.parse().map_err(|_| bad())?);
                window.after_id = Some(id.to_string());
            }
            ListOrder::Keyset(attr) => {
                let mut parts = token.splitn(3, ':');
                let (Some(name), Some(value), Some(id)) =
                    (parts.next(), parts.next(), parts.next())
                else {
                    return Err(bad());
                };
                if name != attr.name {
                    return Err(bad());
                }
                let value = decode_sort_value(value).ok_or_else(bad)?;
                window.after = Some(orbit_query::Keyset { value, execution_id: id.to_string() });
            }
        }
        Ok(window)
    }

    /// The order of the page: creation time unless the query orders by another system
    /// attribute. An order by a search attribute is refused (the page token would need its
    /// value, which the projection does not hold).
    fn order(&self) -> crate::Result<ListOrder> {
        let Some(order) = self.query.as_ref().and_then(|q| q.order.as_ref()) else {
            return Ok(ListOrder::Created { ascending: false });
        };
        match &order.target {
            orbit_query::Target::System(a) if a.name == "created" => {
                Ok(ListOrder::Created { ascending: order.direction == orbit_query::Direction::Asc })
            }
            orbit_query::Target::System(a) if SORTABLE.contains(&a.name) => {
                Ok(ListOrder::Keyset(a))
            }
            _ => Err(crate::StoreError::InvalidArgument(
                "a list orders by a system attribute only".into(),
            )),
        }
    }
}

/// The system attributes [`sort_value`] reads from the projection.
const SORTABLE: &[&str] = &[
    "execution_id",
    "workflow",
    "version",
    "status",
    "created",
    "updated",
    "closed",
    "duration",
    "schedule",
    "parent",
    "root",
    "failed_step",
    "error_code",
];

/// The value `attr` sorts `row` by; `None` for an attribute the projection does not hold.
fn sort_value(
    row: &ExecutionRow,
    attr: &orbit_query::SystemAttr,
) -> Option<orbit_query::SortValue> {
    use orbit_query::SortValue::{Int, Null, Text};
    let ms = |t: u64| Int(i64::try_from(t).unwrap_or(i64::MAX));
    let text = |s: &Option<String>| s.as_ref().map_or(Null, |s| Text(s.clone()));
    Some(match attr.name {
        "execution_id" => Text(row.execution_id.clone()),
        "workflow" => Text(row.workflow.clone()),
        "version" => Text(row.version.clone()),
        "status" => Text(row.status.as_str().to_string()),
        "created" => ms(row.created_at_ms),
        "updated" => ms(row.updated_at_ms),
        "closed" => row.closed_at_ms.map_or(Null, ms),
        "duration" => row.closed_at_ms.map_or(Null, |c| {
            let (c, s) = (i128::from(c), i128::from(row.created_at_ms));
            Int(i64::try_from(c - s).unwrap_or(i64::MAX))
        }),
        "schedule" => text(&row.schedule_id),
        "parent" => text(&row.parent_id),
        "root" => Text(row.root_id.clone()),
        "failed_step" => text(&row.failed_step),
        "error_code" => text(&row.error_code),
        _ => return None,
    })
}

fn encode_sort_value(value: &orbit_query::SortValue) -> String {
    use std::fmt::Write as _;
    match value {
        orbit_query::SortValue::Null => "n".into(),
        orbit_query::SortValue::Int(n) => format!("i{n}"),
        orbit_query::SortValue::Text(s) => {
            let mut out = String::with_capacity(1 + 2 * s.len());
            out.push('t');
            for b in s.bytes() {
                let _ = write!(out, "{b:02x}");
            }
            out
        }
    }
}

fn decode_sort_value(value: &str) -> Option<orbit_query::SortValue> {
    if value == "n" {
        return Some(orbit_query::SortValue::Null);
    }
    if let Some(n) = value.strip_prefix('i') {
        return n.parse().ok().map(orbit_query::SortValue::Int);
    }
    let hex = value.strip_prefix('t')?;
    if hex.len() % 2 != 0 {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..hex.len())
        .step_by(2)
        .map(|i| hex.get(i..i + 2).and_then(|h| u8::from_str_radix(h, 16).ok()))
        .collect();
    String::from_utf8(bytes?).ok().map(orbit_query::SortValue::Text)
}

impl ExecutionPage {
    /// The page made of the rows fetched for `window` (one more than a page when another
    /// follows).
    pub(crate) fn from_rows(mut executions: Vec<ExecutionRow>, window: &PageWindow) -> Self {
        let size = window.size as usize;
        let more = executions.len() > size;
        executions.truncate(size);
        let next_page_token = if more {
            executions.last().map(|r| match window.order {
                ListOrder::Created { .. } => format!("{}:{}", r.created_at_ms, r.execution_id),
                ListOrder::Keyset(attr) => {
                    let value = sort_value(r, attr).unwrap_or(orbit_query::SortValue::Null);
                    format!("{}:{}:{}", attr.name, encode_sort_value(&value), r.execution_id)
                }
            })
        } else {
            None
        };
        ExecutionPage { executions, next_page_token }
    }
}

#[cfg(test)]
mod sort_value_tests {
    use super::*;

    #[test]
    fn sort_values_round_trip_through_the_token_encoding() {
        use orbit_query::SortValue::{Int, Null, Text};
        for v in [Null, Int(-5), Int(i64::MAX), Text(String::new()), Text("a:b ü".into())] {
            assert_eq!(decode_sort_value(&encode_sort_value(&v)), Some(v));
        }
        for bad in ["", "x", "iz", "t0", "tzz", "tff"] {
            assert_eq!(decode_sort_value(bad), None, "{bad}");
        }
    }
}

/// The queued (unclaimed) backlog of one task name and version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueBacklog {
    /// Task name.
    pub task: String,
    /// Task contract version.
    pub task_version: String,
    /// Rows in state `queued`.
    pub queued: u64,
    /// `created_at` of the oldest queued row, epoch milliseconds (store clock).
    pub oldest_created_at_ms: u64,
}

/// The owner row of an execution.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerRow {
    /// Execution id.
    pub execution_id: String,
    /// Root of its tree (children share the root's owner).
    pub root_id: String,
    /// The owning node.
    pub node_id: String,
    /// Ownership epoch; every takeover increments it.
    pub epoch: u64,
    /// When this node took ownership, epoch milliseconds.
    pub since_ms: u64,
}

/// An owners row a restarted node moved ([`crate::roles::OwnerWrites::resume_node`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResumedExecution {
    /// Execution id.
    pub execution_id: String,
    /// The epoch its owners row moved to: the fence of this process's commits.
    pub epoch: u64,
    /// Whether the execution is open (not in a terminal status).
    pub open: bool,
    /// Whether its history records a child start (`ChildStarted`): the caller loads it to
    /// restart a child a lost process asked for but never created.
    pub child_started: bool,
}

/// Lifecycle of a task queue row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskState {
    /// Waiting for a worker.
    Queued,
    /// Handed to a worker session through a frontend.
    Claimed,
    /// The worker's result was recorded.
    Done,
    /// Withdrawn by the owner.
    Cancelled,
}

impl TaskState {
    /// The stored name.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Queued => "queued",
            TaskState::Claimed => "claimed",
            TaskState::Done => "done",
            TaskState::Cancelled => "cancelled",
        }
    }

    /// Parse a stored name.
    #[must_use]
    pub fn parse(s: &str) -> Option<TaskState> {
        match s {
            "queued" => Some(TaskState::Queued),
            "claimed" => Some(TaskState::Claimed),
            "done" => Some(TaskState::Done),
            "cancelled" => Some(TaskState::Cancelled),
            _ => None,
        }
    }
}

/// A task offer to insert (queued) with a commit: the engine's [`TaskOffer`](orbit_engine::TaskOffer)
/// as it is, so what the decider offers and what the queue stores cannot drift apart. With
/// `attempt`, `offer` identifies the row: a redelivery of the same attempt is a new row, and
/// re-inserting the same offer is a no-op.
pub use orbit_engine::effects::TaskOffer as NewTask;

/// A task queue row.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskRow {
    /// Row id (also used by the owner to cancel it).
    pub id: u64,
    /// Execution id.
    pub execution_id: String,
    /// Run the task belongs to.
    pub run: u32,
    /// The unit key (step).
    pub unit_key: String,
    /// Attempt number.
    pub attempt: u32,
    /// Offer number (see [`NewTask::offer`]).
    pub offer: u32,
    /// Task name.
    pub task: String,
    /// Contract version.
    pub task_version: String,
    /// The task input.
    pub input: Value,
    /// Idempotency key.
    pub idempotency_key: String,
    /// Current state.
    pub state: TaskState,
    /// Claiming frontend node.
    pub claimed_by: Option<String>,
    /// Claiming worker session.
    pub session: Option<String>,
    /// The token of the current claim: 128 random bits ([`new_task_token`]); a result
    /// must present it.
    pub token: Option<String>,
    /// The worker (`worker_id` of its hello) the current claim was made for: only it may
    /// report a result for the token.
    pub worker_id: Option<String>,
    /// The worker language the row is routed to ([`NewTask::language`]); `None`: any.
    pub language: Option<String>,
    /// When the row was queued, epoch milliseconds.
    pub created_at_ms: u64,
    /// When it was last claimed.
    pub claimed_at_ms: Option<u64>,
    /// Its priority, 1 (first) ..= 5 (last); 3 when none was declared.
    pub priority: u8,
    /// The flow control its attempt recorded ([`NewTask::flow`]); `None`: none declared.
    pub flow: Option<orbit_engine::Flow>,
}

/// The outcome of [`TaskQueue::complete_task_row`](crate::TaskQueue::complete_task_row).
#[derive(Debug, Clone, PartialEq)]
pub struct CompletedTask {
    /// The row, after the update.
    pub task: TaskRow,
    /// Whether this call moved it to `done` (false: it was already done, or still queued).
    pub newly_done: bool,
    /// The inbox entry written for the owner, if a report was given.
    pub inbox_seq: Option<u64>,
}

/// An inbox entry.
#[derive(Debug, Clone, PartialEq)]
pub struct InboxEntry {
    /// Global, increasing sequence number.
    pub seq: u64,
    /// Execution the command is for.
    pub execution_id: String,
    /// The kind column, as stored: [`InboxMessage::decode`](crate::InboxMessage::decode)
    /// reads it with the token and payload (a row that does not decode is refused by its
    /// owner, not skipped).
    pub kind: String,
    /// Task token, for worker results.
    pub token: Option<String>,
    /// The command.
    pub payload: Value,
    /// When it was written, epoch milliseconds.
    pub created_at_ms: u64,
    /// When the owner applied it.
    pub done_at_ms: Option<u64>,
    /// The owner's reply as stored, for callers that wait (read it with
    /// [`InboxReply::from_json`](crate::InboxReply::from_json)).
    pub result: Option<Value>,
}

/// Where an inbox entry stands, for a caller waiting on a reply.
#[derive(Debug, Clone, PartialEq)]
pub enum InboxStatus {
    /// Not applied yet.
    Pending,
    /// Applied; the owner's reply if it recorded one.
    Done(Option<crate::InboxReply>),
}

/// A durable timer to write with a commit.
#[derive(Debug, Clone, PartialEq)]
pub struct NewTimer {
    /// Key, unique per execution (a unit key, `workflow_timeout`, ...): upserting the same
    /// key moves the timer.
    pub key: String,
    /// Due time, epoch milliseconds.
    pub fire_at_ms: u64,
    /// What to deliver when it fires.
    pub payload: Value,
}

/// A stored timer.
#[derive(Debug, Clone, PartialEq)]
pub struct TimerRow {
    /// Execution id.
    pub execution_id: String,
    /// Run that wrote it.
    pub run: u32,
    /// Key, unique per execution.
    pub key: String,
    /// Due time, epoch milliseconds.
    pub fire_at_ms: u64,
    /// What to deliver when it fires.
    pub payload: Value,
}

/// What a node says about itself when it heartbeats (membership).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeInfo {
    /// Stable node id: a restarted process keeps it and resumes its own work.
    pub node_id: String,
    /// `frontend`, `owner` or `scheduler`.
    pub service: String,
    /// Unique per process start; a new incarnation resets `started_at`.
    pub incarnation: String,
    /// The address other services reach it at (`host:port`), if it serves one.
    pub addr: Option<String>,
    /// What the node reports with this beat (a frontend: a JSON summary of its live worker
    /// sessions); stored as given, replacing the previous beat's.
    pub sessions: Option<String>,
}

/// A `nodes` row. Times come from the store's clock (the database clock on PostgreSQL).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeRow {
    /// Node id.
    pub node_id: String,
    /// Service it runs.
    pub service: String,
    /// Current incarnation.
    pub incarnation: String,
    /// Advertised address.
    pub addr: Option<String>,
    /// Last heartbeat, epoch milliseconds.
    pub heartbeat_at_ms: u64,
    /// Start of the current incarnation, epoch milliseconds.
    pub started_at_ms: u64,
    /// What the node reported with its last beat ([`NodeInfo::sessions`]).
    pub sessions: Option<String>,
}

/// A root tree whose owner is not live: takeover work.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrphanRoot {
    /// Root execution id: the tree moves as one.
    pub root_id: String,
    /// The node that owns it and stopped heartbeating.
    pub node_id: String,
}

/// Transaction counters of the whole database (every process), for benchmarks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DbStats {
    /// Transaction ids assigned so far: every transaction that wrote took one.
    pub write_transactions: u64,
    /// Transactions committed in this database, reads included (`pg_stat_database`; the
    /// server publishes a backend's counts late, seconds and at times tens of seconds).
    pub commits: u64,
    /// Statements this database ran, `BEGIN`/`COMMIT`/`ROLLBACK` left out, counted at once
    /// by `pg_stat_statements`; `None` where that extension is not installed in the database
    /// (`CREATE EXTENSION pg_stat_statements`, with the library preloaded).
    pub statements: Option<u64>,
}

mod claim;
pub(crate) use claim::new_task_tokens;
pub use claim::{credits_left, new_task_token, worker_language, ClaimFilter, MAX_CLAIM};
