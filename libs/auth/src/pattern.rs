//! Name patterns of the identities file: `billing.*`, `*`, `shipping.pack`.
//!
//! `*` matches any run of characters (dots included, so `billing.*` covers
//! `billing.invoice.send`); every other character matches itself. No other syntax, so a
//! pattern means the same thing to everyone reading the file.

/// A workflow-name or task-name pattern.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pattern(String);

impl Pattern {
    /// A pattern from its text.
    #[must_use]
    pub fn new(text: impl Into<String>) -> Self {
        Self(text.into())
    }

    /// The pattern as written.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether `name` matches the whole pattern.
    #[must_use]
    pub fn matches(&self, name: &str) -> bool {
        glob(self.0.as_bytes(), name.as_bytes())
    }
}

/// Iterative glob with backtracking to the last `*`: linear in practice, no recursion.
fn glob(pattern: &[u8], name: &[u8]) -> bool {
    let (mut p, mut n) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        if p < pattern.len() && pattern[p] == b'*' {
            star = Some((p, n));
            p += 1;
        } else if p < pattern.len() && pattern[p] == name[n] {
            p += 1;
            n += 1;
        } else if let Some((sp, sn)) = star {
            p = sp + 1;
            n = sn + 1;
            star = Some((sp, sn + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

/// Whether any of `patterns` matches `name`.
#[must_use]
pub fn any_matches(patterns: &[Pattern], name: &str) -> bool {
    patterns.iter().any(|p| p.matches(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn star_matches_any_run_and_literals_match_themselves() {
        let billing = Pattern::new("billing.*");
        assert!(billing.matches("billing.charge"));
        assert!(billing.matches("billing.invoice.send"));
        assert!(billing.matches("billing."));
        assert!(!billing.matches("billing"));
        assert!(!billing.matches("shipping.pack"));
        assert!(!billing.matches("xbilling.charge"));
        assert!(Pattern::new("*").matches(""));
        assert!(Pattern::new("*").matches("anything.at.all"));
        assert!(Pattern::new("shipping.pack").matches("shipping.pack"));
        assert!(!Pattern::new("shipping.pack").matches("shipping.packs"));
        assert!(Pattern::new("*.pack").matches("shipping.pack"));
        assert!(!Pattern::new("*.pack").matches("shipping.unpack"));
        assert!(Pattern::new("a*b*c").matches("axxbyyc"));
        assert!(!Pattern::new("a*b*c").matches("axxbyy"));
    }
}
