//! The server-wide catalog of declared search attributes on PostgreSQL (`crate::search`):
//! each call is one statement.

use super::conn::PgConn;
use super::error::PgResult;
use super::rows::get;
use crate::search::{parse_type, SearchAttributeRow};
use orbit_definition::SearchType;

/// Inserts the names not declared yet, unless one of them is declared with another type
/// (then nothing is inserted), and returns the stored rows of every name asked for. The
/// insert's rows and the ones there before are read in the same statement (a CTE's rows are
/// invisible to the others), so the union is the stored catalog of those names.
const DECLARE: &str = "WITH d(name, attr_type) AS (SELECT * FROM UNNEST($1::text[], $2::text[])),
    ins AS (INSERT INTO search_attributes (name, attr_type, workflow, created_at)
        SELECT d.name, d.attr_type, $3::text, (extract(epoch from statement_timestamp()) * 1000)::bigint
        FROM d WHERE NOT EXISTS (SELECT 1 FROM search_attributes s JOIN d d2 ON s.name = d2.name
            WHERE s.attr_type <> d2.attr_type)
        ON CONFLICT (name) DO NOTHING RETURNING name, attr_type, workflow)
    SELECT name, attr_type, workflow FROM ins
    UNION ALL SELECT s.name, s.attr_type, s.workflow FROM search_attributes s JOIN d ON s.name = d.name";

const LIST: &str = "SELECT name, attr_type, workflow FROM search_attributes ORDER BY name";

pub(crate) async fn declare(
    conn: &mut PgConn,
    workflow: &str,
    declared: &[(String, SearchType)],
) -> PgResult<Vec<SearchAttributeRow>> {
    let names: Vec<&str> = declared.iter().map(|(n, _)| n.as_str()).collect();
    let types: Vec<&str> = declared.iter().map(|(_, t)| t.as_str()).collect();
    rows(&conn.query(DECLARE, &[&names, &types, &workflow]).await?)
}

pub(crate) async fn list(conn: &mut PgConn) -> PgResult<Vec<SearchAttributeRow>> {
    rows(&conn.query(LIST, &[]).await?)
}

fn rows(rows: &[tokio_postgres::Row]) -> PgResult<Vec<SearchAttributeRow>> {
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        out.push(SearchAttributeRow {
            name: get(row, 0, "search attribute name")?,
            ty: parse_type(&get::<String>(row, 1, "search attribute type")?),
            workflow: get(row, 2, "search attribute workflow")?,
        });
    }
    Ok(out)
}
