//! The split services as real processes on ONE machine over a shared SQLite file
//! (`--database-url sqlite://...`): what the PostgreSQL topology does, minus the
//! cross-process notifications (the services poll instead). Each process logs to a file in
//! the test's directory; the test kills them by pid and reads the file afterwards.

// Tests read their environment (ORBIT_PYTHON, the database URL) and the wall clock
// (unique names, deadlines of real processes) directly.
#![allow(clippy::disallowed_methods)]

use super::{ChildGuard, TempDir};
use orbit_api::v1::workflow_service_client::WorkflowServiceClient;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tonic::transport::Channel;

/// Short membership timeouts, so takeovers happen within a test's patience.
pub const FAST: &[&str] = &["--node-timeout-ms", "1500", "--heartbeat-ms", "200"];

/// [`FAST`] in plain text without identities: the split services refuse to start without
/// TLS and identities unless told `--insecure`, which the tests of the plain-text split on
/// SQLite (not about security) say explicitly.
pub const PLAIN: &[&str] = &["--node-timeout-ms", "1500", "--heartbeat-ms", "200", "--insecure"];

/// One service process.
pub struct Proc {
    pub node_id: String,
    pub addr: String,
    pub log: PathBuf,
    child: Option<ChildGuard>,
}

impl Proc {
    /// SIGKILL (no clean stop: its node row stays until it times out).
    pub fn kill9(&mut self) {
        self.child.take();
    }

    /// SIGTERM, then waits (bounded) for a clean exit; returns whether it exited 0.
    pub fn terminate(&mut self) -> bool {
        let Some(mut guard) = self.child.take() else { return false };
        let pid = guard.0.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Ok(Some(status)) = guard.0.try_wait() {
                return status.success();
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// Processes sharing one SQLite file.
pub struct Split {
    pub dir: TempDir,
    pub db: PathBuf,
    pub procs: Vec<Proc>,
}

impl Drop for Split {
    /// A failed test prints the end of every process's log (its directory goes with
    /// `self.dir`): a flake on a busy machine is explained from them, not reproduced by luck.
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        for p in &mut self.procs {
            let log = p.log();
            let lines: Vec<&str> = log.lines().collect();
            let tail = lines[lines.len().saturating_sub(40)..].join("\n");
            let state = match p.child.as_mut().map(|g| g.0.try_wait()) {
                None => "stopped by the test".to_string(),
                Some(Ok(None)) => "running".to_string(),
                Some(Ok(Some(status))) => format!("exited by itself: {status}"),
                Some(Err(e)) => format!("unknown: {e}"),
            };
            eprintln!("---- {} ({state}), last lines of its log ----\n{tail}", p.node_id);
        }
    }
}

impl Split {
    pub fn new(name: &str) -> Split {
        let dir = TempDir::new(name);
        let db = dir.0.join("orbit.db");
        Split { dir, db, procs: Vec::new() }
    }

    /// Starts `orbit <service> --node-id <node_id>` on a free port over this database, its
    /// stderr in `log`, without waiting for anything.
    pub fn start(&self, service: &str, node_id: &str, extra: &[&str], log: &Path) -> ChildGuard {
        let file = std::fs::File::create(log).expect("log file");
        let child = Command::new(env!("CARGO_BIN_EXE_orbit"))
            .arg(service)
            .args(["--node-id", node_id, "--listen", "127.0.0.1:0"])
            .args(extra)
            .env("ORBIT_DATABASE_URL", format!("sqlite://{}", self.db.display()))
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .expect("spawn orbit service");
        ChildGuard(child)
    }

    /// Starts `orbit <service> --node-id <node_id>` on a free port and waits for its ready
    /// line; returns its index.
    pub fn spawn(&mut self, service: &str, node_id: &str, extra: &[&str]) -> usize {
        // One file per process: two processes may share a node id (a restart, `--take-over`),
        // and the second truncating a file the first still writes would mangle its ready line.
        let log = self.dir.0.join(format!("{node_id}-{}.log", self.procs.len()));
        let mut guard = self.start(service, node_id, extra, &log);
        let prefix = format!("orbit {service} {node_id} serving on ");
        let deadline = Instant::now() + Duration::from_secs(30);
        let addr = loop {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if let Some(line) = text.lines().find(|l| l.starts_with(&prefix)) {
                break line[prefix.len()..].trim().to_string();
            }
            if let Ok(Some(status)) = guard.0.try_wait() {
                panic!("{node_id} exited ({status}) before serving:\n{text}");
            }
            assert!(Instant::now() < deadline, "{node_id} did not serve within 30 s:\n{text}");
            std::thread::sleep(Duration::from_millis(20));
        };
        self.procs.push(Proc { node_id: node_id.into(), addr, log, child: Some(guard) });
        self.procs.len() - 1
    }

    /// The process with this node id.
    pub fn node(&mut self, node_id: &str) -> &mut Proc {
        self.procs.iter_mut().find(|p| p.node_id == node_id).expect("node")
    }

    /// `http://host:port` of a node.
    pub fn url(&mut self, node_id: &str) -> String {
        format!("http://{}", self.node(node_id).addr)
    }

    pub async fn client(&mut self, node_id: &str) -> WorkflowServiceClient<Channel> {
        WorkflowServiceClient::connect(self.url(node_id)).await.expect("connect to a frontend")
    }

    /// A store over the shared file, for checks.
    pub async fn store(&self) -> orbit_store::SqliteStore {
        orbit_store::SqliteStore::open(&self.db).await.expect("open the shared file")
    }
}
