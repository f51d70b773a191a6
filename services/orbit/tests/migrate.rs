//! `orbit migrate up|status` and `--no-migrate` through the real binary, on SQLite (`--db`,
//! `orbit dev`) and on PostgreSQL (`--database-url`, the split services): `up` applies
//! every migration once and is idempotent, `status` lists applied and pending ones (human
//! and JSON), a service with `--no-migrate` refuses an unmigrated database and starts on a
//! migrated one, and every service (migrating or not) and `migrate up` refuse a schema
//! newer than the binary (a migration row it does not know), with exit code 7.

// Tests read their environment (ORBIT_PYTHON, the database URL) and the wall clock
// (unique names, deadlines of real processes) directly.
#![allow(clippy::disallowed_methods)]

mod common;

use common::{ChildGuard, Server, TempDir};
use orbit_store::migrations::MIGRATIONS;
use serde_json::Value;
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The exit code of a start refused over the schema (documented in docs/operations.md).
const SCHEMA_MISMATCH: i32 = 7;
/// A version no release ships: a newer binary's migration.
const FUTURE: i64 = 9_999;
/// Generous bound for one command; a refused service exits as soon as it read the schema.
const PATIENCE: Duration = Duration::from_secs(120);

/// Runs `orbit <args>` to its end (bounded): (exit code, stdout, stderr).
fn orbit(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_orbit"));
    cmd.args(args).env_remove("ORBIT_DATABASE_URL").env_remove("ORBIT_DB");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = ChildGuard(
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn orbit"),
    );
    let read = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = pipe.read_to_string(&mut s);
            s
        })
    };
    let out_reader = read(Box::new(child.0.stdout.take().expect("stdout")));
    let err_reader = read(Box::new(child.0.stderr.take().expect("stderr")));
    let deadline = Instant::now() + PATIENCE;
    let status = loop {
        if let Some(status) = child.0.try_wait().expect("wait") {
            break status;
        }
        assert!(Instant::now() < deadline, "orbit {args:?} did not exit within {PATIENCE:?}");
        std::thread::sleep(Duration::from_millis(20));
    };
    let stdout = out_reader.join().unwrap_or_default();
    let stderr = err_reader.join().unwrap_or_default();
    (status.code().unwrap_or(-1), stdout, stderr)
}

