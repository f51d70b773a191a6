//! The client half of the `orbit` binary: `workflow`, `execution`, `worker`, `cluster`,
//! `replay`, `schedule`, `batch` and `admin`, each a thin layer over one public gRPC
//! service of a running frontend.
//!
//! Every command connects once, makes its calls, prints its result (human text or one JSON
//! document, see [`output`]) and returns `Result<(), Failure>`; [`run`] prints a failure
//! and maps it to the exit code in exactly one place ([`error::exit_code`]). Parsing of
//! user input that needs more than clap lives in [`input`] and is pure.

/// The exit-code table printed at the end of every command's `--help`.
macro_rules! exit_codes_help {
    () => {
        "\
Exit codes:
  0  success
  1  the command ran but its subject did not succeed: with `execution start --wait` the
     execution ended FAILED, CANCELLED or TIMED_OUT; `replay` found a divergence;
     `batch start --wait`: the batch did not complete, or an execution refused
  2  usage error or invalid input: bad arguments, unreadable file, malformed JSON, or a
     server error INVALID_ARGUMENT, INVALID_DEFINITION, INVALID_INPUT, INVALID_QUERY,
     SIGNAL_PAYLOAD_INVALID, PAYLOAD_TOO_LARGE, PAYLOAD_TOO_DEEP
  3  not found: WORKFLOW_NOT_FOUND, EXECUTION_NOT_FOUND, SCHEDULE_NOT_FOUND,
     BATCH_NOT_FOUND, RATE_LIMIT_NOT_FOUND, UNKNOWN_SIGNAL, UNKNOWN_QUERY, UNKNOWN_UPDATE,
     UNKNOWN_TOKEN
  4  any other server error (DEFINITION_CONFLICT, EXECUTION_FINISHED, QUERY_FAILED,
     EXPRESSION_LIMIT, EXECUTION_NOT_SUSPENDED, EXECUTION_NOT_FINISHED, REQUEST_ID_REUSED,
     MIGRATION_UNSAFE, RESET_POINT_INVALID, EXECUTION_PENDING_START, WORKER_MISMATCH,
     SEARCH_ATTRIBUTE_CONFLICT, PERMISSION_DENIED, STORAGE_ERROR, ...)
  5  cannot reach the server: connection refused, transport error, UNAVAILABLE

Errors go to stderr as `error: <CODE>: <message>`, CODE being the Orbit error code (or the
gRPC status code when the server sent none)."
    };
}

/// The `--help` epilogue of a command: its examples, then the exit-code table.
macro_rules! long_help {
    ($($example:literal),+ $(,)?) => {
        concat!("Examples:\n", $("  ", $example, "\n",)+ "\n", exit_codes_help!())
    };
}

mod admin;
mod batch;
mod batch_view;
mod convert;
mod counting;
mod describe;
mod error;
mod execution;
mod execution_args;
mod follow;
mod input;
mod listing;
mod migrate;
mod output;
mod rate_limit;
mod readiness;
mod restore;
mod schedule;
mod search;
mod token;
mod workflow;

use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};
use orbit_api::v1::admin_service_client::AdminServiceClient;
use orbit_api::v1::workflow_service_client::WorkflowServiceClient;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use tonic::{Request, Status};

use error::Failure;
use output::Format;

