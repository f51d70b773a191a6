//! Reading a libpq-style connection string into a `tokio_postgres::Config` plus the TLS
//! settings tokio-postgres does not know.
//!
//! Both libpq forms are accepted: a URL (`postgres://user@host:port/db?sslmode=verify-full`)
//! and keyword/value pairs (`host=db port=5432 sslmode=require`). tokio-postgres only knows
//! `sslmode` = disable | prefer | require and rejects `sslrootcert`, so those two (and the
//! client-certificate keys, which are refused with a clear error) are taken out here and
//! the rest is handed to tokio-postgres unchanged. Error messages never repeat the string
//! itself: it may hold a password.

use crate::error::{Result, StoreError};
use std::path::PathBuf;
use std::str::FromStr;

/// libpq's `sslmode`, all five of them. The default, as in libpq, is `Prefer`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SslMode {
    /// Plain TCP only.
    Disable,
    /// TLS when the server offers it (no certificate verification), plain otherwise.
    Prefer,
    /// TLS; no certificate verification unless a CA file is given (then as `VerifyCa`).
    Require,
    /// TLS; the server's chain must lead to a trusted root; the host name is not checked.
    VerifyCa,
    /// TLS; chain and host name are verified.
    VerifyFull,
}

impl FromStr for SslMode {
    type Err = StoreError;

    fn from_str(s: &str) -> Result<SslMode> {
        Ok(match s {
            "disable" => SslMode::Disable,
            // libpq's `allow` tries plain first; TLS-when-offered is the closest we do.
            "allow" | "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            other => {
                return Err(StoreError::InvalidArgument(format!(
                    "database URL: unknown sslmode {other:?} (expected disable, prefer, \
                     require, verify-ca or verify-full)"
                )))
            }
        })
    }
}

/// Where the trusted roots for `verify-*` come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RootCert {
    /// Not named: a CA file given in the options, else the bundled public roots.
    Default,
    /// `sslrootcert=system`: the bundled public (Mozilla) roots.
    System,
    /// A PEM file of CA certificates.
    File(PathBuf),
}

/// A parsed connection string.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    /// Everything tokio-postgres understands (its own ssl mode is set from `ssl`).
    pub(crate) config: tokio_postgres::Config,
    /// The requested TLS mode.
    pub(crate) ssl: SslMode,
    /// The `sslrootcert` of the string.
    pub(crate) root_cert: RootCert,
}

/// Keys taken out of the string before tokio-postgres sees it.
enum Taken {
    SslMode(String),
    RootCert(String),
}

/// Returns what to do with one key/value pair: take it, refuse the string, or keep it.
fn take(key: &str, value: &str) -> Result<Option<Taken>> {
    match key {
        "sslmode" => Ok(Some(Taken::SslMode(value.to_string()))),
        "sslrootcert" => Ok(Some(Taken::RootCert(value.to_string()))),
        "sslcert" | "sslkey" | "sslpassword" | "sslcrl" | "sslcrldir" | "sslsni" => {
            Err(StoreError::InvalidArgument(format!(
                "database URL: {key} is not supported (client certificates and CRLs are not \
                 implemented; use sslmode and sslrootcert)"
            )))
        }
        _ => Ok(None),
    }
}

/// Parse a URL or keyword/value connection string.
pub(crate) fn parse(conninfo: &str) -> Result<Target> {
    let conninfo = conninfo.trim();
    if conninfo.is_empty() {
        return Err(StoreError::InvalidArgument("database URL is empty".into()));
    }
    let mut taken = Vec::new();
    let rest = if conninfo.starts_with("postgres://") || conninfo.starts_with("postgresql://") {
        strip_url(conninfo, &mut taken)?
    } else if conninfo.contains("://") {
        return Err(StoreError::InvalidArgument(
            "database URL: the scheme must be postgres:// or postgresql://".into(),
        ));
    } else {
        strip_keywords(conninfo, &mut taken)?
    };
    let mut ssl = SslMode::Prefer;
    let mut root_cert = RootCert::Default;
    for t in taken {
        match t {
            Taken::SslMode(v) => ssl = v.parse()?,
            Taken::RootCert(v) if v == "system" => root_cert = RootCert::System,
            Taken::RootCert(v) if v.is_empty() => root_cert = RootCert::Default,
            Taken::RootCert(v) => root_cert = RootCert::File(PathBuf::from(v)),
        }
    }
    let mut config = tokio_postgres::Config::from_str(&rest)
        .map_err(|e| StoreError::InvalidArgument(format!("database URL: {e}")))?;
    if config.get_hosts().is_empty() {
        return Err(StoreError::InvalidArgument("database URL: no host given".into()));
    }
    config.ssl_mode(match ssl {
        SslMode::Disable => tokio_postgres::config::SslMode::Disable,
        SslMode::Prefer => tokio_postgres::config::SslMode::Prefer,
        SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => {
            tokio_postgres::config::SslMode::Require
        }
    });
    Ok(Target { config, ssl, root_cert })
}

