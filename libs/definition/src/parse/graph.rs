//! Dependencies within a body: duplicate ids, `needs` and `steps.<id>` references, the
//! implied dependencies, and cycles.
//!
//! A reference to a step of the same body orders the reader after it (it fills
//! `Step::deps`). Handler bodies (`on`, `on_signal`) may also read main-body steps; those
//! reads order nothing, since the main body has settled (or is running independently)
//! when a handler runs. A step never depends on itself: a self-reference in `needs` is a
//! cycle, one in an expression (typically in `compensate`) just reads its own output.

use crate::error::ErrorCode;
use crate::parse::exprs::StepRef;
use crate::parse::known::Parsed;
use crate::parse::reader::{field_path, Errors};
use std::collections::{BTreeMap, BTreeSet};

/// Checks one body and fills each step's `deps`. `main` holds the main body's ids when
/// checking a handler body.
pub(crate) fn resolve(body: &mut [Parsed], main: Option<&BTreeSet<String>>, errors: &mut Errors) {
    resolve_list(body, main, None, errors);
}

/// Checks the steps of a group and fills their `deps`; the `steps.<id>` reads of ids not
/// in the group go to `outer`, to be resolved as reads of the group step.
pub(crate) fn resolve_group(body: &mut [Parsed], outer: &mut Vec<StepRef>, errors: &mut Errors) {
    resolve_list(body, None, Some(outer), errors);
}

fn resolve_list(
    body: &mut [Parsed],
    main: Option<&BTreeSet<String>>,
    mut outer: Option<&mut Vec<StepRef>>,
    errors: &mut Errors,
) {
    let mut first: BTreeMap<&str, &str> = BTreeMap::new();
    for p in body.iter() {
        if p.step.id.is_empty() {
            continue;
        }
        if let Some(earlier) = first.get(p.step.id.as_str()) {
            let message = format!("step id `{}` is already used by {earlier}", p.step.id);
            errors.push(&field_path(&p.path, "id"), ErrorCode::DuplicateId, message);
        } else {
            first.insert(&p.step.id, &p.path);
        }
    }
    let ids: BTreeSet<String> = first.keys().map(|s| (*s).to_string()).collect();
    check_renames(body, &ids, errors);

    for p in body.iter_mut() {
        let mut deps = BTreeSet::new();
        for (need, path) in &p.needs {
            if *need == p.step.id {
                errors.push(path, ErrorCode::Cycle, format!("step `{need}` needs itself"));
            } else if ids.contains(need) {
                deps.insert(need.clone());
            } else {
                let hint = if main.is_some_and(|m| m.contains(need)) {
                    "; handlers may read main steps but only need steps of their own list"
                } else if outer.is_some() {
                    "; a group's steps need steps of the group only (put `needs` on the group)"
                } else {
                    ""
                };
                let message = format!("`needs` names no step `{need}`{}{hint}", listing(&ids));
                errors.push(path, ErrorCode::UnknownReference, message);
            }
        }
        for r in &p.refs {
            if ids.contains(&r.id) {
                if r.dep && r.id != p.step.id {
                    deps.insert(r.id.clone());
                }
            } else if let Some(outer) = outer.as_deref_mut() {
                outer.push(r.clone());
            } else if !main.is_some_and(|m| m.contains(&r.id)) {
                unknown_ref(r, &ids, main, errors);
            }
        }
        p.step.deps = deps;
    }
    find_cycles(body, errors);
}

/// `renamed_from`: the old id of a renamed step must be free in this version of the body
/// (neither this step's own id nor another step's), and two steps cannot both claim it.
fn check_renames(body: &[Parsed], ids: &BTreeSet<String>, errors: &mut Errors) {
    let mut claimed: BTreeMap<&str, &str> = BTreeMap::new();
    for p in body {
        let Some(old) = p.step.renamed_from.as_deref() else { continue };
        let path = field_path(&p.path, "renamed_from");
        if old == p.step.id {
            let message = format!("step `{old}` cannot be renamed from its own id");
            errors.push(&path, ErrorCode::InvalidValue, message);
        } else if ids.contains(old) {
            let message = format!(
                "`renamed_from: {old}` names step `{old}` of this list; the old id of a \
                 renamed step must not be used by another step"
            );
            errors.push(&path, ErrorCode::InvalidValue, message);
        } else if let Some(earlier) = claimed.get(old) {
            let message = format!("`renamed_from: {old}` is already claimed by {earlier}");
            errors.push(&path, ErrorCode::DuplicateId, message);
        } else {
            claimed.insert(old, &p.path);
        }
    }
}

