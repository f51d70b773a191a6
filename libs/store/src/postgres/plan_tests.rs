//! The hot path does not slow down as history piles up (issue 14, "scale with history").
//!
//! One database gets a little open work (running executions, queued and claimed tasks,
//! pending entries, due timers) and a few hundred finished executions with every row the
//! server keeps for them (events, owners rows, done task rows, applied entries, entries with
//! a request id). Every statement of the hot path and of the periodic work is run under
//! `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)` inside a transaction that is rolled back; then
//! ten times as many finished executions are added and the statements run again. The check:
//! no sequential scan of a table that grows with history, and the pages each statement
//! touches do not grow with the history (a statement that walks an index from end to end,
//! or reads and sorts every owners row, touches ten times as many pages the second time).
//!
//! Pages touched and plan shapes depend on the data, not on the machine's speed.
//! `enable_seqscan = off` keeps the planner from preferring a sequential scan of a small
//! table on the first, smaller database: where no index serves a statement it still picks
//! the sequential scan, which the check refuses. Set `ORBIT_PLAN_HISTORY` (finished
//! executions of the second database, default 5,000) and run with `--nocapture` to print
//! each statement's plan (docs/benchmarks.md has them for 100,000).

use super::sql;
use super::{retention, PgOptions, PgStore};
use crate::roles::Migrations;
use tokio_postgres::types::{FromSql, ToSql, Type};
use tokio_postgres::{Client, NoTls};

/// Tables whose size follows the number of finished executions stored.
const HISTORY_TABLES: [&str; 5] = ["executions", "history_events", "owners", "task_queue", "inbox"];
/// Finished executions of the first database.
const SMALL: i64 = 500;
/// Pages a statement may touch beyond 1.5 times its first count: a btree one level deeper
/// costs one page per key looked up (up to 64 here). A statement that reads a whole index
/// or table touches hundreds to thousands more pages the second time.
const SLACK: i64 = 64;

type Param = Box<dyn ToSql + Sync + Send>;

/// A statement and the arguments it runs with.
struct Case {
    name: &'static str,
    sql: &'static str,
    params: Vec<Param>,
}

fn s(v: &str) -> Param {
    Box::new(v.to_string())
}
fn i(v: i64) -> Param {
    Box::new(v)
}
fn strs(v: &[&str]) -> Param {
    Box::new(v.iter().map(|x| (*x).to_string()).collect::<Vec<String>>())
}

/// The raw text of a `json` column (tokio-postgres has no JSON type without a feature).
struct Json(String);
impl<'a> FromSql<'a> for Json {
    fn from_sql(_: &Type, raw: &'a [u8]) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(Json(String::from_utf8(raw.to_vec())?))
    }
    fn accepts(ty: &Type) -> bool {
        *ty == Type::JSON
    }
}

