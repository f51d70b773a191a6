//! Schema migrations as an operator's step: `orbit migrate up|status`, the `--no-migrate`
//! flag of the services, and the schema check every service runs before it serves.
//!
//! By default each process applies the pending migrations at start (PostgreSQL serialises
//! them on an advisory lock). For a rolling upgrade an operator runs `orbit migrate up` once
//! with the new release, then restarts the services with `--no-migrate`: a service then
//! only checks the schema. Every service, migrating or not, refuses to start on a database
//! whose schema it does not understand ([`SCHEMA_MISMATCH`]): one with migrations recorded
//! that this binary does not ship (a newer release ran them), or, with `--no-migrate`, one
//! with shipped migrations still pending.

use crate::split::backend::{ConnectError, Database, DatabaseOptions};
use orbit_store::{Migrations, SchemaMismatch, SchemaStatus, StoreError};
use serde_json::json;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// The exit code of a process refused because of the database schema (newer than this
/// binary, or pending migrations with `--no-migrate`), and of `orbit migrate up` on a
/// newer schema.
pub const SCHEMA_MISMATCH: u8 = 7;

/// Exit codes of `orbit migrate` besides 0 and [`SCHEMA_MISMATCH`].
const USAGE: u8 = 2;
const DATABASE: u8 = 4;

/// `--no-migrate`, flattened into `orbit dev` and every split service.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct NoMigrateArg {
    /// Do not apply pending schema migrations at start: only check that the schema is
    /// exactly the one this binary expects, and refuse to start otherwise (exit code 7).
    /// For rolling upgrades: `orbit migrate up` first, once, then the services.
    /// Example: --no-migrate
    #[arg(
        long,
        env = "ORBIT_NO_MIGRATE",
        value_parser = clap::builder::BoolishValueParser::new(),
        action = clap::ArgAction::SetTrue
    )]
    pub no_migrate: bool,
}

/// Why [`prepare`] refused.
#[derive(Debug)]
pub enum SchemaError {
    /// The schema is not one this binary may run on.
    Mismatch(SchemaMismatch),
    /// The database could not be read or migrated.
    Store(StoreError),
}

impl std::fmt::Display for SchemaError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SchemaError::Mismatch(m) => m.fmt(f),
            SchemaError::Store(e) => write!(f, "schema migrations: {e}"),
        }
    }
}

impl std::error::Error for SchemaError {}

impl From<StoreError> for SchemaError {
    fn from(e: StoreError) -> Self {
        SchemaError::Store(e)
    }
}

/// What a service does with the schema before it serves: refuse a newer one, apply the
/// pending migrations (unless `no_migrate`, which refuses them instead), and check again.
///
/// # Errors
/// [`SchemaError::Mismatch`] when the service must not start on this database.
pub async fn prepare<S: Migrations + ?Sized>(
    store: &S,
    no_migrate: bool,
) -> Result<(), SchemaError> {
    let before = store.schema_status().await?;
    before.check(!no_migrate).map_err(SchemaError::Mismatch)?;
    if !before.pending.is_empty() {
        let applied = store.migrate().await?;
        tracing::info!(?applied, "applied schema migrations");
        // Another process may have recorded a newer version meanwhile.
        store.schema_status().await?.check(false).map_err(SchemaError::Mismatch)?;
    }
    Ok(())
}

/// `orbit migrate`.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Examples:\n  orbit migrate status --database-url postgres://orbit:orbit@db/orbit\n  orbit migrate up --database-url postgres://orbit:orbit@db/orbit\n  orbit migrate up --db ./orbit-dev.db --output json\n\nExit codes: 0 done; 2 bad flags; 4 the database cannot be reached or a migration failed;\n  7 (up) the schema is newer than this binary."
)]
pub struct MigrateArgs {
    #[command(subcommand)]
    command: MigrateCommand,
}

#[derive(clap::Subcommand, Debug)]
enum MigrateCommand {
    /// Apply the pending migrations (idempotent; safe beside running services). Refuses a
    /// schema newer than this binary.
    Up(TargetArgs),
    /// List the applied, pending and unknown (newer) migrations.
    Status(TargetArgs),
}

/// The database to migrate, and how to print.
#[derive(clap::Args, Debug)]
struct TargetArgs {
    /// A split cluster's database: `postgres://...` or `sqlite:///path/orbit.db`.
    /// Example: --database-url postgres://orbit:secret@db:5432/orbit
    #[arg(long, env = "ORBIT_DATABASE_URL", value_name = "URL", conflicts_with = "db")]
    database_url: Option<String>,
    /// The SQLite file of `orbit dev`. Example: --db ./orbit-dev.db
    #[arg(long, env = "ORBIT_DB", value_name = "FILE")]
    db: Option<PathBuf>,
    /// PEM file of the CA of the PostgreSQL server's certificate (see `orbit owner --help`).
    #[arg(long, env = "ORBIT_DATABASE_CA_FILE", value_name = "PEM")]
    database_ca_file: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Human)]
    output: Format,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Format {
    /// Aligned lines.
    Human,
    /// One JSON document on stdout.
    Json,
}

