//! Listing executions with a list query (`orbit-query`): the compiled SQL answers the same
//! on every backend, ANDs with the structured filters, and keeps keyset paging in both
//! directions of `ORDER BY created`.

use crate::support::{created, ev, execution_row, Backend};
use orbit_query::{parse_and_check, Catalog, STATUS_NAMES};
use orbit_store::{
    CommitBatch, CountFilter, ExecutionCounts, ExecutionFilter, ExecutionRow, NewOwner,
    ProjectionUpdate, Store, StoreError,
};
use std::sync::Arc;

fn query(q: &str) -> Option<orbit_query::Checked> {
    Some(parse_and_check(q, &Catalog::system()).unwrap_or_else(|e| panic!("{q}: {e}")))
}

async fn ids(store: &Arc<dyn Store>, filter: ExecutionFilter) -> Vec<String> {
    let page = store.list_executions(filter).await.unwrap();
    page.executions.into_iter().map(|e| e.execution_id).collect()
}

async fn matching(store: &Arc<dyn Store>, q: &str) -> Vec<String> {
    ids(store, ExecutionFilter { query: query(q), ..ExecutionFilter::default() }).await
}

/// e0..e6 created at 1000, 1000, 1001, 1001, 1002, 1002, 1003 ms; the odd ones are
/// `refund` children of e0, the even ones `order` roots; e2 FAILED at 1500, e6 COMPLETED
/// at 2000; e4 started by schedule s1.
async fn seed(store: &Arc<dyn Store>) {
    for i in 0..7u64 {
        let id = format!("e{i}");
        let mut row = execution_row(&id, 1_000 + i / 2);
        if i % 2 == 1 {
            row.workflow = "refund".into();
            row.parent_id = Some("e0".into());
        }
        if i == 4 {
            row.schedule_id = Some("s1".into());
        }
        let closed = match i {
            2 => Some((orbit_engine::Status::Failed, 1_500)),
            6 => Some((orbit_engine::Status::Completed, 2_000)),
            _ => None,
        };
        let batch = CommitBatch {
            execution_id: id.clone(),
            run: 1,
            new_execution: Some(row),
            new_owner: Some(NewOwner { root_id: id.clone(), node_id: "n".into() }),
            events: vec![ev(1, created(&id, 1))],
            projection: closed.map(|(status, at)| ProjectionUpdate {
                status,
                updated_at_ms: at,
                closed_at_ms: Some(at),
                delete_after_ms: None,
                failed_step: None,
                error_code: None,
            }),
            ..CommitBatch::default()
        };
        store.commit(batch).await.unwrap();
    }
}

/// `get_executions` answers the rows of the ids that exist, each once (an id asked twice
/// too), and nothing for the others (an owner reads its pass's starts with it).
pub async fn executions_read_by_ids(b: &dyn Backend) {
    let store = b.open().await;
    seed(&store).await;
    assert!(store.get_executions(&[]).await.unwrap().is_empty());
    let asked = ["e6", "nope", "e1", "", "e1'; --", "e6"].map(String::from);
    let mut rows = store.get_executions(&asked).await.unwrap();
    rows.sort_by(|a, b| a.execution_id.cmp(&b.execution_id));
    let found: Vec<&str> = rows.iter().map(|r| r.execution_id.as_str()).collect();
    assert_eq!(found, ["e1", "e6"]);
    for row in rows {
        let one = store.get_execution(&row.execution_id).await.unwrap().unwrap();
        assert_eq!(row, one, "the same row as get_execution");
    }
}

