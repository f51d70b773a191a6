//! The numbered migrations shipped in the binary.
//!
//! Each migration is applied once, in order, inside one transaction together with its row in
//! `schema_migrations`; a database that has a row for a version never runs it again. Never
//! edit a released migration: add the next number.

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
];

/// Why a database whose `schema_migrations` holds `applied` is not the schema this binary
/// expects (`None`: it is): a migration not applied yet, or one applied by a newer binary.
#[must_use]
pub fn schema_problem(applied: &[u32]) -> Option<String> {
    let missing: Vec<u32> =
        MIGRATIONS.iter().map(|m| m.version).filter(|v| !applied.contains(v)).collect();
    if !missing.is_empty() {
        return Some(format!("migrations not applied: {missing:?}"));
    }
    let unknown: Vec<u32> =
        applied.iter().copied().filter(|v| !MIGRATIONS.iter().any(|m| m.version == *v)).collect();
    if !unknown.is_empty() {
        return Some(format!("the schema has migrations this binary does not know: {unknown:?}"));
    }
    None
}

/// Creates the bookkeeping table itself (valid on PostgreSQL and SQLite).
pub const CREATE_SCHEMA_MIGRATIONS: &str = "CREATE TABLE IF NOT EXISTS schema_migrations (
    version BIGINT PRIMARY KEY,
    name TEXT NOT NULL,
    applied_at BIGINT NOT NULL
)";

#[cfg(test)]
mod tests {
    use super::MIGRATIONS;

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
