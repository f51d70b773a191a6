//! Applying one inbox entry to an execution's work, inside its engine job (see `apply`):
//! a command through `orbit_engine::accept`, a fired timer, a refusal — each with the
//! reply its sender gets.

use crate::inbox::{self, Request};
use crate::work::Work;
use orbit_engine::event::Event;
use orbit_engine::{accept, Command, ErrorCode};
use orbit_store::{InboxDone, InboxEntry, InboxReply};

/// Applies one inbox entry to the execution's work, recording its reply.
pub(crate) fn apply_entry(
    w: &mut Work,
    entry: &InboxEntry,
    now: u64,
    limits: &orbit_definition::Limits,
) {
    let result = match inbox::request(entry) {
        Ok(Request::Tick) => {
            // Firing deleted the timer row: compare the next wake-up against no row, so the
            // commit writes it again when the timer is not due by this owner's clock (a
            // scheduler whose clock runs ahead) instead of leaving the execution asleep.
            w.hot.timer_at = Some(None);
            InboxReply::Applied { seq: w.hot.state.last_seq, run: w.hot.state.run, applied: true }
        }
        Ok(Request::Command(cmd, child)) => {
            if let Command::Signal { name, .. } = cmd.as_ref() {
                crate::fault_inject::on_signal(name);
            }
            if let Err(e) = inbox::check_child(&w.hot.state, &cmd, child.as_deref()) {
                InboxReply::refused(e)
            } else {
                let cancel = matches!(cmd.as_ref(), Command::Cancel { .. });
                let update = matches!(cmd.as_ref(), Command::Update { .. });
                if let Some(answer) = crate::initial::repeated(&w.hot.state, &cmd) {
                    w.inbox_done.push(InboxDone { seq: entry.seq, result: Some(answer) });
                    return;
                }
                match accept(&w.hot.def, &w.hot.state, *cmd, now, limits) {
                    Ok(events) => {
                        // A result recorded as stale was kept but not applied: say so, so the
                        // frontend can answer the worker `accepted: false`.
                        let applied =
                            !events.iter().any(|e| matches!(e, Event::StaleResultIgnored { .. }));
                        // A cancel of a run already winding down records nothing and answers
                        // seq 0 (`CancelExecutionResponse.seq`), not the run's latest event.
                        let mut seq =
                            if cancel && events.is_empty() { 0 } else { w.hot.state.last_seq };
                        // An update answers its reply and the seq of its `UpdateAccepted`.
                        let result =
                            update.then(|| orbit_engine::update::reply(&events).cloned()).flatten();
                        let mut first = None;
                        for e in events {
                            seq = w.record(e, now);
                            first.get_or_insert(seq);
                        }
                        match result {
                            Some(result) => InboxReply::Updated {
                                seq: first.unwrap_or(seq),
                                run: w.hot.state.run,
                                result,
                            },
                            None => InboxReply::Applied { seq, run: w.hot.state.run, applied },
                        }
                    }
                    Err(e) => InboxReply::refused(e),
                }
            }
        }
        Ok(Request::Control(_)) => InboxReply::Refused {
            code: ErrorCode::InvalidArgument,
            message: "operator entry outside a control pass".into(),
        },
        Err(e) => InboxReply::refused(e),
    };
    w.inbox_done.push(InboxDone { seq: entry.seq, result: Some(result) });
}
