//! Readiness per node for `orbit cluster status`: each live node's gRPC health (which
//! follows its readiness: database, schema, membership), asked at the address it
//! advertises in the nodes table, all nodes at once, each bounded by a short timeout.

use std::collections::HashMap;
use std::time::Duration;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

/// How long one node may take to answer.
const ASK_TIMEOUT: Duration = Duration::from_secs(3);

/// `ready`, `not ready` or `unreachable` for each address.
pub async fn of(
    tls: &orbit_api::tls::ClientTls,
    addresses: Vec<String>,
) -> HashMap<String, &'static str> {
    let mut asks = tokio::task::JoinSet::new();
    for addr in addresses {
        let tls = tls.clone();
        asks.spawn(async move {
            let answer = tokio::time::timeout(ASK_TIMEOUT, ask(&tls, &addr)).await;
            let word = match answer {
                Ok(Some(ServingStatus::Serving)) => "ready",
                Ok(Some(_)) => "not ready",
                _ => "unreachable",
            };
            (addr, word)
        });
    }
    let mut out = HashMap::new();
    while let Some(done) = asks.join_next().await {
        if let Ok((addr, word)) = done {
            out.insert(addr, word);
        }
    }
    out
}

async fn ask(tls: &orbit_api::tls::ClientTls, addr: &str) -> Option<ServingStatus> {
    let channel = tls.endpoint(addr).ok()?.connect_timeout(ASK_TIMEOUT).connect().await.ok()?;
    let request = HealthCheckRequest { service: String::new() };
    let status = HealthClient::new(channel).check(request).await.ok()?.into_inner().status;
    ServingStatus::try_from(status).ok()
}
