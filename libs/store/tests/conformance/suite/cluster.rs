//! Membership, owners at scale and frontends at scale: heartbeats and liveness, owned
//! inbox entries, orphaned trees and their takeover, released claims.
//!
//! Liveness uses the store's clock, so these cases wait real time (a few hundred ms) to let
//! a heartbeat age past a timeout; the margins are wide enough for a loaded machine.

use crate::support::{complete, decoded, signal};
use crate::support::{ev, scheduled, start_batch, task, Backend};
use orbit_store::{
    CommitBatch, InboxDone, NewOwner, NodeInfo, ProjectionUpdate, StoreError, TaskState,
};
use orbit_store::{InboxKind, InboxMessage};
use serde_json::json;
use std::collections::HashSet;
use std::time::Duration;

fn node(id: &str, service: &str, incarnation: &str) -> NodeInfo {
    NodeInfo {
        node_id: id.into(),
        service: service.into(),
        incarnation: incarnation.into(),
        addr: Some(format!("{id}:7234")),
        sessions: None,
    }
}

/// How long a heartbeat is considered fresh in these cases, and how long to wait for one
/// to go stale.
const TIMEOUT_MS: u64 = 300;
const STALE: Duration = Duration::from_millis(700);

/// The start of `id` in tree `root`, owned by `owner`, with a status.
fn start_in(id: &str, root: &str, owner: &str, status: &str) -> CommitBatch {
    let mut batch = start_batch(id, owner);
    if let Some(row) = batch.new_execution.as_mut() {
        row.root_id = root.into();
        row.status = orbit_engine::Status::parse(status).expect("a status name");
        if id != root {
            row.parent_id = Some(root.into());
        }
    }
    batch.new_owner = Some(NewOwner { root_id: root.into(), node_id: owner.into() });
    batch
}

pub async fn nodes_heartbeat_and_go_stale(b: &dyn Backend) {
    let store = b.open().await;
    let now = store.heartbeat_node(&node("owner-1", "owner", "i1")).await.unwrap();
    assert!(now > 1_600_000_000_000, "the store's clock in epoch ms: {now}");
    store.heartbeat_node(&node("fe-1", "frontend", "i1")).await.unwrap();
    let ids =
        |rows: Vec<orbit_store::NodeRow>| rows.into_iter().map(|n| n.node_id).collect::<Vec<_>>();
    assert_eq!(ids(store.live_nodes(None, 60_000).await.unwrap()), ["fe-1", "owner-1"]);
    assert_eq!(ids(store.live_nodes(Some("owner"), 60_000).await.unwrap()), ["owner-1"]);
    let listed = store.list_nodes().await.unwrap();
    assert_eq!(listed.len(), 2);
    let owner = listed.iter().find(|n| n.node_id == "owner-1").unwrap();
    assert_eq!(owner.addr.as_deref(), Some("owner-1:7234"));
    assert_eq!((owner.heartbeat_at_ms, owner.started_at_ms), (now, now));

    // Only fe-1 keeps heartbeating: owner-1 goes stale but stays listed.
    tokio::time::sleep(STALE).await;
    store.heartbeat_node(&node("fe-1", "frontend", "i1")).await.unwrap();
    assert_eq!(ids(store.live_nodes(None, TIMEOUT_MS).await.unwrap()), ["fe-1"]);
    assert!(store.live_nodes(Some("owner"), TIMEOUT_MS).await.unwrap().is_empty());
    assert_eq!(store.list_nodes().await.unwrap().len(), 2);

    // A clean shutdown removes the row at once.
    store.remove_node("fe-1").await.unwrap();
    store.remove_node("no-such-node").await.unwrap();
    assert_eq!(ids(store.list_nodes().await.unwrap()), ["owner-1"]);
}

