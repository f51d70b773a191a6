//! The caller's identity as a service mesh's sidecar proxy verified it.
//!
//! Under a mesh (Linkerd, Istio), the local sidecar terminates mutual TLS and forwards the
//! request in plain text; it then tells the application who the verified peer was in a
//! header. [`MeshIdentity`] names which header to trust, and this module turns its value
//! into names matched against identities' `cert_names`, like a verified certificate's:
//!
//! - Linkerd: `l5d-client-id` holds the peer proxy's identity, a DNS-like name such as
//!   `billing.prod.serviceaccount.identity.linkerd.cluster.local`.
//! - Envoy / Istio: `x-forwarded-client-cert` (XFCC) holds one element per proxy hop,
//!   comma-separated; each element is `;`-separated `Key=value` pairs (keys `By`, `Hash`,
//!   `Cert`, `Chain`, `Subject`, `URI`, `DNS`, case-insensitive; a value holding `,`, `;` or
//!   `=` is double-quoted, with `\"` for a quote inside). The names are the element's `URI`
//!   SANs (`spiffe://cluster.local/ns/prod/sa/billing`), `DNS` SANs and the subject's CN.
//!
//! The header is only read when the server was told to trust it (`--mesh-identity`): the
//! mesh's proxy removes or rewrites it on every request, but a client talking to the port
//! directly could send anything. Parsing is strict: a value that does not parse is refused
//! rather than guessed at. Pure functions, no IO.

use std::fmt;
use std::str::FromStr;

/// Which mesh header carries the verified peer identity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MeshIdentity {
    /// Linkerd's `l5d-client-id`.
    Linkerd,
    /// Envoy's (and so Istio's) `x-forwarded-client-cert`.
    Xfcc,
}

/// The header Linkerd's inbound proxy sets to the client proxy's verified identity.
pub const LINKERD_HEADER: &str = "l5d-client-id";
/// The header Envoy sets to the verified client certificate's details.
pub const XFCC_HEADER: &str = "x-forwarded-client-cert";

impl MeshIdentity {
    /// The name used on the command line.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            MeshIdentity::Linkerd => "linkerd",
            MeshIdentity::Xfcc => "xfcc",
        }
    }

    /// The header this mesh puts the peer identity in.
    #[must_use]
    pub fn header(self) -> &'static str {
        match self {
            MeshIdentity::Linkerd => LINKERD_HEADER,
            MeshIdentity::Xfcc => XFCC_HEADER,
        }
    }

    /// The peer's names from the request headers: `Ok(None)` when the header is absent,
    /// `Err` when it is present but cannot be trusted (repeated, not text, malformed, or
    /// naming nothing).
    ///
    /// # Errors
    /// A description of what is wrong with the header (safe to log: it holds no secret).
    pub fn names(self, headers: &http::HeaderMap) -> Result<Option<Vec<String>>, String> {
        let header = self.header();
        let mut values = headers.get_all(header).iter();
        let Some(value) = values.next() else { return Ok(None) };
        // One proxy sets one header line. Two lines are refused rather than joined: which
        // of them the proxy wrote would be a guess.
        if values.next().is_some() {
            return Err(format!("{header} is repeated"));
        }
        let value = value.to_str().map_err(|_| format!("{header} is not visible ASCII"))?;
        let names = match self {
            MeshIdentity::Linkerd => linkerd_names(value)?,
            MeshIdentity::Xfcc => xfcc_peer_names(value)?,
        };
        Ok(Some(names))
    }
}

impl fmt::Display for MeshIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for MeshIdentity {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "linkerd" => Ok(MeshIdentity::Linkerd),
            "xfcc" => Ok(MeshIdentity::Xfcc),
            other => Err(format!("unknown mesh identity {other:?} (linkerd or xfcc)")),
        }
    }
}

/// The name in an `l5d-client-id` value: one DNS-like name, nothing else.
///
/// # Errors
/// When the value is empty or holds characters no Linkerd identity has (spaces, commas).
pub fn linkerd_names(value: &str) -> Result<Vec<String>, String> {
    let name = value.trim();
    let valid = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_');
    if name.is_empty() || !name.chars().all(valid) {
        return Err(format!("{LINKERD_HEADER} is not one identity name: {value:?}"));
    }
    Ok(vec![name.to_owned()])
}

/// One XFCC element: the details one proxy added about the client certificate it verified.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct XfccElement {
    /// `By`: the URI SAN of the proxy that added the element.
    pub by: Option<String>,
    /// `Hash`: SHA-256 of the client certificate, hex.
    pub hash: Option<String>,
    /// `Subject`: the certificate's subject (`CN=a,O=b` or `/O=b/CN=a`).
    pub subject: Option<String>,
    /// `URI`: URI SANs of the certificate.
    pub uri: Vec<String>,
    /// `DNS`: DNS SANs of the certificate.
    pub dns: Vec<String>,
}

impl XfccElement {
    /// The names this element identifies the client by: URI SANs, DNS SANs, subject CNs.
    #[must_use]
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.uri.iter().chain(&self.dns).cloned().collect();
        if let Some(subject) = &self.subject {
            names.extend(subject_common_names(subject));
        }
        names.retain(|n| !n.is_empty());
        names
    }
}

