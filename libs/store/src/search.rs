//! Search attributes in the store (issue 28 item 1): the rows of `execution_search` a
//! commit writes, told from its `SearchAttributesUpserted` events, and the server-wide
//! catalog of declared attributes (`search_attributes`, one type per name).
//!
//! Projection: a commit replaces, for its execution, the rows of every attribute its events
//! upsert (the last value of each name wins within the batch): the old rows are deleted and
//! the new value's rows inserted (one per `keyword_list` element; none for `unset`), in the
//! same transaction as the events. A batch without upserts yields no [`SearchWrites`], so
//! the commit issues no statement for them. The rows are keyed by execution, not run: a
//! later run's upserts replace the names they set, the others stay.

use crate::batch::CommitBatch;
use orbit_definition::{SearchType, SearchValue};
use orbit_engine::Event;
use std::collections::BTreeMap;

/// One row of `execution_search`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SearchRow {
    pub name: String,
    pub kw: Option<String>,
    pub ival: Option<i64>,
    pub num: Option<f64>,
    pub ts: Option<i64>,
    pub flag: Option<bool>,
}

/// What one batch writes to `execution_search` for its execution.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct SearchWrites {
    /// Names whose rows are deleted first.
    pub names: Vec<String>,
    /// Rows inserted after.
    pub rows: Vec<SearchRow>,
}

/// The batch's writes, or `None` when its events upsert nothing.
pub(crate) fn writes_of(batch: &CommitBatch) -> Option<SearchWrites> {
    let mut last: BTreeMap<&str, &SearchValue> = BTreeMap::new();
    for he in &batch.events {
        if let Event::SearchAttributesUpserted { values, .. } = &he.event {
            last.extend(values.iter().map(|(n, v)| (n.as_str(), v)));
        }
    }
    if last.is_empty() {
        return None;
    }
    let mut out = SearchWrites::default();
    for (name, value) in last {
        out.names.push(name.to_string());
        let row = |f: &dyn Fn(&mut SearchRow)| {
            let mut r = SearchRow {
                name: name.to_string(),
                kw: None,
                ival: None,
                num: None,
                ts: None,
                flag: None,
            };
            f(&mut r);
            r
        };
        match value {
            SearchValue::Keyword(s) | SearchValue::Text(s) => {
                out.rows.push(row(&|r| r.kw = Some(s.clone())));
            }
            SearchValue::Int(i) => out.rows.push(row(&|r| r.ival = Some(*i))),
            SearchValue::Double(d) => out.rows.push(row(&|r| r.num = Some(*d))),
            SearchValue::Bool(b) => out.rows.push(row(&|r| r.flag = Some(*b))),
            SearchValue::Datetime(t) => out.rows.push(row(&|r| r.ts = Some(*t))),
            SearchValue::KeywordList(items) => {
                // One row per distinct element: membership is what a query asks.
                let mut items: Vec<&String> = items.iter().collect();
                items.sort_unstable();
                items.dedup();
                out.rows.extend(items.into_iter().map(|s| row(&|r| r.kw = Some(s.clone()))));
            }
            SearchValue::Unset => {}
        }
    }
    Some(out)
}

/// One declared search attribute of the server-wide catalog.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchAttributeRow {
    /// The attribute name.
    pub name: String,
    /// Its type.
    pub ty: SearchType,
    /// The workflow whose registration declared it first.
    pub workflow: String,
}

/// A stored type name back to its type (`keyword` when unknown: only this code writes it).
pub(crate) fn parse_type(name: &str) -> SearchType {
    SearchType::parse(name).unwrap_or(SearchType::Keyword)
}

#[cfg(test)]
mod tests {
    use super::*;
    use orbit_engine::{HistoryEvent, Origin};

    fn upsert(values: &[(&str, SearchValue)]) -> HistoryEvent {
        let values = values.iter().map(|(n, v)| ((*n).to_string(), v.clone())).collect();
        HistoryEvent {
            seq: 1,
            timestamp_ms: 0,
            origin: Origin::Decided,
            event: Event::SearchAttributesUpserted { step: None, values, errors: BTreeMap::new() },
        }
    }

    #[test]
    fn the_last_value_of_each_name_wins_and_lists_are_one_row_per_element() {
        let mut batch = CommitBatch { execution_id: "x".into(), ..CommitBatch::default() };
        assert_eq!(writes_of(&batch), None);
        batch.events.push(upsert(&[("a", SearchValue::Int(1)), ("b", SearchValue::Bool(true))]));
        batch.events.push(upsert(&[
            ("a", SearchValue::Unset),
            ("t", SearchValue::KeywordList(vec!["y".into(), "x".into(), "y".into()])),
        ]));
        let w = writes_of(&batch).unwrap();
        assert_eq!(w.names, ["a", "b", "t"]);
        let kws: Vec<_> = w.rows.iter().map(|r| (r.name.as_str(), r.kw.clone(), r.flag)).collect();
        assert_eq!(
            kws,
            [("b", None, Some(true)), ("t", Some("x".into()), None), ("t", Some("y".into()), None)]
        );
    }
}
