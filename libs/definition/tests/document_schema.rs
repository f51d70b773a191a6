//! The document's own JSON Schema (`schema/workflow-definition.schema.json`, for editors):
//! it is a valid draft 2020-12 schema, accepts every example and every normalised document,
//! and rejects the wrong shapes the parser rejects.

use orbit_definition::{parse, to_document};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn schema() -> Value {
    let text =
        std::fs::read_to_string(root().join("schema/workflow-definition.schema.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn validator() -> jsonschema::Validator {
    jsonschema::validator_for(&schema()).expect("the schema compiles")
}

fn yaml(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap();
    serde_norway::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn problems(v: &jsonschema::Validator, doc: &Value) -> Vec<String> {
    v.iter_errors(doc).map(|e| format!("{} {e}", e.instance_path())).collect()
}

#[test]
fn the_schema_is_a_valid_draft_2020_12_schema() {
    let s = schema();
    assert_eq!(s["$schema"], "https://json-schema.org/draft/2020-12/schema");
    jsonschema::meta::validate(&s).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn every_example_and_its_normalised_form_validates() {
    let v = validator();
    let dir = root().join("../../examples/definitions");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let doc = yaml(&path);
        let found = problems(&v, &doc);
        assert!(found.is_empty(), "{}: {found:#?}", path.display());
        let normalised = to_document(&parse(&serde_json::to_string(&doc).unwrap()).unwrap());
        let found = problems(&v, &normalised);
        assert!(found.is_empty(), "{} normalised: {found:#?}", path.display());
        seen += 1;
    }
    assert!(seen >= 8);
}

#[test]
fn a_migration_hint_validates_as_written_and_normalised() {
    let v = validator();
    let doc = json!({
        "name": "t", "version": "2", "tasks": {"w": null},
        "steps": [{"id": "a", "task": "w"}],
        "migrations": [
            {"from": "1.*", "outputs": {"a": "${{ {'value': output} }}"}},
            {"from": ["0.9", 0.8], "outputs": {"a": {"value": "${{ steps.old.output }}"}}}
        ]
    });
    assert_eq!(problems(&v, &doc), Vec::<String>::new());
    let normalised = to_document(&parse(&doc.to_string()).unwrap_or_else(|e| panic!("{e}")));
    assert_eq!(normalised["migrations"][0]["from"], json!(["1.*"]));
    assert_eq!(problems(&v, &normalised), Vec::<String>::new());
}

#[test]
fn wrong_shapes_are_rejected() {
    let v = validator();
    let base = json!({"name": "t", "version": "1", "tasks": {"work": null}, "steps": [{"id": "a", "task": "work"}]});
    assert!(v.is_valid(&base));
    let with_step = |step: Value| {
        let mut doc = base.clone();
        doc["steps"] = json!([step]);
        doc
    };
    let bad = [
        ("two kinds", with_step(json!({"id": "a", "task": "work", "sleep": "1s"}))),
        ("no kind", with_step(json!({"id": "a"}))),
        ("bad id", with_step(json!({"id": "2a", "sleep": "1s"}))),
        ("bad renamed_from", with_step(json!({"id": "a", "sleep": "1s", "renamed_from": "2a"}))),
        ("bare number duration", with_step(json!({"id": "a", "sleep": 30}))),
        ("unknown step field", with_step(json!({"id": "a", "task": "work", "retyr": {}}))),
        (
            "heartbeat on compute",
            with_step(json!({"id": "a", "compute": 1, "heartbeat_timeout": "5s"})),
        ),
        (
            "for_each on sleep",
            with_step(json!({"id": "a", "sleep": "1s", "for_each": "${{ input.xs }}"})),
        ),
        ("as without for_each", with_step(json!({"id": "a", "task": "work", "as": "x"}))),
        (
            "continue_on_failure on continue_as_new",
            with_step(
                json!({"id": "a", "continue_as_new": {"input": 1}, "continue_on_failure": true}),
            ),
        ),
        ("group without steps", with_step(json!({"id": "a", "group": {"output": 1}}))),
        ("group with an empty list", with_step(json!({"id": "a", "group": {"steps": []}}))),
        (
            "continue_as_new in a group",
            with_step(
                json!({"id": "a", "group": {"steps": [{"id": "b", "continue_as_new": {"input": 1}}]}}),
            ),
        ),
        (
            "compensate on a group",
            with_step(
                json!({"id": "a", "group": {"steps": [{"id": "b", "task": "work"}]}, "compensate": {"task": "work"}}),
            ),
        ),
        (
            "for_each on a repeat",
            with_step(
                json!({"id": "a", "repeat": {"steps": [{"id": "b", "task": "work"}], "until": "${{ true }}", "max_iterations": 2}, "for_each": [1]}),
            ),
        ),
        (
            "repeat without max_iterations",
            with_step(
                json!({"id": "a", "repeat": {"steps": [{"id": "b", "task": "work"}], "until": "${{ true }}"}}),
            ),
        ),
        (
            "repeat over the iteration limit",
            with_step(
                json!({"id": "a", "repeat": {"steps": [{"id": "b", "task": "work"}], "until": "${{ true }}", "max_iterations": 10001}}),
            ),
        ),
        (
            "repeat without until",
            with_step(
                json!({"id": "a", "repeat": {"steps": [{"id": "b", "task": "work"}], "max_iterations": 3}}),
            ),
        ),
        (
            "compensate on a repeat",
            with_step(
                json!({"id": "a", "repeat": {"steps": [{"id": "b", "task": "work"}], "until": "${{ true }}", "max_iterations": 2}, "compensate": {"task": "work"}}),
            ),
        ),
        ("empty switch", with_step(json!({"id": "a", "switch": []}))),
        (
            "switch branch without when",
            with_step(json!({"id": "a", "switch": [{"steps": [{"id": "b", "task": "work"}]}]})),
        ),
        (
            "switch branch with when and default",
            with_step(
                json!({"id": "a", "switch": [{"when": true, "steps": [{"id": "b", "task": "work"}], "default": [{"id": "c", "task": "work"}]}]}),
            ),
        ),
        (
            "continue_on_failure not a boolean",
            with_step(json!({"id": "a", "task": "work", "continue_on_failure": "yes"})),
        ),
        (
            "backoff below 1",
            with_step(json!({"id": "a", "task": "work", "retry": {"backoff": 0.5}})),
        ),
        (
            "zero attempts",
            with_step(json!({"id": "a", "task": "work", "retry": {"max_attempts": 0}})),
        ),
        (
            "when with text",
            with_step(json!({"id": "a", "sleep": "1s", "when": "x ${{ input.a }}"})),
        ),
        ("bad workflow ref", with_step(json!({"id": "a", "workflow": "child@"}))),
        ("http without url", with_step(json!({"id": "a", "http": {"method": "GET"}}))),
        ("no steps", json!({"name": "t", "version": "1", "steps": []})),
        ("missing name", json!({"version": "1", "steps": [{"id": "a", "sleep": "1s"}]})),
        (
            "unknown top-level field",
            json!({"name": "t", "version": "1", "retries": 1, "steps": [{"id": "a", "sleep": "1s"}]}),
        ),
        ("bad name", json!({"name": "a b", "version": "1", "steps": [{"id": "a", "sleep": "1s"}]})),
        (
            "zero limit",
            json!({"name": "t", "version": "1", "limits": {"max_fan_out": 0}, "steps": [{"id": "a", "sleep": "1s"}]}),
        ),
        (
            "schema typo",
            json!({"name": "t", "version": "1", "input": {"type": "object", "requird": ["a"]}, "steps": [{"id": "a", "sleep": "1s"}]}),
        ),
        (
            "schema bad type",
            json!({"name": "t", "version": "1", "input": {"type": "float"}, "steps": [{"id": "a", "sleep": "1s"}]}),
        ),
        (
            "continue_as_new in a handler",
            json!({"name": "t", "version": "1", "steps": [{"id": "a", "sleep": "1s"}], "on": {"failure": [{"id": "b", "continue_as_new": {"input": 1}}]}}),
        ),
        (
            "compensate in an on handler",
            json!({"name": "t", "version": "1", "tasks": {"w": null}, "steps": [{"id": "a", "sleep": "1s"}], "on": {"cancel": [{"id": "b", "task": "w", "compensate": {"task": "w"}}]}}),
        ),
        (
            "migration hint with a bad pattern",
            json!({"name": "t", "version": "2", "tasks": {"w": null}, "steps": [{"id": "a", "task": "w"}], "migrations": [{"from": "1.?", "outputs": {"a": 1}}]}),
        ),
        (
            "migration hint without outputs",
            json!({"name": "t", "version": "2", "tasks": {"w": null}, "steps": [{"id": "a", "task": "w"}], "migrations": [{"from": "1"}]}),
        ),
        (
            "migration hint with an empty from",
            json!({"name": "t", "version": "2", "tasks": {"w": null}, "steps": [{"id": "a", "task": "w"}], "migrations": [{"from": [], "outputs": {"a": 1}}]}),
        ),
        (
            "migration hint with an unknown field",
            json!({"name": "t", "version": "2", "tasks": {"w": null}, "steps": [{"id": "a", "task": "w"}], "migrations": [{"from": "1", "outputs": {"a": 1}, "to": "2"}]}),
        ),
    ];
    for (what, doc) in bad {
        assert!(!v.is_valid(&doc), "the schema accepts {what}: {doc}");
        // The parser agrees.
        assert!(parse(&doc.to_string()).is_err(), "the parser accepts {what}: {doc}");
    }
}

#[test]
fn shape_errors_of_the_invalid_corpus_are_caught_by_the_schema_too() {
    let v = validator();
    for name in [
        "two-kinds.yaml",
        "no-kind.yaml",
        "bad-step-id.yaml",
        "bare-number-duration.yaml",
        "bad-duration-unit.yaml",
        "for-each-on-sleep.yaml",
        "heartbeat-on-compute.yaml",
        "unknown-fields.yaml",
        "retry-backoff.yaml",
        "bad-limits.yaml",
        "schema-unknown-keyword.yaml",
        "schema-bad-type.yaml",
        "bad-workflow-name.yaml",
        "missing-name-version-steps.yaml",
        "empty-steps.yaml",
        "input-on-compute.yaml",
        "as-without-for-each.yaml",
        "http-bad.yaml",
        "continue-as-new-in-handler.yaml",
        "compensate-in-on-handler.yaml",
        "wrong-types.yaml",
        "when-with-text.yaml",
        "for-each-bad.yaml",
        "flow-bad.yaml",
        "flow-on-non-task.yaml",
        "fairness-bad.yaml",
        "worker-pools-bad.yaml",
    ] {
        let doc = yaml(&root().join("tests/invalid").join(name));
        assert!(!v.is_valid(&doc), "the schema accepts tests/invalid/{name}");
    }
}

#[test]
fn update_handlers_with_steps_validate_without_compensation() {
    let v = validator();
    let doc = json!({
        "name": "t", "version": "1", "tasks": {"work": null},
        "updates": {"add": {
            "steps": [{"id": "h", "task": "work", "input": "${{ args }}"}],
            "reply": "${{ steps.h.output }}"
        }},
        "steps": [{"id": "a", "sleep": "1s"}]
    });
    assert!(problems(&v, &doc).is_empty(), "{:#?}", problems(&v, &doc));
    let normalised = to_document(&parse(&doc.to_string()).unwrap());
    assert!(problems(&v, &normalised).is_empty(), "{:#?}", problems(&v, &normalised));
    let mut bad = doc.clone();
    bad["updates"]["add"]["steps"][0]["compensate"] = json!({"sleep": "1s"});
    assert!(!v.is_valid(&bad), "the schema refuses what the parser refuses");
    assert!(parse(&bad.to_string()).is_err());
}

#[test]
fn flow_control_validates_as_written_and_normalised_and_refuses_what_the_parser_refuses() {
    let v = validator();
    let doc = json!({
        "name": "t", "version": "1", "priority": 2, "tasks": {"work": null},
        "steps": [
            {"id": "a", "task": "work", "priority": 1,
             "concurrency": [{"key": "${{ input.account }}", "limit": 1, "group": "billing"}],
             "rate_limit": {"key": "${{ input.api }}", "limit": 100, "per": "1m"}},
            {"id": "b", "task": "work", "for_each": "${{ input.xs }}",
             "priority": "${{ item.vip ? 1 : 5 }}",
             "concurrency": {"key": "acct-${{ item.id }}", "limit": 2},
             "rate_limit": {"name": "stripe"}}
        ]
    });
    assert_eq!(problems(&v, &doc), Vec::<String>::new());
    let normalised = to_document(&parse(&doc.to_string()).unwrap_or_else(|e| panic!("{e}")));
    assert_eq!(problems(&v, &normalised), Vec::<String>::new());

    let with = |field: &str, value: Value| {
        let mut d = doc.clone();
        d["steps"][0][field] = value;
        d
    };
    let bad = [
        ("priority 0", with("priority", json!(0))),
        ("priority 6", with("priority", json!(6))),
        ("priority text", with("priority", json!("high"))),
        (
            "two concurrency keys",
            with("concurrency", json!([{"key": "a", "limit": 1}, {"key": "b", "limit": 1}])),
        ),
        ("no concurrency key", with("concurrency", json!([]))),
        ("concurrency without limit", with("concurrency", json!({"key": "a"}))),
        ("concurrency limit 0", with("concurrency", json!({"key": "a", "limit": 0}))),
        ("empty key", with("concurrency", json!({"key": "", "limit": 1}))),
        ("bad group", with("concurrency", json!({"key": "a", "limit": 1, "group": "a/b"}))),
        ("named and inline", with("rate_limit", json!({"name": "n", "limit": 1, "per": "1s"}))),
        ("named with a group", with("rate_limit", json!({"name": "n", "group": "g"}))),
        ("inline without per", with("rate_limit", json!({"limit": 1}))),
        ("neither", with("rate_limit", json!({"key": "k"}))),
        ("bare number per", with("rate_limit", json!({"limit": 1, "per": 60}))),
        ("workflow priority expression", {
            let mut d = doc.clone();
            d["priority"] = json!("${{ input.p }}");
            d
        }),
        ("priority on a compute step", {
            let mut d = doc.clone();
            d["steps"][1] = json!({"id": "b", "compute": 1, "priority": 1});
            d
        }),
    ];
    for (what, doc) in bad {
        assert!(!v.is_valid(&doc), "the schema accepts {what}: {doc}");
        assert!(parse(&doc.to_string()).is_err(), "the parser accepts {what}: {doc}");
    }
}

#[test]
fn fairness_validates_as_written_and_normalised_and_refuses_what_the_parser_refuses() {
    let v = validator();
    let doc = json!({
        "name": "t", "version": "1", "tasks": {"work": null},
        "fairness": {"key": "${{ input.tenant }}", "weight": "${{ input.w }}"},
        "steps": [
            {"id": "a", "task": "work", "fairness": {"key": "k"}},
            {"id": "b", "task": "work", "for_each": "${{ input.xs }}",
             "fairness": {"key": "t-${{ item.t }}", "weight": 1000, "group": "tenants"}}
        ]
    });
    assert_eq!(problems(&v, &doc), Vec::<String>::new());
    let normalised = to_document(&parse(&doc.to_string()).unwrap_or_else(|e| panic!("{e}")));
    assert_eq!(problems(&v, &normalised), Vec::<String>::new());

    let with = |value: Value| {
        let mut d = doc.clone();
        d["steps"][0]["fairness"] = value;
        d
    };
    let bad = [
        ("no key", with(json!({"weight": 2}))),
        ("empty key", with(json!({"key": ""}))),
        ("weight 0", with(json!({"key": "k", "weight": 0}))),
        ("weight 1001", with(json!({"key": "k", "weight": 1001}))),
        ("weight text", with(json!({"key": "k", "weight": "heavy"}))),
        ("bad group", with(json!({"key": "k", "group": "a/b"}))),
        ("unknown field", with(json!({"key": "k", "limit": 1}))),
        ("fairness on a sleep step", {
            let mut d = doc.clone();
            d["steps"][1] = json!({"id": "b", "sleep": "1s", "fairness": {"key": "k"}});
            d
        }),
        ("workflow fairness without key", {
            let mut d = doc.clone();
            d["fairness"] = json!({"weight": 2});
            d
        }),
    ];
    for (what, doc) in bad {
        assert!(!v.is_valid(&doc), "the schema accepts {what}: {doc}");
        assert!(parse(&doc.to_string()).is_err(), "the parser accepts {what}: {doc}");
    }
}

#[test]
fn worker_pools_validate_as_written_and_normalised_and_refuse_what_the_parser_refuses() {
    let v = validator();
    let doc = json!({
        "name": "t", "version": "1", "tasks": {"work": null},
        "worker_labels": {"pool": "${{ input.pool }}"},
        "sticky": true,
        "steps": [
            {"id": "a", "task": "work", "on": {"pool": "gpu", "region": "eu"}},
            {"id": "b", "task": "work", "needs": ["a"], "sticky": {"timeout": "2s"}},
            {"id": "c", "task": "work", "needs": ["b"], "sticky": false}
        ]
    });
    assert_eq!(problems(&v, &doc), Vec::<String>::new());
    let normalised = to_document(&parse(&doc.to_string()).unwrap_or_else(|e| panic!("{e}")));
    assert_eq!(problems(&v, &normalised), Vec::<String>::new());

    let step = |field: &str, value: Value| {
        let mut d = doc.clone();
        d["steps"][0][field] = value;
        d
    };
    let bad = [
        ("label name with a space", step("on", json!({"a b": "x"}))),
        ("empty label value", step("on", json!({"pool": ""}))),
        ("label value not a string", step("on", json!({"pool": 1}))),
        ("labels not a mapping", step("on", json!("gpu"))),
        ("sticky text", step("sticky", json!("yes"))),
        ("sticky unknown field", step("sticky", json!({"after": "1s"}))),
        ("on on a sleep step", {
            let mut d = doc.clone();
            d["steps"][2] = json!({"id": "c", "sleep": "1s", "on": {"pool": "gpu"}});
            d
        }),
    ];
    for (what, doc) in bad {
        assert!(!v.is_valid(&doc), "the schema accepts {what}: {doc}");
        assert!(parse(&doc.to_string()).is_err(), "the parser accepts {what}: {doc}");
    }
}

#[test]
fn failure_branches_and_races_validate_and_refuse_what_the_parser_refuses() {
    let v = validator();
    let doc = |steps: Value| json!({"name": "t", "version": "1", "tasks": {"work": null}, "signals": {"go": null}, "steps": steps});
    let one = json!([{"id": "b", "task": "work"}]);
    let good = doc(json!([
        {"id": "a", "task": "work", "on_failure": {"steps": [{"id": "n", "compute": "${{ failure.code }}"}], "output": 1}},
        {"id": "r", "race": [{"steps": [{"id": "w", "await": "go"}], "output": 2}, {"steps": [{"id": "s", "sleep": "1m"}]}]},
    ]));
    assert!(problems(&v, &good).is_empty(), "{:#?}", problems(&v, &good));
    let normalised = to_document(&parse(&good.to_string()).unwrap());
    assert!(problems(&v, &normalised).is_empty(), "{:#?}", problems(&v, &normalised));
    let bad = [
        ("race with one branch", doc(json!([{"id": "r", "race": [{"steps": one}]}]))),
        (
            "race branch without steps",
            doc(json!([{"id": "r", "race": [{"steps": one}, {"output": 1}]}])),
        ),
        (
            "race branch with when",
            doc(json!([{"id": "r", "race": [{"steps": one}, {"when": true, "steps": one}]}])),
        ),
        (
            "compensate on a race",
            doc(
                json!([{"id": "r", "race": [{"steps": one}, {"steps": one}], "compensate": {"task": "work"}}]),
            ),
        ),
        (
            "on_failure without steps",
            doc(json!([{"id": "a", "task": "work", "on_failure": {"output": 1}}])),
        ),
        (
            "on_failure with an empty list",
            doc(json!([{"id": "a", "task": "work", "on_failure": {"steps": []}}])),
        ),
        (
            "on_failure on a group",
            doc(json!([{"id": "a", "group": {"steps": one}, "on_failure": {"steps": one}}])),
        ),
        (
            "on_failure with for_each",
            doc(
                json!([{"id": "a", "task": "work", "for_each": [1], "on_failure": {"steps": one}}]),
            ),
        ),
        (
            "on_failure with continue_on_failure",
            doc(
                json!([{"id": "a", "task": "work", "continue_on_failure": true, "on_failure": {"steps": one}}]),
            ),
        ),
    ];
    for (what, doc) in bad {
        assert!(!v.is_valid(&doc), "the schema accepts {what}: {doc}");
        assert!(parse(&doc.to_string()).is_err(), "the parser accepts {what}: {doc}");
    }
}

#[test]
fn a_repeat_opting_out_of_continue_as_new_validates_and_a_wrong_type_is_refused() {
    let v = validator();
    let doc = |opt: Value| {
        json!({"name": "t", "version": "1", "tasks": {"work": null}, "steps": [
            {"id": "r", "repeat": {"steps": [{"id": "b", "task": "work"}], "until": "${{ true }}", "max_iterations": 2, "continue_as_new": opt}},
        ]})
    };
    for opt in [json!(false), json!(true)] {
        let good = doc(opt);
        assert!(problems(&v, &good).is_empty(), "{:#?}", problems(&v, &good));
        let normalised = to_document(&parse(&good.to_string()).unwrap());
        assert!(problems(&v, &normalised).is_empty(), "{:#?}", problems(&v, &normalised));
    }
    let bad = doc(json!("no"));
    assert!(!problems(&v, &bad).is_empty(), "the schema accepts continue_as_new: \"no\"");
    assert!(parse(&bad.to_string()).is_err(), "the parser accepts continue_as_new: \"no\"");
}