pub async fn executions_list_with_a_query(b: &dyn Backend) {
    let store = b.open().await;
    seed(&store).await;
    let cases: &[(&str, &[&str])] = &[
        ("workflow = 'refund'", &["e5", "e3", "e1"]),
        ("status IN ('completed', 'FAILED')", &["e6", "e2"]),
        ("parent IS NULL AND workflow != 'refund'", &["e6", "e4", "e2", "e0"]),
        // A negation on a nullable attribute holds where it is unset.
        ("parent != 'e0'", &["e6", "e4", "e2", "e0"]),
        ("NOT parent IN ('e0')", &["e6", "e4", "e2", "e0"]),
        ("NOT (workflow = 'refund' OR status = 'COMPLETED')", &["e4", "e2", "e0"]),
        ("duration >= 500", &["e6"]),
        ("duration < '1s'", &["e6", "e2"]),
        ("NOT duration < '1s'", &["e5", "e4", "e3", "e1", "e0"]),
        (
            "created BETWEEN '1970-01-01T00:00:01.001Z' AND '1970-01-01T00:00:01.002Z'",
            &["e5", "e4", "e3", "e2"],
        ),
        ("closed > '1970-01-01T00:00:01.600Z'", &["e6"]),
        ("execution_id STARTS_WITH 'e' AND schedule = 's1'", &["e4"]),
        ("NOT execution_id STARTS_WITH 'e'", &[]),
        ("root = 'e3' OR version = 'v9'", &["e3"]),
        ("closed IS NOT NULL ORDER BY created ASC", &["e2", "e6"]),
        ("ORDER BY created DESC", &["e6", "e5", "e4", "e3", "e2", "e1", "e0"]),
        // Hostile values are values: nothing matches, nothing breaks.
        ("workflow = ''' OR 1=1 --'", &[]),
        ("workflow = '''); DROP TABLE executions; --'", &[]),
        ("workflow = 'ünï 😀'", &[]),
    ];
    for (q, want) in cases {
        assert_eq!(matching(&store, q).await, *want, "{q}");
    }
    assert_eq!(matching(&store, "workflow = 'order'").await.len(), 4, "the table is intact");

    // ANDed with the structured filters.
    let both = ExecutionFilter {
        workflow: Some("order".into()),
        query: query("status = 'running'"),
        ..ExecutionFilter::default()
    };
    assert_eq!(ids(&store, both).await, ["e4", "e0"]);

    // Pages in both directions, no repeats, no gaps.
    for (q, want) in [
        ("ORDER BY created ASC", ["e0", "e1", "e2", "e3", "e4", "e5", "e6"]),
        ("ORDER BY created DESC", ["e6", "e5", "e4", "e3", "e2", "e1", "e0"]),
    ] {
        let mut filter = ExecutionFilter { page_size: 2, query: query(q), ..Default::default() };
        let mut seen = Vec::new();
        loop {
            let page = store.list_executions(filter.clone()).await.unwrap();
            assert!(page.executions.len() <= 2);
            seen.extend(page.executions.into_iter().map(|e| e.execution_id));
            match page.next_page_token {
                Some(t) => filter.page_token = Some(t),
                None => break,
            }
        }
        assert_eq!(seen, want, "{q}");
    }

    // A search attribute has no value in the projection to page by: refused.
    let catalog = Catalog::with_search([("customer", orbit_query::SearchType::Keyword)]);
    let q = parse_and_check("ORDER BY customer", &catalog).unwrap();
    let other = ExecutionFilter { query: Some(q), ..Default::default() };
    assert!(matches!(store.list_executions(other).await, Err(StoreError::InvalidArgument(_))));
}

/// The value an attribute sorts a row by in the test's own terms: `None` is NULL.
fn sort_key(row: &ExecutionRow, attr: &str) -> Option<(i64, String)> {
    let n = |t: u64| (i64::try_from(t).unwrap(), String::new());
    let t = |s: &str| (0, s.to_string());
    match attr {
        "execution_id" => Some(t(&row.execution_id)),
        "workflow" => Some(t(&row.workflow)),
        "version" => Some(t(&row.version)),
        "status" => Some(t(row.status.as_str())),
        "created" => Some(n(row.created_at_ms)),
        "updated" => Some(n(row.updated_at_ms)),
        "closed" => row.closed_at_ms.map(n),
        "duration" => row.closed_at_ms.map(|c| n(c - row.created_at_ms)),
        "schedule" => row.schedule_id.as_deref().map(t),
        "parent" => row.parent_id.as_deref().map(t),
        "root" => Some(t(&row.root_id)),
        other => panic!("no sort key for {other}"),
    }
}