pub async fn a_beat_lists_the_live_nodes_it_leaves(b: &dyn Backend) {
    let store = b.open().await;
    let ids =
        |rows: Vec<orbit_store::NodeRow>| rows.into_iter().map(|n| n.node_id).collect::<Vec<_>>();
    // The first beat of a node lists it (its own row, as written by this beat).
    let mut fe = node("fe-1", "frontend", "i1");
    fe.sessions = Some("s1".into());
    let live = store.beat_and_list(&fe, TIMEOUT_MS).await.unwrap();
    assert_eq!(ids(live.clone()), ["fe-1"]);
    assert_eq!(live[0].sessions.as_deref(), Some("s1"));
    store.heartbeat_node(&node("owner-1", "owner", "i1")).await.unwrap();
    fe.sessions = Some("s2".into());
    let live = store.beat_and_list(&fe, TIMEOUT_MS).await.unwrap();
    assert_eq!(ids(live.clone()), ["fe-1", "owner-1"], "every service, by node id");
    let me = live.iter().find(|n| n.node_id == "fe-1").unwrap();
    assert_eq!(me.sessions.as_deref(), Some("s2"), "this beat's row, not the previous one");
    assert_eq!(store.list_nodes().await.unwrap().len(), 2);
    // owner-1 goes silent: a later beat no longer lists it.
    tokio::time::sleep(STALE).await;
    assert_eq!(ids(store.beat_and_list(&fe, TIMEOUT_MS).await.unwrap()), ["fe-1"]);
}

