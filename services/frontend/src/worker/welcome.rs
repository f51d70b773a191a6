//! `Welcome.warnings`: what a worker's `hello` announces that no registered workflow asks
//! for — a task no workflow uses, or a task at a version no workflow declares. Such a
//! session would wait for work that never comes (a typo in a name, a worker deployed ahead
//! of its workflow); a warning says so at once, without refusing the session, since the
//! workflow may be registered later.

use crate::Shared;
use orbit_engine::effects::HTTP_TASK;
use orbit_store::DefinitionRow;
use std::collections::{BTreeMap, BTreeSet};

/// Warnings about `tasks` (`(name, version)` as announced; an empty version means any),
/// against every registered definition. Reading the definitions failed: no warnings (the
/// session is still served; a warning is advice, not a check).
pub(crate) async fn warnings(shared: &Shared, tasks: &[(String, String)]) -> Vec<String> {
    match shared.store.list_definitions().await {
        Ok(rows) => against(&declared(&rows), tasks),
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the definitions for the welcome's warnings");
            Vec::new()
        }
    }
}

/// Task name → the versions registered definitions declare for it. Read from the stored
/// canonical document (`tasks.NAME.version`, always present there), without compiling the
/// definition: a hello pays one read, not a parse per workflow.
fn declared(rows: &[DefinitionRow]) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for row in rows {
        let Ok(doc) = serde_json::from_str::<serde_json::Value>(&row.document) else { continue };
        let Some(tasks) = doc.get("tasks").and_then(|t| t.as_object()) else { continue };
        for (name, contract) in tasks {
            let version = contract.get("version").and_then(|v| v.as_str()).unwrap_or("1");
            out.entry(name.clone()).or_default().insert(version.to_string());
        }
    }
    out
}

fn against(
    declared: &BTreeMap<String, BTreeSet<String>>,
    tasks: &[(String, String)],
) -> Vec<String> {
    let mut out = Vec::new();
    for (name, version) in tasks {
        // The built-in http task is the server's own (no definition declares it by name).
        if name == HTTP_TASK {
            continue;
        }
        match declared.get(name) {
            None => out.push(format!(
                "no registered workflow uses task {name}: this worker receives none of it until \
                 a workflow declaring it is registered"
            )),
            Some(versions) if !version.is_empty() && !versions.contains(version) => {
                let known: Vec<&str> = versions.iter().map(String::as_str).collect();
                out.push(format!(
                    "no registered workflow declares task {name} version {version} (declared: \
                     {}): this worker receives only tasks of the versions it announces",
                    known.join(", ")
                ));
            }
            Some(_) => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{against, declared};
    use orbit_store::DefinitionRow;

    fn row(document: &str) -> DefinitionRow {
        DefinitionRow {
            name: "w".into(),
            version: "1".into(),
            definition_hash: "h".into(),
            document: document.into(),
            created_at_ms: 1,
        }
    }

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter().map(|(n, v)| ((*n).to_string(), (*v).to_string())).collect()
    }

    #[test]
    fn unknown_tasks_and_undeclared_versions_are_warned_about_once_each() {
        let rows = [
            row(r#"{"tasks": {"a": {"version": "1"}, "b": {"version": "2"}}}"#),
            row(r#"{"tasks": {"a": {"version": "3"}}}"#),
        ];
        let declared = declared(&rows);
        let hello = pairs(&[("a", "1"), ("a", "2"), ("b", ""), ("c", "1"), ("orbit.http", "1")]);
        let warnings = against(&declared, &hello);
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(warnings[0].contains("task a version 2 (declared: 1, 3)"), "{warnings:?}");
        assert!(warnings[1].contains("no registered workflow uses task c"), "{warnings:?}");
    }
}
