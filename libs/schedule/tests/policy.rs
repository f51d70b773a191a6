//! One scheduler pass: catch-up inside and outside the window, every overlap policy against
//! a long-running execution, buffers, the remaining-actions limit and the end time.

use orbit_schedule::{plan, CatchUp, IntervalDef, Overlap, Plan, Prior, Spec, SpecDef, Tick};

const T0: u64 = 1_800_000_000_000; // a whole second

fn def(catch_up: CatchUp, overlap: Overlap) -> SpecDef {
    SpecDef {
        intervals: vec![IntervalDef { every_ms: 1_000, offset_ms: 0 }],
        catch_up,
        overlap,
        catch_up_window_ms: Some(3_500),
        ..SpecDef::default()
    }
}

fn run(
    def: &SpecDef,
    next: u64,
    now: u64,
    running: bool,
    buffered: &[u64],
    remaining: Option<u64>,
) -> Plan {
    let spec = Spec::compile(def).expect("valid");
    plan(&Tick {
        schedule_id: "s",
        spec: &spec,
        def,
        now_ms: now,
        next_fire_ms: Some(next),
        running,
        buffered,
        remaining,
    })
}

fn occurrences(p: &Plan) -> Vec<u64> {
    p.starts.iter().map(|s| s.occurrence_ms).collect()
}

#[test]
fn catch_up_all_fires_what_is_inside_the_window_and_skips_the_rest() {
    // Six occurrences due (T0 .. T0+5s) at T0+5.2s; the window is 3.5 s.
    let p = run(&def(CatchUp::All, Overlap::AllowAll), T0, T0 + 5_200, false, &[], None);
    assert_eq!(occurrences(&p), [T0 + 2_000, T0 + 3_000, T0 + 4_000, T0 + 5_000]);
    assert_eq!(p.skipped, 2);
    assert_eq!(p.next_fire_ms, Some(T0 + 6_000));
    assert_eq!(p.due_ms, Some(T0 + 6_000));
    assert_eq!(p.last_fire_ms, Some(T0 + 5_000));
}

#[test]
fn catch_up_one_fires_the_latest_and_skip_fires_only_on_time() {
    let p = run(&def(CatchUp::One, Overlap::AllowAll), T0, T0 + 5_200, false, &[], None);
    assert_eq!(occurrences(&p), [T0 + 5_000]);
    assert_eq!(p.skipped, 5);
    let p = run(&def(CatchUp::Skip, Overlap::AllowAll), T0, T0 + 5_200, false, &[], None);
    assert_eq!(occurrences(&p), [T0 + 5_000], "the latest one is on time");
    // A daily occurrence missed by an hour is outside ON_TIME_MS: catch-up SKIP drops it.
    let mut daily = def(CatchUp::Skip, Overlap::AllowAll);
    daily.intervals = vec![IntervalDef { every_ms: 86_400_000, offset_ms: 0 }];
    daily.catch_up_window_ms = None;
    let day = T0 - T0 % 86_400_000;
    let p = run(&daily, day, day + 3_600_000, false, &[], None);
    assert!(p.starts.is_empty());
    assert_eq!(p.skipped, 1);
    // Catch-up ONE fires it: inside the default one-day window.
    daily.catch_up = CatchUp::One;
    assert_eq!(occurrences(&run(&daily, day, day + 3_600_000, false, &[], None)), [day]);
}

#[test]
fn nothing_is_due_before_its_time() {
    let p = run(&def(CatchUp::All, Overlap::Skip), T0 + 1_000, T0 + 999, false, &[], None);
    assert!(p.starts.is_empty());
    assert_eq!((p.skipped, p.next_fire_ms, p.last_fire_ms), (0, Some(T0 + 1_000), None));
}