pub async fn node_sessions_follow_each_beat(b: &dyn Backend) {
    let store = b.open().await;
    // A frontend reports its sessions; an owner reports nothing.
    let mut fe = node("fe-1", "frontend", "i1");
    fe.sessions = Some(r#"[{"w":"worker-a"}]"#.into());
    store.heartbeat_node(&fe).await.unwrap();
    store.heartbeat_node(&node("owner-1", "owner", "i1")).await.unwrap();
    let live = store.live_nodes(None, 60_000).await.unwrap();
    let sessions = |rows: &[orbit_store::NodeRow], id: &str| {
        rows.iter().find(|n| n.node_id == id).map(|n| n.sessions.clone())
    };
    assert_eq!(sessions(&live, "fe-1"), Some(Some(r#"[{"w":"worker-a"}]"#.into())));
    assert_eq!(sessions(&live, "owner-1"), Some(None));

    // Each beat replaces the summary, also with nothing (the last session left).
    fe.sessions = Some(r#"[{"w":"worker-b"}]"#.into());
    store.heartbeat_node(&fe).await.unwrap();
    let listed = store.list_nodes().await.unwrap();
    assert_eq!(sessions(&listed, "fe-1"), Some(Some(r#"[{"w":"worker-b"}]"#.into())));
    fe.sessions = None;
    store.heartbeat_node(&fe).await.unwrap();
    let live = store.live_nodes(Some("frontend"), 60_000).await.unwrap();
    assert_eq!(sessions(&live, "fe-1"), Some(None));
}

pub async fn a_new_incarnation_resets_started_at(b: &dyn Backend) {
    let store = b.open().await;
    let first = store.heartbeat_node(&node("n", "owner", "i1")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let second = store.heartbeat_node(&node("n", "owner", "i1")).await.unwrap();
    assert!(second > first);
    let row = store.list_nodes().await.unwrap().remove(0);
    assert_eq!((row.started_at_ms, row.heartbeat_at_ms), (first, second), "same incarnation");

    tokio::time::sleep(Duration::from_millis(20)).await;
    let mut restarted = node("n", "owner", "i2");
    restarted.addr = Some("elsewhere:1".into());
    let third = store.heartbeat_node(&restarted).await.unwrap();
    let row = store.list_nodes().await.unwrap().remove(0);
    assert_eq!((row.started_at_ms, row.heartbeat_at_ms), (third, third), "restarted");
    assert_eq!((row.incarnation.as_str(), row.addr.as_deref()), ("i2", Some("elsewhere:1")));
}

pub async fn pending_inbox_owned_is_the_nodes_and_the_also_entries(b: &dyn Backend) {
    let store = b.open().await;
    for (id, owner) in [("a1", "node-a"), ("a2", "node-a"), ("b1", "node-b")] {
        store.commit(start_in(id, id, owner, "RUNNING")).await.unwrap();
    }
    let mut seqs = Vec::new();
    for id in ["b1", "a1", "x", "a2", "y"] {
        seqs.push(store.enqueue_inbox(id, &signal("go")).await.unwrap());
    }
    // One entry of a1 is applied: applied entries are never returned.
    let applied = CommitBatch {
        execution_id: "a1".into(),
        run: 1,
        expected_epoch: Some(1),
        tasks_done: Vec::new(),
        inbox_done: vec![InboxDone { seq: seqs[1], result: None }],
        ..CommitBatch::default()
    };
    store.commit(applied).await.unwrap();

    let of = |entries: Vec<orbit_store::InboxEntry>| {
        entries.into_iter().map(|e| e.execution_id).collect::<Vec<_>>()
    };
    let mine = store.pending_inbox_owned("node-a", &["x".into()], 100).await.unwrap();
    assert_eq!(of(mine), ["x", "a2"], "owned ones and `also`, by seq; not b1, not y");
    let mine = store.pending_inbox_owned("node-a", &[], 100).await.unwrap();
    assert_eq!(of(mine), ["a2"]);
    let theirs = store.pending_inbox_owned("node-b", &["y".into(), "a2".into()], 2).await.unwrap();
    assert_eq!(of(theirs), ["b1", "a2"], "limit applies");
    assert!(store.pending_inbox_owned("node-z", &[], 100).await.unwrap().is_empty());
}

pub async fn owned_executions_exclude_closed_ones(b: &dyn Backend) {
    let store = b.open().await;
    for (id, status) in [("e3", "RUNNING"), ("e1", "PENDING"), ("e2", "COMPENSATING")] {
        store.commit(start_in(id, id, "node-a", status)).await.unwrap();
    }
    store.commit(start_in("done", "done", "node-a", "RUNNING")).await.unwrap();
    store.commit(start_in("other", "other", "node-b", "RUNNING")).await.unwrap();
    let close = CommitBatch {
        execution_id: "done".into(),
        run: 1,
        expected_epoch: Some(1),
        events: vec![ev(3, scheduled("s"))],
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
    assert_eq!(store.owned_executions("node-a").await.unwrap(), ["e1", "e2", "e3"]);
    assert_eq!(store.owned_executions("node-b").await.unwrap(), ["other"]);
    assert!(store.owned_executions("node-z").await.unwrap().is_empty());
}

pub async fn orphaned_roots_are_trees_of_silent_owners_with_work(b: &dyn Backend) {
    let store = b.open().await;
    // r1: running, with a child, owned by node-b. r2: closed and idle (nothing to take).
    // r3: closed but with a pending inbox entry. r4: owned by the live node-a.
    // r5: owned by node-c, which never heartbeat at all. r6: node-f only heartbeats as a
    // frontend, which does not make it a live owner.
    let trees = [
        ("r1", "node-b", "RUNNING"),
        ("r2", "node-b", "COMPLETED"),
        ("r3", "node-b", "COMPLETED"),
        ("r4", "node-a", "RUNNING"),
        ("r5", "node-c", "RUNNING"),
        ("r6", "node-f", "RUNNING"),
    ];
    for (root, owner, status) in trees {
        store.commit(start_in(root, root, owner, status)).await.unwrap();
    }
    store.commit(start_in("r1-child", "r1", "node-b", "RUNNING")).await.unwrap();
    store.enqueue_inbox("r3", &signal("go")).await.unwrap();

    store.heartbeat_node(&node("node-b", "owner", "i1")).await.unwrap();
    tokio::time::sleep(STALE).await;
    store.heartbeat_node(&node("node-a", "owner", "i1")).await.unwrap();
    store.heartbeat_node(&node("node-f", "frontend", "i1")).await.unwrap();

    let pairs = |found: Vec<orbit_store::OrphanRoot>| {
        found.into_iter().map(|o| (o.root_id, o.node_id)).collect::<Vec<_>>()
    };
    let found = pairs(store.orphaned_roots(TIMEOUT_MS, 100).await.unwrap());
    let expect = [("r1", "node-b"), ("r3", "node-b"), ("r5", "node-c"), ("r6", "node-f")];
    let expect: Vec<(String, String)> =
        expect.iter().map(|(r, n)| (r.to_string(), n.to_string())).collect();
    assert_eq!(found, expect, "one pair per tree, live owners and idle trees left alone");
    assert_eq!(store.orphaned_roots(TIMEOUT_MS, 2).await.unwrap().len(), 2, "limit applies");
    // With a generous timeout node-b is still alive.
    let found = pairs(store.orphaned_roots(60_000, 100).await.unwrap());
    assert!(found.iter().all(|(_, n)| n != "node-b"), "{found:?}");
}

pub async fn take_over_root_moves_the_tree_and_fences_the_old_owner(b: &dyn Backend) {
    let store = b.open().await;
    store.commit(start_in("r", "r", "node-b", "RUNNING")).await.unwrap();
    store.commit(start_in("r-child", "r", "node-b", "RUNNING")).await.unwrap();
    store.commit(start_in("other", "other", "node-b", "RUNNING")).await.unwrap();

    let taken = store.take_over_root("r", "node-b", "node-a").await.unwrap();
    assert_eq!(taken, [("r".to_string(), 2), ("r-child".to_string(), 2)]);
    let owner = store.get_owner("r-child").await.unwrap().unwrap();
    assert_eq!((owner.node_id.as_str(), owner.epoch, owner.root_id.as_str()), ("node-a", 2, "r"));
    assert_eq!(store.get_owner("other").await.unwrap().unwrap().node_id, "node-b", "other tree");

    // The old owner's commit is fenced; the new owner's goes through.
    let append = |epoch| CommitBatch {
        execution_id: "r".into(),
        run: 1,
        expected_epoch: Some(epoch),
        events: vec![ev(3, scheduled("s"))],
        ..CommitBatch::default()
    };
    let err = store.commit(append(1)).await.unwrap_err();
    assert!(matches!(err, StoreError::Fenced(_)), "{err:?}");
    store.commit(append(2)).await.unwrap();

    // Another node that also saw node-b die finds nothing left to take.
    assert!(store.take_over_root("r", "node-b", "node-c").await.unwrap().is_empty());
    assert_eq!(store.get_owner("r").await.unwrap().unwrap().epoch, 2);
    assert_eq!(store.owned_executions("node-a").await.unwrap(), ["r", "r-child"]);
}

pub async fn resume_node_fences_every_row_of_the_node_page_by_page(b: &dyn Backend) {
    let store = b.open().await;
    store.commit(start_in("r", "r", "node-a", "RUNNING")).await.unwrap();
    store.commit(start_in("r-child", "r", "node-a", "RUNNING")).await.unwrap();
    store.commit(start_in("done", "done", "node-a", "COMPLETED")).await.unwrap();
    store.commit(start_in("other", "other", "node-b", "RUNNING")).await.unwrap();
    // `r` asked for a child: its history records the start.
    let child = orbit_engine::Event::ChildStarted {
        step: "c".into(),
        child_id: "r-child".into(),
        workflow: "order".into(),
        version: None,
        input: json!({}),
    };
    let append = |epoch| CommitBatch {
        execution_id: "r".into(),
        run: 1,
        expected_epoch: Some(epoch),
        events: vec![ev(3, child.clone())],
        ..CommitBatch::default()
    };
    store.commit(append(1)).await.unwrap();

    // Pages of two, by id: "done" < "r" < "r-child"; the third call finds nothing left.
    let first = store.resume_node("node-a", "", 2).await.unwrap();
    let second = store.resume_node("node-a", &first[1].execution_id, 2).await.unwrap();
    assert!(store.resume_node("node-a", &second[0].execution_id, 2).await.unwrap().is_empty());
    let listed: Vec<_> = first
        .iter()
        .chain(&second)
        .map(|r| (r.execution_id.as_str(), r.epoch, r.open, r.child_started))
        .collect();
    assert_eq!(
        listed,
        [("done", 2, false, false), ("r", 2, true, true), ("r-child", 2, true, false)],
        "every row of the node once, by id"
    );
    // Another node's row did not move.
    let other = store.get_owner("other").await.unwrap().unwrap();
    assert_eq!((other.node_id.as_str(), other.epoch), ("node-b", 1));
    // The previous process of node-a is fenced; the resumed one commits.
    let err = store.commit(append(1)).await.unwrap_err();
    assert!(matches!(err, StoreError::Fenced(_)), "{err:?}");
    let resumed_append = CommitBatch {
        execution_id: "r".into(),
        run: 1,
        expected_epoch: Some(2),
        events: vec![ev(4, scheduled("s"))],
        ..CommitBatch::default()
    };
    store.commit(resumed_append).await.unwrap();
    // A second restart moves them again.
    let again = store.resume_node("node-a", "", 100).await.unwrap();
    assert_eq!(again.iter().map(|r| r.epoch).collect::<Vec<_>>(), [3, 3, 3]);
    assert!(store.resume_node("node-z", "", 100).await.unwrap().is_empty());
}

pub async fn release_claims_hands_back_each_row_once(b: &dyn Backend) {
    let store = b.open().await;
    let mut batch = start_batch("e1", "node-a");
    batch.tasks_to_insert = (0..6).map(|i| task(&format!("u{i}"), "work")).collect();
    store.commit(batch).await.unwrap();
    let dead = store.claim_tasks(&["work".into()], 4, "fe-dead", "s-dead", "w").await.unwrap();
    let live = store.claim_tasks(&["work".into()], 4, "fe-live", "s-live", "w").await.unwrap();
    assert_eq!((dead.len(), live.len()), (4, 2));

    // Two nodes release the dead frontend's claims at once.
    let (one, two) = tokio::join!(
        store.release_claims("fe-dead", "frontend fe-dead is gone"),
        store.release_claims("fe-dead", "frontend fe-dead is gone"),
    );
    let (one, two) = (one.unwrap(), two.unwrap());
    assert_eq!(one.len() + two.len(), 4, "every row released exactly once");
    let released: HashSet<u64> = one.iter().chain(&two).map(|t| t.id).collect();
    assert_eq!(released, dead.iter().map(|t| t.id).collect::<HashSet<_>>());
    assert!(one.iter().chain(&two).all(|t| t.state == TaskState::Cancelled));

    let inbox = store.pending_inbox(Some("e1"), 100).await.unwrap();
    let uncertain: Vec<_> =
        inbox.iter().filter(|e| e.kind == InboxKind::Uncertain.as_str()).collect();
    assert_eq!(uncertain.len(), 4, "one uncertain entry per released row");
    let tokens: HashSet<_> = uncertain.iter().map(|e| e.token.clone().unwrap()).collect();
    assert_eq!(tokens, dead.iter().map(|t| t.token.clone().unwrap()).collect::<HashSet<_>>());
    assert_eq!(uncertain[0].payload, json!({"reason": "frontend fe-dead is gone"}));
    for message in decoded(&inbox) {
        if let InboxMessage::Uncertain(u) = message {
            assert!(tokens.contains(&u.token), "the token column is the attempt's");
            assert_eq!(u.reason, "frontend fe-dead is gone");
        }
    }

    assert!(store.claimed_tasks("fe-dead").await.unwrap().is_empty());
    assert_eq!(store.claimed_tasks("fe-live").await.unwrap().len(), 2, "others untouched");
    assert!(store.release_claims("fe-dead", "again").await.unwrap().is_empty());
    // A worker that still reports a released attempt is recorded for the owner.
    let token = dead[0].token.clone().unwrap();
    let report = complete(json!(null));
    let done = store.complete_task_row(&token, "w", Some(report)).await.unwrap().unwrap();
    assert!(done.newly_done && done.inbox_seq.is_some());
}

pub async fn a_reconnected_worker_s_claims_move_and_are_never_handed_back_twice(b: &dyn Backend) {
    let store = b.open().await;
    let mut batch = start_batch("e1", "node-a");
    batch.tasks_to_insert = (0..5).map(|i| task(&format!("u{i}"), "work")).collect();
    store.commit(batch).await.unwrap();
    let held = store.claim_tasks(&["work".into()], 4, "fe-a", "s1", "w").await.unwrap();
    let other = store.claim_tasks(&["work".into()], 1, "fe-a", "s9", "w-other").await.unwrap();
    let tokens: Vec<String> = held.iter().map(|t| t.token.clone().unwrap()).collect();
    let other_token = other[0].token.clone().unwrap();
    // One attempt is done before the worker reconnects.
    store.complete_task_row(&tokens[3], "w", Some(complete(json!(1)))).await.unwrap();

    // The worker reconnects through fe-b and names three of its attempts, the done one
    // and another worker's: only its claimed rows among them move.
    let named = [tokens[0].clone(), tokens[1].clone(), tokens[3].clone(), other_token.clone()];
    let moved = store.adopt_claims("w", &named, "fe-b", "s2").await.unwrap();
    let moved_tokens: Vec<_> = moved.iter().map(|t| t.token.clone().unwrap()).collect();
    assert_eq!(moved_tokens, [tokens[0].clone(), tokens[1].clone()]);
    assert!(moved.iter().all(|t| t.claimed_by.as_deref() == Some("fe-b")
        && t.session.as_deref() == Some("s2")
        && t.worker_id.as_deref() == Some("w")
        && t.state == TaskState::Claimed));
    assert!(store.adopt_claims("w", &[], "fe-b", "s2").await.unwrap().is_empty());

    // fe-a's session times out: it hands back only what it still holds.
    let back = store.hand_back_claims("fe-a", &tokens, "SESSION_LOST").await.unwrap();
    assert_eq!(
        back.iter().map(|t| t.token.clone().unwrap()).collect::<Vec<_>>(),
        [tokens[2].clone()]
    );
    assert!(back.iter().all(|t| t.state == TaskState::Cancelled));
    assert!(store.hand_back_claims("fe-a", &tokens, "again").await.unwrap().is_empty());
    let inbox = store.pending_inbox(Some("e1"), 100).await.unwrap();
    let uncertain: Vec<_> =
        inbox.iter().filter(|e| e.kind == InboxKind::Uncertain.as_str()).collect();
    assert_eq!(uncertain.len(), 1, "one entry, for the one row handed back");
    assert_eq!(uncertain[0].token.as_deref(), Some(tokens[2].as_str()));
    assert_eq!(uncertain[0].payload, json!({"reason": "SESSION_LOST"}));

    // A dead fe-a's sweep finds nothing of the moved rows either; fe-b holds them.
    assert_eq!(store.release_claims("fe-a", "gone").await.unwrap().len(), 1, "w-other's row");
    assert_eq!(store.claimed_tasks("fe-b").await.unwrap().len(), 2);
    // The worker's result through fe-b is recorded.
    let done = store.complete_task_row(&tokens[0], "w", Some(complete(json!(2)))).await.unwrap();
    assert!(done.unwrap().newly_done);
}

pub async fn orphaned_claimers_are_claimers_without_a_live_node(b: &dyn Backend) {
    let store = b.open().await;
    let mut batch = start_batch("e1", "node-a");
    batch.tasks_to_insert = (0..3).map(|i| task(&format!("u{i}"), "work")).collect();
    store.commit(batch).await.unwrap();
    for fe in ["fe-stale", "fe-live", "fe-never"] {
        store.claim_tasks(&["work".into()], 1, fe, "s", "w").await.unwrap();
    }
    store.heartbeat_node(&node("fe-stale", "frontend", "i1")).await.unwrap();
    tokio::time::sleep(STALE).await;
    store.heartbeat_node(&node("fe-live", "frontend", "i1")).await.unwrap();
    assert_eq!(store.orphaned_claimers(TIMEOUT_MS).await.unwrap(), ["fe-never", "fe-stale"]);
    assert_eq!(store.orphaned_claimers(60_000).await.unwrap(), ["fe-never"]);
    store.release_claims("fe-never", "gone").await.unwrap();
    assert!(store.orphaned_claimers(60_000).await.unwrap().is_empty(), "released rows");
}
