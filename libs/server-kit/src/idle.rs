//! The idle connection timeout: a connection with no open call for the configured time is
//! closed by the server.
//!
//! tonic (0.14) has a maximum connection *age* but no idle timeout, and HTTP/2 keepalive
//! pings keep an unused connection alive forever. So the server counts the calls open on
//! each connection where connections are accepted:
//!
//! - [`IdleIo`] wraps every accepted TCP stream and registers the connection (by peer
//!   address, unique among a listener's live connections) in the shared [`Tracker`];
//! - [`IdleLayer`] sits in the request stack: a call counts as open from its request until
//!   its response body ends or is dropped (a unary call's answer, a stream's last
//!   message, a client's cancel), so a worker's long `Session` stream keeps its
//!   connection up however quiet it is;
//! - when the connection had no open call for the whole timeout, the next read of
//!   [`IdleIo`] reports end of stream: hyper ends the connection and the socket closes.
//!   A client sees the connection go away between calls and reconnects on its next one.
//!
//! The close is abrupt, not a GOAWAY (tonic gives no handle on hyper's per-connection
//! graceful shutdown): bytes already waiting on the socket at expiry count as activity and
//! postpone the close, but a call sent while the close is on the wire fails UNAVAILABLE
//! (retryable, nothing was processed).

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};
use tonic::body::Body;
use tonic::codegen::http;
use tonic::transport::server::{Connected, TcpConnectInfo, TlsConnectInfo};

/// Open calls and idleness of one connection.
#[derive(Debug)]
struct Activity {
    open: AtomicUsize,
    /// When the last open call ended (or the connection was accepted).
    idle_since: Mutex<Instant>,
}