/// Every sortable system attribute, both directions: the pages of 2 visit every row once,
/// in the order of (value, execution_id) with NULLs last in both directions, and one
/// page of everything agrees.
pub async fn executions_list_in_any_order_pages_without_loss_or_repeat(b: &dyn Backend) {
    let store = b.open().await;
    seed(&store).await;
    let all = store
        .list_executions(ExecutionFilter { page_size: 1000, ..Default::default() })
        .await
        .unwrap()
        .executions;
    assert_eq!(all.len(), 7);
    let attrs = [
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
    ];
    for attr in attrs {
        for desc in [false, true] {
            let mut want = all.clone();
            want.sort_by(|a, b| {
                let (ka, kb) = (sort_key(a, attr), sort_key(b, attr));
                let by_value = match (&ka, &kb) {
                    (None, None) => std::cmp::Ordering::Equal,
                    (None, Some(_)) => std::cmp::Ordering::Greater,
                    (Some(_), None) => std::cmp::Ordering::Less,
                    (Some(x), Some(y)) if desc => y.cmp(x),
                    (Some(x), Some(y)) => x.cmp(y),
                };
                let by_id = if desc {
                    b.execution_id.cmp(&a.execution_id)
                } else {
                    a.execution_id.cmp(&b.execution_id)
                };
                by_value.then(by_id)
            });
            let want: Vec<String> = want.into_iter().map(|r| r.execution_id).collect();
            let q = format!("ORDER BY {attr} {}", if desc { "DESC" } else { "ASC" });
            let whole = ExecutionFilter { page_size: 1000, query: query(&q), ..Default::default() };
            assert_eq!(ids(&store, whole).await, want, "{q} in one page");
            let mut filter =
                ExecutionFilter { page_size: 2, query: query(&q), ..Default::default() };
            let mut seen = Vec::new();
            loop {
                let page = store.list_executions(filter.clone()).await.unwrap();
                assert!(page.executions.len() <= 2);
                seen.extend(page.executions.into_iter().map(|e| e.execution_id));
                match page.next_page_token {
                    Some(t) => filter.page_token = Some(t),
                    None => break,
                }
                assert!(seen.len() <= 7, "{q}: pages repeat: {seen:?}");
            }
            assert_eq!(seen, want, "{q} in pages of 2");
        }
    }
    // A token of another order is refused, not misread.
    let mut filter =
        ExecutionFilter { page_size: 2, query: query("ORDER BY workflow"), ..Default::default() };
    let token = store.list_executions(filter.clone()).await.unwrap().next_page_token.unwrap();
    filter.query = query("ORDER BY version");
    filter.page_token = Some(token);
    assert!(matches!(store.list_executions(filter).await, Err(StoreError::InvalidArgument(_))));
}

/// Counts: the total and groups of a query, largest first, absent values as `None`.
pub async fn executions_count_and_group(b: &dyn Backend) {
    let store = b.open().await;
    seed(&store).await;
    let count = |q: &str, by: &[&str]| {
        let filter = CountFilter {
            query: if q.is_empty() { None } else { query(q) },
            group_by: orbit_query::group_by(by).unwrap(),
        };
        let store = store.clone();
        async move { store.count_executions(filter).await.unwrap() }
    };
    let s = |v: &str| Some(v.to_string());
    assert_eq!(count("", &[]).await, ExecutionCounts { count: 7, groups: vec![] });
    assert_eq!(count("workflow = 'refund'", &[]).await.count, 3);
    assert_eq!(count("workflow = 'nothing'", &[]).await.count, 0);
    assert_eq!(count("workflow = 'nothing'", &["status"]).await.groups, vec![]);
    let by_status = count("", &["status"]).await;
    assert_eq!(by_status.count, 7);
    let groups: Vec<(Vec<Option<String>>, u64)> =
        by_status.groups.into_iter().map(|g| (g.values, g.count)).collect();
    assert_eq!(
        groups,
        [(vec![s("RUNNING")], 5), (vec![s("COMPLETED")], 1), (vec![s("FAILED")], 1)]
    );
    let by_two = count("status != 'COMPLETED'", &["workflow", "parent"]).await;
    assert_eq!(by_two.count, 6);
    let groups: Vec<(Vec<Option<String>>, u64)> =
        by_two.groups.into_iter().map(|g| (g.values, g.count)).collect();
    assert_eq!(groups, [(vec![s("order"), None], 3), (vec![s("refund"), s("e0")], 3)]);
}

