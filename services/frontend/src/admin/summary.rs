//! The worker sessions a frontend reports with each membership heartbeat, so `ListWorkers`
//! on any frontend answers for the whole cluster without a query on a timer of its own
//! (idle cost stays what the heartbeat already pays).
//!
//! The report is compact JSON (one-letter keys) in the `sessions` column of the frontend's
//! `nodes` row; it is as fresh as the last beat, so another frontend's sessions may lag one
//! heartbeat interval. Only sessions whose stream is open are reported.

use crate::worker::Session;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// At most this many sessions are reported per beat, so a frontend with an unusual number
/// of workers does not make its heartbeat row unbounded (the rest are listed only by it).
const MAX_REPORTED: usize = 5_000;

/// One session as `ListWorkers` shows it: from this frontend's registry or from another
/// frontend's last heartbeat.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SessionView {
    #[serde(rename = "w")]
    pub(crate) worker_id: String,
    #[serde(rename = "s")]
    pub(crate) session_id: String,
    /// The authenticated identity that opened the session (auth on).
    #[serde(rename = "i", default, skip_serializing_if = "Option::is_none")]
    pub(crate) identity: Option<String>,
    #[serde(rename = "r", default)]
    pub(crate) runtime: String,
    #[serde(rename = "k", default)]
    pub(crate) sdk: String,
    /// (name, version) of each task offered.
    #[serde(rename = "t", default)]
    pub(crate) tasks: Vec<(String, String)>,
    #[serde(rename = "l", default, skip_serializing_if = "HashMap::is_empty")]
    pub(crate) labels: HashMap<String, String>,
    #[serde(rename = "m", default)]
    pub(crate) max_concurrency: u32,
    #[serde(rename = "f", default)]
    pub(crate) in_flight: u32,
    #[serde(rename = "c", default)]
    pub(crate) credits: u32,
    #[serde(rename = "d", default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) draining: bool,
    /// Last heard from, epoch milliseconds.
    #[serde(rename = "h", default)]
    pub(crate) last_seen_ms: u64,
    /// Opened, epoch milliseconds.
    #[serde(rename = "o", default)]
    pub(crate) connected_at_ms: u64,
    /// The frontend holding the stream (the row's node id, not repeated in the report).
    #[serde(skip)]
    pub(crate) node_id: String,
    /// Whether the stream is open (always, for reported sessions).
    #[serde(skip)]
    pub(crate) live: bool,
}

impl SessionView {
    /// A session of this frontend's registry.
    pub(crate) fn local(node_id: &str, s: &Session) -> SessionView {
        let counters = s.counters();
        SessionView {
            worker_id: s.worker_id.clone(),
            session_id: s.id.clone(),
            identity: s.principal.clone(),
            runtime: s.meta.runtime.clone(),
            sdk: s.meta.sdk.clone(),
            tasks: s.meta.tasks.clone(),
            labels: s.meta.labels.clone(),
            max_concurrency: s.max_concurrency(),
            in_flight: counters.in_flight,
            credits: counters.credits,
            draining: counters.draining,
            last_seen_ms: s.last_seen_ms(),
            connected_at_ms: s.connected_at_ms,
            node_id: node_id.to_string(),
            live: !s.is_stopped(),
        }
    }
}

/// The report of `sessions` (this frontend's open ones): `None` when there is none, so an
/// idle frontend's row stays small.
pub(crate) fn report(node_id: &str, sessions: &[std::sync::Arc<Session>]) -> Option<String> {
    let views: Vec<SessionView> = sessions
        .iter()
        .filter(|s| !s.is_stopped())
        .take(MAX_REPORTED)
        .map(|s| SessionView::local(node_id, s))
        .collect();
    if views.is_empty() {
        return None;
    }
    serde_json::to_string(&views).ok()
}

/// The sessions another frontend (`node_id`) reported; a report this binary cannot read
/// (another version's) is skipped with a warning rather than failing the whole list.
pub(crate) fn parse(node_id: &str, report: &str) -> Vec<SessionView> {
    match serde_json::from_str::<Vec<SessionView>>(report) {
        Ok(mut views) => {
            for v in &mut views {
                v.node_id = node_id.to_string();
                v.live = true;
            }
            views
        }
        Err(e) => {
            tracing::warn!(%node_id, error = %e, "unreadable worker sessions in a nodes row; skipped");
            Vec::new()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(worker: &str) -> SessionView {
        SessionView {
            worker_id: worker.into(),
            session_id: format!("{worker}-s1"),
            identity: Some("svc-a".into()),
            runtime: "rust".into(),
            sdk: "orbit-worker/0.1".into(),
            tasks: vec![("charge".into(), "1".into())],
            labels: HashMap::from([("zone".into(), "a".into())]),
            max_concurrency: 8,
            in_flight: 2,
            credits: 6,
            draining: false,
            last_seen_ms: 1_700_000_000_500,
            connected_at_ms: 1_700_000_000_000,
            node_id: "frontend-1".into(),
            live: true,
        }
    }

    #[test]
    fn a_report_reads_back_with_the_reporting_node() {
        let text = serde_json::to_string(&vec![view("w1")]).expect("json");
        assert!(!text.contains("frontend-1"), "the node id is the row's, not repeated: {text}");
        let mut back = parse("frontend-2", &text);
        assert_eq!(back.len(), 1);
        assert_eq!(back[0].node_id, "frontend-2");
        back[0].node_id = "frontend-1".into();
        assert_eq!(back[0], view("w1"));
    }

    #[test]
    fn an_unreadable_report_is_skipped() {
        assert!(parse("frontend-2", "{not json").is_empty());
        assert!(parse("frontend-2", r#"[{"s":"no worker id"}]"#).is_empty());
    }
}
