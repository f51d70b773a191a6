//! The split topology on PostgreSQL (2 frontends, 2 owners, 1 scheduler as real processes,
//! TLS to the database with certificate verification): every example workflow completes,
//! with one worker on each frontend and clients that start on one frontend and signal,
//! query and watch on the other.

mod common;

use common::cluster::{Topology, FAST};
use common::scenario::{run_every_example, worker_tls, EXAMPLES};
use common::*;
use tokio_util::sync::CancellationToken;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_example_completes_across_frontends() {
    let topo = Topology::start_with("examples", 2, 2, 1, "verify-full", FAST);
    let mut c = topo.client(0).await;
    let mut d = topo.client(1).await;
    for f in EXAMPLES {
        register_example(&mut c, f).await;
    }
    let stop = CancellationToken::new();
    let fe = topo.frontends();
    worker_tls(&fe[0], "examples-a", &stop, topo.tls());
    worker_tls(&fe[1], "examples-b", &stop, topo.tls());
    run_every_example(&mut c, &mut d).await;
    stop.cancel();
    // Both owners served: starts are spread by rendezvous hashing of the execution id.
    let owners = common::cluster::psql(&topo, "SELECT DISTINCT node_id FROM owners ORDER BY 1");
    assert_eq!(owners, vec!["owner-1", "owner-2"], "executions landed on both owners");
}
