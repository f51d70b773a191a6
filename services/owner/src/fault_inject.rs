//! TEST-ONLY fault injection, honoured only in debug builds (`cfg(debug_assertions)`); a
//! release build ignores it entirely.
//!
//! `ORBIT_FAULT_INJECT` holds comma-separated rules, read once per process:
//! * `panic-on-signal:NAME` — the owner panics while applying a signal named NAME (caught
//!   per execution: the execution's work is dropped from the pass and counted);
//! * `abort-on-signal:NAME` — the owner process aborts while applying it (what a stack
//!   overflow does; counted across restarts by the recovery mode).
//!
//! The end-to-end tests of the poison quarantine use it to make an unknown bug of that kind
//! happen deterministically.

/// The environment variable holding the rules.
pub const FAULT_INJECT_ENV: &str = "ORBIT_FAULT_INJECT";

/// Called before a signal named `name` is applied.
#[cfg(debug_assertions)]
pub(crate) fn on_signal(name: &str) {
    use std::sync::OnceLock;
    static RULES: OnceLock<Vec<(String, String)>> = OnceLock::new();
    let rules = RULES.get_or_init(|| {
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
        match action.as_str() {
            "panic-on-signal" => panic!("fault injection: panic on signal `{name}`"),
            "abort-on-signal" => {
                eprintln!("fault injection: abort on signal `{name}`");
                std::process::abort();
            }
            _ => {}
        }
    }
}

/// Release builds: no fault injection.
#[cfg(not(debug_assertions))]
pub(crate) fn on_signal(_name: &str) {}
