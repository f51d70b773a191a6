//! What a worker session may claim ([`ClaimFilter`]), how much at once ([`MAX_CLAIM`]) and
//! the tokens claims hand out. A child of `model.rs` (re-exported there).

use std::collections::BTreeMap;

/// Which queued rows a worker session may claim: its tasks, by version where it announced
/// one, rows routed to its language (or to none), rows whose required labels its own
/// labels hold (or that require none), and rows sticky to it (or to nobody, or whose
/// sticky timeout has passed: the worker id is the claim's own).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClaimFilter {
    /// Task names served at every version (announced without a version).
    pub any_version: Vec<String>,
    /// `(task, version)` pairs served at exactly that version.
    pub versions: Vec<(String, String)>,
    /// The worker's language (lower-case; see [`worker_language`]): rows routed to another
    /// language are skipped, rows routed to none are taken. `None` skips nothing (no
    /// routing: tests and callers that serve every language).
    pub language: Option<String>,
    /// The worker's `Hello.labels`: a row requiring labels (`on:`) is taken only when these
    /// hold every pair; none: only rows that require none.
    pub labels: BTreeMap<String, String>,
}

impl ClaimFilter {
    /// Every version of `names`, every language.
    #[must_use]
    pub fn names(names: &[String]) -> ClaimFilter {
        ClaimFilter { any_version: names.to_vec(), ..ClaimFilter::default() }
    }

    /// From a worker's announced `(name, version)` pairs (an empty version: any) and its
    /// `Hello.runtime`.
    #[must_use]
    pub fn worker(tasks: &[(String, String)], runtime: &str) -> ClaimFilter {
        let mut filter =
            ClaimFilter { language: Some(worker_language(runtime)), ..ClaimFilter::default() };
        for (name, version) in tasks {
            if version.is_empty() {
                if !filter.any_version.contains(name) {
                    filter.any_version.push(name.clone());
                }
            } else if !filter.versions.iter().any(|(n, v)| n == name && v == version) {
                filter.versions.push((name.clone(), version.clone()));
            }
        }
        filter
    }

    /// The same filter for a worker announcing `labels`.
    #[must_use]
    pub fn with_labels(
        mut self,
        labels: impl IntoIterator<Item = (String, String)>,
    ) -> ClaimFilter {
        self.labels = labels.into_iter().collect();
        self
    }

    /// The labels as the claim statements bind them: a JSON object, `None` without any
    /// (then no labelled row matches).
    #[must_use]
    pub fn labels_json(&self) -> Option<String> {
        (!self.labels.is_empty()).then(|| crate::flow::labels_json(&self.labels))
    }

    /// Whether a hand-off of an offer with `flow` to the worker `worker_id` (whose session
    /// this filter is) respects its worker labels and its sticky worker: the claim
    /// statements' rule at the moment the offer is queued (its sticky timeout not passed).
    #[must_use]
    pub fn admits_flow(&self, flow: Option<&orbit_engine::Flow>, worker_id: &str) -> bool {
        flow.is_none_or(|f| {
            f.labels_within(|k| self.labels.get(k).map(String::as_str)) && f.sticks_to(worker_id)
        })
    }

    /// Every task name the filter serves, once each.
    #[must_use]
    pub fn task_names(&self) -> Vec<String> {
        let mut names = self.any_version.clone();
        for (name, _) in &self.versions {
            if !names.contains(name) {
                names.push(name.clone());
            }
        }
        names
    }

    /// Whether a row of `task` at `version`, routed to `language` (`None`: to none), is one
    /// this filter claims: the rule both stores' claim statements apply, in Rust for
    /// callers that ask without a row (e.g. registration warnings).
    #[must_use]
    pub fn admits(&self, task: &str, version: &str, language: Option<&str>) -> bool {
        let serves = self.any_version.iter().any(|n| n == task)
            || self.versions.iter().any(|(n, v)| n == task && v == version);
        let speaks = match (language, self.language.as_deref()) {
            (Some(row), Some(mine)) => row == mine,
            _ => true,
        };
        serves && speaks
    }

    /// Whether it matches no row.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.any_version.is_empty() && self.versions.is_empty()
    }
}

/// A worker's language from its `Hello.runtime`: the first word (up to a space or `/`),
/// lower-case (`python 3.12` → `python`, `node/22` → `node`, `rust` → `rust`); empty when it
/// announced none.
#[must_use]
pub fn worker_language(runtime: &str) -> String {
    let word = runtime.trim().split(|c: char| c.is_whitespace() || c == '/').next();
    word.unwrap_or_default().to_ascii_lowercase()
}

/// The most rows one [`TaskQueue::claim_tasks`](crate::TaskQueue::claim_tasks) call claims (a larger
/// `limit` is cut to it): each row needs a fresh token drawn beforehand.
pub const MAX_CLAIM: u32 = 1_000;

