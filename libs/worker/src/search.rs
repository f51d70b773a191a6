//! What [`Client::search_attributes`](crate::client::Client::search_attributes) answers:
//! an execution's search attributes and memo (issue 28 item 1), as JSON.

use orbit_api::v1 as pb;
use serde_json::Value;
use std::collections::BTreeMap;

use crate::value;

/// An execution's current search attributes (declared in its definition, set by
/// `search:`) and the memo its start gave.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ExecutionSearch {
    /// Name -> value (datetimes as RFC 3339 strings, keyword lists as lists).
    pub search_attributes: BTreeMap<String, Value>,
    /// The start's memo, a JSON object; `None` when none was given.
    pub memo: Option<Value>,
}

impl ExecutionSearch {
    pub(crate) fn of(response: &pb::DescribeExecutionResponse) -> Self {
        let search_attributes = response
            .search_attributes
            .iter()
            .map(|(name, v)| (name.clone(), value::from_proto(v)))
            .collect();
        let memo = response.memo.clone().map(|s| value::from_proto(&pb_value(s)));
        ExecutionSearch { search_attributes, memo }
    }
}

fn pb_value(s: prost_types::Struct) -> prost_types::Value {
    prost_types::Value { kind: Some(prost_types::value::Kind::StructValue(s)) }
}

/// A memo as sent: a JSON object, or `None` for anything else.
pub(crate) fn memo_struct(memo: &Value) -> Option<prost_types::Struct> {
    match value::to_proto(memo).kind {
        Some(prost_types::value::Kind::StructValue(s)) => Some(s),
        _ => None,
    }
}
