//! What the scheduler tests share: a real owner on a fresh SQLite file with one workflow
//! registered, running until the returned token is cancelled.

use orbit_owner::{Clock, Owner, OwnerConfig};
use orbit_store::{ChangeHub, SqliteStore, Store};
use std::path::Path;
use std::sync::Arc;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// The store at `dir/orbit.db` with `definition` registered, and a running owner
/// (`owner-1`, on `clock` when given); the token stops it.
pub async fn owner_with(
    dir: &Path,
    definition: &str,
    clock: Option<Clock>,
) -> (Arc<dyn Store>, Owner, CancellationToken) {
    let store: Arc<dyn Store> =
        Arc::new(SqliteStore::open_and_migrate(dir.join("orbit.db")).await.unwrap());
    let def = orbit_definition::parse(definition).unwrap();
    let doc = orbit_definition::canonical_json(&orbit_definition::to_document(&def));
    store.put_definition(&def.name, &def.version, &def.hash, &doc).await.unwrap();
    let mut config = OwnerConfig { node_id: "owner-1".into(), ..OwnerConfig::default() };
    if let Some(clock) = clock {
        config.clock = clock;
    }
    let owner = Owner::new(
        config,
        store.clone(),
        Arc::new(Notify::new()),
        Arc::new(Notify::new()),
        Arc::new(ChangeHub::new()),
    );
    let stop = CancellationToken::new();
    tokio::spawn({
        let (o, s) = (owner.clone(), stop.clone());
        async move { o.run(s).await }
    });
    (store, owner, stop)
}