/// Every statement of the hot path and of the periodic work that reads a history table.
/// (Plain inserts read nothing and are left out.)
fn cases(pending_seq: i64) -> Vec<Case> {
    let open = || strs(&["open-1"]);
    let claim = |sql| Case {
        name: "claim_tasks (TASK_CLAIM)",
        sql,
        params: vec![
            strs(&["step"]),
            i(64),
            s("frontend-1"),
            s("sess-2"),
            strs(&["t1", "t2", "t3", "t4", "t5", "t6", "t7", "t8", "t9", "t10"]),
            s("w2"),
            s("dispatched"),
            strs(&["step"]),
            strs(&[]),
            strs(&[]),
            Box::new(None::<String>),
            // A worker without labels (`ClaimFilter::labels_json`).
            Box::new(None::<String>),
        ],
    };
    vec![
        Case { name: "commit: lock owners", sql: sql::COMMIT_LOCK_OWNERS, params: vec![open()] },
        Case {
            name: "commit: lock executions",
            sql: sql::COMMIT_LOCK_EXECUTIONS,
            params: vec![open()],
        },
        Case {
            name: "commit: lock inbox",
            sql: sql::COMMIT_LOCK_INBOX,
            params: vec![Box::new(vec![pending_seq])],
        },
        Case {
            name: "commit: lock and check (one round trip)",
            sql: sql::COMMIT_LOCK_CHECK,
            params: vec![
                open(),
                Box::new(vec![pending_seq]),
                // A start's expectations (no rows yet) and the open execution's entry:
                // EXPLAIN ANALYZE runs it, and a differing row would fail it.
                strs(&["new-1"]),
                Box::new(vec![None::<i64>]),
                strs(&["new-1"]),
                Box::new(vec![None::<i64>]),
                Box::new(vec![None::<i64>]),
                Box::new(vec![pending_seq]),
                open(),
                // The start took the latest of no versions (none are registered here).
                Box::new(Some("order".to_string())),
                Box::new(Some(0_i64)),
            ],
        },
        Case {
            name: "commit: update executions",
            sql: sql::COMMIT_UPDATE_EXECUTIONS,
            params: vec![
                open(),
                Box::new(vec![1i64]),
                Box::new(vec![4i64]),
                Box::new(vec![true]),
                strs(&["RUNNING"]),
                Box::new(vec![5i64]),
                Box::new(vec![None::<i64>]),
                Box::new(vec![None::<i64>]),
                Box::new(vec![None::<String>]),
                Box::new(vec![None::<String>]),
                Box::new(vec![None::<String>]),
                Box::new(vec![None::<String>]),
            ],
        },
        Case {
            name: "commit: tasks done",
            sql: sql::COMMIT_TASKS_DONE,
            params: vec![strs(&["claimed-2"]), strs(&["open-2"])],
        },
        Case {
            name: "commit: cancel units",
            sql: sql::COMMIT_CANCEL_UNITS,
            params: vec![open(), strs(&["s1"]), strs(&["claimed-1"]), open()],
        },
        step_commit(pending_seq, false),
        step_commit(pending_seq, true),
        Case {
            name: "commit: delete timers",
            sql: sql::COMMIT_DELETE_TIMERS,
            params: vec![open(), strs(&["next"])],
        },
        Case {
            name: "commit: inbox done",
            sql: sql::COMMIT_INBOX_DONE,
            params: vec![Box::new(vec![pending_seq]), strs(&["{}"])],
        },
        claim(sql::TASK_CLAIM),
        Case { name: "claim_limited (flow claim)", ..claim(sql::flow::TASK_CLAIM_LIMITED) },
        Case {
            name: "limited_possible (first check)",
            sql: sql::flow::LIMITED_EXISTS,
            params: vec![],
        },
        Case { name: "flow_waiting (metrics)", sql: sql::flow::FLOW_WAITING, params: vec![i(20)] },
        Case {
            name: "waiting_on (describe)",
            sql: sql::flow::WAITING_ON,
            params: vec![s("open-1")],
        },
        Case { name: "get_owner (OWNER_GET)", sql: sql::OWNER_GET, params: vec![s("open-1")] },
        Case { name: "task_by_token", sql: sql::TASK_BY_TOKEN, params: vec![s("claimed-2")] },
        Case {
            name: "complete_task_row: done",
            sql: sql::TASK_DONE,
            params: vec![s("claimed-2"), s("w1")],
        },
        Case {
            name: "complete_task_row: report",
            sql: sql::TASK_REPORT,
            params: vec![s("claimed-2"), s("complete"), s("{}"), s("w1")],
        },
        Case {
            name: "claimed_by (recover)",
            sql: sql::TASK_CLAIMED_BY,
            params: vec![s("frontend-1")],
        },
        Case { name: "task backlog (metrics)", sql: sql::TASK_BACKLOG, params: vec![] },
        Case {
            name: "enqueue_inbox: by request id",
            sql: sql::INBOX_BY_REQUEST,
            params: vec![s("done-7"), s("signal"), s("r7")],
        },
        Case {
            name: "pending_inbox (one execution)",
            sql: sql::INBOX_PENDING_ONE,
            params: vec![s("open-1"), i(100)],
        },
        Case {
            name: "pending_inbox_owned",
            sql: sql::INBOX_PENDING_OWNED,
            params: vec![s("owner-1"), open(), i(256), strs(&["resume", "terminate"])],
        },
        Case { name: "inbox entry (reply)", sql: sql::INBOX_GET, params: vec![i(pending_seq)] },
        Case {
            name: "fire_due_timers",
            sql: sql::TIMER_FIRE,
            params: vec![i(1_000), i(100), s("timer")],
        },
        Case { name: "next timer", sql: sql::TIMER_NEXT, params: vec![] },
        Case {
            name: "history_after (watch)",
            sql: sql::EVENT_LOAD_AFTER,
            params: vec![s("open-1"), i(1), i(1)],
        },
        Case {
            name: "get_execution (describe)",
            sql: sql::EXECUTION_GET,
            params: vec![s("open-1")],
        },
        Case {
            name: "get_executions (an owner's starts)",
            sql: sql::EXECUTION_GET_MANY,
            params: vec![strs(&["open-1", "open-2"])],
        },
        Case {
            name: "owned_executions (held check)",
            sql: sql::OWNED_EXECUTIONS,
            params: vec![s("owner-1")],
        },
        Case {
            name: "orphaned_roots (takeover)",
            sql: sql::ORPHANED_ROOTS,
            params: vec![i(5_000), i(256)],
        },
        Case {
            name: "take_over_root",
            sql: sql::TAKE_OVER_ROOT,
            params: vec![s("open-2"), s("owner-gone"), s("owner-1")],
        },
        Case {
            name: "resume_node (a page, at start)",
            sql: sql::RESUME_NODE,
            params: vec![s("owner-1"), s(""), i(100)],
        },
        Case {
            name: "orphaned_claimers (claim sweep)",
            sql: sql::ORPHANED_CLAIMERS,
            params: vec![i(5_000)],
        },
        Case {
            name: "release_claims",
            sql: sql::RELEASE_CLAIMS,
            params: vec![s("frontend-gone"), s("{}"), s("uncertain")],
        },
        Case {
            name: "hand_back_claims (a lost session's attempts)",
            sql: sql::HAND_BACK_CLAIMS,
            params: vec![s("frontend-1"), s("{}"), s("uncertain"), strs(&["t1", "t2"])],
        },
        Case {
            name: "adopt_claims (a worker reconnected elsewhere)",
            sql: sql::ADOPT_CLAIMS,
            params: vec![s("w1"), strs(&["t1", "t2"]), s("frontend-2"), s("s2")],
        },
        Case {
            name: "sweep: done rows",
            sql: retention::DELETE_DONE,
            params: vec![i(60_000), i(50)],
        },
        Case {
            name: "sweep: release owners",
            sql: retention::RELEASE_OWNERS,
            params: vec![i(60_000), i(50)],
        },
        Case {
            name: "sweep: answer unowned",
            sql: retention::ANSWER_UNOWNED,
            params: vec![s("{}"), i(50)],
        },
        Case {
            name: "sweep: expired roots",
            sql: retention::EXPIRED_ROOTS,
            params: vec![i(1_000_000), i(50)],
        },
    ]
}

