//! Fire times of cron and interval specs on given instants: DST in Europe/Berlin and
//! America/New_York (spring forward and fall back), aliases, seconds, several specs, the
//! window, jitter and the id scheme.

use chrono::DateTime;
use orbit_schedule::{execution_id, jitter_ms, IntervalDef, Spec, SpecDef};

fn ms(rfc3339: &str) -> u64 {
    let t = DateTime::parse_from_rfc3339(rfc3339).expect("test instant");
    u64::try_from(t.timestamp_millis()).expect("after 1970")
}

fn cron(zone: &str, exprs: &[&str]) -> Spec {
    let def = SpecDef {
        crons: exprs.iter().map(|s| (*s).to_string()).collect(),
        timezone: zone.into(),
        ..SpecDef::default()
    };
    Spec::compile(&def).expect("valid spec")
}

fn interval(every_ms: u64, offset_ms: u64) -> Spec {
    let def =
        SpecDef { intervals: vec![IntervalDef { every_ms, offset_ms }], ..SpecDef::default() };
    Spec::compile(&def).expect("valid spec")
}

fn fires(spec: &Spec, after: &str, n: usize) -> Vec<String> {
    spec.preview(ms(after), n).into_iter().map(orbit_schedule::rfc3339).collect()
}

#[test]
fn berlin_spring_forward_fires_a_skipped_time_once_at_the_end_of_the_gap() {
    // 29 March 2026: 02:00 CET becomes 03:00 CEST (01:00 UTC).
    let daily = cron("Europe/Berlin", &["30 2 * * *"]);
    assert_eq!(
        fires(&daily, "2026-03-28T12:00:00Z", 2),
        ["2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"]
    );
    // 02:00, 02:30 and 03:00 local fall on one instant: it fires once.
    let half_hourly = cron("Europe/Berlin", &["*/30 * * * *"]);
    assert_eq!(
        fires(&half_hourly, "2026-03-29T00:00:00Z", 3),
        ["2026-03-29T00:30:00Z", "2026-03-29T01:00:00Z", "2026-03-29T01:30:00Z"]
    );
}

#[test]
fn berlin_fall_back_fires_a_repeated_time_once() {
    // 25 October 2026: 03:00 CEST becomes 02:00 CET (01:00 UTC); 02:00-02:59 repeat.
    let daily = cron("Europe/Berlin", &["30 2 * * *"]);
    assert_eq!(
        fires(&daily, "2026-10-24T12:00:00Z", 2),
        ["2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"]
    );
    let half_hourly = cron("Europe/Berlin", &["*/30 * * * *"]);
    assert_eq!(
        fires(&half_hourly, "2026-10-24T23:45:00Z", 4),
        [
            "2026-10-25T00:00:00Z",
            "2026-10-25T00:30:00Z",
            "2026-10-25T02:00:00Z",
            "2026-10-25T02:30:00Z"
        ]
    );
    // Asked from inside the repeated hour, the repeated times do not fire again.
    assert_eq!(fires(&half_hourly, "2026-10-25T01:15:00Z", 1), ["2026-10-25T02:00:00Z"]);
}

#[test]
fn new_york_spring_forward_and_fall_back() {
    // 8 March 2026: 02:00 EST becomes 03:00 EDT (07:00 UTC).
    let daily = cron("America/New_York", &["30 2 * * *"]);
    assert_eq!(
        fires(&daily, "2026-03-07T12:00:00Z", 2),
        ["2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z"]
    );
    // 1 November 2026: 02:00 EDT becomes 01:00 EST (06:00 UTC); 01:30 happens twice.
    let early = cron("America/New_York", &["30 1 * * *"]);
    assert_eq!(
        fires(&early, "2026-10-31T12:00:00Z", 2),
        ["2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"]
    );
}

#[test]
fn intervals_are_absolute_across_dst() {
    // Hourly with a 15-minute offset: evenly spaced in UTC through the Berlin gap...
    let hourly = interval(3_600_000, 900_000);
    assert_eq!(
        fires(&hourly, "2026-03-29T00:00:00Z", 3),
        ["2026-03-29T00:15:00Z", "2026-03-29T01:15:00Z", "2026-03-29T02:15:00Z"]
    );
    // ...and through New York's repeated hour.
    let half = interval(1_800_000, 0);
    assert_eq!(
        fires(&half, "2026-11-01T05:00:00Z", 4),
        [
            "2026-11-01T05:30:00Z",
            "2026-11-01T06:00:00Z",
            "2026-11-01T06:30:00Z",
            "2026-11-01T07:00:00Z"
        ]
    );
    let every_second = interval(1_000, 0);
    assert_eq!(
        every_second.next_after(ms("2026-01-01T00:00:00.400Z")),
        Some(ms("2026-01-01T00:00:01Z"))
    );
}

