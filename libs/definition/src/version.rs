//! Which registered version of a workflow is its *latest*: the one a start, a child step or
//! a schedule without a version runs.
//!
//! The rule (docs/definitions.md, "Versions"):
//! 1. A version that reads as a semantic version ranks above every version that does not.
//!    Read as one: `MAJOR[.MINOR[.PATCH]][-PRERELEASE][+BUILD]`, an optional leading `v`,
//!    missing parts 0 (`1` is `1.0.0`, `v2.1` is `2.1.0`, `2024.06` is `2024.6.0`); they compare by SemVer 2.0
//!    precedence (a pre-release is below its release; build metadata is ignored).
//! 2. Versions that do not read as one (`june-rc`, `blue`, `1.2.3.4`) rank by registration
//!    order.
//! 3. Equal rank (`1.0` and `1.0.0`, or two that do not read as one): the later registered
//!    wins.
//!
//! So registering 1.2.1 after 2.0.0 leaves 2.0.0 the latest, and a hot fix `1.2.2` of an
//! old line never becomes what new starts run.

use std::cmp::Ordering;

/// A version's rank: `None` for one that does not read as a semantic version.
fn semantic(version: &str) -> Option<semver::Version> {
    let v = version.strip_prefix('v').unwrap_or(version);
    let cut = v.find(['-', '+']).unwrap_or(v.len());
    let (core, rest) = v.split_at(cut);
    // Numbers, leading zeros allowed (`2024.06`): written again without them.
    let numbers: Vec<u64> = core.split('.').map(|p| p.parse().ok()).collect::<Option<_>>()?;
    if numbers.len() > 3 {
        return None;
    }
    let mut parts = numbers.iter().map(u64::to_string).collect::<Vec<_>>();
    parts.resize(3, "0".into());
    semver::Version::parse(&format!("{}{rest}", parts.join("."))).ok()
}

/// Compares two versions by the rule; `registered` are their registration positions
/// (the tiebreak).
fn compare(a: (&str, usize), b: (&str, usize)) -> Ordering {
    let by_precedence = match (semantic(a.0), semantic(b.0)) {
        (Some(x), Some(y)) => x.cmp_precedence(&y),
        (Some(_), None) => Ordering::Greater,
        (None, Some(_)) => Ordering::Less,
        (None, None) => Ordering::Equal,
    };
    by_precedence.then(a.1.cmp(&b.1))
}

/// The index of the latest of `versions`, given in registration order; `None` when empty.
#[must_use]
pub fn latest<S: AsRef<str>>(versions: &[S]) -> Option<usize> {
    (0..versions.len())
        .max_by(|&i, &j| compare((versions[i].as_ref(), i), (versions[j].as_ref(), j)))
}

/// Whether `version` matches `pattern`, a version in which `*` stands for any run of
/// characters, the empty one included: `1.*` matches `1.0` and `1.2.3` (not `1`), `*`
/// every version, `2` only `2`. The `from` of a migration hint (`migrations[].from`).
#[must_use]
pub fn matches(pattern: &str, version: &str) -> bool {
    let (p, v) = (pattern.as_bytes(), version.as_bytes());
    let (mut i, mut j) = (0, 0);
    // The last `*` seen and the version position it was tried at: on a mismatch it takes
    // one more character (iterative, linear in practice).
    let mut star: Option<(usize, usize)> = None;
    while j < v.len() {
        if i < p.len() && p[i] == b'*' {
            star = Some((i, j));
            i += 1;
        } else if i < p.len() && p[i] == v[j] {
            i += 1;
            j += 1;
        } else if let Some((si, sj)) = star {
            i = si + 1;
            j = sj + 1;
            star = Some((si, sj + 1));
        } else {
            return false;
        }
    }
    p[i..].iter().all(|&c| c == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_patterns() {
        assert!(matches("1", "1") && !matches("1", "10") && !matches("1", "1.0"));
        assert!(matches("1.*", "1.0") && matches("1.*", "1.2.3") && !matches("1.*", "1"));
        assert!(!matches("1.*", "11.0") && !matches("1.*", "2.1"));
        assert!(matches("*", "anything") && matches("*", "") && matches("**", "x"));
        assert!(matches("*-rc*", "2.0-rc.1") && !matches("*-rc*", "2.0"));
        assert!(matches("v*.0", "v2.1.0") && !matches("v*.0", "v2.1.1"));
        assert!(!matches("", "1") && matches("", ""));
    }

    fn pick(versions: &[&str]) -> &'static str {
        let i = latest(versions).expect("not empty");
        Box::leak(versions[i].to_string().into_boxed_str())
    }

    #[test]
    fn the_highest_semantic_version_wins_whatever_the_registration_order() {
        assert_eq!(pick(&["2.0.0", "1.2.1"]), "2.0.0");
        assert_eq!(pick(&["1.2.1", "2.0.0", "1.10.0"]), "2.0.0");
        assert_eq!(pick(&["1.9.0", "1.10.0"]), "1.10.0", "numeric, not text");
        assert_eq!(pick(&["10", "9"]), "10");
        assert_eq!(pick(&["v2", "1.5"]), "v2", "a leading v and missing parts");
    }

    #[test]
    fn a_prerelease_is_below_its_release_and_build_metadata_ties() {
        assert_eq!(pick(&["2.0.0", "2.0.0-rc.1"]), "2.0.0");
        assert_eq!(pick(&["2.0.0-rc.2", "2.0.0-rc.10"]), "2.0.0-rc.10");
        assert_eq!(pick(&["1.0.0+a", "1.0.0+b"]), "1.0.0+b", "equal: the later");
        assert_eq!(pick(&["1.0.0", "1.0"]), "1.0", "equal: the later");
    }

    #[test]
    fn other_versions_rank_below_semantic_ones_and_by_registration_order() {
        assert_eq!(pick(&["blue", "green"]), "green");
        assert_eq!(pick(&["green", "blue"]), "blue");
        assert_eq!(pick(&["1", "zzz"]), "1");
        assert_eq!(pick(&["june-rc", "1.0.0"]), "1.0.0");
        assert_eq!(pick(&["2024.06", "2024.5.9"]), "2024.06", "dates in parts read as versions");
        assert_eq!(pick(&["1.2.3.4", "x"]), "x", "four parts is not semantic");
        assert_eq!(latest::<&str>(&[]), None);
    }
}