/// Removes the taken keys from a URL's query string.
fn strip_url(url: &str, taken: &mut Vec<Taken>) -> Result<String> {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, q),
        None => return Ok(url.to_string()),
    };
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        match take(&percent_decode(k)?, &percent_decode(v)?)? {
            Some(t) => taken.push(t),
            None => kept.push(pair),
        }
    }
    Ok(if kept.is_empty() { base.to_string() } else { format!("{base}?{}", kept.join("&")) })
}

/// Decodes `%XX` escapes (and `+` is kept as is, as libpq does).
fn percent_decode(s: &str) -> Result<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| StoreError::InvalidArgument("database URL: bad %-escape".into()))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out)
        .map_err(|_| StoreError::InvalidArgument("database URL: %-escapes are not UTF-8".into()))
}

/// Removes the taken keys from a keyword/value string; the others are written back quoted.
fn strip_keywords(s: &str, taken: &mut Vec<Taken>) -> Result<String> {
    let mut kept = Vec::new();
    for (k, v) in keyword_pairs(s)? {
        match take(&k, &v)? {
            Some(t) => taken.push(t),
            None => kept.push(format!("{k}='{}'", v.replace('\\', "\\\\").replace('\'', "\\'"))),
        }
    }
    Ok(kept.join(" "))
}

/// Splits `key = value key2='quoted \' value'` into pairs (libpq's rules).
fn keyword_pairs(s: &str) -> Result<Vec<(String, String)>> {
    let bad = |what: &str| StoreError::InvalidArgument(format!("database URL: {what}"));
    let mut chars = s.chars().peekable();
    let mut pairs = Vec::new();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.peek().is_none() {
            return Ok(pairs);
        }
        let mut key = String::new();
        while let Some(c) = chars.next_if(|c| *c != '=' && !c.is_whitespace()) {
            key.push(c);
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.next() != Some('=') {
            return Err(bad(&format!("expected `=` after {key:?}")));
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        if chars.next_if_eq(&'\'').is_some() {
            loop {
                match chars.next() {
                    Some('\'') => break,
                    Some('\\') => value.push(chars.next().ok_or_else(|| bad("dangling `\\`"))?),
                    Some(c) => value.push(c),
                    None => return Err(bad("unterminated quoted value")),
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
                if c == '\\' {
                    value.push(chars.next().ok_or_else(|| bad("dangling `\\`"))?);
                } else {
                    value.push(c);
                }
            }
        }
        pairs.push((key, value));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_ssl_keys_are_taken_out() {
        let t = parse("postgres://u:p@db.example:6000/orbit?sslmode=verify-full&sslrootcert=%2Ftmp%2Fca.pem&application_name=x").unwrap();
        assert_eq!(t.ssl, SslMode::VerifyFull);
        assert_eq!(t.root_cert, RootCert::File("/tmp/ca.pem".into()));
        assert_eq!(t.config.get_dbname(), Some("orbit"));
        assert_eq!(t.config.get_application_name(), Some("x"));
        assert_eq!(t.config.get_ports(), [6000]);
    }

    #[test]
    fn keyword_strings_keep_quoted_values() {
        let t =
            parse("host=localhost  password='it\\'s secret' sslmode = verify-ca dbname=x").unwrap();
        assert_eq!(t.ssl, SslMode::VerifyCa);
        assert_eq!(t.config.get_password(), Some(&b"it's secret"[..]));
        assert_eq!(t.config.get_dbname(), Some("x"));
        assert_eq!(parse("host=h").unwrap().ssl, SslMode::Prefer, "libpq's default");
        assert_eq!(parse("host=h sslrootcert=system").unwrap().root_cert, RootCert::System);
    }

    #[test]
    fn bad_strings_are_refused_without_echoing_them() {
        for bad in [
            "",
            "postgres://u:hunter2@h/db?sslmode=maybe",
            "mysql://u:hunter2@h/db",
            "host=h password='hunter2",
            "postgres://u:hunter2@h:notaport/db",
            "host=h sslcert=/c.pem",
            "postgres://u:hunter2@h/db?sslrootcert=%zz",
        ] {
            match parse(bad) {
                Err(StoreError::InvalidArgument(m)) => assert!(!m.contains("hunter2"), "{m}"),
                other => panic!("{bad:?}: {other:?}"),
            }
        }
    }
}
