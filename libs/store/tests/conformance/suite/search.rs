//! Search attributes (issue 28 item 1): a commit's `SearchAttributesUpserted` events are
//! projected into `execution_search` in the same transaction (the last value of a name
//! wins, a `keyword_list` is one row per element, `unset` removes), later upserts replace,
//! the compiled list query answers on every type, deleting the execution deletes its rows;
//! the server-wide catalog keeps one type per name.

use crate::support::{created, ev, execution_row, Backend};
use orbit_definition::{SearchType, SearchValue};
use orbit_engine::Event;
use orbit_query::{parse_and_check, Catalog};
use orbit_store::{CommitBatch, DeleteOutcome, ExecutionFilter, NewOwner, ProjectionUpdate, Store};
use std::collections::BTreeMap;
use std::sync::Arc;

fn catalog() -> Catalog {
    Catalog::with_search([
        ("customer", SearchType::Keyword),
        ("note", SearchType::Text),
        ("count", SearchType::Int),
        ("amount", SearchType::Double),
        ("vip", SearchType::Bool),
        ("due", SearchType::Datetime),
        ("tags", SearchType::KeywordList),
    ])
}

async fn matching(store: &Arc<dyn Store>, q: &str) -> Vec<String> {
    let query = Some(parse_and_check(q, &catalog()).unwrap_or_else(|e| panic!("{q}: {e}")));
    let page = store.list_executions(ExecutionFilter { query, ..Default::default() }).await;
    page.unwrap().executions.into_iter().map(|e| e.execution_id).collect()
}

fn upsert(values: Vec<(&str, SearchValue)>) -> Event {
    let values = values.into_iter().map(|(n, v)| (n.to_string(), v)).collect();
    Event::SearchAttributesUpserted { step: None, values, errors: BTreeMap::new() }
}

fn kw(s: &str) -> SearchValue {
    SearchValue::Keyword(s.into())
}

fn list(items: &[&str]) -> SearchValue {
    SearchValue::KeywordList(items.iter().map(|s| (*s).to_string()).collect())
}

/// Creates `id` (created at `at` ms) with the upserts as its first events.
async fn create(store: &Arc<dyn Store>, id: &str, at: u64, upserts: Vec<Event>) {
    let mut events = vec![ev(1, created(id, 1))];
    events.extend(upserts.into_iter().enumerate().map(|(i, e)| ev(i as u64 + 2, e)));
    let batch = CommitBatch {
        execution_id: id.into(),
        run: 1,
        new_execution: Some(execution_row(id, at)),
        new_owner: Some(NewOwner { root_id: id.into(), node_id: "n".into() }),
        events,
        ..CommitBatch::default()
    };
    store.commit(batch).await.unwrap();
}