/// Checks references from workflow-level fields (`output`, `queries`) against the main ids.
pub(crate) fn check_refs(refs: &[StepRef], main: &BTreeSet<String>, errors: &mut Errors) {
    for r in refs.iter().filter(|r| !main.contains(&r.id)) {
        unknown_ref(r, main, None, errors);
    }
}

fn unknown_ref(
    r: &StepRef,
    ids: &BTreeSet<String>,
    main: Option<&BTreeSet<String>>,
    errors: &mut Errors,
) {
    let mut known = ids.clone();
    known.extend(main.into_iter().flatten().cloned());
    let message = format!("`steps.{}` names no step{}", r.id, listing(&known));
    errors.push(&r.path, ErrorCode::UnknownReference, message);
}

fn listing(ids: &BTreeSet<String>) -> String {
    if ids.is_empty() {
        String::new()
    } else {
        format!(" (steps here: {})", crate::parse::reader::short_list(ids.iter()))
    }
}

/// How many steps of a cycle its message lists before "... and N more": the message
/// travels in gRPC metadata, which clients cap (8 KiB by default).
const CYCLE_LISTED: usize = 8;

/// Depth-first search in document order, with an explicit stack (a body may have
/// thousands of steps); every back edge closes a cycle, reported at the step where the
/// cycle starts with the loop in the message (shortened past [`CYCLE_LISTED`] steps).
fn find_cycles(body: &[Parsed], errors: &mut Errors) {
    let index: BTreeMap<&str, usize> =
        body.iter().enumerate().rev().map(|(i, p)| (p.step.id.as_str(), i)).collect();
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        Active,
        Done,
    }
    let mut marks = vec![Mark::New; body.len()];
    // The active path, each step with the dependencies it has yet to visit.
    let mut path: Vec<(usize, std::collections::btree_set::Iter<'_, String>)> = Vec::new();
    // Where each active step sits on the path, to cut a cycle out of it.
    let mut position = vec![usize::MAX; body.len()];

    for root in 0..body.len() {
        if marks[root] != Mark::New {
            continue;
        }
        marks[root] = Mark::Active;
        position[root] = 0;
        path.push((root, body[root].step.deps.iter()));
        while let Some((i, deps)) = path.last_mut() {
            let i = *i;
            let Some(dep) = deps.next() else {
                marks[i] = Mark::Done;
                position[i] = usize::MAX;
                path.pop();
                continue;
            };
            let Some(&j) = index.get(dep.as_str()) else { continue };
            match marks[j] {
                Mark::New => {
                    marks[j] = Mark::Active;
                    position[j] = path.len();
                    path.push((j, body[j].step.deps.iter()));
                }
                Mark::Active => {
                    let cycle: Vec<usize> = path[position[j]..].iter().map(|(k, _)| *k).collect();
                    errors.push(&body[j].path, ErrorCode::Cycle, cycle_message(body, &cycle, j));
                }
                Mark::Done => {}
            }
        }
    }
}

