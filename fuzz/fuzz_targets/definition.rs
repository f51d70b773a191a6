//! Arbitrary bytes as a workflow definition document (YAML or JSON), through the entry point
//! `RegisterWorkflow` uses (`orbit_definition::parse` on the request's string). A document
//! that parses must survive the round trip the server stores: its canonical JSON parses
//! again to the same definition hash.
#![no_main]

use libfuzzer_sys::fuzz_target;
use orbit_definition::{canonical_json, parse, to_document};

fuzz_target!(|data: &[u8]| {
    // gRPC strings are UTF-8 (prost refuses anything else before the handler runs).
    let Ok(text) = std::str::from_utf8(data) else { return };
    if text.trim().is_empty() {
        return; // refused by the handler before parsing
    }
    if let Ok(def) = parse(text) {
        let stored = canonical_json(&to_document(&def));
        let again = parse(&stored).expect("the stored canonical document parses again");
        assert_eq!(again.hash, def.hash, "the stored document keeps the definition hash");
    }
});
