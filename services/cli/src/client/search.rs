//! Search attributes and memo in the CLI (issue 28 item 1): `execution start --memo JSON`
//! and the two sections `execution describe` adds after the description.

use orbit_api::v1::DescribeExecutionResponse;
use orbit_server_kit::payload::{json_object_to_struct, proto_to_json, struct_to_json_object};
use serde_json::{Map, Value as Json};

use super::error::Failure;
use super::input::parse_json_arg;
use super::output::pretty;

/// `--memo`: a JSON object (or `@PATH`), else a usage error.
pub fn memo_arg(text: &str) -> Result<prost_types::Struct, Failure> {
    match parse_json_arg("--memo", text)? {
        Json::Object(map) => Ok(json_object_to_struct(map)),
        _ => Err(Failure::Usage("--memo: the memo must be a JSON object".to_owned())),
    }
}

/// The answer's search attributes (by name) and memo as JSON (`{}` and null when none).
fn parts(r: &DescribeExecutionResponse) -> (Json, Json) {
    let mut names: Vec<&String> = r.search_attributes.keys().collect();
    names.sort();
    let search: Map<String, Json> = names
        .into_iter()
        .map(|n| {
            let v = r.search_attributes[n].clone();
            (n.clone(), proto_to_json(v).unwrap_or(Json::Null))
        })
        .collect();
    let memo =
        r.memo.clone().and_then(|m| struct_to_json_object(m).ok()).map_or(Json::Null, Json::Object);
    (Json::Object(search), memo)
}

/// `description` with `search_attributes` and `memo` added.
#[must_use]
pub fn with_search_json(mut description: Json, r: &DescribeExecutionResponse) -> Json {
    let (search, memo) = parts(r);
    if let Json::Object(map) = &mut description {
        map.insert("search_attributes".into(), search);
        map.insert("memo".into(), memo);
    }
    description
}

/// The text sections: one `name: value` line per search attribute, then the memo.
#[must_use]
pub fn search_text(r: &DescribeExecutionResponse) -> String {
    let (search, memo) = parts(r);
    let mut out = String::new();
    if let Json::Object(map) = &search {
        if !map.is_empty() {
            out.push_str("\nsearch attributes:\n");
            for (name, value) in map {
                out.push_str(&format!("  {name}: {value}\n"));
            }
        }
    }
    if !memo.is_null() {
        out.push_str(&format!("\nmemo:\n{}\n", pretty(&memo)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use orbit_server_kit::payload::json_to_proto;
    use serde_json::json;

    #[test]
    fn describe_shows_search_attributes_and_memo() {
        let r = DescribeExecutionResponse {
            search_attributes: [
                ("customer".to_string(), json_to_proto(json!("acme"))),
                ("amount".to_string(), json_to_proto(json!(12.5))),
            ]
            .into(),
            memo: Some(json_object_to_struct(json!({"note": "hi"}).as_object().unwrap().clone())),
            ..Default::default()
        };
        let j = with_search_json(json!({"info": {}}), &r);
        assert_eq!(j["search_attributes"], json!({"amount": 12.5, "customer": "acme"}));
        assert_eq!(j["memo"], json!({"note": "hi"}));
        let text = search_text(&r);
        assert!(text.contains("  amount: 12.5\n  customer: \"acme\"\n"), "{text}");
        assert!(text.contains("memo:\n{\n  \"note\": \"hi\"\n}"), "{text}");
        assert_eq!(search_text(&DescribeExecutionResponse::default()), "");
        assert!(memo_arg("[1]").is_err());
        assert_eq!(memo_arg(r#"{"a": 1}"#).unwrap().fields.len(), 1);
    }
}
