//! Unit tests: the action table against the descriptor set, the identities file (parse
//! errors with paths, token and certificate matching), and the access rule of every kind.

use prost::Message as _;
use prost_types::FileDescriptorSet;

use crate::action::{access_of, Access, Action, METHOD_TABLE};
use crate::identities::{Identities, Kind};
use crate::token::hash_token_hex;

/// Every `/package.Service/Method` path of the API's descriptor set.
fn every_rpc_path() -> Vec<String> {
    let fds = FileDescriptorSet::decode(orbit_api::FILE_DESCRIPTOR_SET).expect("descriptor set");
    let mut paths = Vec::new();
    for file in fds.file.iter().filter(|f| f.package().starts_with("orbit.")) {
        for service in &file.service {
            for method in &service.method {
                paths.push(format!("/{}.{}/{}", file.package(), service.name(), method.name()));
            }
        }
    }
    paths
}

#[test]
fn every_rpc_of_the_descriptor_set_has_an_access_rule() {
    let paths = every_rpc_path();
    // Sanity: the walk found public, admin, worker, schedule and internal RPCs.
    for service in ["WorkflowService", "AdminService", "WorkerService", "ScheduleService"] {
        assert!(paths.iter().any(|p| p.starts_with(&format!("/orbit.v1.{service}/"))), "{service}");
    }
    assert!(paths.iter().any(|p| p.starts_with("/orbit.internal.v1.OwnerService/")));
    let missing: Vec<_> = paths.iter().filter(|p| access_of(p).is_none()).collect();
    assert!(missing.is_empty(), "RPCs without an entry in the action table: {missing:?}");
    // No public RPC is open, and every internal one is service-only.
    for path in &paths {
        let access = access_of(path).unwrap();
        assert_ne!(access, Access::Open, "{path} must not be open");
        assert_eq!(path.starts_with("/orbit.internal."), access == Access::Service, "{path}");
    }
    // The explicit table names no RPC that does not exist (a renamed RPC is noticed).
    for (path, _) in METHOD_TABLE {
        assert!(paths.iter().any(|p| p == path), "{path} is not in the descriptor set");
    }
}

#[test]
fn actions_of_representative_methods() {
    let client = |a| Some(Access::Client(a));
    assert_eq!(access_of("/orbit.v1.WorkflowService/StartExecution"), client(Action::Start));
    assert_eq!(access_of("/orbit.v1.WorkflowService/SignalExecution"), client(Action::Signal));
    assert_eq!(access_of("/orbit.v1.WorkflowService/QueryExecution"), client(Action::Query));
    assert_eq!(access_of("/orbit.v1.WorkflowService/CancelExecution"), client(Action::Cancel));
    assert_eq!(access_of("/orbit.v1.WorkflowService/UpdateExecution"), client(Action::Update));
    assert_eq!(access_of("/orbit.v1.WorkflowService/ListWorkflows"), client(Action::Read));
    assert_eq!(access_of("/orbit.v1.WorkflowService/RegisterWorkflow"), client(Action::Register));
    assert_eq!(access_of("/orbit.v1.AdminService/Replay"), client(Action::Admin));
    assert_eq!(access_of("/orbit.v1.WorkerService/Session"), Some(Access::Worker));
    assert_eq!(access_of("/orbit.internal.v1.SchedulerService/Status"), Some(Access::Service));
    assert_eq!(access_of("/grpc.health.v1.Health/Check"), Some(Access::Open));
    let reflection = "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo";
    assert_eq!(access_of(reflection), Some(Access::Open));
    assert_eq!(access_of("/orbit.v1.WorkflowService/NoSuchMethod"), None);
    assert_eq!(access_of("/evil.Service/Method"), None);
}

const FILE: &str = r#"
identities:
  - name: ops
    kind: admin
    token_sha256: "HASH_OPS"
  - name: billing-app
    kind: client
    token_sha256: "HASH_APP"
    actions: [start, read]
    workflows: ["billing.*"]
  - name: billing-workers
    kind: worker
    cert_names: [billing-worker.orbit.internal]
    tasks: ["billing.*"]
    runtime: python
  - name: frontend
    kind: service
    cert_names: [frontend.orbit.internal]
"#;

fn sample() -> Identities {
    let text = FILE.replace("HASH_OPS", &hash_token_hex("ops-token"));
    Identities::parse(&text.replace("HASH_APP", &hash_token_hex("app-token"))).unwrap()
}

