//! A seeded generator of random but valid workflow definitions (as YAML text), with the
//! input and the driver's script (signals, cancels) of each case, and the scripted task
//! outcomes both sides share: a pure function of (task, attempt, input).

use serde_json::{json, Value};

/// The manual clock's start on both sides (the simulator's default).
pub const T0: u64 = 1_700_000_000_000;

/// xorshift64*: tiny, seeded, the same sequence on every machine.
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed` (any value; zero is remapped).
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// True with probability `pct`%.
    pub fn pct(&mut self, pct: u64) -> bool {
        self.below(100) < pct
    }

    /// One of `items`.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[usize::try_from(self.below(items.len() as u64)).unwrap_or(0)]
    }
}

/// Something the driver does to the root execution at `T0 + at` (after everything due by
/// then has happened).
#[derive(Debug, Clone)]
pub enum Action {
    /// Send signal `name` with `payload`.
    Signal { at: u64, name: String, payload: Value },
    /// Request cancellation.
    Cancel { at: u64, reason: String },
}

impl Action {
    /// Offset from `T0`.
    pub fn at(&self) -> u64 {
        match self {
            Action::Signal { at, .. } | Action::Cancel { at, .. } => *at,
        }
    }
}

/// How workers answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Every attempt succeeds with an output satisfying the examples' contracts.
    Happy,
    /// Outcomes drawn from a hash of (task, attempt, input): success, retryable failure,
    /// fatal failure, or no answer at all.
    Hashed,
}

/// What a worker does with one attempt (the same on both sides).
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Succeeds with this output.
    Complete(Value),
    /// Fails; `retryable` tells the retry policy whether another attempt may help.
    Fail { code: String, retryable: bool },
    /// Never answers (attempt or workflow timeouts end it).
    Hang,
}

/// The answer to attempt `attempt` of `task` with `input`. The owner names an HTTP step's
/// task `orbit.http`, the simulator `http`: both are the same worker here.
pub fn outcome(mode: Mode, task: &str, attempt: u32, input: &Value) -> Outcome {
    let task = if task == "orbit.http" { "http" } else { task };
    let h = fnv(&format!("{task}|{attempt}|{input}"));
    let happy = || {
        Outcome::Complete(json!({
            "task": task, "attempt": attempt, "v": h % 10,
            "value": 2, "greeting": "hi", "charge_id": "ch-1", "reservation": "r-1",
        }))
    };
    match (mode, h % 100) {
        (Mode::Happy, _) | (Mode::Hashed, 0..=61) => happy(),
        (Mode::Hashed, 62..=77) => Outcome::Fail { code: "FLAKY".into(), retryable: true },
        (Mode::Hashed, 78..=87) => Outcome::Fail { code: "FATAL_X".into(), retryable: false },
        _ => Outcome::Hang,
    }
}

fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
}

/// One generated case: definitions (children first), the workflow to start, its input and
/// the driver's script.
#[derive(Debug, Clone)]
pub struct Case {
    pub name: String,
    pub defs: Vec<String>,
    pub workflow: String,
    pub input: Value,
    pub script: Vec<Action>,
    pub mode: Mode,
    /// Whether a definition has an `http` step.
    pub http: bool,
}

const TASKS: &str = "tasks: { t0: {}, t1: {}, t2: {}, t3: {} }\n";

/// The case of `seed`.
pub fn case(seed: u64) -> Case {
    let mut r = Rng::new(seed);
    let child = r.pct(35).then(|| format!("c{seed}"));
    let mut defs = Vec::new();
    if let Some(c) = &child {
        defs.push(child_def(&mut r, c));
    }
    let (main, http) = main_def(&mut r, seed, child.as_deref());
    defs.push(main);
    let n_items = r.below(4);
    let input = json!({ "x": r.below(5), "n": 0, "items": (0..n_items).collect::<Vec<_>>() });
    let mut script = Vec::new();
    for _ in 0..r.below(4) {
        let at = *r.pick(&[0, 5, 15, 40, 300, 1_500, 20_000]);
        script.push(match r.below(10) {
            0 => Action::Cancel { at, reason: "driver".into() },
            1..=3 => Action::Signal { at, name: "note".into(), payload: json!({"text": at}) },
            _ => Action::Signal { at, name: "go".into(), payload: json!({"by": "driver"}) },
        });
    }
    script.sort_by_key(Action::at);
    Case {
        name: format!("seed {seed}"),
        defs,
        workflow: format!("g{seed}"),
        input,
        script,
        mode: Mode::Hashed,
        http,
    }
}

fn child_def(r: &mut Rng, name: &str) -> String {
    let mut y = format!("name: {name}\nversion: '1'\n{TASKS}steps:\n");
    let n = 1 + r.below(2);
    for i in 0..n {
        let needs =
            if i > 0 && r.pct(50) { format!(", needs: [k{}]", i - 1) } else { String::new() };
        let body = match r.below(4) {
            0 => format!("sleep: {}", r.pick(&["20ms", "100ms", "1s"])),
            1 => "compute: '${{ input.n }}'".to_string(),
            _ => format!("task: t{}, input: '${{{{ input }}}}'{}", r.below(2), retry(r)),
        };
        y += &format!("  - {{ id: k{i}{needs}, {body} }}\n");
    }
    y += &format!("output: '${{{{ steps.k{}.output }}}}'\n", n - 1);
    y
}

fn retry(r: &mut Rng) -> String {
    if !r.pct(50) {
        return String::new();
    }
    let non = if r.pct(30) { ", non_retryable: [FLAKY]" } else { "" };
    format!(
        ", retry: {{ max_attempts: {}, initial_interval: {}, backoff: {}{non} }}",
        1 + r.below(4),
        r.pick(&["0s", "100ms", "250ms", "1s"]),
        r.pick(&["1.0", "2.0", "1.5"]),
    )
}

fn attempt_timeout(r: &mut Rng) -> String {
    match r.below(10) {
        0..=2 => format!(", timeout: {}", r.pick(&["5ms", "50ms", "200ms", "2s"])),
        3 => ", heartbeat_timeout: 100ms".into(),
        _ => String::new(),
    }
}

/// The main definition and whether it has an `http` step.
fn main_def(r: &mut Rng, seed: u64, child: Option<&str>) -> (String, bool) {
    let mut y = format!("name: g{seed}\nversion: '1'\n");
    if r.pct(15) {
        y += &format!("timeout: {}\n", r.pick(&["300ms", "2s", "30s"]));
    }
    y += TASKS;
    y += "signals: { go: null, note: null }\nsteps:\n";
    let n = 1 + r.below(5);
    let mut http = false;
    // Drawn apart, so that the cases of a seed stay what they were before the field.
    let mut catches = Rng::new(seed ^ 0x00c0_ffee_0000_0029);
    for i in 0..n {
        let (line, h) = step(r, i, n, child, catches.pct(12));
        http |= h;
        y += &format!("  - {{ id: s{i}{line} }}\n");
    }
    // A group (issue 29) after the others, reading s0 (so ordered after it), sometimes
    // catching its failure.
    if catches.pct(25) {
        let catch = if catches.pct(30) { ", continue_on_failure: true" } else { "" };
        y += &format!(
            "  - {{ id: grp{catch}, group: {{ steps: [ \
             {{ id: a, task: t{}, input: '${{{{ steps.s0.output }}}}', retry: {{ max_attempts: 2, initial_interval: 10ms }} }}, \
             {{ id: b, task: t{}, input: {{ x: 1 }}, retry: {{ max_attempts: 1 }} }}, \
             {{ id: c, needs: [a, b], compute: '${{{{ [steps.a.output, steps.b.output] }}}}' }} ], \
             output: '${{{{ steps.c.output }}}}' }} }}\n",
            catches.below(3),
            catches.below(3)
        );
    }
    // A switch (issue 29) on the input, with or without a default branch.
    if catches.pct(25) {
        let default = if catches.pct(50) {
            ", { default: [ { id: d, compute: '${{ input.n }}' } ] }"
        } else {
            ""
        };
        y += &format!(
            "  - {{ id: sw, switch: [ \
             {{ when: '${{{{ input.x > 2.0 }}}}', steps: [ {{ id: a, task: t{}, input: {{ x: 2 }}, retry: {{ max_attempts: 2, initial_interval: 10ms }} }} ] }}, \
             {{ when: '${{{{ input.x > 0.0 }}}}', steps: [ {{ id: b, sleep: 20ms }}, {{ id: c, needs: [b], compute: 1 }} ], output: '${{{{ steps.c.output }}}}' }}{default} ] }}\n",
            catches.below(3)
        );
    }
    // A failure branch and a race (issue 29), drawn apart too.
    let mut branches = Rng::new(seed ^ 0x00b4_a4c4_0000_0029);
    if branches.pct(25) {
        y += &failure_branch(&mut branches);
    }
    if branches.pct(25) {
        y += &race(&mut branches);
    }
    // Loops (issue 29), drawn apart too: a `for_each` over a group on the input's items
    // (sometimes bounded, sometimes catching each element), and a repeat whose `until`
    // may never hold before `max_iterations`.
    let mut loops = Rng::new(seed ^ 0x1005_0000_0029_0002);
    if loops.pct(25) {
        let cap = if loops.pct(50) { ", max_concurrency: 1" } else { "" };
        let catch = if loops.pct(30) { ", continue_on_failure: true" } else { "" };
        y += &format!(
            "  - {{ id: each, for_each: '${{{{ input.items }}}}', as: it{cap}{catch}, group: {{ steps: [ \
             {{ id: a, task: t{}, input: {{ it: '${{{{ it }}}}', i: '${{{{ index }}}}' }}, retry: {{ max_attempts: 2, initial_interval: 10ms }} }}, \
             {{ id: b, needs: [a], task: t{}, input: '${{{{ steps.a.output }}}}', retry: {{ max_attempts: 1 }} }} ], \
             output: '${{{{ [it, steps.b.output] }}}}' }} }}\n",
            loops.below(3),
            loops.below(3)
        );
    }
    if loops.pct(25) {
        let catch = if loops.pct(30) { ", continue_on_failure: true" } else { "" };
        y += &format!(
            "  - {{ id: rep{catch}, repeat: {{ steps: [ \
             {{ id: p, task: t{}, input: {{ n: '${{{{ iteration }}}}', last: '${{{{ previous }}}}' }}, retry: {{ max_attempts: 2, initial_interval: 10ms }} }}, \
             {{ id: w, needs: [p], sleep: 10ms }} ], \
             until: '${{{{ iteration >= {}.0 }}}}', max_iterations: {}, output: '${{{{ steps.p.output }}}}' }} }}\n",
            loops.below(3),
            loops.below(3),
            1 + loops.below(3)
        );
    }
    // A long repeat under a small history limit (issue 29): it continues the run as new
    // near the limit, waiting for whatever else is open; drawn apart too.
    let mut long = Rng::new(seed ^ 0x10a9_0000_0029_0003);
    if long.pct(20) {
        let task = if long.pct(50) {
            format!(
                "{{ id: t, needs: [c], task: t{}, input: {{ n: '${{{{ iteration }}}}' }}, timeout: 50ms, continue_on_failure: true }}, ",
                long.below(3)
            )
        } else {
            String::new()
        };
        let iterations = 20 + long.below(30);
        y += &format!(
            "  - {{ id: lp, repeat: {{ steps: [ \
             {{ id: c, compute: '${{{{ [iteration, previous] }}}}' }}, {task}\
             {{ id: w, needs: [c], sleep: 10ms }} ], \
             until: '${{{{ iteration >= {}.0 }}}}', max_iterations: {iterations}, output: '${{{{ iteration }}}}' }} }}\n",
            iterations - 1,
        );
        y += &format!("limits: {{ max_history_events: {} }}\n", 90 + 30 * long.below(3));
    }
    if r.pct(60) {
        y += &format!("output: '${{{{ steps.s{}.output }}}}'\n", r.below(n));
    }
    let on_failure = r.pct(30);
    if on_failure {
        y += "on: { failure: [ { id: alert, task: t2, input: '${{ failure.code }}' } ] }\n";
    }
    if r.pct(30) {
        y += "on_signal: { note: [ { id: rec, task: t1, input: '${{ event }}' } ] }\n";
    }
    (y, http)
}

/// A task step with `on_failure` (issue 29): a branch of a task reading `failure` and a
/// compute, with or without an `output`; the step is sometimes compensated (never once
/// caught) and the branch's task may fail too (then the step fails with its error).
fn failure_branch(r: &mut Rng) -> String {
    let compensate = if r.pct(40) { ", compensate: { task: t3, input: undo }" } else { "" };
    let output = if r.pct(50) { ", output: '${{ [failure.code, steps.g.output] }}'" } else { "" };
    format!(
        "  - {{ id: rec, task: t{}, input: {{ x: 3 }}, retry: {{ max_attempts: 2, initial_interval: 10ms }}{compensate}, \
         on_failure: {{ steps: [ \
         {{ id: f, task: t{}, input: '${{{{ failure.code }}}}', retry: {{ max_attempts: {} }} }}, \
         {{ id: g, needs: [f], compute: '${{{{ [failure.step, steps.f.output.v] }}}}' }} ]{output} }} }}\n",
        r.below(3),
        r.below(3),
        1 + r.below(2),
    )
}

/// A race (issue 29): a wait for `go` (with a timeout) against a sleep, and sometimes two
/// tasks in a row (which may hang, fail or lose, to be cancelled).
fn race(r: &mut Rng) -> String {
    let tasks = if r.pct(60) {
        format!(
            ", {{ steps: [ {{ id: a, task: t{}, input: {{ x: 4 }}, retry: {{ max_attempts: 2, initial_interval: 10ms }} }}, \
             {{ id: b, needs: [a], task: t{}, input: {{ x: 5 }} }} ], output: '${{{{ steps.b.output.v }}}}' }}",
            r.below(3),
            r.below(3)
        )
    } else {
        String::new()
    };
    format!(
        "  - {{ id: rc, race: [ \
         {{ steps: [ {{ id: w, await: go, timeout: {} }} ], output: '${{{{ steps.w.output }}}}' }}, \
         {{ steps: [ {{ id: z, sleep: {} }} ] }}{tasks} ] }}\n",
        r.pick(&["50ms", "300ms", "2s"]),
        r.pick(&["20ms", "100ms", "1s"]),
    )
}

/// The text after `id: sI` of step `i` of `n` (with `continue_on_failure` if `catch`, unless
/// it is the closing `continue_as_new`), and whether it is an `http` step.
fn step(r: &mut Rng, i: u64, n: u64, child: Option<&str>, catch: bool) -> (String, bool) {
    let mut s = String::new();
    let needs: Vec<String> = (0..i).filter(|_| r.pct(35)).map(|j| format!("s{j}")).collect();
    if !needs.is_empty() {
        s += &format!(", needs: [{}]", needs.join(", "));
    }
    let earlier = |r: &mut Rng| if i == 0 { None } else { Some(r.below(i)) };
    if i + 1 == n && r.pct(12) {
        s += ", when: '${{ input.n < 2.0 }}', continue_as_new: { input: { n: '${{ input.n + 1.0 }}', x: '${{ input.x }}', items: '${{ input.items }}' } }";
        return (s, false);
    }
    // Any kind but continue_as_new may catch its failures (issue 29).
    if catch {
        s += ", continue_on_failure: true";
    }
    if r.pct(20) {
        let when = match (r.below(4), earlier(r)) {
            (0, _) => "true".to_string(),
            (1, _) => "false".to_string(),
            (2, Some(j)) => format!("'${{{{ steps.s{j}.output != null }}}}'"),
            _ => "'${{ input.x > 2.0 }}'".to_string(),
        };
        s += &format!(", when: {when}");
    }
    let fan = r.pct(25);
    let for_each = |r: &mut Rng| {
        let list = if r.pct(50) { "'${{ input.items }}'" } else { "[1, 2, 3]" };
        let conc = if r.pct(40) {
            format!(", max_concurrency: {}", 1 + r.below(2))
        } else {
            String::new()
        };
        format!(", for_each: {list}{conc}")
    };
    let compensate = |r: &mut Rng| {
        if r.pct(30) {
            format!(
                ", compensate: {{ task: t3, input: '${{{{ steps.s{i}.output }}}}'{} }}",
                retry(r)
            )
        } else {
            String::new()
        }
    };
    let input = |r: &mut Rng, fan: bool| match (r.below(3), earlier(r)) {
        (0, Some(j)) => format!(", input: '${{{{ steps.s{j}.output }}}}'"),
        (1, _) if fan => ", input: { el: '${{ item }}', i: '${{ index }}' }".to_string(),
        _ => format!(", input: {{ x: '${{{{ input.x }}}}', at: {i} }}"),
    };
    // Without a child workflow to call, and above the http share, a step is a task.
    let kind = match r.below(100) {
        71..=84 if child.is_none() => 0,
        93.. => 0,
        k => k,
    };
    match kind {
        0..=34 => {
            if fan {
                s += &for_each(r);
            }
            s += &format!(", task: t{}", r.below(3));
            s += &input(r, fan);
            s += &retry(r);
            s += &attempt_timeout(r);
            s += &compensate(r);
        }
        35..=44 => {
            if fan {
                s += &for_each(r);
            }
            let expr = match (r.below(4), earlier(r)) {
                (0, Some(j)) => format!("'${{{{ steps.s{j}.output }}}}'"),
                (1, _) => "'${{ input.missing.field }}'".to_string(),
                (2, _) => "{ a: 1, b: '${{ input.x * 2.0 }}' }".to_string(),
                _ => "'${{ input.x + 1.0 }}'".to_string(),
            };
            s += &format!(", compute: {expr}");
            s += &compensate(r);
        }
        45..=54 => {
            s += &format!(", sleep: {}", r.pick(&["50ms", "200ms", "1s"]));
            s += &compensate(r);
        }
        55..=58 => s += ", until: '2023-11-14T22:13:21Z'",
        59..=70 => {
            s += &format!(", await: {}", r.pick(&["go", "go", "note"]));
            if r.pct(50) {
                s += &format!(", timeout: {}", r.pick(&["20ms", "500ms", "5s"]));
            }
        }
        71..=84 => {
            if fan {
                s += &for_each(r);
            }
            let pin = if r.pct(30) { "@1" } else { "" };
            s += &format!(", workflow: {}{pin}", child.unwrap_or_default());
            s += ", input: { n: '${{ input.x }}' }";
            if r.pct(25) {
                s += &format!(", timeout: {}", r.pick(&["30ms", "2s"]));
            }
            s += &compensate(r);
        }
        _ => {
            if fan {
                s += &for_each(r);
            }
            s += &format!(
                ", http: {{ method: {}, url: 'https://example.invalid/s{i}' }}",
                r.pick(&["GET", "POST"])
            );
            s += &retry(r);
            if r.pct(30) {
                s += ", timeout: 200ms";
            }
            return (s, true);
        }
    }
    (s, false)
}