/// The one statement of a typical step of `open-1` (`commit::composed`): the check (its
/// inbox entry applied), the step's events and projection, a result done, the next offer
/// and the NOTIFYs; the shape for any number of executions, or for `one`.
fn step_commit(pending_seq: i64, one: bool) -> Case {
    use super::plan::{Write, WriteKind::*};
    // In a segment's order; the parameters below in the statement's (`in_composed_order`).
    let kinds = [InsertEvents, UpdateExecutions, TasksDone, InsertTasks, InboxDone, Notify];
    let writes: Vec<Write> = kinds.map(|kind| Write { params: Vec::new(), kind }).into();
    let open = || strs(&["open-1"]);
    let none = || Box::new(vec![None::<String>]) as Param;
    let mut params = vec![
        open(),
        Box::new(vec![pending_seq]),
        open(),
        Box::new(vec![Some(1i64)]),
        open(),
        Box::new(vec![Some(1i64)]),
        Box::new(vec![Some(3i64)]),
        Box::new(vec![pending_seq]),
        open(),
        // No start in it: no version count checked.
        Box::new(None::<String>),
        Box::new(None::<i64>),
    ];
    // Events, projection, the offer, the result done, the entry applied, the NOTIFYs.
    params.extend([open(), Box::new(vec![1i64]), Box::new(vec![4i64]), strs(&["StepScheduled"])]);
    params.extend([strs(&["s2"]), strs(&["decided"]), strs(&["{}"]), Box::new(vec![5i64])]);
    params.extend([open(), Box::new(vec![1i64]), Box::new(vec![4i64]), Box::new(vec![true])]);
    params.extend([strs(&["RUNNING"]), Box::new(vec![5i64]), Box::new(vec![None::<i64>])]);
    params.extend([Box::new(vec![None::<i64>]) as Param, none(), none(), none(), none()]);
    params.extend([open(), Box::new(vec![1i64]), strs(&["s2"]), Box::new(vec![1i64])]);
    params.extend([Box::new(vec![1i64]) as Param, strs(&["step"]), strs(&["1"]), strs(&["0"])]);
    params.extend([strs(&["k"]), none(), none(), none(), none(), none()]);
    // The flow columns of an offer without flow control (`flow::FlowColumns::of(None)`).
    let no_i64 = || Box::new(vec![None::<i64>]) as Param;
    params.extend([Box::new(vec![3i64]) as Param, Box::new(vec![120_000i64]) as Param]);
    params.extend([Box::new(vec![false]) as Param, none(), no_i64(), none(), no_i64()]);
    params.extend([no_i64(), none(), none(), none(), no_i64()]);
    params.extend([none(), none(), no_i64()]);
    params.extend([strs(&["claimed-1"]), open()]);
    params.extend([Box::new(vec![pending_seq]) as Param, strs(&["{}"])]);
    params.extend([strs(&["orbit_changes"]), strs(&[""])]);
    Case {
        name: if one {
            "commit: one statement (a step, the one-execution shape)"
        } else {
            "commit: one statement (a step)"
        },
        sql: super::commit::composed(&writes, one).unwrap(),
        params,
    }
}

