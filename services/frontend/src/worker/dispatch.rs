//! The dispatcher of one session: claims queued tasks for it while it has free credits,
//! woken by "tasks ready", by credits arriving, or by a safety-net tick, and hands the
//! claimed rows to [`super::deliver`]. A drained session lends its free credits to owners
//! instead (the split's hand-off, see `lend`), and recalls them when queued tasks wait.

use super::common::Tx;
use super::deliver::deliver;
use super::session::Session;
use crate::Shared;
use orbit_store::TaskRow;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// Claims tasks for the session while it has credits, woken by "tasks ready", by credits
/// arriving, or by the fallback tick (a safety net, 30 s by default; sooner after a failed
/// claim).
pub(super) async fn dispatch(shared: Arc<Shared>, session: Arc<Session>, tx: Tx) {
    let fallback = Duration::from_millis(shared.config.dispatch_fallback_ms.max(1));
    // Whether queued tasks may wait for this session (a "tasks ready" wake-up, the start,
    // the safety net): then it claims before it lends. Woken only by its own credits
    // while drained, it claims nothing: nothing was queued for it since its last claim
    // found nothing (a task queued since woke it by "tasks ready"). Its free credits then
    // take hand-offs (`orbit dev`: the owner of the process reserves them, see `handoff`)
    // or are lent (the split, see `lend`). A claim there held the credits, so a start
    // committing meanwhile found none free and queued its task: an extra claim, and no
    // hand-off, for every such step (issue 25).
    let mut must_claim = true;
    // Registered for wake-ups before looking, so none is missed while claiming. "Tasks
    // ready" stays registered until it fires: an iteration woken by something else may
    // skip its claim, so a notification must never fall between two registrations.
    let mut ready = Box::pin(shared.tasks_ready.clone().notified_owned());
    ready.as_mut().enable();
    // Rows under a concurrency key or a rate limit that stayed queued (issue 27): looked
    // at again when a slot frees (a notification), when the next rate window opens, or at
    // the latest after `LIMITED_RECHECK`. A deadline set by the claim that saw them, so
    // wake-ups that claim nothing (credits coming back, a drained session lending) cannot
    // push it back; cleared when it fires (the claim it causes sets the next one).
    let mut limited_at: Option<tokio::time::Instant> = None;
    let flow_freed = shared.store.flow_wakeups();
    loop {
        let changed = session.changed.notified();
        tokio::pin!(changed);
        changed.as_mut().enable();
        let freed = async {
            match &flow_freed {
                Some(n) => n.notified().await,
                None => std::future::pending::<()>().await,
            }
        };
        tokio::pin!(freed);
        if session.is_stopped() {
            return;
        }
        let lending = shared.lending.active();
        let drained = session.drained.load(Ordering::SeqCst);
        let mut failed = false;
        if must_claim || !drained {
            // One claim takes at most `MAX_CLAIM` rows; a full batch loops for more at once.
            // The credits are held meanwhile, so hand-offs (see `handoff`) cannot take them.
            let wanted = session.hold(orbit_store::MAX_CLAIM);
            if wanted > 0 {
                let claimed = claim(&shared, &session, wanted).await;
                let full = matches!(&claimed, Ok(c) if c.full);
                // Nothing more queued for this session: new tasks may be handed to it
                // directly.
                session.drained.store(claimed.is_ok() && !full, Ordering::SeqCst);
                match claimed {
                    Ok(c) => {
                        must_claim = false;
                        limited_at = c.limited_wait.map(|w| tokio::time::Instant::now() + w);
                        failed = c.limited_failed;
                        let any = !c.rows.is_empty();
                        if any {
                            deliver(&shared, &session, c.rows, &tx, false).await;
                        }
                        session.unhold(wanted);
                        if any && full {
                            continue;
                        }
                    }
                    Err(e) => {
                        session.unhold(wanted);
                        tracing::warn!(session = %session.id, error = %e, "claiming tasks failed");
                        // The store may be briefly away: look again soon, not at the safety
                        // net.
                        failed = true;
                    }
                }
            } else if must_claim && session.lent() > 0 {
                // Queued tasks may wait while owners hold this session's credits: they give
                // back what they have not used, and the session claims then.
                tracing::debug!(session = %session.id, lent = session.lent(), "recalling lent credits to claim");
                shared.lending.recall(&session.id);
            }
        }
        if lending && !must_claim && session.drained.load(Ordering::SeqCst) {
            shared.lending.offer(&session);
        }
        // With the frontend's queue watch running (`sampler`), a session needs no timer of
        // its own but for a failed claim and for rows a limit holds: the watch's safety-net
        // read wakes it.
        let watched = shared.queue_watched.load(std::sync::atomic::Ordering::SeqCst);
        let timer = async {
            match (failed, limited_at, watched) {
                (true, _, _) => tokio::time::sleep(fallback.min(CLAIM_RETRY)).await,
                (false, Some(at), _) => {
                    let net = tokio::time::Instant::now() + fallback;
                    tokio::time::sleep_until(at.min(net)).await;
                }
                (false, None, true) => std::future::pending::<()>().await,
                (false, None, false) => tokio::time::sleep(fallback).await,
            }
        };
        tokio::select! {
            biased;
            () = &mut ready => {
                must_claim = true;
                ready = Box::pin(shared.tasks_ready.clone().notified_owned());
                ready.as_mut().enable();
            }
            // The queue watch saw rows for it queued (see `Session::ask_to_claim`).
            () = &mut changed => must_claim |= session.take_claim_ask(),
            () = &mut freed => must_claim = true,
            () = timer => {
                must_claim = true;
                limited_at = None;
            }
        }
    }
}