/// Splits `text` at `separator` outside double quotes (inside quotes, a `\` pairs with the
/// next character, so `\"` does not close them). `Err` when a quote is left open.
fn split_unquoted(text: &str, separator: char) -> Result<Vec<&str>, String> {
    let (mut parts, mut start, mut quoted, mut escaped) = (Vec::new(), 0, false, false);
    for (i, c) in text.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            c if c == separator && !quoted => {
                parts.push(&text[start..i]);
                start = i + c.len_utf8();
            }
            _ => {}
        }
    }
    if quoted {
        return Err("unterminated double quote".to_owned());
    }
    parts.push(&text[start..]);
    Ok(parts)
}

/// A value as written: quoted (`"a;b"`, `\"` inside for a quote) or bare.
fn unquote(raw: &str) -> Result<String, String> {
    let Some(inner) = raw.strip_prefix('"') else {
        if raw.contains('"') {
            return Err(format!("stray double quote in {raw:?}"));
        }
        return Ok(raw.to_owned());
    };
    let Some(inner) = inner.strip_suffix('"') else {
        return Err(format!("text after the closing quote in {raw:?}"));
    };
    // Envoy escapes only quotes (`\"`); any other backslash pair is kept as written, so an
    // RFC 2253 subject's `\,` reaches the subject parser intact.
    let (mut out, mut chars) = (String::with_capacity(inner.len()), inner.chars());
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next().ok_or("a value ends with a backslash")? {
                '"' => out.push('"'),
                next => {
                    out.push('\\');
                    out.push(next);
                }
            },
            '"' => return Err(format!("text after the closing quote in {raw:?}")),
            c => out.push(c),
        }
    }
    Ok(out)
}

/// Parses a whole `x-forwarded-client-cert` value into its elements, first to last.
///
/// # Errors
/// When an element is empty, a pair has no `=` or an empty key, a quote is left open,
/// or `By`, `Hash` or `Subject` appears twice in one element.
pub fn parse_xfcc(value: &str) -> Result<Vec<XfccElement>, String> {
    let mut elements = Vec::new();
    for (n, text) in split_unquoted(value, ',')?.into_iter().enumerate() {
        let at = |e: String| format!("{XFCC_HEADER} element {n}: {e}");
        if text.trim().is_empty() {
            return Err(at("empty element".to_owned()));
        }
        let mut element = XfccElement::default();
        for pair in split_unquoted(text, ';').map_err(at)? {
            let pair = pair.trim();
            let (key, raw) =
                pair.split_once('=').ok_or_else(|| at(format!("{pair:?} is not key=value")))?;
            let key = key.trim();
            let value = unquote(raw.trim()).map_err(at)?;
            let once = |slot: &mut Option<String>| {
                if slot.replace(value.clone()).is_some() {
                    return Err(at(format!("{key} appears twice")));
                }
                Ok(())
            };
            match key.to_ascii_lowercase().as_str() {
                "" => return Err(at("empty key".to_owned())),
                "by" => once(&mut element.by)?,
                "hash" => once(&mut element.hash)?,
                "subject" => once(&mut element.subject)?,
                "uri" => element.uri.push(value),
                "dns" => element.dns.push(value),
                // Cert and Chain are URL-encoded PEM we do not need (the proxy verified the
                // chain); keys added by later Envoy versions are ignored the same way.
                _ => {}
            }
        }
        elements.push(element);
    }
    Ok(elements)
}

/// The names of the immediate peer in an XFCC value.
///
/// Trust only the LAST element. Envoy appends the element describing the client
/// certificate it verified itself to the END of the header (`APPEND_FORWARD`), or replaces
/// the header with that one element (`SANITIZE_SET`, what a sidecar should use); and with
/// either setting a request that did not arrive over mutual TLS has the header removed.
/// Everything before the last element was written by earlier hops — or by the client
/// itself — so it says who claims to be upstream, not who connected to our sidecar.
///
/// # Errors
/// When the value does not parse or its last element names no URI, DNS or subject CN.
pub fn xfcc_peer_names(value: &str) -> Result<Vec<String>, String> {
    let elements = parse_xfcc(value)?;
    let last = elements.last().map(XfccElement::names).unwrap_or_default();
    if last.is_empty() {
        return Err(format!("the last {XFCC_HEADER} element names no URI, DNS or subject CN"));
    }
    Ok(last)
}

/// The CN values of a subject in either form Envoy has printed: RFC 2253 (`CN=a,O=b`,
/// `\,` escapes a comma) or OpenSSL's one-line form (`/O=b/CN=a`).
#[must_use]
pub fn subject_common_names(subject: &str) -> Vec<String> {
    let (body, separator) = match subject.strip_prefix('/') {
        Some(rest) => (rest, '/'),
        None => (subject, ','),
    };
    let mut parts = Vec::new();
    let (mut current, mut escaped) = (String::new(), false);
    for c in body.chars() {
        match c {
            _ if escaped => {
                current.push(c);
                escaped = false;
            }
            '\\' => escaped = true,
            c if c == separator || (separator == ',' && c == '+') => {
                parts.push(std::mem::take(&mut current));
            }
            c => current.push(c),
        }
    }
    parts.push(current);
    parts
        .iter()
        .filter_map(|p| p.split_once('='))
        .filter(|(k, _)| k.trim().eq_ignore_ascii_case("cn"))
        .map(|(_, v)| v.trim().to_owned())
        .filter(|v| !v.is_empty())
        .collect()
}

#[cfg(test)]
#[path = "mesh_tests.rs"]
mod tests;
