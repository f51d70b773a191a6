//! The numbered migrations shipped in the binary.
//!
//! Each migration is applied once, in order, inside one transaction together with its row in
//! `schema_migrations`; a database that has a row for a version never runs it again. Never
//! edit a released migration: add the next number.
//!
//! [`SchemaStatus`] compares the recorded rows with the shipped list, so a process can
//! refuse a database it does not understand: one with versions recorded that this binary
//! does not ship (a newer binary migrated it) or, when it must not migrate itself
//! (`--no-migrate`), one with shipped versions still pending.

/// One numbered migration.
#[derive(Debug, Clone, Copy)]
pub struct Migration {
    /// Version, strictly increasing from 1.
    pub version: u32,
    /// Short name, recorded with the version.
    pub name: &'static str,
    /// Portable SQL (see the header of `0001_init.sql` for the dialect rules).
    pub sql: &'static str,
}

/// Every migration, in order.
pub const MIGRATIONS: &[Migration] = &[
    Migration { version: 1, name: "init", sql: include_str!("../migrations/0001_init.sql") },
    Migration {
        version: 2,
        name: "pending_inbox_index",
        sql: include_str!("../migrations/0002_pending_inbox_index.sql"),
    },
    Migration {
        version: 3,
        name: "execution_faults",
        sql: include_str!("../migrations/0003_execution_faults.sql"),
    },
    Migration {
        version: 4,
        name: "retention",
        sql: include_str!("../migrations/0004_retention.sql"),
    },
    Migration {
        version: 5,
        name: "task_worker",
        sql: include_str!("../migrations/0005_task_worker.sql"),
    },
    Migration {
        version: 6,
        name: "drop_worker_tables",
        sql: include_str!("../migrations/0006_drop_worker_tables.sql"),
    },
    Migration {
        version: 7,
        name: "inbox_request_id",
        sql: include_str!("../migrations/0007_inbox_request_id.sql"),
    },
    Migration {
        version: 8,
        name: "schedules",
        sql: include_str!("../migrations/0008_schedules.sql"),
    },
    Migration {
        version: 9,
        name: "task_language",
        sql: include_str!("../migrations/0009_task_language.sql"),
    },
    Migration {
        version: 10,
        name: "node_sessions",
        sql: include_str!("../migrations/0010_node_sessions.sql"),
    },
    Migration {
        version: 11,
        name: "history_scale",
        sql: include_str!("../migrations/0011_history_scale.sql"),
    },
    Migration { version: 12, name: "batches", sql: include_str!("../migrations/0012_batches.sql") },
    Migration {
        version: 13,
        name: "flow_control",
        sql: include_str!("../migrations/0013_flow_control.sql"),
    },
    Migration {
        version: 14,
        name: "fair_claim",
        sql: include_str!("../migrations/0014_fair_claim.sql"),
    },
    Migration {
        version: 15,
        name: "worker_pools",
        sql: include_str!("../migrations/0015_worker_pools.sql"),
    },
    Migration {
        version: 16,
        name: "start_dedupe",
        sql: include_str!("../migrations/0016_start_dedupe.sql"),
    },
    Migration {
        version: 17,
        name: "execution_slots",
        sql: include_str!("../migrations/0017_execution_slots.sql"),
    },
    Migration {
        version: 18,
        name: "flow_sweep",
        sql: include_str!("../migrations/0018_flow_sweep.sql"),
    },
    Migration {
        version: 19,
        name: "execution_failure",
        sql: include_str!("../migrations/0019_execution_failure.sql"),
    },
    Migration {
        version: 20,
        name: "execution_search",
        sql: include_str!("../migrations/0020_execution_search.sql"),
    },
    Migration {
        version: 21,
        name: "dedupe_memo",
        sql: include_str!("../migrations/0021_dedupe_memo.sql"),
    },
];

/// Creates the bookkeeping table itself (valid on PostgreSQL and SQLite).
pub const CREATE_SCHEMA_MIGRATIONS: &str = "CREATE TABLE IF NOT EXISTS schema_migrations (
    version BIGINT PRIMARY KEY,
    name TEXT NOT NULL,
    applied_at BIGINT NOT NULL
)";

/// One row of `schema_migrations`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppliedMigration {
    /// The migration's version (a newer binary may have recorded one this one lacks).
    pub version: i64,
    /// Its name, as recorded.
    pub name: String,
    /// When it was applied (ms since the epoch, the database clock on PostgreSQL).
    pub applied_at_ms: i64,
}

