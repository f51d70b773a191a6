//! `CountExecutions.group_by`: the system attributes a count may be grouped by — those of
//! a bounded set of values (keyword and status attributes, not `execution_id`, whose every
//! group would hold one execution), at most [`MAX_GROUP_BY`], each once.

use crate::catalog::{AttrType, SearchType, SystemAttr, SYSTEM_ATTRIBUTES};

/// The most attributes one count groups by.
pub const MAX_GROUP_BY: usize = 3;

/// Whether a count may group by `attr`.
#[must_use]
pub fn groupable(attr: &SystemAttr) -> bool {
    attr.name != "execution_id"
        && matches!(
            attr.ty,
            AttrType::Status | AttrType::Search(SearchType::Keyword | SearchType::Bool)
        )
}

/// The names a count may group by, in catalog order.
#[must_use]
pub fn groupable_names() -> Vec<&'static str> {
    SYSTEM_ATTRIBUTES.iter().filter(|a| groupable(a)).map(|a| a.name).collect()
}

/// The attributes named by `names`, in that order.
///
/// # Errors
/// A message naming the first name that is unknown, not groupable or repeated, or the
/// count when there are more than [`MAX_GROUP_BY`].
pub fn group_by<S: AsRef<str>>(names: &[S]) -> Result<Vec<&'static SystemAttr>, String> {
    if names.len() > MAX_GROUP_BY {
        return Err(format!(
            "{} attributes to group by; at most {MAX_GROUP_BY} (MAX_GROUP_BY)",
            names.len()
        ));
    }
    let mut attrs: Vec<&'static SystemAttr> = Vec::with_capacity(names.len());
    for name in names {
        let name = name.as_ref();
        let attr = SYSTEM_ATTRIBUTES.iter().find(|a| a.name == name).filter(|a| groupable(a));
        let Some(attr) = attr else {
            return Err(format!(
                "cannot group by {name:?}; groupable attributes: {}",
                groupable_names().join(", ")
            ));
        };
        if attrs.iter().any(|a| a.name == name) {
            return Err(format!("{name:?} is named twice"));
        }
        attrs.push(attr);
    }
    Ok(attrs)
}
