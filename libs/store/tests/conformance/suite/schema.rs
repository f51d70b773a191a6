//! Schema-level guarantees: migrations, definitions, durability across reopening and
//! listing executions.

use crate::support::{created, ev, execution_row, scheduled, start_batch, timer, Backend};
use orbit_store::migrations::MIGRATIONS;
use orbit_store::{
    CommitBatch, ExecutionFilter, NewOwner, ProjectionUpdate, PutOutcome, StoreError,
};
use std::sync::Arc;

pub async fn migrations_are_idempotent(b: &dyn Backend) {
    let store = b.open().await;
    assert_eq!(store.migrate().await.unwrap(), Vec::<u32>::new(), "second migrate is a no-op");
    store.put_definition("order", "v1", "h1", "doc").await.unwrap();
    drop(store);
    let reopened = b.open().await;
    assert_eq!(reopened.migrate().await.unwrap(), Vec::<u32>::new());
    assert!(reopened.get_definition("order", Some("v1")).await.unwrap().is_some());
}

pub async fn applied_migrations_are_the_shipped_ones(b: &dyn Backend) {
    let store = b.open().await;
    let applied = store.applied_migrations().await.unwrap();
    let recorded: Vec<(i64, &str)> = applied.iter().map(|a| (a.version, a.name.as_str())).collect();
    let shipped: Vec<(i64, &str)> =
        MIGRATIONS.iter().map(|m| (i64::from(m.version), m.name)).collect();
    assert_eq!(recorded, shipped, "every shipped migration is recorded once, in order");
    assert!(applied.iter().all(|a| a.applied_at_ms > 0), "{applied:?}");
    let status = store.schema_status().await.unwrap();
    assert!(status.pending.is_empty() && status.unknown.is_empty(), "{status:?}");
    assert_eq!(status.check(false), Ok(()), "a migrated store is current");
}

pub async fn definitions_are_immutable(b: &dyn Backend) {
    let store = b.open().await;
    assert_eq!(
        store.put_definition("order", "v1", "h1", "doc").await.unwrap(),
        PutOutcome::Created
    );
    assert_eq!(
        store.put_definition("order", "v1", "h1", "doc").await.unwrap(),
        PutOutcome::Unchanged
    );
    let err = store.put_definition("order", "v1", "h2", "other").await.unwrap_err();
    assert!(matches!(err, StoreError::Conflict(_)), "{err:?}");
    let row = store.get_definition("order", Some("v1")).await.unwrap().unwrap();
    assert_eq!((row.definition_hash.as_str(), row.document.as_str()), ("h1", "doc"));
    assert_eq!(store.list_definitions().await.unwrap().len(), 1);
    assert!(store.get_definition("order", Some("v9")).await.unwrap().is_none());
    assert!(store.get_definition("missing", None).await.unwrap().is_none());
}

pub async fn definitions_latest_is_the_highest_version(b: &dyn Backend) {
    let store = b.open().await;
    for v in ["v2", "v10", "v1", "blue"] {
        store.put_definition("order", v, &format!("h-{v}"), "doc").await.unwrap();
    }
    store.put_definition("other", "v1", "x", "doc").await.unwrap();
    let latest = store.get_definition("order", None).await.unwrap().unwrap();
    assert_eq!(latest.version, "v10", "the highest semantic version, not the last registered");
    assert_eq!(latest.definition_hash, "h-v10");
    let versions: Vec<_> = store
        .definition_versions("order")
        .await
        .unwrap()
        .into_iter()
        .map(|v| format!("{}={}", v.version, v.definition_hash))
        .collect();
    assert_eq!(versions, ["v2=h-v2", "v10=h-v10", "v1=h-v1", "blue=h-blue"], "registration order");
    assert!(store.definition_versions("missing").await.unwrap().is_empty());
    let names: Vec<_> = store
        .list_definitions()
        .await
        .unwrap()
        .into_iter()
        .map(|d| format!("{}@{}", d.name, d.version))
        .collect();
    assert_eq!(names, ["order@v2", "order@v10", "order@v1", "order@blue", "other@v1"]);
}

pub async fn history_survives_reopening(b: &dyn Backend) {
    let store = b.open().await;
    let mut batch = start_batch("e1", "node-a");
    batch.events.push(ev(3, scheduled("charge")));
    batch.timers_to_upsert = vec![timer("t", 10)];
    store.commit(batch).await.unwrap();
    let before = store.load_history("e1", 1).await.unwrap();
    drop(store);
    let reopened = b.open().await;
    assert_eq!(reopened.load_history("e1", 1).await.unwrap(), before);
    assert_eq!(reopened.get_execution("e1").await.unwrap().unwrap().last_seq, 3);
    assert_eq!(reopened.next_timer_at().await.unwrap(), Some(10));
}

pub async fn executions_list_with_filters_and_pages(b: &dyn Backend) {
    let store = b.open().await;
    for i in 0..7u64 {
        let id = format!("e{i}");
        let mut row = execution_row(&id, 1_000 + i / 2); // pairs share a created_at
        if i % 2 == 1 {
            row.workflow = "refund".into();
            row.parent_id = Some("e0".into());
        }
        let batch = CommitBatch {
            execution_id: id.clone(),
            run: 1,
            new_execution: Some(row),
            new_owner: Some(NewOwner { root_id: id.clone(), node_id: "n".into() }),
            events: vec![ev(1, created(&id, 1))],
            projection: (i == 6).then_some(ProjectionUpdate {
                status: orbit_engine::Status::Completed,
                updated_at_ms: 2_000,
                closed_at_ms: Some(2_000),
                delete_after_ms: None,
                failed_step: None,
                error_code: None,
            }),
            ..CommitBatch::default()
        };
        store.commit(batch).await.unwrap();
    }
    let mut seen = Vec::new();
    let mut filter = ExecutionFilter { page_size: 3, ..ExecutionFilter::default() };
    loop {
        let page = store.list_executions(filter.clone()).await.unwrap();
        assert!(page.executions.len() <= 3);
        seen.extend(page.executions.into_iter().map(|e| e.execution_id));
        match page.next_page_token {
            Some(t) => filter.page_token = Some(t),
            None => break,
        }
    }
    assert_eq!(seen, ["e6", "e5", "e4", "e3", "e2", "e1", "e0"], "newest first, no repeats");
    // Six running, one completed: `max_active_executions` counts only the open ones.
    assert_eq!(store.count_active_executions().await.unwrap(), 6);

    let ids = |f: ExecutionFilter| {
        let store = Arc::clone(&store);
        async move {
            let page = store.list_executions(f).await.unwrap();
            page.executions.into_iter().map(|e| e.execution_id).collect::<Vec<_>>()
        }
    };
    let by_workflow = ExecutionFilter { workflow: Some("refund".into()), ..Default::default() };
    assert_eq!(ids(by_workflow).await, ["e5", "e3", "e1"]);
    let by_status =
        ExecutionFilter { status: Some(orbit_engine::Status::Completed), ..Default::default() };
    assert_eq!(ids(by_status).await, ["e6"]);
    let by_parent = ExecutionFilter { parent_id: Some("e0".into()), ..Default::default() };
    assert_eq!(ids(by_parent).await.len(), 3);
    let bad = ExecutionFilter { page_token: Some("garbage".into()), ..Default::default() };
    assert!(matches!(store.list_executions(bad).await, Err(StoreError::InvalidArgument(_))));
}
