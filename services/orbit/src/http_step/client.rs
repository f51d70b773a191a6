//! One http step attempt: the request `{method, url, headers, body}` sent with hyper over a
//! TCP connection (TLS for `https://`, see `super::tls`) to an allowed host, redirects
//! followed (to allowed hosts only), the
//! response read up to the payload limit and turned into the step's output
//! `{status, headers, body}` or a failure code.

use base64::Engine as _;
use http::{header, Method, Request, StatusCode, Uri};
use http_body_util::{BodyExt as _, Full, Limited};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use orbit_worker::TaskFailure;
use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpStream;

/// A non-2xx response (details: `status`); retryable for 5xx and 429.
pub const HTTP_ERROR: &str = "HTTP_ERROR";
/// The URL's (or a redirect's) host is not on the allow-list.
pub const HTTP_HOST_NOT_ALLOWED: &str = "HTTP_HOST_NOT_ALLOWED";
/// No response within the step's timeout (default 30 s).
pub const HTTP_TIMEOUT: &str = "HTTP_TIMEOUT";
/// The connection failed (refused, reset, DNS); retryable.
pub const HTTP_CONNECT_FAILED: &str = "HTTP_CONNECT_FAILED";
/// The response body exceeds the payload limit.
pub const HTTP_BODY_TOO_LARGE: &str = "HTTP_BODY_TOO_LARGE";
/// The rendered request is unusable (bad URL, method, header, scheme).
pub const HTTP_BAD_REQUEST: &str = "HTTP_BAD_REQUEST";
/// A 2xx response declared JSON (its content type) whose body does not parse; not retried.
pub const HTTP_BAD_RESPONSE: &str = "HTTP_BAD_RESPONSE";
/// The host already has `--http-max-per-host` requests in flight: the attempt fails at once
/// (retryable, under the step's retry policy) instead of holding one of the built-in
/// worker's slots, so a hung host cannot starve steps to other hosts.
pub const HTTP_HOST_BUSY: &str = "HTTP_HOST_BUSY";

/// Redirects followed before giving up.
const MAX_REDIRECTS: usize = 5;

/// `--http-max-concurrency`'s default: attempts the built-in worker runs at once.
pub const DEFAULT_MAX_CONCURRENCY: u32 = 64;

/// `--http-max-per-host`'s default: requests in flight to one host:port.
pub const DEFAULT_MAX_PER_HOST: u32 = 16;

/// Which hosts may be called, how much of a response is read, whom https trusts, and how
/// many requests run at once (in all, and per host).
#[derive(Debug, Clone)]
pub struct Policy {
    /// `(host, port)`, lower-case; no port: any port.
    allowed: Vec<(String, Option<u16>)>,
    max_body_bytes: usize,
    /// The https client (`None` only if rustls could not be set up at all).
    tls: Option<Arc<rustls::ClientConfig>>,
    /// Attempts the built-in worker runs at once (its session's `max_concurrency`).
    pub max_concurrency: u32,
    /// Requests in flight to one `host:port` at most (see [`HTTP_HOST_BUSY`]).
    max_per_host: usize,
    /// Requests in flight per `host:port`.
    in_flight: Arc<Mutex<HashMap<(String, u16), usize>>>,
}

/// One request's place in its host's count; given back on drop.
struct HostSlot {
    key: (String, u16),
    in_flight: Arc<Mutex<HashMap<(String, u16), usize>>>,
}

impl Drop for HostSlot {
    fn drop(&mut self) {
        let mut map = self.in_flight.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(n) = map.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                map.remove(&self.key);
            }
        }
    }
}

impl Policy {
    /// From `host` / `host:port` entries (blank entries ignored).
    pub fn new(entries: &[String], max_body_bytes: usize) -> Policy {
        let allowed = entries
            .iter()
            .map(|e| e.trim().to_ascii_lowercase())
            .filter(|e| !e.is_empty())
            .map(|e| match e.rsplit_once(':') {
                Some((h, p)) if p.parse::<u16>().is_ok() => (h.to_string(), p.parse().ok()),
                _ => (e, None),
            })
            .collect();
        let tls = super::tls::client_config(None).ok();
        Policy {
            allowed,
            max_body_bytes,
            tls,
            max_concurrency: DEFAULT_MAX_CONCURRENCY,
            max_per_host: DEFAULT_MAX_PER_HOST as usize,
            in_flight: Arc::default(),
        }
    }

    /// With `total` attempts at once and at most `per_host` requests to one host:port.
    #[must_use]
    pub fn with_limits(mut self, total: u32, per_host: u32) -> Policy {
        self.max_concurrency = total.max(1);
        self.max_per_host = per_host.max(1) as usize;
        self
    }

    /// A place for one more request to `host:port`, or `None` at the host's limit.
    fn slot(&self, host: &str, port: u16) -> Option<HostSlot> {
        let key = (host.to_ascii_lowercase(), port);
        let mut map = self.in_flight.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let n = map.entry(key.clone()).or_insert(0);
        if *n >= self.max_per_host {
            return None;
        }
        *n += 1;
        Some(HostSlot { key, in_flight: self.in_flight.clone() })
    }

