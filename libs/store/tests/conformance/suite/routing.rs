//! Routing in claims: a worker session claims only rows of its language (or of none) and,
//! for a task it announced at a version, only rows of that version.

use crate::support::{start_batch, task, Backend};
use orbit_store::{ClaimFilter, NewTask};

fn routed(step: &str, name: &str, version: &str, language: Option<&str>) -> NewTask {
    NewTask {
        task_version: version.into(),
        language: language.map(str::to_string),
        ..task(step, name)
    }
}

fn steps(rows: &[orbit_store::TaskRow]) -> Vec<&str> {
    rows.iter().map(|r| r.unit_key.as_str()).collect()
}

fn worker(tasks: &[(&str, &str)], runtime: &str) -> ClaimFilter {
    let tasks: Vec<(String, String)> =
        tasks.iter().map(|(n, v)| ((*n).to_string(), (*v).to_string())).collect();
    ClaimFilter::worker(&tasks, runtime)
}

pub async fn claims_route_by_language(b: &dyn Backend) {
    let store = b.open().await;
    let mut batch = start_batch("e1", "node-a");
    batch.tasks_to_insert = vec![
        routed("py", "t", "1", Some("python")),
        routed("rs", "t", "1", Some("rust")),
        routed("anyone", "t", "1", None),
    ];
    store.commit(batch).await.unwrap();

    // A rust worker takes the rust row and the unrouted one, never the python row.
    let rust = worker(&[("t", "1")], "Rust");
    let got = store.claim_matching(&rust, 10, "fe", "s-rs", "w-rs").await.unwrap();
    assert_eq!(steps(&got), ["rs", "anyone"]);
    assert_eq!(got[0].language.as_deref(), Some("rust"), "the row keeps its language");
    assert!(store.claim_matching(&rust, 10, "fe", "s-rs", "w-rs").await.unwrap().is_empty());

    // A worker without a runtime gets nothing routed; `python 3.12` is python.
    let bare = worker(&[("t", "1")], "");
    assert!(store.claim_matching(&bare, 10, "fe", "s-0", "w-0").await.unwrap().is_empty());
    let py = worker(&[("t", "1")], "python 3.12");
    let got = store.claim_matching(&py, 10, "fe", "s-py", "w-py").await.unwrap();
    assert_eq!(steps(&got), ["py"]);
    assert_eq!(got[0].worker_id.as_deref(), Some("w-py"));

    // Without a language in the filter (no routing) every language is claimable.
    let mut batch = start_batch("e2", "node-a");
    batch.tasks_to_insert = vec![routed("go", "t", "1", Some("go"))];
    store.commit(batch).await.unwrap();
    let got = store.claim_tasks(&["t".into()], 10, "fe", "s", "w").await.unwrap();
    assert_eq!(steps(&got), ["go"]);
}

pub async fn claims_match_announced_versions(b: &dyn Backend) {
    let store = b.open().await;
    let mut batch = start_batch("e1", "node-a");
    batch.tasks_to_insert = vec![
        routed("v1", "t", "1", None),
        routed("v2", "t", "2", None),
        routed("u2", "u", "2", None),
        routed("v1b", "t", "1", None),
    ];
    store.commit(batch).await.unwrap();

    // Announced at version 2: only version 2 rows of that task; `u` at any version.
    let v2 = worker(&[("t", "2"), ("u", "")], "rust");
    let got = store.claim_matching(&v2, 10, "fe", "s2", "w2").await.unwrap();
    assert_eq!(steps(&got), ["v2", "u2"]);
    assert!(got.iter().all(|r| r.worker_id.as_deref() == Some("w2")));

    // Version 1, one row per claim, oldest first; version 3 matches nothing.
    let v3 = worker(&[("t", "3")], "rust");
    assert!(store.claim_matching(&v3, 10, "fe", "s3", "w3").await.unwrap().is_empty());
    let v1 = worker(&[("t", "1")], "rust");
    assert_eq!(steps(&store.claim_matching(&v1, 1, "fe", "s1", "w1").await.unwrap()), ["v1"]);
    assert_eq!(steps(&store.claim_matching(&v1, 5, "fe", "s1", "w1").await.unwrap()), ["v1b"]);

    // Every claimed row wrote its `dispatched` entry for the owner.
    let inbox = store.pending_inbox(Some("e1"), 10).await.unwrap();
    assert_eq!(inbox.len(), 4, "{inbox:?}");
}

/// Task hand-off: an offer queued with a claim is inserted claimed for that session's
/// worker under the claim's token in the same commit, and no `dispatched` entry is written
/// (the batch's own events carry `StepDispatched`); the claims never see it, the other
/// offers stay queued, and a claim of an offer queued before fails the whole commit (the
/// history must not name a token no row carries).
pub async fn a_commit_queues_handed_off_tasks_already_claimed(b: &dyn Backend) {
    let store = b.open().await;
    let mut batch = start_batch("e1", "node-a");
    batch.tasks_to_insert = vec![task("a", "t"), task("b", "t")];
    let claim = |unit: &str, token: &str| orbit_store::TaskClaim {
        unit: unit.into(),
        attempt: 1,
        offer: 1,
        claimer: "fe".into(),
        session: "s-1".into(),
        worker_id: "w-1".into(),
        token: token.into(),
    };
    batch.task_claims = vec![claim("a", "tok-a")];
    let outcome = store.commit(batch).await.unwrap();
    assert_eq!(outcome.task_ids.len(), 2);
    assert_eq!(outcome.claimed.len(), 1);
    let row = &outcome.claimed[0];
    assert_eq!(row.unit_key, "a");
    assert_eq!(row.state, orbit_store::TaskState::Claimed);
    assert_eq!(row.token.as_deref(), Some("tok-a"));
    assert_eq!(row.worker_id.as_deref(), Some("w-1"));
    assert_eq!(row.session.as_deref(), Some("s-1"));
    assert_eq!(row.claimed_by.as_deref(), Some("fe"));
    assert!(row.claimed_at_ms.is_some());
    assert_eq!(store.task_by_token("tok-a").await.unwrap().as_ref(), Some(row));

    let inbox = store.pending_inbox(Some("e1"), 10).await.unwrap();
    assert!(inbox.is_empty(), "a hand-off writes no inbox entry: {inbox:?}");

    // The claims take only the offer left queued.
    let got = store.claim_tasks(&["t".into()], 10, "fe", "s-2", "w-2").await.unwrap();
    assert_eq!(steps(&got), ["b"]);

    let again = orbit_store::CommitBatch {
        execution_id: "e1".into(),
        run: 1,
        expected_epoch: Some(1),
        tasks_to_insert: vec![task("b", "t")],
        task_claims: vec![claim("b", "tok-b")],
        ..Default::default()
    };
    // The same offer queued again with a claim: already there, so the commit is refused
    // and writes nothing (the row keeps its state, the token names no row).
    let refused = store.commit(again.clone()).await;
    assert!(matches!(refused, Err(orbit_store::StoreError::Conflict(_))), "{refused:?}");
    assert_eq!(store.task_by_token("tok-b").await.unwrap(), None);
    let b = store.task_by_token(&got[0].token.clone().unwrap()).await.unwrap().unwrap();
    assert_eq!(b.state, orbit_store::TaskState::Claimed);
    // Without the claim, the offer already queued is skipped as before.
    let outcome = store.commit(orbit_store::CommitBatch { task_claims: vec![], ..again }).await;
    let outcome = outcome.unwrap();
    assert!(outcome.claimed.is_empty() && outcome.task_ids.is_empty());
}
