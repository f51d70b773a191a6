//! `orbit bench --replay`: after the run, every execution the benchmark completed is
//! replayed against the server's decider (`AdminService.Replay`, [`IN_FLIGHT`] at a time),
//! so a benchmark run also shows that what the hot path recorded is what the pure decider
//! decides (issue 25: the replay check on every benchmark's executions).

use orbit_api::v1 as pb;
use orbit_api::v1::admin_service_client::AdminServiceClient;
use orbit_cli::client::Transport;
use serde_json::{json, Value};
use std::sync::Arc;
use tokio::sync::Semaphore;

/// Replays in flight at once.
const IN_FLIGHT: usize = 16;

/// What the replays found.
#[derive(Debug, Default)]
pub struct Replayed {
    /// Executions whose history the decider reproduced.
    pub reproduced: u64,
    /// Events replayed, over all of them.
    pub events: u64,
    /// (execution, where and how it diverged).
    pub diverged: Vec<(String, String)>,
    /// (execution, the error the call returned).
    pub failed: Vec<(String, String)>,
}

impl Replayed {
    /// True when every execution was reproduced.
    pub fn clean(&self) -> bool {
        self.diverged.is_empty() && self.failed.is_empty()
    }

    /// The report's JSON section.
    pub fn json(&self) -> Value {
        let pairs = |v: &[(String, String)]| -> Vec<Value> {
            v.iter().map(|(id, what)| json!({ "execution_id": id, "detail": what })).collect()
        };
        json!({
            "reproduced": self.reproduced,
            "events": self.events,
            "diverged": pairs(&self.diverged),
            "failed": pairs(&self.failed),
        })
    }

    /// The report's lines.
    pub fn lines(&self) -> Vec<String> {
        let total = self.reproduced + (self.diverged.len() + self.failed.len()) as u64;
        let mut out = vec![format!(
            "  replay       {} of {total} executions reproduced by the server's decider ({} events)",
            self.reproduced, self.events
        )];
        for (id, what) in self.diverged.iter().take(5) {
            out.push(format!("               DIVERGED {id}: {what}"));
        }
        for (id, what) in self.failed.iter().take(5) {
            out.push(format!("               not replayed {id}: {what}"));
        }
        out
    }
}

/// Replays the latest run of each of `ids` through `channel`.
pub async fn run(channel: Transport, ids: Vec<String>) -> Replayed {
    let gate = Arc::new(Semaphore::new(IN_FLIGHT));
    let mut calls = Vec::with_capacity(ids.len());
    for id in ids {
        let (gate, mut client) = (gate.clone(), AdminServiceClient::new(channel.clone()));
        calls.push(tokio::spawn(async move {
            let _permit = gate.acquire_owned().await;
            let request = pb::ReplayRequest { execution_id: id.clone(), run: 0 };
            (id, client.replay(request).await.map(tonic::Response::into_inner))
        }));
    }
    let mut replayed = Replayed::default();
    for call in calls {
        let Ok((id, answer)) = call.await else { continue };
        match answer {
            Ok(r) if r.ok => {
                replayed.reproduced += 1;
                replayed.events += r.events_checked;
            }
            Ok(r) => {
                let d = r.divergence.unwrap_or_default();
                replayed
                    .diverged
                    .push((id, format!("run {} at seq {}: {}", r.run, d.seq, d.message)));
            }
            Err(status) => replayed.failed.push((id, status.message().to_string())),
        }
    }
    replayed
}

#[cfg(test)]
mod tests {
    use super::Replayed;

    #[test]
    fn a_divergence_or_a_failed_call_is_not_clean_and_is_named() {
        let mut r = Replayed { reproduced: 3, events: 36, ..Replayed::default() };
        assert!(r.clean());
        assert_eq!(
            r.lines(),
            ["  replay       3 of 3 executions reproduced by the server's decider (36 events)"]
        );
        r.diverged.push(("bench-1".into(), "run 1 at seq 4: differs".into()));
        r.failed.push(("bench-2".into(), "not found".into()));
        assert!(!r.clean());
        let lines = r.lines();
        assert!(lines[0].contains("3 of 5 executions"), "{lines:?}");
        assert!(lines[1].contains("DIVERGED bench-1: run 1 at seq 4"), "{lines:?}");
        assert!(lines[2].contains("not replayed bench-2: not found"), "{lines:?}");
        assert_eq!(r.json()["diverged"][0]["execution_id"], "bench-1");
    }
}
