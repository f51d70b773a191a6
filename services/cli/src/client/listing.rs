//! Paged reads of executions: `execution history` (every page of one run) and
//! `execution list` (pages until `--limit`).

use clap::ValueEnum;
use orbit_api::v1::{ExecutionStatus, GetHistoryRequest, ListExecutionsRequest};
use orbit_server_kit::error::OrbitError;
use serde_json::json;

use super::convert::{event_json, event_row, info_json, status_name};
use super::error::Failure;
use super::input::WorkflowRef;
use super::output::{print_json, print_text, ts, Format, Table};
use super::Client;

/// An execution status accepted by `execution list --status`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum StatusFilter {
    Running,
    Compensating,
    Completed,
    Failed,
    Cancelled,
    #[value(alias = "timed_out")]
    TimedOut,
    #[value(alias = "continued_as_new")]
    ContinuedAsNew,
    /// Parked by the poison quarantine (`orbit execution resume|terminate`).
    Suspended,
}

impl From<StatusFilter> for ExecutionStatus {
    fn from(filter: StatusFilter) -> Self {
        match filter {
            StatusFilter::Running => ExecutionStatus::Running,
            StatusFilter::Compensating => ExecutionStatus::Compensating,
            StatusFilter::Completed => ExecutionStatus::Completed,
            StatusFilter::Failed => ExecutionStatus::Failed,
            StatusFilter::Cancelled => ExecutionStatus::Cancelled,
            StatusFilter::TimedOut => ExecutionStatus::TimedOut,
            StatusFilter::ContinuedAsNew => ExecutionStatus::ContinuedAsNew,
            StatusFilter::Suspended => ExecutionStatus::Suspended,
        }
    }
}

/// `execution history`: every page of one run's history.
pub async fn history(
    mut client: Client,
    format: Format,
    id: String,
    run: u32,
) -> Result<(), Failure> {
    let mut events = Vec::new();
    let mut page_token = String::new();
    let mut resolved_run = run;
    loop {
        let request = GetHistoryRequest {
            execution_id: id.clone(),
            run: resolved_run,
            page_size: 10_000,
            page_token,
        };
        let page = client.get_history(request).await?.into_inner();
        // Later pages ask for the run the first page resolved, not "the latest".
        resolved_run = page.run;
        events.extend(page.events.into_iter().map(event_json));
        if page.next_page_token.is_empty() {
            break;
        }
        page_token = page.next_page_token;
    }
    match format {
        Format::Json => {
            print_json(&json!({"execution_id": id, "run": resolved_run, "events": events}));
        }
        Format::Human => {
            let mut table = Table::new(&["SEQ", "TIME", "EVENT", "STEP", "PAYLOAD"]);
            for event in &events {
                table.row(event_row(event));
            }
            print_text(&table.render());
        }
    }
    Ok(())
}

/// What `execution list` filters on.
pub struct ListFilters {
    /// `--status` (any of these).
    pub statuses: Vec<StatusFilter>,
    /// `--workflow NAME[@VERSION]`.
    pub workflow: Option<WorkflowRef>,
    /// `--query`.
    pub query: Option<String>,
}

/// `execution list`: pages until `limit` executions or the last page. A refused `--query`
/// is shown with a caret under the place the server points at.
pub async fn list(
    mut client: Client,
    format: Format,
    filters: ListFilters,
    limit: u32,
) -> Result<(), Failure> {
    let ListFilters { statuses, workflow, query } = filters;
    let query = query.unwrap_or_default();
    let statuses: Vec<i32> =
        statuses.into_iter().map(|s| ExecutionStatus::from(s).into()).collect();
    let (workflow, version) =
        workflow.map_or_else(Default::default, |w| (w.name.clone(), w.version_or_empty()));
    let mut executions = Vec::new();
    let mut page_token = String::new();
    while executions.len() < limit as usize {
        let request = ListExecutionsRequest {
            statuses: statuses.clone(),
            workflow: workflow.clone(),
            version: version.clone(),
            page_size: (limit - u32::try_from(executions.len()).unwrap_or(limit)).min(1000),
            page_token,
            query: query.clone(),
            ..ListExecutionsRequest::default()
        };
        let page = match client.list_executions(request).await {
            Ok(page) => page.into_inner(),
            Err(status) => {
                if let Some((_, line, column)) =
                    OrbitError::from_status(&status).and_then(|e| e.query_position())
                {
                    eprint!("{}", caret(&query, line, column));
                }
                return Err(status.into());
            }
        };
        executions.extend(page.executions);
        if page.next_page_token.is_empty() {
            break;
        }
        page_token = page.next_page_token;
    }
    executions.truncate(limit as usize);
    match format {
        Format::Json => print_json(&json!({
            "executions": executions.iter().map(info_json).collect::<Vec<_>>()
        })),
        Format::Human => {
            let mut table = Table::new(&[
                "EXECUTION",
                "WORKFLOW",
                "RUN",
                "STATUS",
                "CREATED",
                "CLOSED",
                "FAILED STEP",
                "ERROR",
            ]);
            for e in &executions {
                table.row(vec![
                    e.execution_id.clone(),
                    format!("{}@{}", e.workflow, e.version),
                    e.run.to_string(),
                    status_name(e.status()),
                    ts(e.created_at.as_ref()),
                    ts(e.closed_at.as_ref()),
                    e.failed_step.clone(),
                    e.error_code.clone(),
                ]);
            }
            print_text(&table.render());
        }
    }
    Ok(())
}

/// The query's `line` (1-based) and a caret under its `column` (1-based, in characters),
/// each indented two spaces.
pub(super) fn caret(query: &str, line: usize, column: usize) -> String {
    let text = query.lines().nth(line.saturating_sub(1)).unwrap_or("");
    let pad: String = text
        .chars()
        .take(column.saturating_sub(1))
        .map(|c| if c == '\t' { '\t' } else { ' ' })
        .collect();
    format!("  {text}\n  {pad}^\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_filters_cover_every_terminal_and_live_status() {
        let names: Vec<String> = StatusFilter::value_variants()
            .iter()
            .map(|f| status_name(ExecutionStatus::from(*f)))
            .collect();
        assert_eq!(
            names,
            [
                "RUNNING",
                "COMPENSATING",
                "COMPLETED",
                "FAILED",
                "CANCELLED",
                "TIMED_OUT",
                "CONTINUED_AS_NEW",
                "SUSPENDED"
            ]
        );
        assert_eq!(StatusFilter::from_str("TIMED_OUT", true), Ok(StatusFilter::TimedOut));
        assert_eq!(StatusFilter::from_str("timed-out", true), Ok(StatusFilter::TimedOut));
    }

    #[test]
    fn the_caret_stands_under_the_column() {
        assert_eq!(caret("created > 5", 1, 11), "  created > 5\n            ^\n");
        assert_eq!(caret("a = 1 AND\nb == 2", 2, 4), "  b == 2\n     ^\n");
        // Columns count characters, not bytes.
        assert_eq!(caret("é = 'x' AND ü", 1, 13), "  é = 'x' AND ü\n              ^\n");
        assert_eq!(caret("", 1, 1), "  \n  ^\n");
    }
}