/// `dependency cycle: a -> b -> c -> a`, in run order (the path runs from dependant to
/// dependency), listing at most [`CYCLE_LISTED`] steps.
fn cycle_message(body: &[Parsed], cycle: &[usize], start: usize) -> String {
    let mut names: Vec<&str> = cycle.iter().map(|&k| body[k].step.id.as_str()).collect();
    names.push(&body[start].step.id);
    names.reverse();
    if names.len() > CYCLE_LISTED + 1 {
        let more = names.len() - 1 - CYCLE_LISTED;
        let shown = names[..CYCLE_LISTED].join(" -> ");
        format!("dependency cycle of {} steps: {shown} -> ... and {more} more", names.len() - 1)
    } else {
        format!("dependency cycle: {}", names.join(" -> "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expr::Template;
    use crate::model::{RetryPolicy, Step, StepKind};
    use serde_json::Value;

    fn step(i: usize, id: &str, needs: &[&str], refs: &[&str]) -> Parsed {
        let path = format!("steps[{i}]");
        Parsed {
            step: Step {
                id: id.into(),
                kind: StepKind::Compute { value: Template::Literal(Value::Null) },
                needs: needs.iter().map(|s| (*s).to_string()).collect(),
                deps: BTreeSet::new(),
                when: None,
                input: None,
                timeout_ms: None,
                queue_timeout_ms: None,
                heartbeat_timeout_ms: None,
                retry: RetryPolicy::default(),
                compensate: None,
                for_each: None,
                renamed_from: None,
                flow: crate::flow::StepFlow::default(),
                search: std::collections::BTreeMap::new(),
                continue_on_failure: false,
                on_failure: None,
            },
            needs: needs
                .iter()
                .enumerate()
                .map(|(j, n)| ((*n).to_string(), format!("{path}.needs[{j}]")))
                .collect(),
            refs: refs
                .iter()
                .map(|r| StepRef { id: (*r).into(), path: format!("{path}.compute"), dep: true })
                .collect(),
            path,
        }
    }

    fn run(body: &mut [Parsed], main: Option<&BTreeSet<String>>) -> Vec<String> {
        let mut errors = Errors::default();
        resolve(body, main, &mut errors);
        errors.0.iter().map(|e| format!("{} {} {}", e.code, e.path, e.message)).collect()
    }

    #[test]
    fn deps_join_needs_and_references_but_never_self() {
        let mut body = vec![
            step(0, "a", &[], &["a"]),
            step(1, "b", &["a"], &[]),
            step(2, "c", &[], &["b", "a"]),
        ];
        assert!(run(&mut body, None).is_empty());
        assert!(body[0].step.deps.is_empty());
        assert_eq!(body[1].step.deps.iter().collect::<Vec<_>>(), ["a"]);
        assert_eq!(body[2].step.deps.iter().collect::<Vec<_>>(), ["a", "b"]);
    }

    #[test]
    fn cycles_are_reported_once_with_the_loop() {
        let mut body = vec![
            step(0, "a", &["c"], &[]),
            step(1, "b", &[], &["a"]),
            step(2, "c", &["b"], &[]),
            step(3, "d", &[], &[]),
        ];
        let errs = run(&mut body, None);
        assert_eq!(errs, ["CYCLE steps[0] dependency cycle: a -> b -> c -> a"]);
        let mut body = vec![step(0, "a", &["a"], &[])];
        assert_eq!(run(&mut body, None), ["CYCLE steps[0].needs[0] step `a` needs itself"]);
    }

    #[test]
    fn long_chains_and_cycles_need_no_recursion() {
        let n = 30_000;
        let ids: Vec<String> = (0..n).map(|i| format!("s{i}")).collect();
        let mut body: Vec<Parsed> = (0..n)
            .map(|i| {
                let need = if i == 0 { n - 1 } else { i - 1 };
                step(i, &ids[i], &[ids[need].as_str()], &[])
            })
            .collect();
        let errs = run(&mut body, None);
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(errs[0].contains(&format!("cycle of {n} steps")), "{}", errs[0]);
        assert!(errs[0].contains("more") && errs[0].len() < 300, "{}", errs[0]);
        body[0].needs.clear();
        assert!(run(&mut body, None).is_empty());
    }

    #[test]
    fn unknown_and_duplicate_ids() {
        let mut body = vec![step(0, "a", &["zz"], &["yy"]), step(1, "a", &[], &[])];
        let errs = run(&mut body, None);
        assert_eq!(errs.len(), 3, "{errs:?}");
        assert!(errs[0].starts_with("DUPLICATE_ID steps[1].id"));
        assert!(errs[1].starts_with("UNKNOWN_REFERENCE steps[0].needs[0]"));
        assert!(errs[2].starts_with("UNKNOWN_REFERENCE steps[0].compute"));
    }

    #[test]
    fn handlers_read_main_steps_without_depending_on_them() {
        let main: BTreeSet<String> = ["charge".to_string()].into();
        let mut body = vec![step(0, "alert", &[], &["charge"])];
        assert!(run(&mut body, Some(&main)).is_empty());
        assert!(body[0].step.deps.is_empty());
        let mut body = vec![step(0, "alert", &["charge"], &[])];
        let errs = run(&mut body, Some(&main));
        assert!(errs[0].contains("only need steps of their own list"), "{errs:?}");
    }
}