/// The commands that talk to a running server, flattened into `orbit`'s top level.
#[derive(Subcommand, Debug)]
pub enum ClientCommand {
    /// Register, list and read workflow definitions.
    #[command(after_long_help = long_help!(
        "orbit workflow register orders.yaml",
        "orbit workflow list",
        "orbit workflow get orders@1",
    ))]
    Workflow(workflow::WorkflowArgs),
    /// Start, inspect, follow, signal, query and cancel executions.
    #[command(after_long_help = long_help!(
        "orbit execution start orders --input '{\"amount\": 42}' --wait",
        "orbit execution describe order-1001",
        "orbit execution list --status running",
    ))]
    Execution(execution::ExecutionArgs),
    /// List the workers connected to the frontend you talk to (sessions are not shared
    /// between frontends).
    #[command(after_long_help = long_help!("orbit worker list --online"))]
    Worker(admin::WorkerArgs),
    /// Show the cluster's nodes and their liveness.
    #[command(after_long_help = long_help!("orbit cluster status --include-dead"))]
    Cluster(admin::ClusterArgs),
    /// Check that this server's decider reproduces an execution's history.
    ///
    /// Replays the stored history of one run through the decider of the server you talk to
    /// and reports the first event it would decide differently. Run it against a server of
    /// the new version before an upgrade meets running executions. Prints `OK` or the
    /// divergence; a divergence exits 1.
    #[command(after_long_help = long_help!(
        "orbit replay order-1001",
        "orbit replay order-1001 --run 2 --output json",
    ))]
    Replay(admin::ReplayArgs),
    /// Create and manage schedules: cron and interval starts of a workflow.
    Schedule(schedule::ScheduleArgs),
    /// Run server-side batch jobs: migrate every selected execution to another version,
    /// at a bounded rate, resumable after any crash (docs/evolving.md, "Batches").
    Batch(batch::BatchArgs),
    /// Server-wide settings: the named rate limits steps take from (`admin rate-limit`).
    Admin(rate_limit::AdminArgs),
    /// Create a bearer token for an identity: prints the token once and the identities-file
    /// entry holding only its SHA-256 hash. Talks to no server.
    Token(token::TokenArgs),
}

/// Where the server is and how to print, shared by every client command.
#[derive(Args, Debug, Clone)]
pub struct ConnectArgs {
    /// The frontend's gRPC address: `host:port` (dialled `https://` with --tls-ca, else
    /// `http://`), or a URL with its scheme.
    #[arg(
        long,
        global = true,
        env = "ORBIT_ADDRESS",
        default_value = "127.0.0.1:7233",
        value_name = "URL"
    )]
    pub address: String,
    /// A bearer token sent as `authorization` metadata with every call. Needed when the
    /// server enforces an identities file (`orbit dev --identities`, docs/security.md);
    /// `orbit token new` makes one.
    #[arg(long, global = true, env = "ORBIT_TOKEN", hide_env_values = true, value_name = "TOKEN")]
    pub token: Option<String>,
    /// How to print the result: `human` (tables, `key: value` lines) or `json` (one JSON
    /// document on stdout).
    #[arg(long, global = true, value_enum, default_value_t = Format::Human, value_name = "FORMAT")]
    pub output: Format,
    /// TLS of the connection to the server (`--tls-ca`, `--tls-client-cert`, ...).
    #[command(flatten)]
    pub tls: crate::flags::ClientTlsArgs,
}

/// The gRPC transport every client uses: a channel with the bearer token added to each call.
pub type Transport = InterceptedService<Channel, Auth>;

/// The client every execution command uses.
pub type Client = WorkflowServiceClient<Transport>;

/// Adds `authorization: Bearer <token>` to every request when a token is configured.
#[derive(Clone, Debug)]
pub struct Auth(Option<MetadataValue<Ascii>>);

impl Auth {
    /// The interceptor for `token` (none: calls go without `authorization`). Shared by the
    /// CLI commands and `orbit bench`.
    ///
    /// # Errors
    ///
    /// A token that is not printable ASCII (it cannot be gRPC metadata).
    pub fn bearer(token: Option<&str>) -> Result<Auth, String> {
        token
            .map(|t| format!("Bearer {t}").parse::<MetadataValue<Ascii>>())
            .transpose()
            .map(Auth)
            .map_err(|_| "--token must be printable ASCII".to_owned())
    }
}

impl tonic::service::Interceptor for Auth {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        if let Some(bearer) = &self.0 {
            request.metadata_mut().insert("authorization", bearer.clone());
        }
        Ok(request)
    }
}

/// How long to wait for the TCP/HTTP2 connection before reporting the server unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Large histories and documents may exceed tonic's 4 MiB default.
const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;

impl ConnectArgs {
    /// The address with a scheme: `host:port` becomes `http://host:port`, or
    /// `https://host:port` with TLS options.
    fn url(&self) -> String {
        self.tls.options().url(&self.address)
    }

