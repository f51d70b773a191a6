//! The admin HTTP port from a test: plain HTTP/1.0 GETs over loopback (no client library:
//! the server must speak HTTP any scraper or probe speaks), and the address a process
//! printed for it.

use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// `GET path` on `addr` (`host:port`): the status code and the body. `None` when the
/// connection fails or no answer comes within 10 s.
pub async fn get(addr: &str, path: &str) -> Option<(u16, String)> {
    let fetch = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
        let request = format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await.ok()?;
        let text = String::from_utf8_lossy(&raw).to_string();
        let (head, body) = text.split_once("\r\n\r\n")?;
        let status = head.split_whitespace().nth(1)?.parse().ok()?;
        Some((status, body.to_string()))
    };
    tokio::time::timeout(Duration::from_secs(10), fetch).await.ok().flatten()
}

/// The admin address a process printed (`… admin http on HOST:PORT`) in `log`.
pub fn address_in(log: &str) -> Option<String> {
    log.lines().find_map(|l| l.split_once("admin http on ").map(|(_, a)| a.trim().to_string()))
}

/// `s` percent-encoded for a URL query value.
pub fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The metric `name` on the admin port `addr`, summed over its samples whose labels
/// contain `label` (`""`: every sample).
pub async fn metric_sum(addr: &str, name: &str, label: &str) -> u64 {
    let (status, body) = get(addr, "/metrics").await.expect("metrics");
    assert_eq!(status, 200, "{body}");
    let (labelled, bare) = (format!("{name}{{"), format!("{name} "));
    body.lines()
        .filter(|l| (l.starts_with(&labelled) || l.starts_with(&bare)) && l.contains(label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}
