//! The identities file (YAML): who may call Orbit, matched by token hash or certificate name.
//!
//! ```yaml
//! identities:
//!   - name: ops
//!     kind: admin
//!     token_sha256: 5e88…            # hex SHA-256 of the bearer token
//!   - name: billing-app
//!     kind: client
//!     token_sha256: 9f86…
//!     actions: [start, signal, query, read]
//!     workflows: ["billing.*"]
//!   - name: billing-workers
//!     kind: worker
//!     cert_names: [billing-worker.orbit.internal]
//!     tasks: ["billing.*"]
//!     runtime: python
//!   - name: frontend
//!     kind: service
//!     cert_names: [frontend.orbit.internal]
//! ```
//!
//! Parsing is strict: unknown fields, fields that do not belong to the kind, bad hashes,
//! duplicate names or credentials are errors with a path (`identities[2].token_sha256`) and
//! a stable code, so a typo never silently widens or narrows access.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use serde::Deserialize;

use crate::action::{Access, Action};
use crate::pattern::{any_matches, Pattern};
use crate::token::{hash_token, hashes_equal, TokenHash};

/// The kind of an identity: what family of RPCs it may call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Every public RPC (all client actions, admin RPCs, worker RPCs); not internal ones.
    Admin,
    /// The client actions listed, on the workflows matching its patterns.
    Client,
    /// The worker RPCs, claiming only tasks matching its patterns.
    Worker,
    /// The internal `orbit.internal.v1.*` RPCs only (frontend → owner, → scheduler).
    Service,
}

impl Kind {
    /// The name used in the file.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Admin => "admin",
            Kind::Client => "client",
            Kind::Worker => "worker",
            Kind::Service => "service",
        }
    }
}

/// One identity of the file, validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    /// Its unique name, used in logs and refusals.
    pub name: String,
    /// Its kind.
    pub kind: Kind,
    /// SHA-256 of its bearer token, if it authenticates by token.
    pub token_sha256: Option<TokenHash>,
    /// Client-certificate names (subject CN or SAN) it authenticates with.
    pub cert_names: Vec<String>,
    /// Client: the actions it holds.
    pub actions: Vec<Action>,
    /// Client: the workflow names it may act on (empty: none).
    pub workflows: Vec<Pattern>,
    /// Worker: the task names it may claim (empty: none).
    pub tasks: Vec<Pattern>,
    /// Worker: the runtime it must announce in `Hello`, if pinned.
    pub runtime: Option<String>,
}

impl Identity {
    /// Whether this identity may call a method with this access rule (action level; the
    /// workflow-name check of client actions is [`Identity::may_act_on`]).
    #[must_use]
    pub fn allows(&self, access: Access) -> bool {
        match (access, self.kind) {
            (Access::Open, _) => true,
            (Access::Service, kind) => kind == Kind::Service,
            (_, Kind::Admin) => true,
            (Access::Client(action), Kind::Client) => self.actions.contains(&action),
            (Access::Worker, Kind::Worker) => true,
            _ => false,
        }
    }

    /// Whether this identity may act on the workflow `name` (admins: any; clients: names
    /// matching one of their patterns; others: none).
    #[must_use]
    pub fn may_act_on(&self, workflow: &str) -> bool {
        match self.kind {
            Kind::Admin => true,
            Kind::Client => any_matches(&self.workflows, workflow),
            Kind::Worker | Kind::Service => false,
        }
    }

    /// Whether this identity may claim (and announce) the task `name` (admins: any;
    /// workers: names matching one of their patterns; others: none).
    #[must_use]
    pub fn may_claim(&self, task: &str) -> bool {
        match self.kind {
            Kind::Admin => true,
            Kind::Worker => any_matches(&self.tasks, task),
            Kind::Client | Kind::Service => false,
        }
    }

    /// Whether a worker announcing `runtime` satisfies this identity's pin: the runtime is
    /// the pin, or the pin followed by a version (`python` admits `python 3.12`; the SDKs
    /// announce `<language> <version>`). A pin with a version must match exactly.
    #[must_use]
    pub fn runtime_allowed(&self, runtime: &str) -> bool {
        self.runtime.as_deref().is_none_or(|pin| {
            runtime == pin || runtime.strip_prefix(pin).is_some_and(|rest| rest.starts_with(' '))
        })
    }
}

/// A parse or validation error of the identities file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileError {
    /// Where: `identities[2].actions[1]`, or `line 4 column 3` for YAML syntax errors.
    pub path: String,
    /// A stable upper-snake-case code, for example `INVALID_TOKEN_HASH`.
    pub code: &'static str,
    /// A human-readable description.
    pub message: String,
}

impl fmt::Display for FileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {} ({})", self.path, self.message, self.code)
    }
}

impl std::error::Error for FileError {}

fn err(path: String, code: &'static str, message: impl Into<String>) -> FileError {
    FileError { path, code, message: message.into() }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    identities: Vec<RawIdentity>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawIdentity {
    name: String,
    kind: String,
    token_sha256: Option<String>,
    #[serde(default)]
    cert_names: Vec<String>,
    actions: Option<Vec<String>>,
    workflows: Option<Vec<String>>,
    tasks: Option<Vec<String>>,
    runtime: Option<String>,
}

/// Every identity of a file, validated.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Identities {
    identities: Vec<Arc<Identity>>,
}