/// What one claim for a session took.
struct Claimed {
    /// The rows, ordinary ones first.
    rows: Vec<TaskRow>,
    /// As many rows as credits: more may be queued.
    full: bool,
    /// Rows a concurrency key or a rate limit holds stayed queued: look again after this
    /// (the next rate window, else `LIMITED_RECHECK`; a freed slot wakes the session
    /// sooner).
    limited_wait: Option<Duration>,
    /// The flow claim failed (the ordinary rows are kept): look again soon.
    limited_failed: bool,
}

/// One claim for the session: the ordinary rows (the one statement every claim runs),
/// then, only when the store may hold rows under a concurrency key, a rate limit or a fair
/// key, the flow claim with the credits left, both in one call (issue 27; on SQLite one
/// job of the single writer; nothing more is run for workloads without flow control).
async fn claim(shared: &Shared, session: &Session, wanted: u32) -> orbit_store::Result<Claimed> {
    let store = &shared.store;
    let node = &shared.config.node_id;
    let (filter, worker) = (&session.claim, &session.worker_id);
    if !store.limited_possible().await.unwrap_or(true) {
        let rows = store.claim_matching(filter, wanted, node, &session.id, worker).await?;
        return Ok(Claimed {
            full: rows.len() >= wanted as usize,
            rows,
            limited_wait: None,
            limited_failed: false,
        });
    }
    // Timed only here: what a window with slow claims looks like in the logs (the rate
    // test of `cluster_flow` runs its nodes with this module at `debug`).
    let began = tokio::time::Instant::now();
    let (mut rows, limited) =
        store.claim_with_limited(filter, wanted, node, &session.id, worker).await?;
    let left = orbit_store::credits_left(wanted, rows.len());
    let mut out =
        Claimed { full: left == 0, rows: Vec::new(), limited_wait: None, limited_failed: false };
    match limited {
        Ok(limited) => {
            out.full |= left > 0 && limited.rows.len() >= left as usize;
            if limited.blocked {
                let now = shared.config.clock.now();
                let rate =
                    limited.retry_at_ms.map(|at| Duration::from_millis(at.saturating_sub(now)));
                out.limited_wait = Some(
                    rate.map_or(LIMITED_RECHECK, |r| r.clamp(LIMITED_MIN_WAIT, LIMITED_RECHECK)),
                );
            }
            rows.extend(limited.rows);
        }
        Err(e) => {
            tracing::warn!(session = %session.id, error = %e, "claiming rate- or concurrency-limited tasks failed");
            out.limited_failed = true;
        }
    }
    out.rows = rows;
    tracing::debug!(
        session = %session.id,
        wanted,
        claimed = out.rows.len(),
        full = out.full,
        limited_wait = ?out.limited_wait,
        took = ?began.elapsed(),
        "claimed"
    );
    Ok(out)
}

/// The longest a session waits before it looks again at rows a limit holds: a safety net
/// (a freed concurrency slot wakes it by notification, a rate window by its own timer).
const LIMITED_RECHECK: Duration = Duration::from_secs(5);

/// The shortest such wait (a rate window about to open).
const LIMITED_MIN_WAIT: Duration = Duration::from_millis(5);

/// The pause before a failed claim is tried again.
const CLAIM_RETRY: Duration = Duration::from_secs(1);