/// The query language's status names are the engine's.
pub async fn query_status_names_are_the_engines(_: &dyn Backend) {
    let engine: Vec<&str> = orbit_engine::Status::ALL.iter().map(|s| s.as_str()).collect();
    assert_eq!(engine, STATUS_NAMES);
}

/// `failed_step` and `error_code`: written with a FAILED or TIMED_OUT projection, kept by a
/// later commit of the closed run that carries none, cleared when a new run starts (any
/// other status), and answered by the list query and by counts.
pub async fn failure_columns_are_set_kept_and_cleared(b: &dyn Backend) {
    use orbit_engine::Status;
    let store = b.open().await;
    let id = "f1";
    let project =
        |seq: u64, run: u32, status: Status, step: Option<&str>, code: Option<&str>| CommitBatch {
            execution_id: id.into(),
            run,
            new_execution: (seq == 1).then(|| execution_row(id, 1_000)),
            new_owner: (seq == 1).then(|| NewOwner { root_id: id.into(), node_id: "n".into() }),
            events: vec![ev(if run == 1 { seq } else { seq - 3 }, created(id, run))],
            projection: Some(ProjectionUpdate {
                status,
                updated_at_ms: 1_000 + seq,
                closed_at_ms: status.is_closed().then_some(1_000 + seq),
                delete_after_ms: None,
                failed_step: step.map(str::to_string),
                error_code: code.map(str::to_string),
            }),
            ..CommitBatch::default()
        };
    let row = |store: Arc<dyn Store>| async move {
        let row = store.get_execution(id).await.unwrap().unwrap();
        (row.failed_step, row.error_code)
    };
    let s = |v: &str| Some(v.to_string());
    store.commit(project(1, 1, Status::Running, None, None)).await.unwrap();
    assert_eq!(row(store.clone()).await, (None, None));
    store
        .commit(project(2, 1, Status::Failed, Some("charge"), Some("CARD_DECLINED")))
        .await
        .unwrap();
    assert_eq!(row(store.clone()).await, (s("charge"), s("CARD_DECLINED")));
    assert_eq!(
        matching(&store, "failed_step = 'charge' AND error_code = 'CARD_DECLINED'").await,
        [id]
    );
    assert_eq!(matching(&store, "failed_step IS NULL").await, Vec::<String>::new());
    let by_step = store
        .count_executions(CountFilter {
            query: query("error_code STARTS_WITH 'CARD'"),
            group_by: orbit_query::group_by(&["failed_step", "error_code"]).unwrap(),
        })
        .await
        .unwrap();
    assert_eq!(by_step.count, 1);
    assert_eq!(by_step.groups[0].values, [s("charge"), s("CARD_DECLINED")]);
    // A later commit of the closed run without a failure keeps it.
    store.commit(project(3, 1, Status::Failed, None, None)).await.unwrap();
    assert_eq!(row(store.clone()).await, (s("charge"), s("CARD_DECLINED")));
    // A new run (reset, continue-as-new) clears it.
    store.commit(project(4, 2, Status::Running, None, None)).await.unwrap();
    assert_eq!(row(store.clone()).await, (None, None));
    assert_eq!(matching(&store, "failed_step = 'charge'").await, Vec::<String>::new());
    // A timeout sets the code alone.
    store.commit(project(5, 2, Status::TimedOut, None, Some("TIMEOUT"))).await.unwrap();
    assert_eq!(row(store.clone()).await, (None, s("TIMEOUT")));
    assert_eq!(matching(&store, "error_code = 'TIMEOUT' AND failed_step IS NULL").await, [id]);
}