impl Activity {
    fn idle_since(&self) -> Instant {
        *self.idle_since.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The live connections of one server, by peer address.
#[derive(Debug)]
pub(crate) struct Tracker {
    timeout: Option<Duration>,
    connections: Mutex<HashMap<SocketAddr, Arc<Activity>>>,
}

impl Tracker {
    /// A tracker closing connections idle for `timeout` (`None`: never).
    pub(crate) fn new(timeout: Option<Duration>) -> Arc<Tracker> {
        Arc::new(Tracker { timeout, connections: Mutex::new(HashMap::new()) })
    }

    /// Wraps an accepted stream.
    pub(crate) fn accept(self: &Arc<Self>, stream: TcpStream) -> IdleIo {
        let activity = Arc::new(Activity {
            open: AtomicUsize::new(0),
            idle_since: Mutex::new(Instant::now()),
        });
        let peer = stream.peer_addr().ok();
        let timeout = self.timeout.filter(|_| peer.is_some());
        if let (Some(peer), Some(_)) = (peer, timeout) {
            self.lock().insert(peer, activity.clone());
        }
        let sleep = timeout.map(|t| Box::pin(tokio::time::sleep(t)));
        IdleIo { inner: stream, tracker: self.clone(), activity, peer, timeout, sleep }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<SocketAddr, Arc<Activity>>> {
        // A plain map under a short lock; a panic elsewhere leaves it consistent.
        self.connections.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn find(&self, peer: SocketAddr) -> Option<Arc<Activity>> {
        self.lock().get(&peer).cloned()
    }
}

/// An accepted connection that ends itself once idle for the timeout.
#[derive(Debug)]
pub(crate) struct IdleIo {
    inner: TcpStream,
    tracker: Arc<Tracker>,
    activity: Arc<Activity>,
    peer: Option<SocketAddr>,
    timeout: Option<Duration>,
    sleep: Option<Pin<Box<Sleep>>>,
}

impl IdleIo {
    /// Restarts the idle clock now.
    fn touch(&mut self) {
        *self.activity.idle_since.lock().unwrap_or_else(PoisonError::into_inner) = Instant::now();
        if let (Some(timeout), Some(sleep)) = (self.timeout, self.sleep.as_mut()) {
            sleep.as_mut().reset(Instant::now() + timeout);
        }
    }

    /// Whether the connection has been idle for the timeout; re-arms the timer otherwise.
    fn expired(&mut self, cx: &mut Context<'_>) -> bool {
        let (Some(timeout), Some(sleep)) = (self.timeout, self.sleep.as_mut()) else {
            return false;
        };
        while sleep.as_mut().poll(cx).is_ready() {
            let deadline = if self.activity.open.load(Ordering::SeqCst) > 0 {
                // Busy: look again a timeout from now (the call may end any time before).
                Instant::now() + timeout
            } else {
                let deadline = self.activity.idle_since() + timeout;
                if deadline <= Instant::now() {
                    return true;
                }
                deadline
            };
            sleep.as_mut().reset(deadline);
        }
        false
    }
}

impl AsyncRead for IdleIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if self.expired(cx) {
            let before = buf.filled().len();
            return match Pin::new(&mut self.inner).poll_read(cx, buf) {
                // The peer spoke just now (a new call is arriving): not idle after all.
                Poll::Ready(Ok(())) if buf.filled().len() > before => {
                    self.touch();
                    Poll::Ready(Ok(()))
                }
                Poll::Ready(other) => Poll::Ready(other),
                Poll::Pending => {
                    tracing::debug!(peer = ?self.peer, "closing an idle connection");
                    // End of stream: hyper ends the connection and drops the socket.
                    Poll::Ready(Ok(()))
                }
            };
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for IdleIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

impl Connected for IdleIo {
    // The TCP info every handler sees (`Request::remote_addr`), unchanged.
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

impl Drop for IdleIo {
    fn drop(&mut self) {
        if let Some(peer) = self.peer {
            let mut connections = self.tracker.lock();
            // Only this connection's entry: the address may already belong to a new one.
            if connections.get(&peer).is_some_and(|a| Arc::ptr_eq(a, &self.activity)) {
                connections.remove(&peer);
            }
        }
    }
}

/// One open call; the connection's count drops when it does.
struct OpenCall(Arc<Activity>);

impl OpenCall {
    fn open(activity: Arc<Activity>) -> OpenCall {
        activity.open.fetch_add(1, Ordering::SeqCst);
        OpenCall(activity)
    }
}

impl Drop for OpenCall {
    fn drop(&mut self) {
        let mut idle_since = self.0.idle_since.lock().unwrap_or_else(PoisonError::into_inner);
        if self.0.open.fetch_sub(1, Ordering::SeqCst) == 1 {
            *idle_since = Instant::now();
        }
    }
}

/// Counts the calls open on each tracked connection (see the module docs).
#[derive(Clone, Debug)]
pub(crate) struct IdleLayer {
    tracker: Arc<Tracker>,
}

impl IdleLayer {
    pub(crate) fn new(tracker: Arc<Tracker>) -> IdleLayer {
        IdleLayer { tracker }
    }
}

impl<S> tower_layer::Layer<S> for IdleLayer {
    type Service = IdleService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        IdleService { inner, tracker: self.tracker.clone() }
    }
}

/// The service [`IdleLayer`] makes.
#[derive(Clone, Debug)]
pub(crate) struct IdleService<S> {
    inner: S,
    tracker: Arc<Tracker>,
}

type BoxFuture<T, E> = Pin<Box<dyn std::future::Future<Output = Result<T, E>> + Send>>;

impl<S, B> tonic::codegen::Service<http::Request<B>> for IdleService<S>
where
    S: tonic::codegen::Service<http::Request<B>, Response = http::Response<Body>>,
    S::Future: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = S::Error;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        // TLS connections carry the TCP info inside `PeerCertificates`.
        let extensions = request.extensions();
        let call = extensions
            .get::<TcpConnectInfo>()
            .or_else(|| extensions.get::<TlsConnectInfo<TcpConnectInfo>>().map(|t| t.get_ref()))
            .and_then(TcpConnectInfo::remote_addr)
            .and_then(|peer| self.tracker.find(peer))
            .map(OpenCall::open);
        let response = self.inner.call(request);
        Box::pin(async move {
            let response = response.await?;
            Ok(match call {
                Some(call) => response.map(|body| Body::new(CallBody { inner: body, _call: call })),
                None => response,
            })
        })
    }
}

/// A response body that holds its call open until it ends or is dropped.
struct CallBody {
    inner: Body,
    _call: OpenCall,
}

impl http_body::Body for CallBody {
    type Data = tonic::codegen::Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}