    /// Connects to the server.
    ///
    /// # Errors
    ///
    /// [`Failure::Usage`] for a malformed address or token, [`Failure::Connect`] when the
    /// server cannot be reached.
    pub async fn connect(&self) -> Result<Transport, Failure> {
        let url = self.url();
        let auth = Auth::bearer(self.token.as_deref()).map_err(Failure::Usage)?;
        let endpoint = self
            .tls
            .options()
            .endpoint(&self.address)
            .map_err(|e| Failure::Usage(format!("--address {url}: {e}")))?
            .connect_timeout(CONNECT_TIMEOUT);
        let channel = endpoint
            .connect()
            .await
            .map_err(|e| Failure::Connect { address: url, reason: error_chain(&e) })?;
        Ok(InterceptedService::new(channel, auth))
    }

    /// A `WorkflowService` client for the server.
    ///
    /// # Errors
    ///
    /// As [`ConnectArgs::connect`].
    pub async fn workflow_client(&self) -> Result<WorkflowServiceClient<Transport>, Failure> {
        Ok(WorkflowServiceClient::new(self.connect().await?)
            .max_decoding_message_size(MAX_MESSAGE_BYTES))
    }

    /// An `AdminService` client for the server.
    ///
    /// # Errors
    ///
    /// As [`ConnectArgs::connect`].
    pub async fn admin_client(&self) -> Result<AdminServiceClient<Transport>, Failure> {
        Ok(AdminServiceClient::new(self.connect().await?)
            .max_decoding_message_size(MAX_MESSAGE_BYTES))
    }
}