/// Open work, the same for both databases: 20 running executions (odd ones owned by a node
/// that is gone), a queued task of each odd one, a task of each even one claimed by
/// `frontend-1` (token `claimed-<n>`), one by a frontend that is gone, a pending entry and a
/// due timer of each.
const OPEN_WORK: &str = "
INSERT INTO nodes (node_id, service, incarnation, addr, heartbeat_at, started_at) VALUES
    ('owner-1', 'owner', 'i', 'a', 9000000000000, 0),
    ('frontend-1', 'frontend', 'i', 'a', 9000000000000, 0);
INSERT INTO executions (execution_id, run, root_id, workflow, version, definition_hash, status,
    created_at, updated_at, last_seq)
    SELECT 'open-' || g, 1, 'open-' || g, 'wf', '1', 'h', 'RUNNING', 1, 1, 3
    FROM generate_series(1, 20) g;
INSERT INTO history_events SELECT 'open-' || g, 1, s, 'StepScheduled', 's1', 'decided', '{}', 1
    FROM generate_series(1, 20) g, generate_series(1, 3) s;
INSERT INTO owners SELECT 'open-' || g, 'open-' || g,
    CASE WHEN g % 2 = 0 THEN 'owner-1' ELSE 'owner-gone' END, 1, 9000000000000 + g
    FROM generate_series(1, 20) g;
