//! Orbit's errors read by gRPC clients that are not Orbit's own code, through reflection
//! only (no .proto files given): grpcurl and `buf curl` against the real `orbit dev` decode
//! the `google.rpc.ErrorInfo` detail of every Orbit error (its `reason` is the Orbit code)
//! and the `google.rpc.BadRequest` of a field violation. Reflection serves the `google/rpc`
//! descriptors for that; without them grpcurl prints "google.rpc.ErrorInfo is not
//! recognized". `buf curl` names each detail's type and prints its bytes (it decodes only
//! the types compiled into buf itself, whatever reflection serves); the bytes are the
//! `ErrorInfo` with the Orbit code.

mod common;

use common::buf::buf_curl_raw;
use common::grpcurl::grpcurl_raw;
use common::{Server, TempDir};
use prost::Message as _;
use serde_json::Value;

const DESCRIBE: &str = "orbit.v1.WorkflowService/DescribeExecution";
const START: &str = "orbit.v1.WorkflowService/StartExecution";

/// The JSON document in `text` (grpcurl's `-format-error` output, buf's error report).
fn json_in(text: &str) -> Value {
    let start = text.find('{').unwrap_or_else(|| panic!("no JSON in: {text}"));
    let end = text.rfind('}').unwrap_or_else(|| panic!("no JSON in: {text}"));
    serde_json::from_str(&text[start..=end]).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// Decodes base64 as buf prints it (standard alphabet, padding optional).
fn base64(text: &str) -> Vec<u8> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let (mut out, mut acc, mut bits) = (Vec::new(), 0u32, 0u32);
    for c in text.bytes().filter(|&c| c != b'=') {
        let v = ALPHABET.iter().position(|&a| a == c).unwrap_or_else(|| panic!("base64: {text}"));
        acc = (acc << 6) | u32::try_from(v).expect("6 bits");
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push(u8::try_from((acc >> bits) & 0xff).expect("a byte"));
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpcurl_and_buf_curl_decode_error_info_through_reflection() {
    let dir = TempDir::new("error-details");
    let server = Server::start(&dir.0.join("orbit.db"), &[]).await;
    let target = format!("127.0.0.1:{}", server.port);
    let base = server.address();
    let cwd = dir.0.clone();
    let missing = r#"{"execution_id": "no-such-execution"}"#.to_string();
    let (plain, formatted, bad_request, buf) = tokio::task::spawn_blocking(move || {
        let describe = |extra: &[&str]| {
            let args = [extra, &["-plaintext", "-d", &missing, &target, DESCRIBE]].concat();
            grpcurl_raw(&args)
        };
        let plain = describe(&[]);
        let formatted = describe(&["-format-error"]);
        let bad_request = grpcurl_raw(&["-plaintext", "-format-error", "-d", "{}", &target, START]);
        let url = format!("{base}/{DESCRIBE}");
        let buf = buf_curl_raw(&cwd, &["--http2-prior-knowledge", "-d", &missing, &url]);
        (plain, formatted, bad_request, buf)
    })
    .await
    .expect("client thread");

    // grpcurl's default error report: the detail printed decoded, with its fields.
    let (ok, out, err) = &plain;
    let text = format!("{out}{err}");
    assert!(!ok, "DescribeExecution of a missing execution succeeded: {text}");
    assert!(!text.contains("is not recognized"), "grpcurl could not decode a detail: {text}");
    assert!(text.contains("Code: NotFound"), "{text}");
    assert!(text.contains("type.googleapis.com/google.rpc.ErrorInfo"), "{text}");
    // grpcurl prints each detail as one JSON object; spacing varies between versions.
    let compact = text.replace([' ', '\n', '\t'], "");
    assert!(compact.contains(r#""reason":"EXECUTION_NOT_FOUND""#), "reason not decoded: {text}");
    assert!(compact.contains(r#""domain":"orbit.dev""#), "{text}");

    // `-format-error`: the status as JSON, every detail an object of its decoded fields.
    // (grpcurl writes the formatted error to stderr.)
    let (ok, out, err) = &formatted;
    assert!(!ok, "{out}{err}");
    let status = json_in(err);
    assert_eq!(status["code"], 5, "NOT_FOUND: {status}");
    let info = &status["details"][0];
    assert_eq!(info["@type"], "type.googleapis.com/google.rpc.ErrorInfo", "{status}");
    assert_eq!(info["reason"], "EXECUTION_NOT_FOUND", "{status}");
    assert_eq!(info["domain"], "orbit.dev", "{status}");

    // A field violation also travels as a decoded google.rpc.BadRequest.
    let (ok, out, err) = &bad_request;
    assert!(!ok, "StartExecution without a workflow succeeded: {out}{err}");
    let status = json_in(err);
    assert_eq!(status["code"], 3, "INVALID_ARGUMENT: {status}");
    let details = status["details"].as_array().unwrap_or_else(|| panic!("no details: {status}"));
    let of_type = |t: &str| {
        details
            .iter()
            .find(|d| d["@type"] == format!("type.googleapis.com/google.rpc.{t}"))
            .unwrap_or_else(|| panic!("no {t} in {status}"))
    };
    assert_eq!(of_type("ErrorInfo")["reason"], "INVALID_ARGUMENT", "{status}");
    let violation = &of_type("BadRequest")["fieldViolations"][0];
    assert_eq!(violation["field"], "workflow", "{status}");

    // buf curl: the error on stderr as JSON, each detail its type name and bytes.
    let (ok, out, err) = &buf;
    assert!(!ok, "buf curl DescribeExecution succeeded: {out}");
    let report = json_in(err);
    assert_eq!(report["code"], "not_found", "{err}");
    let detail = &report["details"][0];
    assert_eq!(detail["type"], "google.rpc.ErrorInfo", "{err}");
    let bytes = base64(detail["value"].as_str().unwrap_or_else(|| panic!("no value: {err}")));
    let info = tonic_types::pb::ErrorInfo::decode(bytes.as_slice()).expect("an ErrorInfo");
    assert_eq!((info.reason.as_str(), info.domain.as_str()), ("EXECUTION_NOT_FOUND", "orbit.dev"));
}
