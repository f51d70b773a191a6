//! `execution count`: how many executions a list query matches, in total or grouped by
//! up to three attributes (`CountExecutions`). A refused `--query` is shown with a caret
//! under the place the server points at, as `execution list` does. And `execution
//! attributes`: what a query may name (`ListSearchAttributes`, every page).

use orbit_api::v1::{CountExecutionsRequest, ListSearchAttributesRequest, SearchAttribute};
use orbit_server_kit::error::OrbitError;
use serde_json::json;

use super::error::Failure;
use super::listing::caret;
use super::output::{print_json, print_text, Format, Table};
use super::Client;

/// `execution count`: the total, or one row per group (largest first) and the total.
pub async fn count(
    mut client: Client,
    format: Format,
    query: Option<String>,
    group_by: Vec<String>,
) -> Result<(), Failure> {
    let query = query.unwrap_or_default();
    let request = CountExecutionsRequest { query: query.clone(), group_by: group_by.clone() };
    let counts = match client.count_executions(request).await {
        Ok(counts) => counts.into_inner(),
        Err(status) => {
            if let Some((_, line, column)) =
                OrbitError::from_status(&status).and_then(|e| e.query_position())
            {
                eprint!("{}", caret(&query, line, column));
            }
            return Err(status.into());
        }
    };
    match format {
        Format::Json => print_json(&json!({
            "count": counts.count,
            "groups": counts.groups.iter().map(|g| {
                let values: serde_json::Map<String, serde_json::Value> = group_by
                    .iter()
                    .zip(&g.values)
                    .map(|(name, v)| (name.clone(), json!(v)))
                    .collect();
                json!({"values": values, "count": g.count})
            }).collect::<Vec<_>>(),
        })),
        Format::Human if group_by.is_empty() => print_text(&format!("{}\n", counts.count)),
        Format::Human => {
            let mut header: Vec<String> = group_by.iter().map(|g| g.to_uppercase()).collect();
            header.push("COUNT".into());
            let header: Vec<&str> = header.iter().map(String::as_str).collect();
            let mut table = Table::new(&header);
            for g in &counts.groups {
                let mut row: Vec<String> = g
                    .values
                    .iter()
                    .map(|v| if v.is_empty() { "-".into() } else { v.clone() })
                    .collect();
                row.push(g.count.to_string());
                table.row(row);
            }
            let mut total: Vec<String> = vec![String::new(); group_by.len()];
            if let Some(first) = total.first_mut() {
                *first = "TOTAL".into();
            }
            total.push(counts.count.to_string());
            table.row(total);
            print_text(&table.render());
        }
    }
    Ok(())
}

/// `execution attributes`: NAME, TYPE, KIND (system or the declaring workflow).
pub async fn attributes(mut client: Client, format: Format) -> Result<(), Failure> {
    let mut all: Vec<SearchAttribute> = Vec::new();
    let mut page_token = String::new();
    loop {
        let request = ListSearchAttributesRequest { page_size: 1000, page_token };
        let page = client.list_search_attributes(request).await?.into_inner();
        all.extend(page.attributes);
        if page.next_page_token.is_empty() {
            break;
        }
        page_token = page.next_page_token;
    }
    match format {
        Format::Json => print_json(&json!(all
            .iter()
            .map(|a| json!({
                "name": a.name, "type": a.r#type, "system": a.system, "workflow": a.workflow,
            }))
            .collect::<Vec<_>>())),
        Format::Human => {
            let mut table = Table::new(&["NAME", "TYPE", "DECLARED BY"]);
            for a in &all {
                let by = if a.system { "(system)".to_string() } else { a.workflow.clone() };
                table.row(vec![a.name.clone(), a.r#type.clone(), by]);
            }
            print_text(&table.render());
        }
    }
    Ok(())
}