impl Identities {
    /// Parses and validates an identities file's text.
    ///
    /// # Errors
    /// The first problem found, with its path and code.
    pub fn parse(text: &str) -> Result<Self, FileError> {
        let raw: RawFile = serde_norway::from_str(text).map_err(|e| {
            let path = e.location().map_or_else(
                || "identities".to_owned(),
                |l| format!("line {} column {}", l.line(), l.column()),
            );
            err(path, "PARSE_ERROR", e.to_string())
        })?;
        let mut names = HashSet::new();
        let mut hashes: Vec<TokenHash> = Vec::new();
        let mut certs = HashSet::new();
        let mut identities = Vec::with_capacity(raw.identities.len());
        for (i, r) in raw.identities.into_iter().enumerate() {
            let at = |field: &str| format!("identities[{i}].{field}");
            if r.name.is_empty() {
                return Err(err(at("name"), "EMPTY_NAME", "an identity needs a name"));
            }
            if !names.insert(r.name.clone()) {
                return Err(err(
                    at("name"),
                    "DUPLICATE_NAME",
                    format!("name {:?} is used twice", r.name),
                ));
            }
            let kind = match r.kind.as_str() {
                "admin" => Kind::Admin,
                "client" => Kind::Client,
                "worker" => Kind::Worker,
                "service" => Kind::Service,
                other => {
                    let msg = format!("unknown kind {other:?} (admin, client, worker or service)");
                    return Err(err(at("kind"), "UNKNOWN_KIND", msg));
                }
            };
            let token_sha256 = match &r.token_sha256 {
                None => None,
                Some(h) => {
                    let bytes = hex::decode(h).ok().and_then(|b| <TokenHash>::try_from(b).ok());
                    let Some(hash) = bytes else {
                        let msg = "token_sha256 must be 64 hex digits (the SHA-256 of the token, never the token)";
                        return Err(err(at("token_sha256"), "INVALID_TOKEN_HASH", msg));
                    };
                    if hashes.iter().any(|h| hashes_equal(h, &hash)) {
                        return Err(err(
                            at("token_sha256"),
                            "DUPLICATE_CREDENTIAL",
                            "this token hash belongs to another identity",
                        ));
                    }
                    hashes.push(hash);
                    Some(hash)
                }
            };
            for (j, c) in r.cert_names.iter().enumerate() {
                if c.is_empty() || !certs.insert(c.clone()) {
                    let msg =
                        format!("certificate name {c:?} is empty or belongs to another identity");
                    return Err(err(at(&format!("cert_names[{j}]")), "DUPLICATE_CREDENTIAL", msg));
                }
            }
            if token_sha256.is_none() && r.cert_names.is_empty() {
                return Err(err(
                    at("token_sha256"),
                    "NO_CREDENTIAL",
                    "an identity needs token_sha256 or cert_names",
                ));
            }
            let only = |field: &str, present: bool, owner: Kind| {
                if present && kind != owner {
                    let msg = format!(
                        "{field} applies to {} identities, not {}",
                        owner.as_str(),
                        kind.as_str()
                    );
                    return Err(err(at(field), "FIELD_NOT_ALLOWED", msg));
                }
                Ok(())
            };
            only("actions", r.actions.is_some(), Kind::Client)?;
            only("workflows", r.workflows.is_some(), Kind::Client)?;
            only("tasks", r.tasks.is_some(), Kind::Worker)?;
            only("runtime", r.runtime.is_some(), Kind::Worker)?;
            let mut actions = Vec::new();
            for (j, a) in r.actions.unwrap_or_default().iter().enumerate() {
                let action = a.parse::<Action>().map_err(|()| {
                    let all: Vec<_> = Action::ALL.iter().map(|a| a.as_str()).collect();
                    let msg = format!("unknown action {a:?} (one of {})", all.join(", "));
                    err(at(&format!("actions[{j}]")), "UNKNOWN_ACTION", msg)
                })?;
                actions.push(action);
            }
            let patterns = |list: Option<Vec<String>>, field: &str| {
                let list = list.unwrap_or_default();
                if let Some(j) = list.iter().position(String::is_empty) {
                    return Err(err(
                        at(&format!("{field}[{j}]")),
                        "EMPTY_PATTERN",
                        "a pattern cannot be empty",
                    ));
                }
                Ok(list.into_iter().map(Pattern::new).collect::<Vec<_>>())
            };
            identities.push(Arc::new(Identity {
                workflows: patterns(r.workflows, "workflows")?,
                tasks: patterns(r.tasks, "tasks")?,
                name: r.name,
                kind,
                token_sha256,
                cert_names: r.cert_names,
                actions,
                runtime: r.runtime,
            }));
        }
        Ok(Self { identities })
    }

    /// Every identity, in file order.
    #[must_use]
    pub fn all(&self) -> &[Arc<Identity>] {
        &self.identities
    }

    /// The identity holding this bearer token: the token is hashed once and compared with
    /// every stored hash in constant time (all of them, so timing does not depend on which
    /// one matched).
    #[must_use]
    pub fn by_token(&self, token: &str) -> Option<&Arc<Identity>> {
        let hash = hash_token(token);
        let mut found = None;
        for identity in &self.identities {
            if let Some(stored) = &identity.token_sha256 {
                if hashes_equal(stored, &hash) && found.is_none() {
                    found = Some(identity);
                }
            }
        }
        found
    }

    /// The identity holding one of these verified certificate names, if any.
    #[must_use]
    pub fn by_cert_names(&self, names: &[String]) -> Option<&Arc<Identity>> {
        self.identities.iter().find(|i| i.cert_names.iter().any(|c| names.contains(c)))
    }
}
