//! Listing executions with a list query (`orbit-query`): the compiled SQL answers the same
//! on every backend, ANDs with the structured filters, and keeps keyset paging in both
//! directions of `ORDER BY created`.

use crate::support::{created, ev, execution_row, Backend};
use orbit_query::{parse_and_check, Catalog, STATUS_NAMES};
use orbit_store::{CommitBatch, ExecutionFilter, NewOwner, ProjectionUpdate, Store, StoreError};
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
            }),
            ..CommitBatch::default()
        };
        store.commit(batch).await.unwrap();
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

    // Keyset paging is on creation time: another order is refused.
    let other = ExecutionFilter { query: query("ORDER BY workflow"), ..Default::default() };
    assert!(matches!(store.list_executions(other).await, Err(StoreError::InvalidArgument(_))));
}

/// The query language's status names are the engine's.
pub async fn query_status_names_are_the_engines(_: &dyn Backend) {
    let engine: Vec<&str> = orbit_engine::Status::ALL.iter().map(|s| s.as_str()).collect();
    assert_eq!(engine, STATUS_NAMES);
}
