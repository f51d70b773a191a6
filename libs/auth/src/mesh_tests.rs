//! Unit tests of the mesh header parsers: Envoy's documented XFCC examples, quoting,
//! which element is trusted, malformed values, and Linkerd's `l5d-client-id`.

use super::*;

const HASH: &str = "468ed33be74eee6556d90c0149c1309e9ba61d6425303443c0748a02dd8de688";

fn headers(pairs: &[(&str, &str)]) -> http::HeaderMap {
    let mut map = http::HeaderMap::new();
    for (name, value) in pairs {
        map.append(
            http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            http::HeaderValue::from_str(value).unwrap(),
        );
    }
    map
}

#[test]
fn envoy_documented_examples_parse() {
    // Example 1 of Envoy's documentation: one element, quoted one-line subject, URI SAN.
    let one = format!(
        "By=http://frontend.lyft.com;Hash={HASH};Subject=\"/C=US/ST=CA/L=San Francisco/OU=Lyft/CN=Test Client\";URI=http://testclient.lyft.com"
    );
    let elements = parse_xfcc(&one).unwrap();
    assert_eq!(elements.len(), 1);
    assert_eq!(elements[0].by.as_deref(), Some("http://frontend.lyft.com"));
    assert_eq!(elements[0].hash.as_deref(), Some(HASH));
    assert_eq!(xfcc_peer_names(&one).unwrap(), ["http://testclient.lyft.com", "Test Client"]);

    // Example 3: URI and two DNS SANs in one element.
    let dns = format!("By=http://frontend.lyft.com;Hash={HASH};URI=http://testclient.lyft.com;DNS=lyft.com;DNS=www.lyft.com");
    assert_eq!(
        xfcc_peer_names(&dns).unwrap(),
        ["http://testclient.lyft.com", "lyft.com", "www.lyft.com"]
    );
}

#[test]
fn only_the_last_element_is_the_peer() {
    // Example 2 of Envoy's documentation: two hops. The first element was written
    // upstream (or by the client itself); the last is what our sidecar verified.
    let two = format!(
        "By=http://frontend.lyft.com;Hash={HASH};URI=http://testclient.lyft.com,By=http://backend.lyft.com;Hash={HASH};URI=http://frontend.lyft.com"
    );
    assert_eq!(parse_xfcc(&two).unwrap().len(), 2);
    assert_eq!(xfcc_peer_names(&two).unwrap(), ["http://frontend.lyft.com"]);

    // A forged element naming an admin, followed by the sidecar's own: only the latter counts.
    let forged = "URI=spiffe://cluster.local/ns/ops/sa/admin,By=spiffe://cluster.local/ns/prod/sa/orbit;URI=spiffe://cluster.local/ns/prod/sa/billing";
    assert_eq!(xfcc_peer_names(forged).unwrap(), ["spiffe://cluster.local/ns/prod/sa/billing"]);
}