INSERT INTO task_queue (execution_id, run, unit_key, attempt, offer, task, task_version, input,
    idempotency_key, state, claimed_by, session, token, claim_count, created_at, claimed_at,
    updated_at, worker_id)
    SELECT 'open-' || g, 1, 's1', 1, 1, 'step', '1', '0', 'k',
        CASE WHEN g % 2 = 0 THEN 'claimed' ELSE 'queued' END,
        CASE WHEN g = 20 THEN 'frontend-gone' WHEN g % 2 = 0 THEN 'frontend-1' END,
        CASE WHEN g % 2 = 0 THEN 'sess-1' END, CASE WHEN g % 2 = 0 THEN 'claimed-' || g END,
        g % 2, 1, NULL, 1, CASE WHEN g % 2 = 0 THEN 'w1' END
    FROM generate_series(1, 20) g;
INSERT INTO inbox (execution_id, kind, payload, created_at)
    SELECT 'open-' || g, 'signal', '{}', 1 FROM generate_series(1, 20) g;
INSERT INTO timers SELECT 'open-' || g, 'next', 1, g, '{}' FROM generate_series(1, 20) g;
";

/// Finished executions `done-<from>` .. `done-<to>`, each with the rows a 3-step execution
/// leaves: 12 events, its owners row (the sweeper has not released it yet), 3 done task
/// rows, 3 applied `dispatched` entries and one applied signal with a request id (kept
/// until the execution is deleted, so the oldest applied entries are these).
fn history(from: i64, to: i64) -> String {
    format!(
        "
INSERT INTO executions (execution_id, run, root_id, workflow, version, definition_hash, status,
    created_at, updated_at, closed_at, last_seq, delete_after)
    SELECT 'done-' || g, 1, 'done-' || g, 'wf', '1', 'h', 'COMPLETED', g, g, g, 12, 9000000000000
    FROM generate_series({from}, {to}) g;
INSERT INTO history_events SELECT 'done-' || g, 1, s, 'StepSucceeded', 's1', 'recorded',
    '{{\"type\":\"StepSucceeded\",\"step\":\"s1\",\"attempt\":1,\"output\":1}}', g
    FROM generate_series({from}, {to}) g, generate_series(1, 12) s;
INSERT INTO owners SELECT 'done-' || g, 'done-' || g,
    CASE WHEN g % 2 = 0 THEN 'owner-1' ELSE 'owner-gone' END, 1, g
    FROM generate_series({from}, {to}) g;
INSERT INTO task_queue (execution_id, run, unit_key, attempt, offer, task, task_version, input,
    idempotency_key, state, claimed_by, session, token, claim_count, created_at, claimed_at,
    updated_at, worker_id)
    SELECT 'done-' || g, 1, 's' || u, 1, 1, 'step', '1', '0', 'k', 'done', 'frontend-1',
        'sess-1', md5('done-' || g || u), 1, g, g, 1000000 + g, 'w1'
    FROM generate_series({from}, {to}) g, generate_series(1, 3) u;
INSERT INTO inbox (execution_id, kind, token, payload, created_at, done_at, result, request_id)
    SELECT 'done-' || g, 'signal', NULL, '{{}}', g, g, '{{}}', 'r' || g
    FROM generate_series({from}, {to}) g;
INSERT INTO inbox (execution_id, kind, token, payload, created_at, done_at, result)
    SELECT 'done-' || g, 'dispatched', md5('done-' || g || u), '{{}}', g, 1000000 + g, '{{}}'
    FROM generate_series({from}, {to}) g, generate_series(1, 3) u;
"
    )
}

/// What one plan says: pages touched, and the scans of history tables (node, relation,
/// index).
struct Plan {
    pages: i64,
    scans: Vec<String>,
    seq_scans: Vec<String>,
}

