//! Whether an authenticated worker may open the session its `hello` describes.
//!
//! The auth layer (orbit-auth) decides at action level that the caller is a worker; the
//! task names are in the stream's first message, so this check runs here, once per
//! session: every announced task must match the identity's task patterns (a worker may
//! only claim what it may announce, since the dispatcher offers only announced tasks), and
//! a runtime pin must match `hello.runtime`. Without an identity (auth not configured)
//! every hello is admitted, as before.

use orbit_api::v1::worker_message::Hello;
use orbit_auth::Identity;
use orbit_server_kit::{ErrorCode, OrbitError};

/// `Ok` when `caller` may announce everything in `hello`, else `PERMISSION_DENIED` naming
/// the identity and the first task (or runtime) outside its rights.
pub(crate) fn admit(caller: Option<&Identity>, hello: &Hello) -> Result<(), OrbitError> {
    let Some(identity) = caller else { return Ok(()) };
    if let Some(task) = hello.tasks.iter().find(|t| !identity.may_claim(&t.name)) {
        tracing::warn!(identity = %identity.name, task = %task.name, "hello refused: task outside the identity's patterns");
        let message = format!(
            "identity {:?} may not claim task {:?} (its task patterns: {})",
            identity.name,
            task.name,
            identity.tasks.iter().map(|p| p.as_str()).collect::<Vec<_>>().join(", ")
        );
        return Err(OrbitError::new(ErrorCode::PermissionDenied, message));
    }
    if !identity.runtime_allowed(&hello.runtime) {
        tracing::warn!(identity = %identity.name, runtime = %hello.runtime, "hello refused: runtime pin");
        let message = format!(
            "identity {:?} is pinned to runtime {:?}, the hello announces {:?}",
            identity.name,
            identity.runtime.as_deref().unwrap_or_default(),
            hello.runtime
        );
        return Err(OrbitError::new(ErrorCode::PermissionDenied, message));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use orbit_api::v1::TaskRef;
    use orbit_auth::token::hash_token_hex;
    use orbit_auth::Identities;

    fn hello(tasks: &[&str], runtime: &str) -> Hello {
        Hello {
            worker_id: "w".into(),
            runtime: runtime.into(),
            tasks: tasks
                .iter()
                .map(|t| TaskRef { name: (*t).into(), version: "1".into() })
                .collect(),
            max_concurrency: 1,
            ..Hello::default()
        }
    }

    #[test]
    fn tasks_outside_the_patterns_and_a_wrong_runtime_are_refused() {
        let file = format!(
            "identities:\n  - name: billing\n    kind: worker\n    token_sha256: {}\n    tasks: ['billing.*']\n    runtime: python\n  - name: any\n    kind: worker\n    token_sha256: {}\n    tasks: ['*']\n",
            hash_token_hex("b"),
            hash_token_hex("a")
        );
        let ids = Identities::parse(&file).unwrap();
        let billing = ids.by_token("b").unwrap();
        admit(Some(billing), &hello(&["billing.charge", "billing.refund"], "python")).unwrap();
        let refused = admit(Some(billing), &hello(&["billing.charge", "shipping.pack"], "python"));
        let error = refused.unwrap_err();
        assert_eq!(error.code, ErrorCode::PermissionDenied);
        assert!(error.message.contains("\"billing\"") && error.message.contains("shipping.pack"));
        let runtime = admit(Some(billing), &hello(&["billing.charge"], "rust")).unwrap_err();
        assert!(runtime.message.contains("pinned to runtime \"python\""), "{}", runtime.message);
        admit(Some(ids.by_token("a").unwrap()), &hello(&["shipping.pack"], "rust")).unwrap();
        admit(None, &hello(&["shipping.pack"], "rust")).unwrap();
    }
}
