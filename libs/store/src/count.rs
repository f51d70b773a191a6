//! `CountExecutions`: how many executions a list query matches, in total and grouped by
//! up to three system attributes (`orbit_query::group_by`). One statement per count on
//! either backend: `SELECT <group columns>, COUNT(*) ... GROUP BY <group columns>`, the
//! total being the sum of the groups.

use orbit_query::{Checked, Dialect, SqlValue, SystemAttr};

/// What to count.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CountFilter {
    /// A checked list query (its `ORDER BY`, if any, is ignored); `None` counts every
    /// execution.
    pub query: Option<Checked>,
    /// The attributes to group by (checked by `orbit_query::group_by`); empty for the
    /// total only.
    pub group_by: Vec<&'static SystemAttr>,
}

/// One group of a count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CountGroup {
    /// The group's value of each `group_by` attribute, in order; `None` where it is absent
    /// (a root execution's `parent`).
    pub values: Vec<Option<String>>,
    /// Executions in the group.
    pub count: u64,
}

/// The answer to a count.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExecutionCounts {
    /// Executions matched.
    pub count: u64,
    /// With `group_by`: every non-empty group, largest first (ties by value); empty
    /// without.
    pub groups: Vec<CountGroup>,
}

/// The statement and its parameters for `filter` in `dialect` (placeholders from 1).
pub(crate) fn count_sql(filter: &CountFilter, dialect: Dialect) -> (String, Vec<SqlValue>) {
    let (where_sql, params) = match &filter.query {
        Some(q) => {
            let c = orbit_query::compile(q, dialect, 1);
            (c.where_sql, c.params)
        }
        None => ("1 = 1".to_string(), Vec::new()),
    };
    if filter.group_by.is_empty() {
        return (format!("SELECT COUNT(*) FROM executions WHERE {where_sql}"), params);
    }
    let columns: Vec<&str> = filter.group_by.iter().map(|a| a.column).collect();
    let columns = columns.join(", ");
    let text = format!(
        "SELECT {columns}, COUNT(*) FROM executions WHERE {where_sql} \
         GROUP BY {columns} ORDER BY COUNT(*) DESC, {columns}"
    );
    (text, params)
}

/// The counts from the rows of [`count_sql`]: each row is the group's values then its
/// count (or only the count without groups).
pub(crate) fn from_rows(grouped: bool, rows: Vec<(Vec<Option<String>>, i64)>) -> ExecutionCounts {
    let n = |c: i64| u64::try_from(c).unwrap_or(0);
    if !grouped {
        return ExecutionCounts { count: rows.first().map_or(0, |r| n(r.1)), groups: Vec::new() };
    }
    let groups: Vec<CountGroup> =
        rows.into_iter().map(|(values, c)| CountGroup { values, count: n(c) }).collect();
    ExecutionCounts { count: groups.iter().map(|g| g.count).sum(), groups }
}

#[cfg(test)]
mod tests {
    use super::*;
    use orbit_query::{group_by, parse_and_check, Catalog};

    #[test]
    fn grouped_and_plain_statements() {
        let query = Some(parse_and_check("workflow = 'a'", &Catalog::system()).unwrap());
        let plain = CountFilter { query: query.clone(), group_by: Vec::new() };
        let (text, params) = count_sql(&plain, Dialect::Postgres);
        assert_eq!(text, "SELECT COUNT(*) FROM executions WHERE workflow = $1::text");
        assert_eq!(params, vec![SqlValue::Text("a".into())]);
        let grouped = CountFilter { query, group_by: group_by(&["status", "parent"]).unwrap() };
        let (text, _) = count_sql(&grouped, Dialect::Sqlite);
        assert_eq!(
            text,
            "SELECT status, parent_id, COUNT(*) FROM executions WHERE workflow = ?1 \
             GROUP BY status, parent_id ORDER BY COUNT(*) DESC, status, parent_id"
        );
        let counts = from_rows(true, vec![(vec![Some("RUNNING".into()), None], 3)]);
        assert_eq!(counts.count, 3);
        assert_eq!(from_rows(false, vec![(Vec::new(), 7)]).count, 7);
    }
}
