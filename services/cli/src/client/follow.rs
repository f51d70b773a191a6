//! Following a run as it executes (`execution watch`, `execution start --wait`).
//!
//! A watch stream that breaks with UNAVAILABLE is resumed after the last event seen, so no
//! event is shown twice and none is skipped; a run that continues as new can be followed
//! into the next one.

use std::time::Duration;

use orbit_api::v1::watch_execution_response::Kind;
use orbit_api::v1::{ExecutionResult, ExecutionStatus, WatchExecutionRequest};
use serde_json::Value as Json;
use tonic::{Code, Status};

use super::convert::{event_json, event_row};
use super::error::Failure;
use super::output::{or_dash, pretty, Fields};
use super::Client;

/// How often following a run reconnects after a broken stream before giving up.
const MAX_RESUMES: u32 = 5;

/// Follows a run until it closes and returns its result, calling `on_event` for each event
/// (none with `result_only`). With `follow_continue_as_new`, a run that continues as new is
/// followed into the next one. A stream that breaks with UNAVAILABLE is resumed after the
/// last event seen, up to [`MAX_RESUMES`] times in a row.
pub async fn follow_run(
    client: &mut Client,
    execution_id: &str,
    run: u32,
    result_only: bool,
    follow_continue_as_new: bool,
    mut on_event: impl FnMut(Json),
) -> Result<ExecutionResult, Failure> {
    let (mut run, mut after_seq, mut resumes) = (run, 0_u64, 0_u32);
    loop {
        let request = WatchExecutionRequest {
            execution_id: execution_id.to_owned(),
            run,
            after_seq,
            result_only,
            follow_continue_as_new,
        };
        let broken = match client.watch_execution(request).await {
            Err(status) => status,
            Ok(response) => {
                let mut stream = response.into_inner();
                loop {
                    match stream.message().await {
                        Ok(Some(message)) => match message.kind {
                            Some(Kind::Event(event)) => {
                                resumes = 0;
                                if event.run != run {
                                    run = event.run;
                                    after_seq = 0;
                                }
                                after_seq = after_seq.max(event.seq);
                                on_event(event_json(event));
                            }
                            Some(Kind::Result(result)) => {
                                let continued = result.status() == ExecutionStatus::ContinuedAsNew;
                                if !(continued && follow_continue_as_new) {
                                    return Ok(result);
                                }
                                // The stream goes on with the next run's events.
                                run = result.run + 1;
                                after_seq = 0;
                            }
                            None => {}
                        },
                        Ok(None) => {
                            break Status::unavailable("the watch stream ended before the result");
                        }
                        Err(status) => break status,
                    }
                }
            }
        };
        if broken.code() != Code::Unavailable || resumes >= MAX_RESUMES {
            return Err(Failure::Rpc(broken));
        }
        resumes += 1;
        eprintln!("watch stream broken ({}); resuming after seq {after_seq}", broken.message());
        tokio::time::sleep(Duration::from_millis(500) * resumes).await;
    }
}

/// One line per streamed event: `#seq time EventType step payload`.
pub fn event_line(event: &Json) -> String {
    let cells = event_row(event);
    let step = or_dash(&cells[3]);
    format!("#{:<5} {}  {:<24} {step}  {}\n", cells[0], cells[1], cells[2], cells[4])
        .replace("  \n", "\n")
}

/// The `key: value` lines of a closed run's result.
pub fn result_text(result: &Json) -> Fields {
    let mut fields = Fields::new();
    fields.add("status", result["status"].as_str().unwrap_or("?"));
    fields.add("run", &result["run"]);
    fields.add("closed", result["closed_at"].as_str().unwrap_or("-"));
    if result["status"] == "COMPLETED" {
        fields.add("output", pretty(&result["output"]));
    }
    if let Some(error) = result["error"].as_object() {
        let code = error.get("code").and_then(Json::as_str).unwrap_or("");
        let message = error.get("message").and_then(Json::as_str).unwrap_or("");
        fields.add("error", format!("{code}: {message}"));
        if let Some(details) = error.get("details").filter(|d| !d.is_null()) {
            fields.add("details", pretty(details));
        }
    }
    fields
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn results_render_output_or_error() {
        let ok = json!({"status": "COMPLETED", "run": 1, "output": {"total": 42}, "error": null,
                        "closed_at": "2024-01-01T00:00:00Z"});
        let text = result_text(&ok).render();
        assert!(text.contains("status: COMPLETED"), "{text}");
        assert!(text.contains("\"total\": 42"), "{text}");
        let failed = json!({"status": "FAILED", "run": 2, "output": null, "closed_at": null,
                            "error": {"code": "CARD_DECLINED", "message": "no", "details": null}});
        let text = result_text(&failed).render();
        assert!(text.contains("error:  CARD_DECLINED: no"), "{text}");
        assert!(!text.contains("output"), "{text}");
    }

    #[test]
    fn event_lines_are_compact() {
        let event = json!({"seq": 7, "event_type": "WorkflowStarted", "step": "",
                           "timestamp": "2024-01-01T00:00:00Z", "payload": {}});
        assert_eq!(event_line(&event), "#7     2024-01-01T00:00:00Z  WorkflowStarted          -\n");
    }
}
