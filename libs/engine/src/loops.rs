//! What an expression inside a loop sees: the names a `for_each` group's element and a
//! repeat's iteration bind (issue 29).
//!
//! A list that runs more than once names its run in the unit path (`g[2].`, `poll[0].`), so
//! the site's group prefix alone says which element or iteration an expression belongs
//! to: walking it from the innermost list outwards, the first segment `id[n]` whose step
//! binds the name gives the value. Element `n` of a `for_each` group binds its `as` name
//! (the frozen list's element n, from `StepFanOut`) and `index` (n); iteration `n` of a
//! repeat binds `iteration` (n) and `previous` (the recorded output of iteration n-1, unit
//! `id[n-1]`; null in iteration 0).

use crate::state::State;
use crate::unit::{enclosing, Scope as UnitScope, UnitKey};
use orbit_definition::{Definition, StepKind};
use serde_json::{json, Value};

/// The value `name` has in the loops around group prefix `group` of body instance `scope`,
/// innermost first; `None` if no enclosing element or iteration binds it.
#[must_use]
pub(crate) fn enclosing_var(
    def: &Definition,
    state: &State,
    scope: &UnitScope,
    group: &str,
    name: &str,
) -> Option<Value> {
    let body = scope.body();
    for prefix in enclosing(group) {
        let Some(path) = prefix.strip_suffix('.') else { continue };
        let Some((list, n)) = run_of(path) else { continue };
        let Some(step) = def.find_step(&body, path) else { continue };
        let key = |p: &str| UnitKey::step(scope.clone(), p).to_string();
        match &step.kind {
            StepKind::Repeat(_) => match name {
                "iteration" => return Some(json!(n)),
                "previous" => {
                    let previous = n.checked_sub(1).map(|p| key(&format!("{list}[{p}]")));
                    let output = previous.and_then(|k| state.unit(&k)?.output.clone());
                    return Some(output.unwrap_or(Value::Null));
                }
                _ => {}
            },
            StepKind::Group { .. } => match &step.for_each {
                Some(_) if name == "index" => return Some(json!(n)),
                Some(each) if each.as_name == name => {
                    let items = state.fanouts.get(&key(list));
                    return Some(items.and_then(|i| i.get(n)).cloned().unwrap_or(Value::Null));
                }
                _ => {}
            },
            _ => {}
        }
    }
    None
}

/// The list path and run index of a prefix path ending in a run (`a.g[2]` → (`a.g`, 2)).
fn run_of(path: &str) -> Option<(&str, usize)> {
    let (list, index) = path.strip_suffix(']')?.rsplit_once('[')?;
    let last = list.rsplit('.').next()?;
    if last.contains(']') {
        return None;
    }
    Some((list, index.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::run_of;

    #[test]
    fn runs_are_read_from_the_last_segment() {
        assert_eq!(run_of("g[2]"), Some(("g", 2)));
        assert_eq!(run_of("a[1].g[12]"), Some(("a[1].g", 12)));
        assert_eq!(run_of("a[1].g"), None);
        assert_eq!(run_of("g"), None);
    }
}
