//! `CountExecutions`: the list query (`list_query.rs`) counted by the store, in total and
//! grouped by up to three system attributes (`orbit_query::group_by`).
//!
//! A caller restricted to some workflows counts only those, as `ListExecutions` lists only
//! those: the store also groups by `workflow`, the groups of workflows outside the caller's
//! patterns are dropped (the same `Scope::sees` test as the list's), and the rest are
//! merged back to the groups asked for. Nothing about other workflows leaks: not their
//! counts, not their names.

use crate::error::ApiResult;
use crate::scope::Scope;
use crate::Shared;
use orbit_api::v1::{CountExecutionsRequest, CountExecutionsResponse, CountGroup};
use orbit_server_kit::validate::invalid;
use orbit_store::{CountFilter, ExecutionCounts};
use std::collections::BTreeMap;

/// Counts what `req` asks for, as `scope` may see it.
pub(crate) async fn count_executions(
    shared: &Shared,
    scope: &Scope,
    req: CountExecutionsRequest,
) -> ApiResult<CountExecutionsResponse> {
    let mut query = super::search::list_query(shared, &req.query).await?;
    if let Some(q) = &mut query {
        q.order = None;
    }
    let group_by = orbit_query::group_by(&req.group_by).map_err(|m| invalid("group_by", m))?;
    let asked = group_by.len();
    let mut filter = CountFilter { query, group_by };
    let workflow_at = if scope.is_restricted() {
        match filter.group_by.iter().position(|a| a.name == "workflow") {
            Some(i) => Some(i),
            None => {
                filter.group_by.extend(orbit_query::group_by(&["workflow"]).unwrap_or_default());
                Some(asked)
            }
        }
    } else {
        None
    };
    let counts = shared.store.count_executions(filter).await?;
    let counts = match workflow_at {
        Some(at) => visible(counts, at, asked, asked > 0, |w| scope.sees(w)),
        None => counts,
    };
    Ok(CountExecutionsResponse {
        count: counts.count,
        groups: counts
            .groups
            .into_iter()
            .map(|g| CountGroup {
                values: g.values.into_iter().map(Option::unwrap_or_default).collect(),
                count: g.count,
            })
            .collect(),
    })
}

/// The groups whose workflow (value `at`) `sees` accepts, cut to their first `asked`
/// values and merged; grouped or not as the caller asked (`grouped`). Largest first, ties
/// by value, as the store orders them.
fn visible(
    counts: ExecutionCounts,
    at: usize,
    asked: usize,
    grouped: bool,
    sees: impl Fn(&str) -> bool,
) -> ExecutionCounts {
    let mut merged: BTreeMap<Vec<Option<String>>, u64> = BTreeMap::new();
    for mut g in counts.groups {
        if !g.values.get(at).and_then(Option::as_deref).is_some_and(&sees) {
            continue;
        }
        g.values.truncate(asked);
        *merged.entry(g.values).or_default() += g.count;
    }
    let count = merged.values().sum();
    if !grouped {
        return ExecutionCounts { count, groups: Vec::new() };
    }
    let mut groups: Vec<orbit_store::CountGroup> = merged
        .into_iter()
        .map(|(values, count)| orbit_store::CountGroup { values, count })
        .collect();
    groups.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.values.cmp(&b.values)));
    ExecutionCounts { count, groups }
}

#[cfg(test)]
mod tests {
    use super::*;
    use orbit_store::CountGroup as Group;

    fn g(values: &[Option<&str>], count: u64) -> Group {
        Group { values: values.iter().map(|v| v.map(str::to_string)).collect(), count }
    }

    #[test]
    fn groups_outside_the_patterns_are_dropped_and_the_rest_merged() {
        let counts = ExecutionCounts {
            count: 10,
            groups: vec![
                g(&[Some("RUNNING"), Some("shipping.pack")], 4),
                g(&[Some("RUNNING"), Some("billing.a")], 3),
                g(&[Some("FAILED"), Some("billing.b")], 2),
                g(&[Some("RUNNING"), Some("billing.b")], 1),
            ],
        };
        let sees = |w: &str| w.starts_with("billing.");
        let by_status = visible(counts.clone(), 1, 1, true, sees);
        assert_eq!(by_status.count, 6);
        assert_eq!(by_status.groups, vec![g(&[Some("RUNNING")], 4), g(&[Some("FAILED")], 2)]);
        let total = visible(counts.clone(), 1, 0, false, sees);
        assert_eq!(total, ExecutionCounts { count: 6, groups: Vec::new() });
        let nothing = visible(counts, 1, 1, true, |_| false);
        assert_eq!(nothing, ExecutionCounts::default());
    }
}
