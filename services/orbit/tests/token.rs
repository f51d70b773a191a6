//! `orbit token new` through the real binary: the printed token is fresh, 256-bit, shown
//! once, and the printed entry is a valid identities-file item that admits exactly that
//! token with the requested kind, holding only its hash.

use std::process::{Command, Output};

use orbit_auth::{Identities, Kind};
use serde_json::Value;

fn orbit(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_orbit")).args(args).output().expect("orbit runs")
}

fn new_json(name: &str, kind: &str) -> Value {
    let output = orbit(&["token", "new", name, "--kind", kind, "--output", "json"]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).expect("one JSON document")
}

#[test]
fn each_kind_prints_a_fresh_token_and_an_entry_admitting_only_its_hash() {
    for (kind, expected) in [
        ("client", Kind::Client),
        ("worker", Kind::Worker),
        ("admin", Kind::Admin),
        ("service", Kind::Service),
    ] {
        let doc = new_json("billing-app", kind);
        let token = doc["token"].as_str().unwrap();
        let entry = doc["entry"].as_str().unwrap();
        assert_eq!(token.len(), 64, "256 bits, hex");
        assert!(!entry.contains(token), "the entry never holds the token");
        let identities = Identities::parse(&format!("identities:\n{entry}")).expect("entry parses");
        let identity = identities.by_token(token).expect("the entry admits the token");
        assert_eq!((identity.name.as_str(), identity.kind), ("billing-app", expected));
        assert!(identities.by_token(&format!("{token}x")).is_none());
        assert_eq!(doc["token_sha256"].as_str().unwrap(), orbit_auth::token::hash_token_hex(token));
    }
    let first = new_json("a", "client");
    let second = new_json("a", "client");
    assert_ne!(first["token"], second["token"], "every call draws a new token");
}

#[test]
fn human_output_shows_the_token_once_and_the_entry() {
    let output = orbit(&["token", "new", "billing-workers", "--kind", "worker"]);
    assert!(output.status.success());
    let text = String::from_utf8(output.stdout).unwrap();
    let token =
        text.lines().next().unwrap().strip_prefix("token: ").expect("first line is the token");
    assert_eq!(text.matches(token).count(), 1, "the token appears once:\n{text}");
    let entry_start = text.find("  - name: billing-workers").expect("entry printed");
    let identities = Identities::parse(&format!("identities:\n{}", &text[entry_start..])).unwrap();
    let identity = identities.by_token(token).unwrap();
    assert!(identity.kind == Kind::Worker && identity.may_claim("anything"), "default tasks: *");
}

#[test]
fn bad_names_and_kinds_are_usage_errors() {
    for args in [
        &["token", "new", "has space"][..],
        &["token", "new", "x:y"],
        &["token", "new", "ok", "--kind", "root"],
    ] {
        let output = orbit(args);
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        assert!(output.stdout.is_empty(), "no token printed for {args:?}");
    }
}
