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
        name: "retention",
        sql: include_str!("../migrations/0003_retention.sql"),
    },
];

/// Creates the bookkeeping table itself (valid on PostgreSQL and SQLite).
pub const CREATE_SCHEMA_MIGRATIONS: &str = "CREATE TABLE IF NOT EXISTS schema_migrations (
    version BIGINT PRIMARY KEY,
    name TEXT NOT NULL,
    applied_at BIGINT NOT NULL
)";

#[cfg(test)]
mod tests {
    use super::MIGRATIONS;

    #[test]
    fn versions_are_consecutive_from_one() {
        for (i, m) in MIGRATIONS.iter().enumerate() {
            assert_eq!(m.version as usize, i + 1, "migration {} out of order", m.name);
        }
    }
}
