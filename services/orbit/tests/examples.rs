//! Every example definition runs to its expected output against the real `orbit dev`
//! binary, with in-process Rust workers over loopback gRPC.

mod common;

use common::scenario::{run_every_example, worker, EXAMPLES};
use common::*;
use tokio_util::sync::CancellationToken;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_example_runs_to_its_expected_output() {
    let dir = TempDir::new("examples");
    let server = Server::start(&dir.0.join("orbit.db"), &[]).await;
    let mut c = server.client().await;
    for f in EXAMPLES {
        register_example(&mut c, f).await;
    }
    let stop = CancellationToken::new();
    worker(&server.address(), "examples", &stop);
    let mut d = server.client().await;
    run_every_example(&mut c, &mut d).await;
    stop.cancel();
}