    /// Also trusts the CA certificates in the PEM file `ca` for https (besides the public
    /// web roots).
    ///
    /// # Errors
    /// The file cannot be read or holds no certificate.
    pub fn with_ca(mut self, ca: &std::path::Path) -> Result<Policy, String> {
        self.tls = Some(super::tls::client_config(Some(ca))?);
        Ok(self)
    }

    fn allows(&self, host: &str, port: u16) -> bool {
        let host = host.to_ascii_lowercase();
        self.allowed.iter().any(|(h, p)| *h == host && p.is_none_or(|p| p == port))
    }
}

/// Runs one attempt of the request in `input` within `timeout`.
///
/// # Errors
/// A [`TaskFailure`] with one of this module's codes.
pub async fn call(policy: &Policy, input: &Value, timeout: Duration) -> Result<Value, TaskFailure> {
    match tokio::time::timeout(timeout, follow(policy, input)).await {
        Ok(result) => result,
        Err(_) => Err(TaskFailure::retryable(
            HTTP_TIMEOUT,
            format!("no response within {} ms", timeout.as_millis()),
        )),
    }
}

async fn follow(policy: &Policy, input: &Value) -> Result<Value, TaskFailure> {
    let bad = |m: String| TaskFailure::fatal(HTTP_BAD_REQUEST, m);
    let method = input["method"].as_str().unwrap_or("GET");
    let mut method = Method::from_bytes(method.as_bytes()).map_err(|e| bad(e.to_string()))?;
    let url = input["url"].as_str().ok_or_else(|| bad("the request has no url".into()))?;
    let mut uri: Uri = url.parse().map_err(|e| bad(format!("bad url `{url}`: {e}")))?;
    let (content_type, mut body) = match &input["body"] {
        Value::Null => (None, Bytes::new()),
        Value::String(s) => (Some("text/plain; charset=utf-8"), Bytes::from(s.clone())),
        other => (Some("application/json"), Bytes::from(other.to_string())),
    };
    let headers = input["headers"].as_object().cloned().unwrap_or_default();
    for _ in 0..=MAX_REDIRECTS {
        let (response, _slot) =
            send(policy, &method, &uri, &headers, content_type, body.clone()).await?;
        let status = response.status();
        let location = response.headers().get(header::LOCATION).and_then(|l| l.to_str().ok());
        let Some(location) = location.filter(|_| status.is_redirection()) else {
            // The host's slot is held until the body is read.
            return output(policy, response).await;
        };
        uri = resolve(&uri, location).map_err(bad)?;
        if status == StatusCode::SEE_OTHER {
            (method, body) = (Method::GET, Bytes::new());
        }
    }
    Err(TaskFailure::fatal(HTTP_ERROR, format!("more than {MAX_REDIRECTS} redirects")))
}

/// `location` relative to `base`.
fn resolve(base: &Uri, location: &str) -> Result<Uri, String> {
    let absolute = if location.starts_with('/') {
        let authority = base.authority().map_or("", |a| a.as_str());
        format!("{}://{authority}{location}", base.scheme_str().unwrap_or("http"))
    } else {
        location.to_string()
    };
    absolute.parse().map_err(|e| format!("bad redirect `{location}`: {e}"))
}

async fn send(
    policy: &Policy,
    method: &Method,
    uri: &Uri,
    headers: &Map<String, Value>,
    content_type: Option<&str>,
    body: Bytes,
) -> Result<(hyper::Response<hyper::body::Incoming>, HostSlot), TaskFailure> {
    let bad = |m: String| TaskFailure::fatal(HTTP_BAD_REQUEST, m);
    let tls = match uri.scheme_str() {
        Some("http") => None,
        Some("https") => Some(
            policy
                .tls
                .as_ref()
                .ok_or_else(|| bad(format!("`{uri}`: https is not available on this server")))?,
        ),
        _ => return Err(bad(format!("`{uri}`: only http:// and https:// URLs are supported"))),
    };
    let host = uri.host().ok_or_else(|| bad(format!("`{uri}` has no host")))?;
    let port = uri.port_u16().unwrap_or(if tls.is_some() { 443 } else { 80 });
    if !policy.allows(host, port) {
        return Err(TaskFailure::fatal(
            HTTP_HOST_NOT_ALLOWED,
            format!("`{host}:{port}` is not on the server's --http-allow-host list"),
        )
        .with_details(json!({ "host": host, "port": port })));
    }
    let slot = policy.slot(host, port).ok_or_else(|| {
        TaskFailure::retryable(
            HTTP_HOST_BUSY,
            format!(
                "`{host}:{port}` already has {} requests in flight (--http-max-per-host)",
                policy.max_per_host
            ),
        )
        .with_details(json!({ "host": host, "port": port, "limit": policy.max_per_host }))
    })?;
    let connect_failed = |e: String| TaskFailure::retryable(HTTP_CONNECT_FAILED, e);
    let host_for_connect = host.trim_start_matches('[').trim_end_matches(']');
    let stream = TcpStream::connect((host_for_connect, port))
        .await
        .map_err(|e| connect_failed(format!("cannot connect to {host}:{port}: {e}")))?;
    let stream = super::tls::wrap(stream, host_for_connect, tls).await.map_err(connect_failed)?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| connect_failed(format!("{host}:{port}: {e}")))?;
    // Drives the connection; it ends with the response body (or the attempt's timeout).
    tokio::spawn(connection);
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let mut request = Request::builder().method(method.clone()).uri(path);
    let authority = uri.authority().map_or(host.to_string(), |a| a.to_string());
    request = request.header(header::HOST, authority);
    if let Some(ct) = content_type.filter(|_| !body.is_empty()) {
        request = request.header(header::CONTENT_TYPE, ct);
    }
    for (name, value) in headers {
        request = request.header(name.as_str(), value.as_str().unwrap_or_default());
    }
    let request = request.body(Full::new(body)).map_err(|e| bad(e.to_string()))?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| connect_failed(format!("{host}:{port}: {e}")))?;
    Ok((response, slot))
}

