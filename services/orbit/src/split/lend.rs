//! The split's task hand-off, the frontend's links: one `HandoffService.Lend` stream to
//! each live owner (see `orbit_frontend`'s `worker::lend` and `orbit_owner::Lenders`),
//! opened for every owner membership lists, and opened again after it breaks while that
//! owner stays live.

use orbit_api::internal::v1::handoff_service_client::HandoffServiceClient;
use orbit_cluster::Membership;
use orbit_frontend::Frontend;
use std::collections::HashMap;
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::metadata::{Ascii, MetadataValue};

/// The pause before a broken stream to a live owner is opened again.
const REOPEN_AFTER: Duration = Duration::from_millis(500);

/// How to reach owners: TLS and the service token of this node's calls to them.
#[derive(Clone)]
pub struct Dial {
    pub tls: orbit_api::tls::ClientTls,
    pub bearer: Option<MetadataValue<Ascii>>,
}

/// Keeps a lend stream open to every live owner until `shutdown`.
pub fn spawn(
    frontend: Frontend,
    membership: Membership,
    dial: Dial,
    shutdown: CancellationToken,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut changes = membership.changes();
        let mut links: HashMap<String, JoinHandle<()>> = HashMap::new();
        loop {
            links.retain(|_, h| !h.is_finished());
            for owner in membership.live_owners() {
                let Some(addr) = owner.addr.clone() else { continue };
                if links.contains_key(&owner.node_id) {
                    continue;
                }
                let link = link(
                    frontend.clone(),
                    membership.clone(),
                    owner.node_id.clone(),
                    addr,
                    dial.clone(),
                    shutdown.clone(),
                );
                links.insert(owner.node_id, tokio::spawn(link));
            }
            tokio::select! {
                () = shutdown.cancelled() => break,
                r = changes.changed() => if r.is_err() { break },
                // A link ends when its owner left; look again now and then as well.
                () = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
        }
        for (_, h) in links {
            h.abort();
        }
    })
}

/// One owner's stream, opened again while the owner is live.
async fn link(
    frontend: Frontend,
    membership: Membership,
    owner: String,
    addr: String,
    dial: Dial,
    shutdown: CancellationToken,
) {
    loop {
        let open = {
            let (addr, dial) = (addr.clone(), dial.clone());
            move |rx| -> futures_util::future::BoxFuture<'static, _> {
                Box::pin(async move {
                    let endpoint = dial
                        .tls
                        .endpoint(&addr)
                        .map_err(tonic::Status::unavailable)?
                        .connect_timeout(Duration::from_secs(2))
                        .tcp_nodelay(true)
                        .http2_keep_alive_interval(Duration::from_secs(5))
                        .keep_alive_timeout(Duration::from_secs(10));
                    let channel = endpoint
                        .connect()
                        .await
                        .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
                    let mut request = tonic::Request::new(UnboundedReceiverStream::new(rx));
                    if let Some(bearer) = dial.bearer {
                        request.metadata_mut().insert("authorization", bearer);
                    }
                    let response = HandoffServiceClient::new(channel).lend(request).await?;
                    Ok(response.into_inner())
                })
            }
        };
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = frontend.lend_to(owner.clone(), open) => {}
        }
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(REOPEN_AFTER) => {}
        }
        if !membership
            .live_owners()
            .iter()
            .any(|o| o.node_id == owner && o.addr.as_deref() == Some(addr.as_str()))
        {
            return;
        }
    }
}