#[test]
fn tokens_and_certificate_names_find_their_identity() {
    let ids = sample();
    assert_eq!(ids.all().len(), 4);
    assert_eq!(ids.by_token("ops-token").unwrap().name, "ops");
    assert_eq!(ids.by_token("app-token").unwrap().name, "billing-app");
    assert!(ids.by_token("app-token ").is_none());
    assert!(ids.by_token("nope").is_none());
    // The hash itself is not a token.
    assert!(ids.by_token(&hash_token_hex("ops-token")).is_none());
    let certs = |names: &[&str]| names.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let worker = ids.by_cert_names(&certs(&["x", "billing-worker.orbit.internal"])).unwrap();
    assert_eq!((worker.name.as_str(), worker.kind), ("billing-workers", Kind::Worker));
    assert!(ids.by_cert_names(&certs(&["ops"])).is_none());
}

#[test]
fn every_kind_gets_exactly_its_rights() {
    let ids = sample();
    let by = |name: &str| ids.all().iter().find(|i| i.name == name).unwrap().clone();
    let (admin, client, worker, service) =
        (by("ops"), by("billing-app"), by("billing-workers"), by("frontend"));
    for action in Action::ALL {
        let access = Access::Client(action);
        assert!(admin.allows(access), "admin {action}");
        assert_eq!(
            client.allows(access),
            matches!(action, Action::Start | Action::Read),
            "{action}"
        );
        assert!(!worker.allows(access) && !service.allows(access), "{action}");
    }
    assert!(admin.allows(Access::Worker) && worker.allows(Access::Worker));
    assert!(!client.allows(Access::Worker) && !service.allows(Access::Worker));
    assert!(service.allows(Access::Service));
    assert!(!admin.allows(Access::Service) && !client.allows(Access::Service));
    assert!(!worker.allows(Access::Service));
    // Patterns: workflows for clients, tasks for workers.
    assert!(client.may_act_on("billing.charge") && !client.may_act_on("shipping.pack"));
    assert!(worker.may_claim("billing.charge") && !worker.may_claim("shipping.pack"));
    assert!(!client.may_claim("billing.charge") && !worker.may_act_on("billing.charge"));
    assert!(admin.may_act_on("anything") && admin.may_claim("anything"));
    assert!(worker.runtime_allowed("python") && !worker.runtime_allowed("rust"));
    // The SDKs announce `<language> <version>`: the language pin admits any version.
    assert!(worker.runtime_allowed("python 3.12") && !worker.runtime_allowed("python3"));
    assert!(!worker.runtime_allowed("rust 1.88.0") && !worker.runtime_allowed("pythonista 1"));
    assert!(client.runtime_allowed("rust"));
}

#[test]
fn file_errors_name_the_path_and_a_stable_code() {
    let hash = hash_token_hex("t");
    let cases: Vec<(String, &str, &str)> = vec![
        ("identities:\n  - name: a\n    kind: boss\n    token_sha256: H".into(), "identities[0].kind", "UNKNOWN_KIND"),
        ("identities:\n  - name: a\n    kind: admin\n    token_sha256: secret".into(), "identities[0].token_sha256", "INVALID_TOKEN_HASH"),
        ("identities:\n  - name: a\n    kind: admin".into(), "identities[0].token_sha256", "NO_CREDENTIAL"),
        ("identities:\n  - name: a\n    kind: client\n    token_sha256: H\n    actions: [read, launch]".into(), "identities[0].actions[1]", "UNKNOWN_ACTION"),
        ("identities:\n  - name: a\n    kind: worker\n    token_sha256: H\n    actions: [read]".into(), "identities[0].actions", "FIELD_NOT_ALLOWED"),
        ("identities:\n  - name: a\n    kind: client\n    token_sha256: H\n    tasks: [x]".into(), "identities[0].tasks", "FIELD_NOT_ALLOWED"),
        ("identities:\n  - name: a\n    kind: admin\n    token_sha256: H\n  - name: a\n    kind: admin\n    cert_names: [c]".into(), "identities[1].name", "DUPLICATE_NAME"),
        ("identities:\n  - name: a\n    kind: admin\n    token_sha256: H\n  - name: b\n    kind: admin\n    token_sha256: H".into(), "identities[1].token_sha256", "DUPLICATE_CREDENTIAL"),
        ("identities:\n  - name: a\n    kind: worker\n    cert_names: [c]\n    tasks: ['']".into(), "identities[0].tasks[0]", "EMPTY_PATTERN"),
        ("identities:\n  - name: a\n    kind: admin\n    token: H".into(), "line 4 column 5", "PARSE_ERROR"),
    ];
    for (text, path, code) in cases {
        let error = Identities::parse(&text.replace('H', &hash)).unwrap_err();
        assert_eq!((error.path.as_str(), error.code), (path, code), "{text}\n{error}");
    }
}
