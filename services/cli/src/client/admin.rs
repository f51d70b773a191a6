//! `orbit worker list`, `orbit cluster status` and `orbit replay ID`: the operator's view
//! over `AdminService`. No token is checked yet (`--token` / `ORBIT_TOKEN` is sent as is).

use clap::{Args, Subcommand};
use orbit_api::v1::{
    ClusterStatusRequest, HistoryEvent, ListWorkersRequest, Node, ReplayRequest, WorkerInfo,
};
use serde_json::{json, Value as Json};
use std::fmt::Write as _;

use super::convert::event_json;
use super::error::Failure;
use super::output::{
    enum_name, or_dash, pretty, print_json, print_text, ts, ts_json, Fields, Format, Table,
};
use super::ConnectArgs;

/// `orbit worker ...`
#[derive(Args, Debug)]
pub struct WorkerArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
    #[command(subcommand)]
    command: WorkerCommand,
}

#[derive(Subcommand, Debug)]
enum WorkerCommand {
    /// List the workers with a session on any live frontend: the tasks they offer, their
    /// sessions (with the frontend holding each) and work in flight. Another frontend's
    /// sessions are as of its last heartbeat (`--heartbeat-ms`); offline workers are listed
    /// only by the frontend that held them.
    #[command(after_long_help = long_help!(
        "orbit worker list",
        "orbit worker list --online --task payments.charge --output json",
    ))]
    List {
        /// Only workers with a live session.
        #[arg(long)]
        online: bool,
        /// Only workers offering this task name.
        #[arg(long, value_name = "NAME")]
        task: Option<String>,
    },
}

/// `orbit cluster ...`
#[derive(Args, Debug)]
pub struct ClusterArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
    #[command(subcommand)]
    command: ClusterCommand,
}

#[derive(Subcommand, Debug)]
enum ClusterCommand {
    /// List the cluster's nodes by service, their liveness, their readiness (each live
    /// node's gRPC health, asked at its address) and the executions each owns.
    #[command(after_long_help = long_help!(
        "orbit cluster status",
        "orbit cluster status --include-dead --output json",
    ))]
    Status {
        /// Also list nodes that are no longer live.
        #[arg(long)]
        include_dead: bool,
    },
}

/// `orbit replay ID`
#[derive(Args, Debug)]
pub struct ReplayArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// The execution id.
    id: String,
    /// The run to replay (default: the latest).
    #[arg(long, value_name = "N", default_value_t = 0, hide_default_value = true)]
    run: u32,
}

/// Runs `worker list`, every page.
pub async fn run_worker(args: WorkerArgs) -> Result<(), Failure> {
    let WorkerCommand::List { online, task } = args.command;
    let mut client = args.connect.admin_client().await?;
    let mut workers = Vec::new();
    let mut page_token = String::new();
    loop {
        let request = ListWorkersRequest {
            online_only: online,
            task: task.clone().unwrap_or_default(),
            page_size: 1000,
            page_token,
        };
        let page = client.list_workers(request).await?.into_inner();
        workers.extend(page.workers);
        if page.next_page_token.is_empty() {
            break;
        }
        page_token = page.next_page_token;
    }
    match args.connect.output {
        Format::Json => {
            print_json(&json!({"workers": workers.iter().map(worker_json).collect::<Vec<_>>()}));
        }
        Format::Human => {
            let mut table = Table::new(&[
                "WORKER",
                "ONLINE",
                "IN FLIGHT",
                "MAX",
                "SESSIONS",
                "SDK",
                "RUNTIME",
                "LAST SEEN",
                "TASKS",
            ]);
            for w in &workers {
                table.row(vec![
                    w.worker_id.clone(),
                    yes_no(w.online).to_owned(),
                    w.in_flight.to_string(),
                    w.max_concurrency.to_string(),
                    w.sessions.len().to_string(),
                    or_dash(&w.sdk).to_owned(),
                    or_dash(&w.runtime).to_owned(),
                    ts(w.last_seen_at.as_ref()),
                    tasks_text(w),
                ]);
            }
            print_text(&table.render());
        }
    }
    Ok(())
}

/// Runs `cluster status`.
pub async fn run_cluster(args: ClusterArgs) -> Result<(), Failure> {
    let ClusterCommand::Status { include_dead } = args.command;
    let request = ClusterStatusRequest { include_dead };
    let response = args.connect.admin_client().await?.cluster_status(request).await?.into_inner();
    // Readiness of each live node: its gRPC health, which follows its readiness probes. A
    // node without an address (`orbit dev`) is the server this command reached.
    let address_of = |n: &Node| {
        if n.addr.is_empty() {
            args.connect.address.clone()
        } else {
            n.addr.clone()
        }
    };
    let asked: Vec<String> = response.nodes.iter().filter(|n| n.live).map(address_of).collect();
    let ready = super::readiness::of(&args.connect.tls.options(), asked).await;
    let ready_of = |n: &Node| -> &'static str {
        if !n.live {
            return "-";
        }
        ready.get(&address_of(n)).copied().unwrap_or("unreachable")
    };
    match args.connect.output {
        Format::Json => print_json(&json!({
            "nodes": response.nodes.iter().map(|n| {
                let mut j = node_json(n);
                j["ready"] = json!(ready_of(n));
                j
            }).collect::<Vec<_>>(),
            "orphaned_executions": response.orphaned_executions,
        })),
        Format::Human => {
            let mut table = Table::new(&[
                "SERVICE",
                "NODE",
                "LIVE",
                "READY",
                "ADDRESS",
                "INCARNATION",
                "OWNED",
                "HEARTBEAT",
                "STARTED",
            ]);
            for n in &response.nodes {
                table.row(vec![
                    service_name(n),
                    n.node_id.clone(),
                    yes_no(n.live).to_owned(),
                    ready_of(n).to_owned(),
                    or_dash(&n.addr).to_owned(),
                    n.incarnation.to_string(),
                    n.owned_executions.to_string(),
                    ts(n.heartbeat_at.as_ref()),
                    ts(n.started_at.as_ref()),
                ]);
            }
            let mut text = table.render();
            let _ = writeln!(text, "\norphaned executions: {}", response.orphaned_executions);
            print_text(&text);
        }
    }
    Ok(())
}

