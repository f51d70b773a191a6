//! Durations as written in documents: `250ms`, `30s`, `5m`, `1h`, `2d`, `1m30s`.
//!
//! A duration is one or more `<digits><unit>` parts with units `d`, `h`, `m`, `s`, `ms`,
//! each at most once and from the largest down, so every duration has exactly one spelling
//! per value once normalised ([`format_duration`]). Bare numbers are rejected on purpose:
//! `timeout: 30` is ambiguous between seconds and milliseconds, and guessing wrong is a
//! thousandfold error. Values are whole milliseconds.

const UNITS: [(&str, u64); 5] =
    [("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1_000), ("ms", 1)];

/// Parses a duration into milliseconds.
///
/// # Errors
/// A message saying what is wrong: empty, a bare number, an unknown unit, units repeated or
/// out of order, or a value too large.
pub fn parse_duration(text: &str) -> Result<u64, String> {
    let s = text.trim();
    if s.is_empty() {
        return Err("empty duration; write e.g. `30s`, `5m` or `1m30s`".into());
    }
    if s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "`{s}` has no unit; write e.g. `{s}s` or `{s}ms` (units: d, h, m, s, ms)"
        ));
    }
    let mut rest = s;
    let mut total: u64 = 0;
    // Index into UNITS of the last unit used: the next must be strictly smaller.
    let mut last: Option<usize> = None;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(format!("`{s}` is not a duration; write e.g. `30s`, `5m` or `1m30s`"));
        }
        let number: u64 =
            rest[..digits].parse().map_err(|_| format!("`{s}` is too large a duration"))?;
        rest = &rest[digits..];
        let letters = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
        let unit = &rest[..letters];
        rest = &rest[letters..];
        let Some(index) = UNITS.iter().position(|(name, _)| *name == unit) else {
            return Err(if unit.is_empty() && !rest.is_empty() {
                format!(
                    "`{s}` is not a duration; write e.g. `30s`, `5m` or `1m30s`, without spaces"
                )
            } else if unit.is_empty() {
                format!("`{s}` has a number without a unit (units: d, h, m, s, ms)")
            } else {
                format!("`{s}` has an unknown unit `{unit}` (units: d, h, m, s, ms)")
            });
        };
        if last.is_some_and(|l| index <= l) {
            return Err(format!(
                "`{s}` repeats a unit or puts them out of order; write the largest first, e.g. `1m30s`"
            ));
        }
        last = Some(index);
        total = number
            .checked_mul(UNITS[index].1)
            .and_then(|ms| total.checked_add(ms))
            .ok_or_else(|| format!("`{s}` is too large a duration"))?;
    }
    Ok(total)
}

/// The canonical spelling of a duration: its non-zero parts from days down to
/// milliseconds (`90000` → `1m30s`), `0s` for zero. `parse_duration` reads it back exactly.
#[must_use]
pub fn format_duration(ms: u64) -> String {
    if ms == 0 {
        return "0s".into();
    }
    let mut rest = ms;
    let mut out = String::new();
    for (unit, size) in UNITS {
        let n = rest / size;
        if n > 0 {
            out.push_str(&n.to_string());
            out.push_str(unit);
            rest -= n * size;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_documented_forms() {
        assert_eq!(parse_duration("250ms"), Ok(250));
        assert_eq!(parse_duration("30s"), Ok(30_000));
        assert_eq!(parse_duration("5m"), Ok(300_000));
        assert_eq!(parse_duration("1h"), Ok(3_600_000));
        assert_eq!(parse_duration("2d"), Ok(172_800_000));
        assert_eq!(parse_duration("1m30s"), Ok(90_000));
        assert_eq!(parse_duration("1d2h3m4s5ms"), Ok(93_784_005));
        assert_eq!(parse_duration(" 0s "), Ok(0));
        assert_eq!(parse_duration("90s"), Ok(90_000));
    }

    #[test]
    fn rejects_what_is_ambiguous_or_malformed() {
        for bad in ["", "30", "0", "1.5s", "s", "30x", "30 s", "1s1m", "1m1m", "-1s", "1h30", "ms5"]
        {
            assert!(parse_duration(bad).is_err(), "{bad:?} should be rejected");
        }
        assert!(parse_duration("30").unwrap_err().contains("`30s`"));
        assert!(parse_duration("99999999999999999999d").unwrap_err().contains("too large"));
        assert!(parse_duration("999999999999999d").unwrap_err().contains("too large"));
    }

    proptest::proptest! {
        #[test]
        fn every_value_round_trips_through_its_canonical_form(ms: u64) {
            proptest::prop_assert_eq!(parse_duration(&format_duration(ms)), Ok(ms));
        }
    }

    #[test]
    fn formats_canonically_and_round_trips() {
        assert_eq!(format_duration(0), "0s");
        assert_eq!(format_duration(90_000), "1m30s");
        assert_eq!(format_duration(1_500), "1s500ms");
        assert_eq!(format_duration(86_400_000), "1d");
        for ms in [1, 999, 1_000, 59_999, 60_000, 3_600_001, 93_784_005, u64::MAX] {
            assert_eq!(parse_duration(&format_duration(ms)), Ok(ms), "{ms}");
        }
    }
}
