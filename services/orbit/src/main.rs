//! `orbit`: one binary for the services and the client.
//!
//! `orbit dev` runs the frontend, the owner and the scheduler in one process on an embedded
//! SQLite file; `orbit frontend|owner|scheduler` run one service each, any number of them
//! on one shared database; `bench` and `migrate` run here too. The client subcommands and
//! `orbit test` live in the `orbit-cli` crate (`services/cli`); `main` only dispatches to it.

mod admin_args;
mod auth_args;
mod bench;
mod bench_server;
mod dev;
mod http_step;
mod limit_args;
mod logs;
mod mesh_args;
mod migrate;
mod rate_limit_args;
mod retention;
mod split;
mod tls_args;
mod trace_args;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// Orbit: a durable workflow runtime.
#[derive(Parser, Debug)]
#[command(name = "orbit", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run every service in one process on an embedded SQLite file (the quick start).
    Dev(dev::DevArgs),
    /// Run the frontend service (public API, worker streams) on a shared database.
    Frontend(split::FrontendArgs),
    /// Run the owner service (writes histories, takes over dead owners) on a shared database.
    Owner(split::OwnerArgs),
    /// Run the scheduler service (durable timers) on a shared database.
    Scheduler(split::SchedulerArgs),
    /// Run N executions of a K-step workflow with in-process workers and print throughput and
    /// latency percentiles.
    Bench(bench::BenchArgs),
    /// Apply or list the database's schema migrations (before a rolling upgrade).
    Migrate(migrate::MigrateArgs),
    /// Run a workflow definition in the simulator against a fixtures file and check the
    /// outcome: a unit test for a workflow, with no server and no worker.
    Test(orbit_cli::testing::TestArgs),
    /// Talk to a running server.
    #[command(flatten)]
    Client(orbit_cli::client::ClientCommand),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Every runtime thread gets the engine's stack, so an owner's pass of one execution runs
    // where it is instead of waking the engine thread (orbit_owner's isolate.rs).
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_stack_size(orbit_owner::ENGINE_STACK_BYTES)
        .on_thread_start(orbit_owner::engine_sized_thread)
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    runtime.block_on(async move {
        match cli.command {
            Command::Dev(args) => dev::run(args).await,
            Command::Frontend(args) => split::run_frontend(args).await,
            Command::Owner(args) => split::run_owner(args).await,
            Command::Scheduler(args) => split::run_scheduler(args).await,
            Command::Bench(args) => bench::run(args).await,
            Command::Migrate(args) => migrate::run(args).await,
            Command::Test(args) => orbit_cli::testing::run(&args),
            Command::Client(cmd) => orbit_cli::client::run(cmd).await,
        }
    })
}