/// The step's output, or `HTTP_ERROR` for a non-2xx status.
async fn output(
    policy: &Policy,
    response: hyper::Response<hyper::body::Incoming>,
) -> Result<Value, TaskFailure> {
    let status = response.status();
    let mut headers = Map::new();
    for (name, value) in response.headers() {
        headers.insert(
            name.to_string(),
            Value::String(String::from_utf8_lossy(value.as_bytes()).into()),
        );
    }
    let json = headers
        .get("content-type")
        .and_then(Value::as_str)
        .is_some_and(|ct| ct.to_ascii_lowercase().contains("json"));
    let limit = policy.max_body_bytes;
    let bytes = match Limited::new(response.into_body(), limit).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => {
            return Err(TaskFailure::fatal(
                HTTP_BODY_TOO_LARGE,
                format!("the response body exceeds {limit} bytes"),
            )
            .with_details(json!({ "status": status.as_u16(), "limit": limit })));
        }
        Err(e) => return Err(TaskFailure::retryable(HTTP_CONNECT_FAILED, e.to_string())),
    };
    // The body: parsed JSON when declared JSON, text when UTF-8, else the exact bytes in
    // `body_base64` (standard alphabet) with `body` null.
    let (body, base64) = match std::str::from_utf8(&bytes) {
        Ok(text) if json => match serde_json::from_str(text) {
            Ok(v) => (v, None),
            Err(e) if status.is_success() => {
                let head: String = text.chars().take(200).collect();
                return Err(TaskFailure::fatal(
                    HTTP_BAD_RESPONSE,
                    format!("the response says it is JSON but does not parse: {e}"),
                )
                .with_details(json!({ "status": status.as_u16(), "body_head": head })));
            }
            Err(_) => (Value::String(text.to_string()), None),
        },
        Ok(text) => (Value::String(text.to_string()), None),
        Err(_) => (Value::Null, Some(base64::engine::general_purpose::STANDARD.encode(&bytes))),
    };
    if !status.is_success() {
        let retryable = status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS;
        let message = format!("HTTP {status}");
        let details = json!({ "status": status.as_u16(), "body": body });
        return Err(TaskFailure::new(HTTP_ERROR, message, retryable).with_details(details));
    }
    let mut out = json!({ "status": status.as_u16(), "headers": headers, "body": body });
    if let Some(b) = base64 {
        out["body_base64"] = Value::String(b);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allow_list_entries_match_host_and_optional_port() {
        let entries = ["API.example.com".to_string(), " 127.0.0.1:8080 ".into(), String::new()];
        let p = Policy::new(&entries, 10);
        assert!(p.allows("api.example.com", 443));
        assert!(p.allows("Api.Example.Com", 80));
        assert!(p.allows("127.0.0.1", 8080));
        assert!(!p.allows("127.0.0.1", 8081), "a port given is the only port");
        assert!(!p.allows("sub.api.example.com", 80), "no subdomains");
        assert!(!Policy::new(&[], 10).allows("localhost", 80), "empty list allows nothing");
    }

    #[test]
    fn redirects_resolve_against_the_request() {
        let base: Uri = "http://h:81/a/b?q=1".parse().expect("uri");
        assert_eq!(resolve(&base, "/c").expect("abs").to_string(), "http://h:81/c");
        assert_eq!(resolve(&base, "http://x/y").expect("abs").to_string(), "http://x/y");
    }

    #[tokio::test]
    async fn a_host_off_the_list_is_refused_before_connecting() {
        let p = Policy::new(&["allowed".to_string()], 10);
        let input = json!({ "method": "GET", "url": "http://elsewhere:1/" });
        let e = call(&p, &input, Duration::from_secs(5)).await.expect_err("refused");
        assert_eq!(e.code, HTTP_HOST_NOT_ALLOWED);
        assert!(!e.retryable);
        let ftp = json!({ "method": "GET", "url": "ftp://allowed/" });
        let e = call(&p, &ftp, Duration::from_secs(5)).await.expect_err("refused");
        assert_eq!(e.code, HTTP_BAD_REQUEST);
    }
}