/// How a database's recorded migrations compare with the ones this binary ships.
#[derive(Debug, Clone)]
pub struct SchemaStatus {
    /// Every recorded row, by version (known and unknown).
    pub applied: Vec<AppliedMigration>,
    /// Shipped migrations not recorded yet, in order.
    pub pending: Vec<Migration>,
    /// Recorded versions this binary does not ship: the schema is newer than it.
    pub unknown: Vec<AppliedMigration>,
}

/// Why a process must not run on a database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SchemaMismatch {
    /// The database has migrations this binary does not know: a newer release applied them.
    Newer {
        /// The unknown versions.
        unknown: Vec<i64>,
    },
    /// Shipped migrations are not applied, and this process must not apply them.
    Behind {
        /// The pending versions.
        pending: Vec<u32>,
    },
}

impl std::fmt::Display for SchemaMismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let latest = MIGRATIONS.last().map_or(0, |m| m.version);
        match self {
            SchemaMismatch::Newer { unknown } => write!(
                f,
                "the database schema is newer than this binary: migration(s) {unknown:?} were \
                 applied by a newer Orbit release (this binary knows migrations up to {latest}); \
                 run the newer release, or restore a database that matches this one"
            ),
            SchemaMismatch::Behind { pending } => write!(
                f,
                "the database schema is older than this binary: migration(s) {pending:?} are \
                 pending and --no-migrate is set; apply them first with `orbit migrate up`"
            ),
        }
    }
}

impl std::error::Error for SchemaMismatch {}

impl SchemaStatus {
    /// Compares `applied` (the recorded rows, any order) with [`MIGRATIONS`].
    #[must_use]
    pub fn of(mut applied: Vec<AppliedMigration>) -> SchemaStatus {
        applied.sort_by_key(|a| a.version);
        let known = |v: i64| MIGRATIONS.iter().any(|m| i64::from(m.version) == v);
        let pending = MIGRATIONS
            .iter()
            .filter(|m| !applied.iter().any(|a| a.version == i64::from(m.version)))
            .copied()
            .collect();
        let unknown = applied.iter().filter(|a| !known(a.version)).cloned().collect();
        SchemaStatus { applied, pending, unknown }
    }

    /// Whether a process may run on this schema: never with unknown (newer) versions;
    /// with pending ones only when `may_migrate` (it applies them itself).
    ///
    /// # Errors
    /// The mismatch, with a message for the operator.
    pub fn check(&self, may_migrate: bool) -> Result<(), SchemaMismatch> {
        if !self.unknown.is_empty() {
            return Err(SchemaMismatch::Newer {
                unknown: self.unknown.iter().map(|a| a.version).collect(),
            });
        }
        if !may_migrate && !self.pending.is_empty() {
            return Err(SchemaMismatch::Behind {
                pending: self.pending.iter().map(|m| m.version).collect(),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{AppliedMigration, SchemaMismatch, SchemaStatus, MIGRATIONS};

    fn row(version: i64) -> AppliedMigration {
        AppliedMigration { version, name: format!("m{version}"), applied_at_ms: 1 }
    }

    #[test]
    fn status_compares_recorded_rows_with_the_shipped_list() {
        let all: Vec<_> = MIGRATIONS.iter().map(|m| row(i64::from(m.version))).collect();
        let current = SchemaStatus::of(all.clone());
        assert!(current.pending.is_empty() && current.unknown.is_empty());
        assert_eq!(current.check(false), Ok(()));

        let empty = SchemaStatus::of(Vec::new());
        assert_eq!(empty.pending.len(), MIGRATIONS.len());
        assert_eq!(empty.check(true), Ok(()), "a process that migrates may start");
        let pending: Vec<u32> = MIGRATIONS.iter().map(|m| m.version).collect();
        assert_eq!(empty.check(false), Err(SchemaMismatch::Behind { pending }));

        let mut newer = all;
        newer.push(row(9_999));
        let newer = SchemaStatus::of(newer);
        assert_eq!(newer.unknown, [row(9_999)]);
        let refused = Err(SchemaMismatch::Newer { unknown: vec![9_999] });
        assert_eq!(newer.check(true), refused, "migrating cannot fix a newer schema");
        assert!(newer.check(false).unwrap_err().to_string().contains("newer than this binary"));
    }

    // Strictly increasing from 1 rather than consecutive: parallel branches reserve their
    // numbers (this one 0005 while 0003 and 0004 land elsewhere); once merged they are.
    #[test]
    fn versions_increase_from_one() {
        assert_eq!(MIGRATIONS.first().map(|m| m.version), Some(1));
        for pair in MIGRATIONS.windows(2) {
            assert!(pair[0].version < pair[1].version, "migration {} out of order", pair[1].name);
        }
    }
}