/// Runs `replay ID`: OK, or the divergence and exit 1.
pub async fn run_replay(args: ReplayArgs) -> Result<(), Failure> {
    let request = ReplayRequest { execution_id: args.id.clone(), run: args.run };
    let response = args.connect.admin_client().await?.replay(request).await?.into_inner();
    let divergence = response.divergence.clone().unwrap_or_default();
    match args.connect.output {
        Format::Json => print_json(&json!({
            "execution_id": args.id,
            "run": response.run,
            "ok": response.ok,
            "events_checked": response.events_checked,
            "divergence": if response.ok { Json::Null } else { json!({
                "seq": divergence.seq,
                "message": divergence.message,
                "expected": divergence.expected.clone().map_or(Json::Null, event_json),
                "actual": divergence.actual.clone().map_or(Json::Null, event_json),
            })},
        })),
        Format::Human if response.ok => print_text(&format!(
            "OK: {} events of run {} of {} reproduced by this server's decider\n",
            response.events_checked, response.run, args.id
        )),
        Format::Human => print_text(
            &Fields::new()
                .add("result", "DIVERGED")
                .add("run", response.run)
                .add("events checked", response.events_checked)
                .add("at seq", divergence.seq)
                .add("message", &divergence.message)
                .add("expected", event_text(divergence.expected))
                .add("recorded", event_text(divergence.actual))
                .render(),
        ),
    }
    if response.ok {
        Ok(())
    } else {
        Err(Failure::Unsuccessful)
    }
}

/// An event of a divergence as a pretty JSON block, or `(none)`.
fn event_text(event: Option<HistoryEvent>) -> String {
    event.map_or_else(|| "(none)".to_owned(), |e| pretty(&event_json(e)))
}

fn yes_no(flag: bool) -> &'static str {
    if flag {
        "yes"
    } else {
        "no"
    }
}

fn service_name(node: &Node) -> String {
    enum_name(node.service().as_str_name(), "SERVICE_KIND_")
}

/// `name@version, ...` of the tasks a worker offers.
fn tasks_text(worker: &WorkerInfo) -> String {
    let tasks: Vec<String> =
        worker.tasks.iter().map(|t| format!("{}@{}", t.name, t.version)).collect();
    or_dash(&tasks.join(", ")).to_owned()
}

fn worker_json(w: &WorkerInfo) -> Json {
    let mut labels: Vec<_> = w.labels.iter().collect();
    labels.sort();
    json!({
        "worker_id": w.worker_id,
        "runtime": w.runtime,
        "sdk": w.sdk,
        "tasks": w.tasks.iter().map(|t| json!({"name": t.name, "version": t.version})).collect::<Vec<_>>(),
        "max_concurrency": w.max_concurrency,
        "labels": labels.into_iter().map(|(k, v)| (k.clone(), json!(v))).collect::<serde_json::Map<_, _>>(),
        "online": w.online,
        "in_flight": w.in_flight,
        "last_seen_at": ts_json(w.last_seen_at.as_ref()),
        "sessions": w.sessions.iter().map(|s| json!({
            "session_id": s.session_id,
            "frontend_node_id": s.frontend_node_id,
            "connected_at": ts_json(s.connected_at.as_ref()),
            "last_seen_at": ts_json(s.last_seen_at.as_ref()),
            "credits": s.credits,
            "in_flight": s.in_flight,
            "draining": s.draining,
        })).collect::<Vec<_>>(),
    })
}

fn node_json(n: &Node) -> Json {
    json!({
        "node_id": n.node_id,
        "service": service_name(n),
        "incarnation": n.incarnation,
        "addr": n.addr,
        "live": n.live,
        "heartbeat_at": ts_json(n.heartbeat_at.as_ref()),
        "started_at": ts_json(n.started_at.as_ref()),
        "owned_executions": n.owned_executions,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use orbit_api::v1::{ServiceKind, TaskRef};

    #[test]
    fn workers_and_nodes_convert() {
        let worker = WorkerInfo {
            worker_id: "w1".into(),
            tasks: vec![TaskRef { name: "payments.charge".into(), version: "1".into() }],
            online: true,
            ..WorkerInfo::default()
        };
        assert_eq!(tasks_text(&worker), "payments.charge@1");
        assert_eq!(worker_json(&worker)["tasks"][0]["name"], "payments.charge");
        assert_eq!(tasks_text(&WorkerInfo::default()), "-");
        let node = Node { service: ServiceKind::Owner.into(), ..Node::default() };
        assert_eq!(node_json(&node)["service"], "OWNER");
    }
}