/// The credits of a claim for `limit` rows left after it took `taken` ordinary ones: what
/// the flow claim that follows may take
/// ([`TaskQueue::claim_with_limited`](crate::TaskQueue::claim_with_limited)).
#[must_use]
pub fn credits_left(limit: u32, taken: usize) -> u32 {
    limit.saturating_sub(u32::try_from(taken).unwrap_or(u32::MAX))
}

/// A fresh task token: 128 bits from the operating system's secure random source, as 32
/// lowercase hex digits. Nothing parses a token: it is only looked up in `task_queue`, whose
/// row says which execution, unit and worker it belongs to, so it carries no information
/// and cannot be guessed or forged from another one.
///
/// # Errors
/// The operating system has no randomness to give
/// ([`StoreError::Unavailable`](crate::StoreError::Unavailable)).
pub fn new_task_token() -> crate::Result<String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|e| {
        crate::StoreError::Unavailable(format!("no randomness for a task token: {e}"))
    })?;
    Ok(bytes.iter().fold(String::with_capacity(32), |mut hex, b| {
        use std::fmt::Write;
        let _ = write!(hex, "{b:02x}");
        hex
    }))
}

/// `n` fresh tokens (see [`new_task_token`]).
pub(crate) fn new_task_tokens(n: u32) -> crate::Result<Vec<String>> {
    (0..n.min(MAX_CLAIM)).map(|_| new_task_token()).collect()
}

#[cfg(test)]
mod token_tests {
    use super::*;

    #[test]
    fn tokens_are_128_random_bits_in_hex() {
        let tokens = new_task_tokens(64).expect("tokens");
        assert_eq!(tokens.len(), 64);
        for t in &tokens {
            assert_eq!(t.len(), 32, "{t}");
            assert!(t.chars().all(|c| matches!(c, '0'..='9' | 'a'..='f')), "{t}");
        }
        let mut unique = tokens.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), tokens.len(), "no two tokens alike");
        assert_eq!(new_task_tokens(MAX_CLAIM + 5).expect("tokens").len(), MAX_CLAIM as usize);
    }
}

#[cfg(test)]
mod claim_filter_tests {
    use super::*;

    #[test]
    fn admits_follows_the_claim_statements_rule() {
        let tasks = [("greet".to_string(), "2".to_string()), ("any".to_string(), String::new())];
        let f = ClaimFilter::worker(&tasks, "python 3.12");
        assert!(f.admits("greet", "2", None), "announced version, no routing");
        assert!(!f.admits("greet", "1", None), "another version");
        assert!(f.admits("any", "7", Some("python")), "no version announced: every version");
        assert!(!f.admits("any", "7", Some("rust")), "routed to another language");
        assert!(!f.admits("other", "1", None), "a task it does not serve");
        assert!(
            ClaimFilter::names(&["any".into()]).admits("any", "1", Some("rust")),
            "no language: all"
        );
    }

    #[test]
    fn admits_flow_checks_labels_and_the_sticky_worker() {
        let pool = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs.iter().map(|(k, v)| ((*k).to_string(), (*v).to_string())).collect()
        };
        let gpu =
            ClaimFilter::names(&["t".into()]).with_labels(pool(&[("pool", "gpu"), ("zone", "a")]));
        let plain = ClaimFilter::names(&["t".into()]);
        assert_eq!(plain.labels_json(), None);
        assert_eq!(gpu.labels_json().as_deref(), Some(r#"{"pool":"gpu","zone":"a"}"#));
        let wants = orbit_engine::Flow { labels: pool(&[("pool", "gpu")]), ..Default::default() };
        assert!(gpu.admits_flow(Some(&wants), "w1"), "a subset");
        assert!(!plain.admits_flow(Some(&wants), "w1"), "no labels");
        let other = orbit_engine::Flow { labels: pool(&[("pool", "cpu")]), ..Default::default() };
        assert!(!gpu.admits_flow(Some(&other), "w1"), "another value");
        assert!(plain.admits_flow(None, "w1") && gpu.admits_flow(None, "w1"));
        let sticky = orbit_engine::Flow {
            sticky: Some(orbit_engine::StickyWorker { worker: "w1".into(), timeout_ms: 5 }),
            ..Default::default()
        };
        assert!(plain.admits_flow(Some(&sticky), "w1"));
        assert!(!plain.admits_flow(Some(&sticky), "w2"), "not the sticky worker");
    }
}

#[cfg(test)]
mod tests {
    use super::credits_left;

    #[test]
    fn credits_left_after_the_ordinary_rows_never_go_below_zero() {
        assert_eq!(credits_left(4, 1), 3);
        assert_eq!(credits_left(4, 4), 0);
        assert_eq!(credits_left(4, 9), 0);
        assert_eq!(credits_left(4, usize::MAX), 0);
    }
}
