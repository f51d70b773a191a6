//! The dispatcher of one session: claims queued tasks for it while it has free credits,
//! woken by "tasks ready", by credits arriving, or by a safety-net tick, and hands the
//! claimed rows to [`super::deliver`]. A drained session lends its free credits to owners
//! instead (the split's hand-off, see `lend`), and recalls them when queued tasks wait.

use super::common::Tx;
use super::deliver::deliver;
use super::session::Session;
use crate::Shared;
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
    loop {
        let changed = session.changed.notified();
        tokio::pin!(changed);
        changed.as_mut().enable();
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
                let claimed = shared
                    .store
                    .claim_matching(
                        &session.claim,
                        wanted,
                        &shared.config.node_id,
                        &session.id,
                        &session.worker_id,
                    )
                    .await;
                let full = matches!(&claimed, Ok(rows) if rows.len() >= wanted as usize);
                // Nothing more queued for this session: new tasks may be handed to it
                // directly.
                session.drained.store(claimed.is_ok() && !full, Ordering::SeqCst);
                match claimed {
                    Ok(rows) if !rows.is_empty() => {
                        must_claim = false;
                        deliver(&shared, &session, rows, &tx, false).await;
                        session.unhold(wanted);
                        if full {
                            continue;
                        }
                    }
                    Ok(_) => {
                        must_claim = false;
                        session.unhold(wanted);
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
                shared.lending.recall(&session.id);
            }
        }
        if lending && !must_claim && session.drained.load(Ordering::SeqCst) {
            shared.lending.offer(&session);
        }
        // With the frontend's queue watch running (`sampler`), a session needs no timer of
        // its own but for a failed claim: the watch's safety-net read wakes it.
        let watched = shared.queue_watched.load(std::sync::atomic::Ordering::SeqCst);
        let timer = async {
            match (failed, watched) {
                (true, _) => tokio::time::sleep(fallback.min(CLAIM_RETRY)).await,
                (false, true) => std::future::pending::<()>().await,
                (false, false) => tokio::time::sleep(fallback).await,
            }
        };
        tokio::select! {
            biased;
            () = &mut ready => {
                must_claim = true;
                ready = Box::pin(shared.tasks_ready.clone().notified_owned());
                ready.as_mut().enable();
            }
            () = &mut changed => {}
            () = timer => must_claim = true,
        }
    }
}

/// The pause before a failed claim is tried again.
const CLAIM_RETRY: Duration = Duration::from_secs(1);