#[test]
fn seconds_aliases_and_several_specs() {
    let seconds = cron("UTC", &["*/10 * * * * *"]);
    assert_eq!(
        fires(&seconds, "2026-01-01T12:00:05Z", 2),
        ["2026-01-01T12:00:10Z", "2026-01-01T12:00:20Z"]
    );
    let daily = cron("Europe/Berlin", &["@daily"]);
    assert_eq!(fires(&daily, "2026-06-01T12:00:00Z", 1), ["2026-06-01T22:00:00Z"]);
    // The union of an hourly cron and a 30-minute interval: :00 fires once.
    let def = SpecDef {
        crons: vec!["0 * * * *".into()],
        intervals: vec![IntervalDef { every_ms: 1_800_000, offset_ms: 0 }],
        ..SpecDef::default()
    };
    let both = Spec::compile(&def).expect("valid");
    assert_eq!(
        fires(&both, "2026-01-01T00:10:00Z", 3),
        ["2026-01-01T00:30:00Z", "2026-01-01T01:00:00Z", "2026-01-01T01:30:00Z"]
    );
}

#[test]
fn start_and_end_bound_the_occurrences() {
    let def = SpecDef {
        intervals: vec![IntervalDef { every_ms: 60_000, offset_ms: 0 }],
        start_at_ms: Some(ms("2026-01-01T00:10:00Z")),
        end_at_ms: Some(ms("2026-01-01T00:12:00Z")),
        ..SpecDef::default()
    };
    let spec = Spec::compile(&def).expect("valid");
    // The start is inclusive, the end exclusive; then the schedule has ended.
    assert_eq!(
        fires(&spec, "2026-01-01T00:00:00Z", 5),
        ["2026-01-01T00:10:00Z", "2026-01-01T00:11:00Z"]
    );
    assert_eq!(spec.next_after(ms("2026-01-01T00:11:00Z")), None);
}

#[test]
fn bad_specs_name_the_field() {
    let bad = |def: SpecDef| Spec::compile(&def).expect_err("invalid").field;
    assert_eq!(
        bad(SpecDef { crons: vec!["0 * * * *".into(), "61 * * * *".into()], ..SpecDef::default() }),
        "spec.crons[1]"
    );
    assert_eq!(
        bad(SpecDef {
            crons: vec!["@daily".into()],
            timezone: "Mars/Olympus".into(),
            ..SpecDef::default()
        }),
        "spec.timezone"
    );
    assert_eq!(
        bad(SpecDef {
            intervals: vec![IntervalDef { every_ms: 500, offset_ms: 0 }],
            ..SpecDef::default()
        }),
        "spec.intervals[0]"
    );
    assert_eq!(bad(SpecDef::default()), "spec");
}

#[test]
fn jitter_is_bounded_stable_and_spread() {
    let bound = 30_000;
    let mut seen = std::collections::BTreeSet::new();
    for k in 0..1_000u64 {
        let occ = ms("2026-01-01T00:00:00Z") + k * 60_000;
        let j = jitter_ms("nightly", occ, bound);
        assert!(j < bound, "jitter {j} out of bounds");
        assert_eq!(j, jitter_ms("nightly", occ, bound), "jitter must be stable per occurrence");
        seen.insert(j);
    }
    assert!(seen.len() > 900, "jitter should spread occurrences, got {} values", seen.len());
    assert_ne!(jitter_ms("a", 1_000, bound), jitter_ms("b", 1_000, bound));
    assert_eq!(jitter_ms("nightly", 1_000, 0), 0);
}

#[test]
fn execution_ids_name_the_nominal_occurrence() {
    assert_eq!(execution_id("nightly", ms("2026-03-29T01:00:00Z")), "nightly:2026-03-29T01:00:00Z");
    assert_eq!(execution_id("s", ms("2026-03-29T01:00:00.250Z")), "s:2026-03-29T01:00:00.250Z");
}
