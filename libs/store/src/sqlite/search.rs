//! The server-wide catalog of declared search attributes on SQLite (`crate::search`): the
//! single writer makes the check and the insert one step.

use super::conn::now_ms;
use super::rows::to_i64;
use crate::error::Result;
use crate::search::{parse_type, SearchAttributeRow};
use orbit_definition::SearchType;
use rusqlite::{params, Connection};

/// Inserts the names not declared yet unless one is declared with another type, and
/// returns the stored rows of every name asked for.
pub(crate) fn declare(
    conn: &Connection,
    workflow: &str,
    declared: &[(String, SearchType)],
) -> Result<Vec<SearchAttributeRow>> {
    let stored = |conn: &Connection| -> Result<Vec<SearchAttributeRow>> {
        let all = list(conn)?;
        Ok(all.into_iter().filter(|r| declared.iter().any(|(n, _)| *n == r.name)).collect())
    };
    let before = stored(conn)?;
    let conflict = before.iter().any(|r| declared.iter().any(|(n, t)| *n == r.name && *t != r.ty));
    if conflict {
        return Ok(before);
    }
    let now = to_i64(now_ms(), "now")?;
    for (name, ty) in declared {
        conn.prepare_cached(
            "INSERT INTO search_attributes (name, attr_type, workflow, created_at) \
             VALUES (?1, ?2, ?3, ?4) ON CONFLICT (name) DO NOTHING",
        )?
        .execute(params![name, ty.as_str(), workflow, now])?;
    }
    stored(conn)
}

pub(crate) fn list(conn: &Connection) -> Result<Vec<SearchAttributeRow>> {
    let mut stmt = conn
        .prepare_cached("SELECT name, attr_type, workflow FROM search_attributes ORDER BY name")?;
    let found = stmt
        .query_map([], |r| {
            Ok(SearchAttributeRow {
                name: r.get(0)?,
                ty: parse_type(&r.get::<_, String>(1)?),
                workflow: r.get(2)?,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(found)
}