/// An error and its sources on one line (`transport error: connection refused`).
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// Runs one client command and returns the process exit code (see [`error::exit_code`]).
pub async fn run(cmd: ClientCommand) -> ExitCode {
    let (format, result) = match cmd {
        ClientCommand::Workflow(args) => (args.connect.output, workflow::run(args).await),
        ClientCommand::Execution(args) => (args.connect.output, execution::run(args).await),
        ClientCommand::Worker(args) => (args.connect.output, admin::run_worker(args).await),
        ClientCommand::Cluster(args) => (args.connect.output, admin::run_cluster(args).await),
        ClientCommand::Replay(args) => (args.connect.output, admin::run_replay(args).await),
        ClientCommand::Schedule(args) => (args.connect.output, schedule::run(args).await),
        ClientCommand::Batch(args) => (args.connect.output, batch::run(args).await),
        ClientCommand::Admin(args) => (args.connect.output, rate_limit::run(args).await),
        ClientCommand::Token(args) => (args.output, token::run(&args)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            error::report(&failure, format);
            ExitCode::from(error::exit_code(&failure))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser};

    /// A stand-in for `orbit`'s top-level parser.
    #[derive(Parser, Debug)]
    #[command(name = "orbit")]
    struct Cli {
        #[command(subcommand)]
        command: ClientCommand,
    }

    fn parse(args: &[&str]) -> Result<ClientCommand, clap::Error> {
        Cli::try_parse_from(std::iter::once("orbit").chain(args.iter().copied())).map(|c| c.command)
    }

    #[test]
    fn the_command_tree_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn global_options_work_after_the_subcommand() {
        let cmd = parse(&["execution", "describe", "e1", "--output", "json", "--address", "h:1"])
            .unwrap();
        let ClientCommand::Execution(args) = cmd else { panic!("{cmd:?}") };
        assert_eq!(args.connect.output, Format::Json);
        assert_eq!(args.connect.url(), "http://h:1");
    }

    #[test]
    fn workflow_refs_are_validated_by_clap() {
        let err = parse(&["execution", "start", "orders@", "--input", "{}"]).unwrap_err();
        assert!(err.to_string().contains("empty version"), "{err}");
        assert_eq!(err.exit_code(), 2);
    }

    #[test]
    fn reset_and_fork_explain_what_is_kept_and_run_again() {
        let mut cli = Cli::command();
        let execution = cli.find_subcommand_mut("execution").expect("execution");
        for name in ["reset", "fork"] {
            let help = execution
                .find_subcommand_mut(name)
                .unwrap_or_else(|| panic!("execution {name}"))
                .render_long_help()
                .to_string();
            for words in ["Kept, not run again", "Run again", "--dry-run", "orbit execution"] {
                assert!(help.contains(words), "execution {name} --help lacks {words:?}:\n{help}");
            }
        }
        let reset = parse(&["execution", "reset", "e1", "--to-step", "a", "--output", "json"]);
        let Ok(ClientCommand::Execution(args)) = reset else { panic!("{reset:?}") };
        assert_eq!(args.connect.output, Format::Json);
        let err = parse(&["execution", "reset", "e1"]).unwrap_err();
        assert!(err.to_string().contains("--to-step"), "{err}");
        assert_eq!(err.exit_code(), 2);
        let err = parse(&["execution", "fork", "e1", "--new-id", "c"]).unwrap_err();
        assert!(err.to_string().contains("--at"), "{err}");
    }

    #[test]
    fn priority_is_checked_before_anything_is_sent() {
        for args in [
            &["execution", "start", "orders", "--priority", "2"][..],
            &["execution", "update", "c-1", "add", "--start-workflow", "cart", "--priority", "1"],
        ] {
            let parsed = parse(args);
            assert!(parsed.is_ok(), "{args:?}: {parsed:?}");
        }
        for bad in ["0", "6", "urgent"] {
            let err = parse(&["execution", "start", "orders", "--priority", bad]).unwrap_err();
            assert!(err.to_string().contains("1 (dispatched first) to 5 (last)"), "{err}");
            assert_eq!(err.exit_code(), 2);
        }
        // Update-with-start only: a plain update starts nothing a priority could apply to.
        let err = parse(&["execution", "update", "c-1", "add", "--priority", "1"]).unwrap_err();
        assert!(err.to_string().contains("--start-workflow"), "{err}");
        let mut cli = Cli::command();
        let help = cli
            .find_subcommand_mut("execution")
            .and_then(|e| e.find_subcommand_mut("start"))
            .expect("execution start")
            .render_long_help()
            .to_string();
        assert!(help.contains("priority 1 is dispatched first and 5 last"), "{help}");
        assert!(help.contains("else 3"), "{help}");
    }

    #[test]
    fn rate_limit_commands_parse_and_validate() {
        let set = parse(&["admin", "rate-limit", "set", "api", "--limit", "10", "--per", "1m"]);
        assert!(set.is_ok(), "{set:?}");
        let list = parse(&["admin", "rate-limit", "list", "--output", "json"]);
        let Ok(ClientCommand::Admin(args)) = list else { panic!("{list:?}") };
        assert_eq!(args.connect.output, Format::Json);
        assert!(parse(&["admin", "rate-limit", "delete", "api"]).is_ok());
        for (args, says) in [
            (&["admin", "rate-limit", "set", "api", "--limit", "0", "--per", "1m"][..], "0"),
            (&["admin", "rate-limit", "set", "api", "--limit", "5", "--per", "0s"], "1ms to 366d"),
            (&["admin", "rate-limit", "set", "api", "--limit", "5", "--per", "60"], "no unit"),
            (&["admin", "rate-limit", "set", "api", "--per", "1m"], "--limit"),
            (&["admin", "rate-limit", "set", "api", "--limit", "5"], "--per"),
            (&["admin", "rate-limit", "delete"], "<NAME>"),
        ] {
            let err = parse(args).unwrap_err();
            assert!(err.to_string().contains(says), "{args:?}: {err}");
            assert_eq!(err.exit_code(), 2, "{args:?}");
        }
        let mut cli = Cli::command();
        let help = cli
            .find_subcommand_mut("admin")
            .and_then(|a| a.find_subcommand_mut("rate-limit"))
            .and_then(|r| r.find_subcommand_mut("set"))
            .expect("admin rate-limit set")
            .render_long_help()
            .to_string();
        for words in
            ["at most --limit task starts per window of --per", "aligned to the Unix epoch"]
        {
            assert!(
                help.contains(words),
                "set --help lacks {words:?}:
{help}"
            );
        }
    }

    #[test]
    fn every_command_has_examples_and_exit_codes() {
        fn check(cmd: &clap::Command, path: &str) {
            let path = format!("{path} {}", cmd.get_name());
            if cmd.get_subcommands().next().is_none() {
                let help = cmd.get_after_long_help().map(ToString::to_string).unwrap_or_default();
                assert!(help.contains("Examples:"), "{path} has no examples");
                assert!(help.contains("Exit codes:"), "{path} has no exit codes");
                assert!(cmd.get_about().is_some(), "{path} has no about");
            }
            for sub in cmd.get_subcommands() {
                check(sub, &path);
            }
        }
        check(&Cli::command(), "");
    }
}
