//! `orbit workflow register | list | get`: workflow definitions over `WorkflowService`.
//!
//! The client does not parse definitions: the server validates them and answers
//! `INVALID_DEFINITION` with one field violation per problem, which [`super::error`] prints.

use clap::{Args, Subcommand};
use orbit_api::v1::{
    GetWorkflowRequest, ListWorkflowsRequest, RegisterWorkflowRequest, WorkflowDefinition,
};
use serde_json::{json, Value as Json};

use super::error::Failure;
use super::input::{parse_workflow_ref, read_definition, WorkflowRef};
use super::output::{pretty, print_json, print_text, ts, ts_json, Fields, Format, Table};
use super::ConnectArgs;

/// `orbit workflow ...`
#[derive(Args, Debug)]
pub struct WorkflowArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
    #[command(subcommand)]
    command: WorkflowCommand,
}

#[derive(Subcommand, Debug)]
enum WorkflowCommand {
    /// Register a workflow definition from a YAML or JSON file.
    ///
    /// A (name, version) is immutable: registering the same document again is a no-op
    /// reported as `unchanged`, so the command is safe to rerun. An invalid document prints
    /// every problem as `path: [CODE] message` and exits 2; a different document under an
    /// existing (name, version) fails with DEFINITION_CONFLICT.
    #[command(after_long_help = long_help!(
        "orbit workflow register orders.yaml",
        "cat orders.json | orbit workflow register -",
    ))]
    Register {
        /// The definition file (`.yaml`, `.yml` or `.json`; `-` reads stdin).
        #[arg(value_name = "FILE")]
        file: String,
    },
    /// List registered workflow definitions, by name then registration time.
    #[command(after_long_help = long_help!(
        "orbit workflow list",
        "orbit workflow list --name orders --output json",
    ))]
    List {
        /// Only versions of this workflow.
        #[arg(long, value_name = "NAME")]
        name: Option<String>,
    },
    /// Print a registered definition's document, as the server stores it.
    ///
    /// Without `@VERSION`, the most recently registered version. With `--output json` the
    /// document comes with its name, version, hash and registration time.
    #[command(after_long_help = long_help!(
        "orbit workflow get orders",
        "orbit workflow get orders@1 > orders-v1.yaml",
    ))]
    Get {
        /// The workflow, as NAME or NAME@VERSION.
        #[arg(value_name = "NAME[@VERSION]", value_parser = parse_workflow_ref)]
        workflow: WorkflowRef,
    },
}

/// Runs a `workflow` subcommand.
pub async fn run(args: WorkflowArgs) -> Result<(), Failure> {
    let format = args.connect.output;
    match args.command {
        WorkflowCommand::Register { file } => {
            // Read before connecting: a typo in the path is a usage error, not exit 5.
            let (document, format_hint) = read_definition(&file)?;
            let request = RegisterWorkflowRequest { document, format: format_hint.into() };
            let response = args
                .connect
                .workflow_client()
                .await?
                .register_workflow(request)
                .await?
                .into_inner();
            let status = if response.created { "created" } else { "unchanged" };
            // On stderr: the definition is registered, the output stays what scripts parse.
            for warning in &response.warnings {
                eprintln!("warning: {warning}");
            }
            match format {
                Format::Json => print_json(&json!({
                    "name": response.name,
                    "version": response.version,
                    "definition_hash": response.definition_hash,
                    "created": response.created,
                    "created_at": ts_json(response.created_at.as_ref()),
                })),
                Format::Human => print_text(
                    &Fields::new()
                        .add("name", &response.name)
                        .add("version", &response.version)
                        .add("hash", &response.definition_hash)
                        .add("status", status)
                        .add("registered", ts(response.created_at.as_ref()))
                        .render(),
                ),
            }
        }
        WorkflowCommand::List { name } => {
            let mut client = args.connect.workflow_client().await?;
            let mut workflows = Vec::new();
            let mut page_token = String::new();
            loop {
                let request = ListWorkflowsRequest {
                    name: name.clone().unwrap_or_default(),
                    include_document: false,
                    page_size: 1000,
                    page_token,
                };
                let page = client.list_workflows(request).await?.into_inner();
                workflows.extend(page.workflows);
                if page.next_page_token.is_empty() {
                    break;
                }
                page_token = page.next_page_token;
            }
            match format {
                Format::Json => print_json(&json!({
                    "workflows": workflows.iter().map(|w| definition_json(w, false)).collect::<Vec<_>>()
                })),
                Format::Human => {
                    let mut table =
                        Table::new(&["NAME", "VERSION", "LATEST", "HASH", "REGISTERED"]);
                    for w in &workflows {
                        table.row(vec![
                            w.name.clone(),
                            w.version.clone(),
                            if w.latest { "yes" } else { "" }.to_string(),
                            w.definition_hash.clone(),
                            ts(w.created_at.as_ref()),
                        ]);
                    }
                    print_text(&table.render());
                }
            }
        }
        WorkflowCommand::Get { workflow } => {
            let request = GetWorkflowRequest {
                name: workflow.name.clone(),
                version: workflow.version_or_empty(),
            };
            let response =
                args.connect.workflow_client().await?.get_workflow(request).await?.into_inner();
            let definition = response.workflow.ok_or_else(|| {
                Failure::Rpc(tonic::Status::internal("GetWorkflow returned no workflow"))
            })?;
            match format {
                Format::Json => print_json(&definition_json(&definition, true)),
                Format::Human => {
                    // The server may store the normalised JSON form on one line.
                    let mut document = serde_json::from_str::<Json>(&definition.document)
                        .map_or(definition.document, |value| pretty(&value));
                    if !document.ends_with('\n') {
                        document.push('\n');
                    }
                    print_text(&document);
                }
            }
        }
    }
    Ok(())
}

/// A definition as JSON; the document only when asked for.
fn definition_json(definition: &WorkflowDefinition, with_document: bool) -> Json {
    let mut value = json!({
        "name": definition.name,
        "version": definition.version,
        "definition_hash": definition.definition_hash,
        "created_at": ts_json(definition.created_at.as_ref()),
        "latest": definition.latest,
    });
    if with_document {
        value["document"] = Json::String(definition.document.clone());
    }
    value
}
