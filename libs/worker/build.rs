//! Records the compiler's version for `Hello.runtime` (`rust <version>`), so `ListWorkers`
//! shows which toolchain built a worker. `RUSTC` is the compiler cargo builds this crate
//! with; when it cannot be asked, the runtime is plain `rust`.
#![allow(clippy::disallowed_methods)] // Cargo talks to a build script through its environment.

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=RUSTC");
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    // `rustc 1.83.0 (90b35a623 2024-11-26)` → `1.83.0`.
    let version = Command::new(rustc)
        .arg("--version")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.split_whitespace().nth(1).map(str::to_owned))
        .unwrap_or_default();
    let runtime = if version.is_empty() { "rust".to_owned() } else { format!("rust {version}") };
    println!("cargo:rustc-env=ORBIT_WORKER_RUNTIME={runtime}");
}
