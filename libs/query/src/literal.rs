//! Literal forms that are not the grammar's: datetimes (`'2026-11-24'`,
//! `'2026-11-24T10:00:00Z'`) and durations (`'5m'`, `'1h30m'`, `'250ms'`), each to
//! milliseconds.

use chrono::{DateTime, NaiveDate};

/// Epoch milliseconds of an RFC 3339 timestamp or a `YYYY-MM-DD` date (midnight UTC).
#[must_use]
pub fn datetime_ms(text: &str) -> Option<i64> {
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Some(t.timestamp_millis());
    }
    let date = NaiveDate::parse_from_str(text, "%Y-%m-%d").ok()?;
    Some(date.and_hms_opt(0, 0, 0)?.and_utc().timestamp_millis())
}

/// Milliseconds of a duration written as one or more `<integer><unit>` parts, units `ms`,
/// `s`, `m`, `h`, `d` (`'1h30m'`); `None` when malformed or out of range.
#[must_use]
pub fn duration_ms(text: &str) -> Option<i64> {
    let mut total: i64 = 0;
    let mut rest = text;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        if digits == 0 {
            return None;
        }
        let n: i64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit_len = rest.find(|c: char| c.is_ascii_digit()).unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            _ => return None,
        };
        rest = &rest[unit_len..];
        total = total.checked_add(n.checked_mul(scale)?)?;
    }
    Some(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datetimes() {
        assert_eq!(datetime_ms("1970-01-02"), Some(86_400_000));
        assert_eq!(datetime_ms("1970-01-01T00:00:01Z"), Some(1000));
        assert_eq!(datetime_ms("1970-01-01T01:00:00+01:00"), Some(0));
        assert_eq!(datetime_ms("2026-13-01"), None);
        assert_eq!(datetime_ms("yesterday"), None);
    }

    #[test]
    fn durations() {
        assert_eq!(duration_ms("250ms"), Some(250));
        assert_eq!(duration_ms("5m"), Some(300_000));
        assert_eq!(duration_ms("1h30m"), Some(5_400_000));
        assert_eq!(duration_ms("2d"), Some(172_800_000));
        for bad in ["", "5", "m", "5x", "1h-3m", "99999999999999999999s"] {
            assert_eq!(duration_ms(bad), None, "{bad}");
        }
    }
}