fn walk(node: &serde_json::Value, plan: &mut Plan) {
    let kind = node["Node Type"].as_str().unwrap_or("");
    let relation = node["Relation Name"].as_str().unwrap_or("");
    if HISTORY_TABLES.contains(&relation) || node.get("Index Name").is_some() {
        let index = node["Index Name"].as_str().unwrap_or("-");
        plan.scans.push(format!("{kind} {relation} {index}"));
        if kind == "Seq Scan" {
            plan.seq_scans.push(relation.to_string());
        }
    }
    for child in node["Plans"].as_array().into_iter().flatten() {
        walk(child, plan);
    }
}

async fn explain(client: &Client, case: &Case) -> Plan {
    let params: Vec<&(dyn ToSql + Sync)> =
        case.params.iter().map(|p| &**p as &(dyn ToSql + Sync)).collect();
    client.batch_execute("BEGIN").await.unwrap();
    let text = format!("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {}", case.sql);
    let rows =
        client.query(&text, &params).await.unwrap_or_else(|e| panic!("{}: {e:?}", case.name));
    client.batch_execute("ROLLBACK").await.unwrap();
    let Json(json) = rows[0].get(0);
    let doc: serde_json::Value = serde_json::from_str(&json).unwrap();
    let top = &doc[0]["Plan"];
    let pages = top["Shared Hit Blocks"].as_i64().unwrap_or(0)
        + top["Shared Read Blocks"].as_i64().unwrap_or(0);
    let mut plan = Plan { pages, scans: Vec::new(), seq_scans: Vec::new() };
    walk(top, &mut plan);
    plan
}

async fn connect(url: &str) -> Client {
    let (client, connection) = tokio_postgres::connect(url, NoTls).await.unwrap();
    tokio::spawn(connection);
    client
}

/// A new database `name` (dropped first if a killed run left it), migrated: the admin
/// connection, the store (one pooled connection) and a plain client of it.
async fn fresh(admin_url: &str, name: &str) -> (Client, PgStore, Client) {
    let admin = connect(admin_url).await;
    admin.batch_execute(&format!("DROP DATABASE IF EXISTS {name}")).await.unwrap();
    admin.batch_execute(&format!("CREATE DATABASE {name}")).await.unwrap();
    let url = format!("{}/{name}", admin_url.rsplit_once('/').unwrap().0);
    let store =
        PgStore::connect(&url, PgOptions { pool_size: 1, ..PgOptions::default() }).await.unwrap();
    store.migrate().await.unwrap();
    let client = connect(&url).await;
    (admin, store, client)
}

#[tokio::test]
#[allow(clippy::disallowed_methods)] // A test knob: the history size to measure at.
async fn hot_path_statements_do_not_grow_with_history() {
    let admin_url = super::tests::url();
    let big: i64 =
        std::env::var("ORBIT_PLAN_HISTORY").ok().and_then(|v| v.parse().ok()).unwrap_or(5_000);
    let name = format!("orbit_t_plans_{}", std::process::id());
    let (admin, store, client) = fresh(&admin_url, &name).await;
    client.batch_execute(OPEN_WORK).await.unwrap();
    // Plans come from a pooled connection, with the session settings the services run
    // with (`conn.rs`, INDEX_ACCESS).
    let pooled = store.inner.pool.get().await.unwrap();
    let planner = pooled.client();
    // A young database: the tables hold a handful of rows, and no statistics. The plans a
    // connection makes now are the ones it keeps (generic plans are cached per connection):
    // they must be the index plans already.
    let pending: i64 = client
        .query_one("SELECT min(seq) FROM inbox WHERE execution_id = 'open-1'", &[])
        .await
        .unwrap()
        .get(0);
    let mut young = Vec::new();
    for case in cases(pending) {
        let plan = explain(planner, &case).await;
        if !plan.seq_scans.is_empty() {
            young.push(format!("{}: Seq Scan on {:?}", case.name, plan.seq_scans));
        }
    }
    assert!(young.is_empty(), "plans on a young database scan tables:\n{}", young.join("\n"));
    client.batch_execute(&history(1, SMALL)).await.unwrap();
    client.batch_execute("VACUUM ANALYZE").await.unwrap();
    let mut small = Vec::new();
    for case in cases(pending) {
        small.push(explain(planner, &case).await.pages);
    }
    client.batch_execute(&history(SMALL + 1, SMALL + big)).await.unwrap();
    client.batch_execute("VACUUM ANALYZE").await.unwrap();
    let mut failures = Vec::new();
    for (case, before) in cases(pending).iter().zip(small) {
        let plan = explain(planner, case).await;
        println!(
            "{:<34} pages {before:>5} -> {:>5}  {}",
            case.name,
            plan.pages,
            plan.scans.join("; ")
        );
        if !plan.seq_scans.is_empty() {
            failures.push(format!("{}: Seq Scan on {:?}", case.name, plan.seq_scans));
        }
        if plan.pages > before + before / 2 + SLACK {
            failures.push(format!(
                "{}: {before} pages with {SMALL} finished executions, {} with {}",
                case.name,
                plan.pages,
                SMALL + big
            ));
        }
    }
    drop(client);
    drop(pooled);
    drop(store);
    admin.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).await.unwrap();
    assert!(failures.is_empty(), "statements that grow with history:\n{}", failures.join("\n"));
}

