//! TEST-ONLY fault injection, compiled in only with the `test-hooks` feature (the tests'
//! dev-dependencies enable it); any other build has none of this code.
//!
//! `ORBIT_FAULT_INJECT` holds comma-separated rules, read once per process:
//! * `panic-on-signal:NAME` — the owner panics while applying a signal named NAME (caught
//!   per execution: the execution's work is dropped from the pass and counted);
//! * `abort-on-signal:NAME` — the owner process aborts while applying it (what a stack
//!   overflow does; counted across restarts by the recovery mode);
//! * `panic-on-start:WORKFLOW`, `abort-on-start:WORKFLOW` — the same while deciding the
//!   first events of a new execution of that workflow (a child, a start).
//!
//! The end-to-end tests of the poison quarantine use it to make an unknown bug of that kind
//! happen deterministically.

/// The environment variable holding the rules.
pub const FAULT_INJECT_ENV: &str = "ORBIT_FAULT_INJECT";

/// Called before a signal named `name` is applied.
pub(crate) fn on_signal(name: &str) {
    hit("signal", name);
}

/// Called before the first decision of a new execution of `workflow`.
pub(crate) fn on_start(workflow: &str) {
    hit("start", workflow);
}

#[cfg(feature = "test-hooks")]
fn hit(what: &str, name: &str) {
    use std::sync::OnceLock;
    static RULES: OnceLock<Vec<(String, String)>> = OnceLock::new();
    let rules = RULES.get_or_init(|| {
        #[allow(clippy::disallowed_methods)] // The hook's only input, in test builds only.
        std::env::var(FAULT_INJECT_ENV)
            .unwrap_or_default()
            .split(',')
            .filter_map(|r| r.trim().split_once(':'))
            .map(|(a, n)| (a.to_string(), n.to_string()))
            .collect()
    });
    for (action, target) in rules {
        if target != name {
            continue;
        }
        match action.strip_suffix(what).and_then(|a| a.strip_suffix("-on-")) {
            Some("panic") => panic!("fault injection: panic on {what} `{name}`"),
            Some("abort") => {
                eprintln!("fault injection: abort on {what} `{name}`");
                std::process::abort();
            }
            _ => {}
        }
    }
}

/// Without `test-hooks`: no fault injection.
#[cfg(not(feature = "test-hooks"))]
fn hit(_what: &str, _name: &str) {}