/// Runs `orbit migrate`.
pub async fn run(args: MigrateArgs) -> ExitCode {
    crate::logs::init("warn");
    let (up, target) = match &args.command {
        MigrateCommand::Up(t) => (true, t),
        MigrateCommand::Status(t) => (false, t),
    };
    let url = match (&target.database_url, &target.db) {
        (Some(url), None) => url.clone(),
        (None, Some(path)) => format!("sqlite://{}", path.display()),
        _ => {
            eprintln!("error: name the database with --database-url URL or --db FILE");
            return ExitCode::from(USAGE);
        }
    };
    // `status` on a SQLite file that does not exist: everything is pending, and looking must
    // not create the file.
    if let (false, Some(path)) = (up, crate::split::backend::sqlite_path(&url)) {
        if !path.exists() {
            print_status(&SchemaStatus::of(Vec::new()), None, target.output);
            return ExitCode::SUCCESS;
        }
    }
    let options = DatabaseOptions {
        url,
        ca_file: target.database_ca_file.clone(),
        pool_size: 2,
        application_name: "orbit-migrate".into(),
        idle_in_transaction_timeout: Duration::from_secs(60),
        no_migrate: true,
    };
    let database = match Database::open(&options).await {
        Ok(db) => db,
        Err(ConnectError::Config(e)) => return fail(USAGE, &e),
        Err(e) => return fail(DATABASE, &format!("cannot open the database: {e}")),
    };
    let store = database.store.as_ref();
    let status = match store.schema_status().await {
        Ok(s) => s,
        Err(e) => return fail(DATABASE, &format!("cannot read schema_migrations: {e}")),
    };
    if !up {
        print_status(&status, None, target.output);
        return ExitCode::SUCCESS;
    }
    if let Err(m) = status.check(true) {
        return fail(SCHEMA_MISMATCH, &m.to_string());
    }
    let applied = match store.migrate().await {
        Ok(applied) => applied,
        Err(e) => {
            return fail(DATABASE, &format!("migration failed (nothing of it was kept): {e}"))
        }
    };
    match store.schema_status().await {
        Ok(after) => {
            print_status(&after, Some(&applied), target.output);
            ExitCode::SUCCESS
        }
        Err(e) => fail(DATABASE, &format!("cannot read schema_migrations: {e}")),
    }
}

fn fail(code: u8, message: &str) -> ExitCode {
    eprintln!("error: {message}");
    ExitCode::from(code)
}

/// Prints the status (and, after `up`, what this call applied).
fn print_status(status: &SchemaStatus, applied_now: Option<&[u32]>, format: Format) {
    let state = if !status.unknown.is_empty() {
        "newer"
    } else if !status.pending.is_empty() {
        "pending"
    } else {
        "current"
    };
    if format == Format::Json {
        let row = |v: i64, name: &str, at: Option<i64>, state: &str| json!({"version": v, "name": name, "applied_at_ms": at, "state": state});
        let mut migrations: Vec<_> = status
            .applied
            .iter()
            .map(|a| {
                let known = !status.unknown.contains(a);
                row(
                    a.version,
                    &a.name,
                    Some(a.applied_at_ms),
                    if known { "applied" } else { "unknown" },
                )
            })
            .collect();
        migrations.extend(
            status.pending.iter().map(|m| row(i64::from(m.version), m.name, None, "pending")),
        );
        let mut doc = json!({
            "schema": state,
            "latest_known": orbit_store::migrations::MIGRATIONS.last().map_or(0, |m| m.version),
            "applied": status.applied.len() - status.unknown.len(),
            "pending": status.pending.iter().map(|m| m.version).collect::<Vec<_>>(),
            "unknown": status.unknown.iter().map(|a| a.version).collect::<Vec<_>>(),
            "migrations": migrations,
        });
        if let Some(now) = applied_now {
            doc["applied_now"] = json!(now);
        }
        println!("{doc:#}");
        return;
    }
    let mut out = String::new();
    if let Some(now) = applied_now {
        if now.is_empty() {
            out.push_str("nothing to apply\n");
        } else {
            out.push_str(&format!("applied {now:?}\n"));
        }
    }
    out.push_str(&format!("schema: {state}\n"));
    out.push_str(&format!("{:<8} {:<24} {}\n", "VERSION", "NAME", "STATE"));
    for a in &status.applied {
        let what = if status.unknown.contains(a) { "unknown (newer release)" } else { "applied" };
        out.push_str(&format!("{:<8} {:<24} {what} {}\n", a.version, a.name, utc(a.applied_at_ms)));
    }
    for m in &status.pending {
        out.push_str(&format!("{:<8} {:<24} pending\n", m.version, m.name));
    }
    print!("{out}");
}

/// `ms` since the epoch as `YYYY-MM-DDTHH:MM:SSZ` (civil calendar from days, no time zone
/// database needed).
fn utc(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's days-from-civil inverse.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let (h, m, s) = (rest / 3600, rest % 3600 / 60, rest % 60);
    format!("{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}Z")
}

#[cfg(test)]
mod tests {
    use super::utc;

    #[test]
    fn utc_formats_epoch_milliseconds() {
        assert_eq!(utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc(951_782_400_000), "2000-02-29T00:00:00Z");
        assert_eq!(utc(1_796_083_199_999), "2026-11-30T23:59:59Z");
    }
}