#[test]
fn overlap_policies_against_a_running_execution() {
    let one = |overlap| run(&def(CatchUp::All, overlap), T0, T0 + 100, true, &[], None);
    let p = one(Overlap::Skip);
    assert!(p.starts.is_empty());
    assert_eq!(p.skipped, 1);
    let p = one(Overlap::AllowAll);
    assert_eq!(p.starts[0].prior, Prior::Keep);
    assert_eq!(one(Overlap::CancelOther).starts[0].prior, Prior::Cancel);
    assert_eq!(one(Overlap::TerminateOther).starts[0].prior, Prior::Terminate);
    let p = one(Overlap::BufferOne);
    assert!(p.starts.is_empty());
    assert_eq!(p.buffered, [T0]);
    // Due again at the next occurrence or the buffer recheck, whichever is sooner.
    assert_eq!(p.due_ms, Some((T0 + 1_000).min(T0 + 100 + orbit_schedule::RECHECK_MS)));
    // Three due at once with one running: BUFFER_ONE keeps one, BUFFER_ALL keeps all.
    let three = |overlap| run(&def(CatchUp::All, overlap), T0, T0 + 2_100, true, &[], None);
    let p = three(Overlap::BufferOne);
    assert_eq!((p.buffered.len(), p.skipped), (1, 2));
    let p = three(Overlap::BufferAll);
    assert_eq!((p.buffered.clone(), p.skipped), (vec![T0, T0 + 1_000, T0 + 2_000], 0));
    // CANCEL_OTHER with three due: each start cancels the one before it.
    let p = three(Overlap::CancelOther);
    assert_eq!(p.starts.iter().map(|s| s.prior).collect::<Vec<_>>(), [Prior::Cancel; 3]);
    // Once nothing runs, the buffered occurrence starts first (its own id), then the rest.
    let p = run(&def(CatchUp::All, Overlap::BufferOne), T0 + 1_000, T0 + 1_100, false, &[T0], None);
    assert_eq!(occurrences(&p), [T0]);
    assert_eq!(p.buffered, [T0 + 1_000]);
    let p = run(&def(CatchUp::All, Overlap::Skip), T0 + 1_000, T0 + 1_100, false, &[], None);
    assert_eq!(occurrences(&p), [T0 + 1_000]);
}

#[test]
fn remaining_actions_limit_ends_the_schedule() {
    let p = run(&def(CatchUp::All, Overlap::AllowAll), T0, T0 + 3_100, false, &[], Some(2));
    assert_eq!(occurrences(&p), [T0, T0 + 1_000]);
    assert_eq!(p.skipped, 2);
    assert_eq!((p.remaining, p.next_fire_ms, p.due_ms), (Some(0), None, None));
}

#[test]
fn end_time_ends_the_schedule() {
    let mut d = def(CatchUp::All, Overlap::AllowAll);
    d.end_at_ms = Some(T0 + 2_000);
    let p = run(&d, T0, T0 + 2_500, false, &[], None);
    assert_eq!(occurrences(&p), [T0, T0 + 1_000]);
    assert_eq!(p.next_fire_ms, None);
}

#[test]
fn jitter_delays_the_due_time_but_not_the_id() {
    let mut d = def(CatchUp::All, Overlap::AllowAll);
    d.jitter_ms = 800;
    let spec = Spec::compile(&d).expect("valid");
    let j = orbit_schedule::jitter_ms("s", T0, 800);
    let tick = |now| Tick {
        schedule_id: "s",
        spec: &spec,
        def: &d,
        now_ms: now,
        next_fire_ms: Some(T0),
        running: false,
        buffered: &[],
        remaining: None,
    };
    if j > 0 {
        assert!(plan(&tick(T0 + j - 1)).starts.is_empty(), "not due before its jitter");
    }
    let p = plan(&tick(T0 + j));
    assert_eq!(occurrences(&p), [T0]);
    assert_eq!(p.due_ms, Some(T0 + 1_000 + orbit_schedule::jitter_ms("s", T0 + 1_000, 800)));
}