pub async fn search_attributes_are_projected_replaced_and_deleted(b: &dyn Backend) {
    let store = b.open().await;
    create(
        &store,
        "a",
        1_000,
        vec![
            upsert(vec![("customer", kw("acme")), ("amount", SearchValue::Double(5.0))]),
            // The last value of a name in one commit wins.
            upsert(vec![
                ("amount", SearchValue::Double(12.5)),
                ("count", SearchValue::Int(3)),
                ("vip", SearchValue::Bool(true)),
                ("due", SearchValue::Datetime(86_400_000)),
                ("note", SearchValue::Text("rush order".into())),
                ("tags", list(&["eu", "vip", "eu"])),
            ]),
        ],
    )
    .await;
    create(
        &store,
        "b",
        1_001,
        vec![upsert(vec![
            ("customer", kw("globex")),
            ("amount", SearchValue::Double(50.0)),
            ("count", SearchValue::Int(-1)),
            ("vip", SearchValue::Bool(false)),
            ("tags", list(&["us"])),
        ])],
    )
    .await;
    create(&store, "c", 1_002, vec![]).await;

    let cases: &[(&str, &[&str])] = &[
        ("customer = 'acme' AND amount > 10", &["a"]),
        ("customer = 'acme' AND amount > 20", &[]),
        ("amount BETWEEN 10 AND 100", &["b", "a"]),
        ("count < 0", &["b"]),
        ("count IN (3, 4)", &["a"]),
        ("vip = true", &["a"]),
        ("vip = false", &["b"]),
        ("due >= '1970-01-02'", &["a"]),
        ("note = 'rush order'", &["a"]),
        ("tags = 'eu'", &["a"]),
        ("tags IN ('us', 'vip')", &["b", "a"]),
        // No element matches, or unset.
        ("tags != 'eu'", &["c", "b"]),
        ("customer IS NULL", &["c"]),
        ("customer STARTS_WITH 'glo'", &["b"]),
        ("workflow = 'order' AND customer != 'acme'", &["c", "b"]),
    ];
    for (q, want) in cases {
        assert_eq!(matching(&store, q).await, *want, "{q}");
    }

    // A later commit replaces the names it upserts; `unset` removes; the rest stay.
    let batch = CommitBatch {
        execution_id: "a".into(),
        run: 1,
        expected_epoch: Some(1),
        events: vec![ev(
            4,
            upsert(vec![
                ("customer", kw("initech")),
                ("tags", list(&["apac"])),
                ("count", SearchValue::Unset),
            ]),
        )],
        ..CommitBatch::default()
    };
    store.commit(batch).await.unwrap();
    assert_eq!(matching(&store, "customer = 'acme'").await, Vec::<String>::new());
    assert_eq!(matching(&store, "customer = 'initech'").await, ["a"]);
    assert_eq!(matching(&store, "tags = 'eu'").await, Vec::<String>::new());
    assert_eq!(matching(&store, "tags = 'apac'").await, ["a"]);
    assert_eq!(matching(&store, "count IS NULL").await, ["c", "a"]);
    assert_eq!(matching(&store, "amount = 12.5").await, ["a"]);

    // Deleting the execution deletes its rows.
    let close = CommitBatch {
        execution_id: "a".into(),
        run: 1,
        expected_epoch: Some(1),
        events: vec![ev(5, Event::WorkflowCompleted { output: serde_json::Value::Null })],
        projection: Some(ProjectionUpdate {
            status: orbit_engine::Status::Completed,
            updated_at_ms: 2_000,
            closed_at_ms: Some(2_000),
            delete_after_ms: None,
            failed_step: None,
            error_code: None,
        }),
        ..CommitBatch::default()
    };
    store.commit(close).await.unwrap();
    assert!(matches!(store.delete_execution("a").await.unwrap(), DeleteOutcome::Deleted(_)));
    assert_eq!(matching(&store, "amount > 0").await, ["b"]);
    // Re-creating the id starts with no attributes.
    create(&store, "a", 3_000, vec![]).await;
    assert_eq!(matching(&store, "amount IS NOT NULL").await, ["b"]);
}

pub async fn search_attribute_catalog_keeps_one_type_per_name(b: &dyn Backend) {
    let store = b.open().await;
    let decl = |v: &[(&str, SearchType)]| -> Vec<(String, SearchType)> {
        v.iter().map(|(n, t)| ((*n).to_string(), *t)).collect()
    };
    let rows = store
        .declare_search_attributes("billing", &decl(&[("customer", SearchType::Keyword)]))
        .await
        .unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!((rows[0].ty, rows[0].workflow.as_str()), (SearchType::Keyword, "billing"));
    // The same type from another workflow: shared, the first declarer kept.
    let rows = store
        .declare_search_attributes(
            "shipping",
            &decl(&[("customer", SearchType::Keyword), ("weight", SearchType::Double)]),
        )
        .await
        .unwrap();
    let mut got: Vec<_> = rows.iter().map(|r| (r.name.as_str(), r.workflow.as_str())).collect();
    got.sort_unstable();
    assert_eq!(got, [("customer", "billing"), ("weight", "shipping")]);
    // Another type: the stored row comes back and nothing of the call is added.
    let rows = store
        .declare_search_attributes(
            "audit",
            &decl(&[("customer", SearchType::Int), ("extra", SearchType::Bool)]),
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!((rows[0].name.as_str(), rows[0].ty), ("customer", SearchType::Keyword));
    let all: Vec<String> =
        store.search_attributes().await.unwrap().into_iter().map(|r| r.name).collect();
    assert_eq!(all, ["customer", "weight"]);
}