#[test]
fn quoted_values_keep_separators_and_escaped_quotes() {
    let value = r#"By="spiffe://a";Subject="CN=billing\, Inc.,O=Acme;=,\"x\"";URI="spiffe://cluster.local/ns/prod/sa/billing""#;
    let elements = parse_xfcc(value).unwrap();
    assert_eq!(elements.len(), 1, "the comma inside quotes does not split elements");
    assert_eq!(elements[0].subject.as_deref(), Some(r#"CN=billing\, Inc.,O=Acme;=,"x""#));
    assert_eq!(
        elements[0].names(),
        ["spiffe://cluster.local/ns/prod/sa/billing", "billing, Inc."],
        "RFC 2253 subject: the escaped comma stays in the CN"
    );
    // Keys are case-insensitive; surrounding spaces are tolerated.
    let spaced = " uri = spiffe://x/ns/a/sa/b ; dns=b.example ";
    assert_eq!(xfcc_peer_names(spaced).unwrap(), ["spiffe://x/ns/a/sa/b", "b.example"]);
}

#[test]
fn cert_chain_and_unknown_keys_are_ignored() {
    let value =
        "Hash=ab;Cert=\"-----BEGIN%20CERTIFICATE-----%0A\";Chain=\"x\";Future=1;DNS=w.example";
    assert_eq!(xfcc_peer_names(value).unwrap(), ["w.example"]);
}

#[test]
fn malformed_values_are_errors() {
    for bad in [
        "",                                  // no element at all
        "URI=spiffe://a,",                   // empty last element
        ",URI=spiffe://a",                   // empty first element
        "URI=spiffe://a;justtext",           // pair without '='
        "=spiffe://a",                       // empty key
        "Subject=\"CN=a",                    // unterminated quote
        "URI=\"spiffe://a\"tail",            // text after the closing quote
        "URI=spi\"ffe",                      // stray quote in a bare value
        "Subject=\"CN=a\";Subject=\"CN=b\"", // a single-valued key twice
        "By=spiffe://proxy;Hash=ab",         // the peer element names nobody
        "URI=spiffe://a,Hash=ab",            // ... even if an earlier one does
        "Subject=\"O=no common name\"",
    ] {
        assert!(xfcc_peer_names(bad).is_err(), "accepted {bad:?}");
    }
}

#[test]
fn subjects_in_both_forms() {
    assert_eq!(subject_common_names("/C=US/O=Acme/CN=worker-1"), ["worker-1"]);
    assert_eq!(subject_common_names("CN=worker-1,O=Acme,C=US"), ["worker-1"]);
    assert_eq!(subject_common_names("cn=a+CN=b,O=x"), ["a", "b"]);
    assert!(subject_common_names("O=Acme").is_empty());
}

#[test]
fn linkerd_client_id() {
    let name = "billing.prod.serviceaccount.identity.linkerd.cluster.local";
    assert_eq!(linkerd_names(name).unwrap(), [name]);
    for bad in ["", "  ", "a b", "a,b", "spiffe://x/y", "a;b"] {
        assert!(linkerd_names(bad).is_err(), "accepted {bad:?}");
    }
}

#[test]
fn names_reads_only_the_configured_header() {
    let linkerd = "billing.prod.serviceaccount.identity.linkerd.cluster.local";
    let both = headers(&[(LINKERD_HEADER, linkerd), (XFCC_HEADER, "URI=spiffe://x/sa/y")]);
    assert_eq!(MeshIdentity::Linkerd.names(&both).unwrap().unwrap(), [linkerd]);
    assert_eq!(MeshIdentity::Xfcc.names(&both).unwrap().unwrap(), ["spiffe://x/sa/y"]);
    let none = headers(&[("authorization", "Bearer x")]);
    assert_eq!(MeshIdentity::Linkerd.names(&none).unwrap(), None);
    assert_eq!(MeshIdentity::Xfcc.names(&none).unwrap(), None);
    // Two header lines: which one the proxy wrote is unknown, so neither is trusted.
    let twice = headers(&[(XFCC_HEADER, "URI=spiffe://a"), (XFCC_HEADER, "URI=spiffe://b")]);
    assert!(MeshIdentity::Xfcc.names(&twice).is_err());
    let twice = headers(&[(LINKERD_HEADER, "a.b"), (LINKERD_HEADER, "c.d")]);
    assert!(MeshIdentity::Linkerd.names(&twice).is_err());
}

#[test]
fn parses_its_flag_values() {
    assert_eq!("linkerd".parse::<MeshIdentity>().unwrap(), MeshIdentity::Linkerd);
    assert_eq!("xfcc".parse::<MeshIdentity>().unwrap(), MeshIdentity::Xfcc);
    assert!("istio".parse::<MeshIdentity>().is_err());
    assert_eq!(MeshIdentity::Xfcc.header(), "x-forwarded-client-cert");
}

/// The layer's decisions with and without mesh identity, on one identities file.
mod decisions {
    use super::{LINKERD_HEADER, XFCC_HEADER};
    use crate::layer::{authorize, authorize_with, PeerCertNames};
    use crate::mesh::MeshIdentity;
    use crate::token::hash_token_hex;
    use crate::{Identities, IdentityStore};
    use orbit_server_kit::error::ErrorCode;

    const BILLING: &str = "billing.prod.serviceaccount.identity.linkerd.cluster.local";
    const SPIFFE: &str = "spiffe://cluster.local/ns/prod/sa/shipping";

    fn store() -> IdentityStore {
        let text = format!(
            "identities:\n\
             - {{name: billing, kind: client, cert_names: [{BILLING}], actions: [read], workflows: ['*']}}\n\
             - {{name: shipping, kind: client, cert_names: ['{SPIFFE}'], actions: [read], workflows: ['*']}}\n\
             - {{name: ops, kind: admin, token_sha256: {}}}\n",
            hash_token_hex("ops-token")
        );
        IdentityStore::new(Identities::parse(&text).unwrap())
    }

    fn request(headers: &[(&str, &str)]) -> http::Request<()> {
        let mut builder = http::Request::builder().uri("/orbit.v1.WorkflowService/ListWorkflows");
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        builder.body(()).unwrap()
    }

    fn who(mesh: Option<MeshIdentity>, request: &http::Request<()>) -> Result<String, ErrorCode> {
        authorize_with(&store(), mesh, request)
            .map(|c| c.expect("not an open method").name.clone())
            .map_err(|e| e.code)
    }

    #[test]
    fn mesh_headers_are_ignored_unless_trusted() {
        let linkerd = request(&[(LINKERD_HEADER, BILLING)]);
        let xfcc = request(&[(XFCC_HEADER, &format!("URI={SPIFFE}"))]);
        for r in [&linkerd, &xfcc] {
            assert_eq!(who(None, r), Err(ErrorCode::Unauthenticated));
            let plain = authorize(&store(), r).map(|_| ()).map_err(|e| e.code);
            assert_eq!(plain, Err(ErrorCode::Unauthenticated), "authorize ignores them too");
        }
        // Each mode reads only its own header.
        assert_eq!(who(Some(MeshIdentity::Xfcc), &linkerd), Err(ErrorCode::Unauthenticated));
        assert_eq!(who(Some(MeshIdentity::Linkerd), &xfcc), Err(ErrorCode::Unauthenticated));
        assert_eq!(who(Some(MeshIdentity::Linkerd), &linkerd).as_deref(), Ok("billing"));
        assert_eq!(who(Some(MeshIdentity::Xfcc), &xfcc).as_deref(), Ok("shipping"));
    }

    #[test]
    fn the_mesh_identity_still_needs_the_right() {
        let mut xfcc = request(&[(XFCC_HEADER, &format!("URI={SPIFFE}"))]);
        // shipping holds only `read`; RegisterWorkflow is `register`.
        *xfcc.uri_mut() = http::Uri::from_static("/orbit.v1.WorkflowService/RegisterWorkflow");
        let error = authorize_with(&store(), Some(MeshIdentity::Xfcc), &xfcc).unwrap_err();
        assert_eq!(error.code, ErrorCode::PermissionDenied);
        assert!(error.message.contains("shipping"), "{}", error.message);
    }

    #[test]
    fn a_bearer_token_takes_precedence_over_the_mesh_header() {
        let both = request(&[(LINKERD_HEADER, BILLING), ("authorization", "Bearer ops-token")]);
        assert_eq!(who(Some(MeshIdentity::Linkerd), &both).as_deref(), Ok("ops"));
        let bad = request(&[(LINKERD_HEADER, BILLING), ("authorization", "Bearer wrong")]);
        assert_eq!(who(Some(MeshIdentity::Linkerd), &bad), Err(ErrorCode::Unauthenticated));
    }

    #[test]
    fn unknown_or_malformed_mesh_identities_are_unauthenticated() {
        let mesh = Some(MeshIdentity::Xfcc);
        for value in ["URI=spiffe://cluster.local/ns/prod/sa/nobody", "URI=\"open", "By=x;Hash=y"] {
            assert_eq!(
                who(mesh, &request(&[(XFCC_HEADER, value)])),
                Err(ErrorCode::Unauthenticated)
            );
        }
        let linkerd = request(&[(
            LINKERD_HEADER,
            "nobody.prod.serviceaccount.identity.linkerd.cluster.local",
        )]);
        assert_eq!(who(Some(MeshIdentity::Linkerd), &linkerd), Err(ErrorCode::Unauthenticated));
        // A present but unusable header is not skipped in favour of a certificate.
        let mut r = request(&[(LINKERD_HEADER, "not one name")]);
        r.extensions_mut().insert(PeerCertNames(vec![BILLING.to_owned()]));
        assert_eq!(who(Some(MeshIdentity::Linkerd), &r), Err(ErrorCode::Unauthenticated));
        // Without the header, the certificate still identifies the caller.
        let mut r = request(&[]);
        r.extensions_mut().insert(PeerCertNames(vec![BILLING.to_owned()]));
        assert_eq!(who(Some(MeshIdentity::Linkerd), &r).as_deref(), Ok("billing"));
    }
}