/// The ordinary claim reads the head of the queue, not the queue: behind 5,000 queued rows
/// of a lower priority it touches about the pages it touched behind 100 (a claim that sorts
/// every queued row of its task names reads them all: 83 pages behind 100, 224 behind 5,100).
#[tokio::test]
async fn the_claim_does_not_grow_with_the_queue() {
    let admin_url = super::tests::url();
    let name = format!("orbit_t_claim_plan_{}", std::process::id());
    let (admin, store, client) = fresh(&admin_url, &name).await;
    let queue = |from: i64, to: i64, rank: i64| {
        format!(
            "INSERT INTO task_queue (execution_id, run, unit_key, attempt, offer, task,
                task_version, input, idempotency_key, state, claim_count, created_at,
                updated_at, priority, dispatch_rank, limited)
             SELECT 'q-' || g, 1, 's1', 1, 1, 'step', '1', '0', 'k', 'queued', 0, g, g, 5,
                {rank} + g, false FROM generate_series({from}, {to}) g"
        )
    };
    let claim = || Case {
        name: "claim_tasks (TASK_CLAIM) behind a queue",
        sql: sql::TASK_CLAIM,
        params: vec![
            strs(&["step", "other"]),
            i(4),
            s("frontend-1"),
            s("sess-1"),
            strs(&["t1", "t2", "t3", "t4"]),
            s("w1"),
            s("dispatched"),
            strs(&["step", "other"]),
            strs(&[]),
            strs(&[]),
            Box::new(None::<String>),
            Box::new(None::<String>),
        ],
    };
    let pooled = store.inner.pool.get().await.unwrap();
    client.batch_execute(&queue(1, 100, 0)).await.unwrap();
    client.batch_execute("VACUUM ANALYZE task_queue").await.unwrap();
    let short = explain(pooled.client(), &claim()).await.pages;
    client.batch_execute(&queue(101, 5_100, 240_000)).await.unwrap();
    client.batch_execute("VACUUM ANALYZE task_queue").await.unwrap();
    let long = explain(pooled.client(), &claim()).await;
    println!(
        "claim behind 100 queued: {short} pages; behind 5,100: {} ({:?})",
        long.pages, long.scans
    );
    drop(client);
    drop(pooled);
    drop(store);
    admin.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).await.unwrap();
    assert!(long.seq_scans.is_empty(), "{:?}", long.scans);
    assert!(
        long.pages <= short + short / 2 + SLACK,
        "{short} pages behind 100, {} behind 5,100",
        long.pages
    );
}