/// `orbit migrate <sub> <target> --output json`, expected to exit 0: the JSON document.
fn migrate_json(sub: &str, target: &[&str]) -> Value {
    let args = [&["migrate", sub][..], target, &["--output", "json"]].concat();
    let (code, out, err) = orbit(&args, &[]);
    assert_eq!(code, 0, "orbit migrate {sub} failed: {out}{err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
}

fn shipped() -> Vec<u64> {
    MIGRATIONS.iter().map(|m| u64::from(m.version)).collect()
}

fn versions(v: &Value) -> Vec<u64> {
    v.as_array()
        .unwrap_or_else(|| panic!("not a list: {v}"))
        .iter()
        .filter_map(Value::as_u64)
        .collect()
}

/// Asserts that a service run exited with the schema code and an explanation.
fn assert_refused(run: &(i32, String, String), why: &str, what: &str) {
    let (code, out, err) = run;
    assert_eq!(*code, SCHEMA_MISMATCH, "{what}: expected exit 7, got {code}: {out}{err}");
    assert!(err.contains(why), "{what}: no `{why}` in: {err}");
}

/// The status and `up` round trip shared by both backends, on a database nobody migrated.
fn up_twice_and_status(target: &[&str]) {
    let before = migrate_json("status", target);
    assert_eq!(before["schema"], "pending", "{before}");
    assert_eq!(versions(&before["pending"]), shipped(), "{before}");
    assert_eq!(before["applied"], 0, "{before}");

    let first = migrate_json("up", target);
    assert_eq!(versions(&first["applied_now"]), shipped(), "first up applies all: {first}");
    assert_eq!(first["schema"], "current", "{first}");
    let second = migrate_json("up", target);
    assert_eq!(versions(&second["applied_now"]), Vec::<u64>::new(), "idempotent: {second}");
    assert_eq!(second["migrations"], first["migrations"], "a second up changes nothing");

    let after = migrate_json("status", target);
    assert_eq!(after["schema"], "current", "{after}");
    assert_eq!(after["applied"], MIGRATIONS.len(), "{after}");
    assert!(versions(&after["pending"]).is_empty(), "{after}");
    let rows = after["migrations"].as_array().expect("migrations");
    assert!(rows.iter().all(|r| r["state"] == "applied" && r["applied_at_ms"].as_i64() > Some(0)));

    let args = [&["migrate", "status"][..], target].concat();
    let (code, human, err) = orbit(&args, &[]);
    assert_eq!(code, 0, "{human}{err}");
    assert!(human.contains("schema: current"), "{human}");
    for m in MIGRATIONS {
        assert!(human.lines().any(|l| l.contains(m.name) && l.contains("applied")), "{human}");
    }
}

/// After a newer release recorded [`FUTURE`]: `up` refuses, `status` shows it.
fn newer_schema_is_refused_by_migrate(target: &[&str]) {
    let up = orbit(&[&["migrate", "up"][..], target].concat(), &[]);
    assert_refused(&up, "newer than this binary", "migrate up on a newer schema");
    let status = migrate_json("status", target);
    assert_eq!(status["schema"], "newer", "{status}");
    assert_eq!(status["unknown"], serde_json::json!([FUTURE]), "{status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_migrate_status_no_migrate_and_a_newer_schema() {
    let dir = TempDir::new("migrate-sqlite");
    let db = dir.0.join("orbit.db");
    let path = db.display().to_string();
    let target = ["--db", path.as_str()];

    // Looking at a file that does not exist yet creates nothing.
    let missing = migrate_json("status", &target);
    assert_eq!(versions(&missing["pending"]), shipped(), "{missing}");
    assert!(!db.exists(), "status created the file");

    // `orbit dev --no-migrate` on the empty file: refused, pointing at `orbit migrate up`.
    let dev = |extra: &[&str], env: &[(&str, &str)]| {
        let args = [&["dev", "--db", path.as_str(), "--listen", "127.0.0.1:0"][..], extra].concat();
        orbit(&args, env)
    };
    assert_refused(&dev(&["--no-migrate"], &[]), "orbit migrate up", "dev --no-migrate");
    assert_refused(&dev(&[], &[("ORBIT_NO_MIGRATE", "true")]), "pending", "ORBIT_NO_MIGRATE");

    up_twice_and_status(&target);

    // Migrated: `--no-migrate` starts and serves.
    let server = Server::start(&db, &["--no-migrate"]).await;
    let mut client = server.client().await;
    client.list_workflows(orbit_api::v1::ListWorkflowsRequest::default()).await.expect("serves");
    drop(server);

    // A newer release recorded a migration this binary does not know.
    record_future_sqlite(&db);
    assert_refused(&dev(&[], &[]), "newer than this binary", "dev on a newer schema");
    assert_refused(&dev(&["--no-migrate"], &[]), "newer than this binary", "dev --no-migrate");
    newer_schema_is_refused_by_migrate(&target);
}

fn record_future_sqlite(db: &Path) {
    let conn = rusqlite::Connection::open(db).expect("open the file");
    conn.execute(
        "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?1, 'from_a_newer_release', 1)",
        [FUTURE],
    )
    .expect("record a future migration");
}

/// A database of its own on the shared PostgreSQL server, dropped at the end.
struct PgDatabase {
    admin: String,
    name: String,
    url: String,
}

impl PgDatabase {
    fn create(name: &str) -> PgDatabase {
        let admin = std::env::var("ORBIT_TEST_DATABASE_URL").unwrap_or_else(|_| {
            panic!(
                "ORBIT_TEST_DATABASE_URL is not set: start PostgreSQL with `scripts/pg.sh start` \
                 and `eval \"$(scripts/pg.sh env)\"` (scripts/test.sh does both)"
            )
        });
        let name = format!("orbit_e2e_{name}_{}", std::process::id());
        let db = PgDatabase { url: with_database(&admin, &name), admin, name };
        db.psql_admin(&format!("DROP DATABASE IF EXISTS {}", db.name));
        db.psql_admin(&format!("CREATE DATABASE {}", db.name));
        db
    }

    fn psql_admin(&self, sql: &str) {
        psql(&self.admin, sql);
    }
}

impl Drop for PgDatabase {
    fn drop(&mut self) {
        let sql = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        let _ = Command::new("psql").arg(&self.admin).args(["-qtAc", &sql]).output();
    }
}

/// `url` with its database path replaced by `name` (query kept).
fn with_database(url: &str, name: &str) -> String {
    let (base, query) = url.split_once('?').map_or((url, None), |(b, q)| (b, Some(q)));
    let authority_end = base.find("://").map_or(0, |i| i + 3);
    let host_end = base[authority_end..].find('/').map_or(base.len(), |i| authority_end + i);
    let mut out = format!("{}/{name}", &base[..host_end]);
    if let Some(q) = query {
        out.push('?');
        out.push_str(q);
    }
    out
}

fn psql(url: &str, sql: &str) {
    let out = Command::new("psql").arg(url).args(["-qtAc", sql]).output().expect("run psql");
    assert!(out.status.success(), "psql {sql}: {}", String::from_utf8_lossy(&out.stderr));
}

/// Starts a split service and waits for its ready line; the guard stops it.
fn serve(service: &str, url: &str, dir: &Path, extra: &[&str]) -> ChildGuard {
    let log = dir.join(format!("{service}.log"));
    let file = std::fs::File::create(&log).expect("log file");
    let mut child = ChildGuard(
        Command::new(env!("CARGO_BIN_EXE_orbit"))
            .args([service, "--database-url", url, "--listen", "127.0.0.1:0", "--insecure"])
            .args(extra)
            .env_remove("ORBIT_DB")
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .expect("spawn a service"),
    );
    let deadline = Instant::now() + PATIENCE;
    loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains(" serving on ") {
            return child;
        }
        if let Ok(Some(status)) = child.0.try_wait() {
            panic!("orbit {service} exited ({status}) before serving:\n{text}");
        }
        assert!(Instant::now() < deadline, "orbit {service} did not serve:\n{text}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_migrate_status_no_migrate_and_a_newer_schema() {
    let pg = PgDatabase::create("migrate");
    let dir = TempDir::new("migrate-pg");
    let url = pg.url.clone();
    let target = ["--database-url", url.as_str()];
    let service = |name: &str, extra: &[&str], env: &[(&str, &str)]| {
        let args = [
            &[name, "--database-url", url.as_str(), "--listen", "127.0.0.1:0", "--insecure"][..],
            extra,
        ]
        .concat();
        orbit(&args, env)
    };

    // The services with --no-migrate refuse the empty database (flag and variable).
    assert_refused(&service("owner", &["--no-migrate"], &[]), "orbit migrate up", "owner");
    let by_env = service("frontend", &[], &[("ORBIT_NO_MIGRATE", "1")]);
    assert_refused(&by_env, "pending", "frontend with ORBIT_NO_MIGRATE");

    up_twice_and_status(&target);

    // Migrated: a service with --no-migrate starts.
    drop(serve("scheduler", &url, &dir.0, &["--no-migrate"]));

    // A newer release recorded a migration this binary does not know: every service
    // refuses, migrating by default or not.
    psql(
        &url,
        &format!(
            "INSERT INTO schema_migrations (version, name, applied_at) \
             VALUES ({FUTURE}, 'from_a_newer_release', 1)"
        ),
    );
    assert_refused(&service("owner", &[], &[]), "newer than this binary", "owner, newer");
    let no_migrate = service("scheduler", &["--no-migrate"], &[]);
    assert_refused(&no_migrate, "newer than this binary", "scheduler --no-migrate, newer");
    newer_schema_is_refused_by_migrate(&target);
}

#[test]
fn database_urls_get_the_test_database() {
    assert_eq!(with_database("postgres://u@h:1/postgres", "x"), "postgres://u@h:1/x");
    assert_eq!(
        with_database("postgres://u@h:1/p?sslmode=disable", "x"),
        "postgres://u@h:1/x?sslmode=disable"
    );
    assert_eq!(with_database("postgres://h", "x"), "postgres://h/x");
}
