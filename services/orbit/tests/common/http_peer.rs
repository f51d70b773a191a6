//! A plain HTTP/1.1 server on a free loopback port for tests that need a real peer (the
//! HTTP step's target): each connection is served by the given handler.

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::future::Future;

/// Serves `handle` on `127.0.0.1:<free port>` until the test's runtime ends; returns the port.
pub async fn serve<F, Fut>(handle: F) -> u16
where
    F: Fn(Request<Incoming>) -> Fut + Copy + Send + Sync + 'static,
    Fut: Future<Output = Result<Response<Full<Bytes>>, Infallible>> + Send + 'static,
{
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { return };
            tokio::spawn(async move {
                let service = hyper::service::service_fn(handle);
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    port
}
