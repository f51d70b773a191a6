//! `buf curl`, a gRPC client that is not Orbit's own code: finding the binary (installed by
//! scripts/test.sh with `pip install buf-bin`) and running it bounded.

use super::run_bounded;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// How long one `buf curl` may take (far above its own `--timeout 30s`).
pub const BUF_CALL: Duration = Duration::from_secs(60);

/// `buf` on PATH, or in the Python scripts folder where `pip install buf-bin` puts it.
/// Panics with the install command when it is missing: a test needing buf never passes
/// silently without it.
pub fn buf() -> PathBuf {
    if let Ok(path) = std::env::var("BUF") {
        return PathBuf::from(path);
    }
    let on_path = Command::new("sh").args(["-c", "command -v buf"]).output();
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
        let p = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()).join("buf");
        if p.exists() {
            return p;
        }
    }
    panic!(
        "`buf` not found (on PATH, in $BUF or in python3's scripts folder): install it with \
         `python3 -m pip install buf-bin==1.75.0` (scripts/test.sh does)"
    );
}

/// Runs `buf curl --protocol grpc --timeout 30s <args>` (bounded) in `cwd`:
/// (success, stdout, stderr).
pub fn buf_curl_raw(cwd: &Path, args: &[&str]) -> (bool, String, String) {
    let mut cmd = Command::new(buf());
    cmd.current_dir(cwd)
        .args(["curl", "--protocol", "grpc", "--timeout", "30s"])
        .args(args)
        .env("BUF_CACHE_DIR", cwd.join("buf-cache"));
    run_bounded(&mut cmd, BUF_CALL)
}
