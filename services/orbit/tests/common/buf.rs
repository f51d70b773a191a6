//! `buf curl`, a gRPC client that is not Orbit's own code: finding the binary (installed by
//! scripts/test.sh with `pip install buf-bin`) and running it bounded.

use super::run_bounded;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// How long one `buf curl` may take (far above its own `--timeout 30s`).
pub const BUF_CALL: Duration = Duration::from_secs(60);

/// `buf` from `$BUF`, on PATH, or in the Python scripts folder where `pip install buf-bin`
/// puts it ([`super::pip_tool`]: panics with the install command when it is missing).
pub fn buf() -> PathBuf {
    super::pip_tool("buf", "BUF", "python3 -m pip install buf-bin==1.75.0")
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
