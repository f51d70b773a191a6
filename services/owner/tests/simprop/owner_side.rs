//! Runs a case through a real `Owner` on SQLite (a temp file) with a manual clock, and a
//! driver that plays the worker and the scheduler the way the simulator does: it claims
//! every queued offer at once (the claim writes the `dispatched` entry), answers each
//! attempt `latency_ms` of manual time later through `complete_task_row`, fires due timers
//! through `fire_due_timers`, sends the script's signals and cancels through the inbox, and
//! lets the owner pass until nothing moves before the clock goes on.

use super::gen::{outcome, Action, Case, Outcome, T0};
use super::{task_names, Histories, HORIZON_MS, ROOT};
use orbit_definition::{Definition, Limits};
use orbit_engine::TaskError;
use orbit_owner::{Owner, OwnerConfig, StartRequest};
use orbit_store::inbox::{Cancel, Complete, Fail, Signal};
use orbit_store::{ChangeHub, ExecutionFilter, InboxMessage, SqliteStore, Store};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

const WORKER: &str = "prop-worker";

/// Passes without progress after which a settle gives up (a livelock on either side).
const MAX_SETTLE_PASSES: usize = 200;

struct Driver {
    store: Arc<dyn Store>,
    owner: Owner,
    clock: Arc<AtomicU64>,
    names: Vec<String>,
    /// Answers due: (when, token, outcome), in the order the attempts were dispatched.
    answers: Vec<(u64, String, Outcome)>,
    case: Case,
    latency_ms: u64,
}

type Res<T> = Result<T, String>;

fn err(what: &str) -> impl Fn(orbit_store::StoreError) -> String + '_ {
    move |e| format!("{what}: {e}")
}

impl Driver {
    fn now(&self) -> u64 {
        self.clock.load(Ordering::SeqCst)
    }

    /// Claims every queued offer, in unit-key order per execution (the simulator's dispatch
    /// order), and schedules each answer `latency_ms` from now.
    async fn claim(&mut self) -> Res<usize> {
        let mut rows = self
            .store
            .claim_tasks(&self.names, orbit_store::MAX_CLAIM, "prop-frontend", "s1", WORKER)
            .await
            .map_err(err("claim"))?;
        rows.sort_by(|a, b| (&a.execution_id, &a.unit_key).cmp(&(&b.execution_id, &b.unit_key)));
        let at = self.now() + self.latency_ms;
        for row in &rows {
            let token = row.token.clone().ok_or("a claimed row without a token")?;
            let o = outcome(self.case.mode, &row.task, row.attempt, &row.input);
            if o != Outcome::Hang {
                self.answers.push((at, token, o));
            }
        }
        Ok(rows.len())
    }

    /// What changes when the owner makes progress: every execution's run and last seq.
    async fn fingerprint(&self) -> Res<Vec<(String, u32, u64)>> {
        let page = self
            .store
            .list_executions(ExecutionFilter { page_size: 1000, ..ExecutionFilter::default() })
            .await
            .map_err(err("list"))?;
        let mut fp: Vec<_> =
            page.executions.into_iter().map(|r| (r.execution_id, r.run, r.last_seq)).collect();
        fp.sort();
        Ok(fp)
    }

    /// Passes (claiming what they queue) until a pass neither queues nor records anything.
    async fn settle(&mut self) -> Res<()> {
        let mut last = None;
        for _ in 0..MAX_SETTLE_PASSES {
            let claimed = self.claim().await?;
            self.owner.wake().await;
            let fp = self.fingerprint().await?;
            if claimed == 0 && last.as_ref() == Some(&fp) {
                return Ok(());
            }
            last = Some(fp);
        }
        Err(format!("the owner did not come to rest within {MAX_SETTLE_PASSES} passes"))
    }

    /// Writes the answers due now, in dispatch order, and fires the due timers.
    async fn deliver_due(&mut self) -> Res<()> {
        let now = self.now();
        let (due, later): (Vec<_>, Vec<_>) = self.answers.drain(..).partition(|a| a.0 <= now);
        self.answers = later;
        for (_, token, o) in due {
            let report = match o {
                Outcome::Complete(output) => {
                    InboxMessage::Complete(Complete { token: token.clone(), output })
                }
                Outcome::Fail { code, retryable } => {
                    let message = "scripted failure".to_string();
                    let error =
                        TaskError { code: code.to_string(), message, retryable, details: None };
                    InboxMessage::Fail(Fail { token: token.clone(), error })
                }
                Outcome::Hang => continue,
            };
            self.store
                .complete_task_row(&token, WORKER, Some(report))
                .await
                .map_err(err("complete"))?;
        }
        self.store.fire_due_timers(now, 10_000).await.map_err(err("timers"))?;
        Ok(())
    }

    /// Everything due up to `until`, moving the clock from one due time to the next.
    async fn run_until(&mut self, until: u64) -> Res<()> {
        loop {
            self.settle().await?;
            let answer = self.answers.iter().map(|a| a.0).min();
            let timer = self.store.next_timer_at().await.map_err(err("next timer"))?;
            match answer.into_iter().chain(timer).min() {
                Some(at) if at <= until => {
                    self.clock.fetch_max(at, Ordering::SeqCst);
                    self.deliver_due().await?;
                }
                _ => {
                    self.clock.fetch_max(until, Ordering::SeqCst);
                    return self.settle().await;
                }
            }
        }
    }

    async fn act(&mut self, action: &Action) -> Res<()> {
        let message = match action {
            Action::Signal { name, payload, .. } => InboxMessage::Signal(Signal {
                name: name.clone(),
                payload: payload.clone(),
                request_id: None,
            }),
            Action::Cancel { reason, .. } => {
                InboxMessage::Cancel(Cancel { reason: reason.clone(), request_id: None })
            }
        };
        self.store.enqueue_inbox(ROOT, &message).await.map_err(err("inbox"))?;
        Ok(())
    }
}

/// Every run of every execution the owner wrote for `case`.
pub async fn run(
    case: &Case,
    defs: &[Definition],
    limits: &Limits,
    latency_ms: u64,
) -> Res<Histories> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let store: Arc<dyn Store> = Arc::new(
        SqliteStore::open_and_migrate(dir.path().join("orbit.db")).await.map_err(err("open"))?,
    );
    for def in defs {
        let doc = orbit_definition::canonical_json(&orbit_definition::to_document(def));
        store.put_definition(&def.name, &def.version, &def.hash, &doc).await.map_err(err("def"))?;
    }
    let clock = Arc::new(AtomicU64::new(T0));
    let c = clock.clone();
    let cfg = OwnerConfig {
        limits: limits.clone(),
        // Passes run when the driver wakes the owner, never on their own.
        idle_pass: Duration::from_secs(3600),
        clock: orbit_owner::Clock::from_fn(move || c.load(Ordering::SeqCst)),
        ..OwnerConfig::default()
    };
    let owner = Owner::new(
        cfg,
        store.clone(),
        Arc::new(Notify::new()),
        Arc::new(Notify::new()),
        Arc::new(ChangeHub::new()),
    );
    let stop = CancellationToken::new();
    let (o, s) = (owner.clone(), stop.clone());
    let passes = tokio::spawn(async move { o.run(s).await });
    let mut d = Driver {
        store: store.clone(),
        owner: owner.clone(),
        clock,
        names: task_names(defs),
        answers: Vec::new(),
        case: case.clone(),
        latency_ms,
    };
    let result = async {
        let request = StartRequest {
            execution_id: ROOT.into(),
            workflow: case.workflow.clone(),
            version: None,
            input: case.input.clone(),
            parent: None,
            root_id: None,
            schedule_id: None,
            fork: None,
            priority: None,
            memo: None,
            update: None,
            versions_seen: None,
        };
        owner.start(request).await.map_err(|e| format!("owner start: {e}"))?;
        for action in &case.script {
            d.run_until(T0 + action.at()).await?;
            d.act(action).await?;
        }
        d.run_until(T0 + HORIZON_MS).await?;
        let mut out = Histories::new();
        for (id, runs, _) in d.fingerprint().await? {
            let mut all = Vec::new();
            for run in 1..=runs {
                all.push(store.load_history(&id, run).await.map_err(err("history"))?);
            }
            out.insert(id, all);
        }
        Ok(out)
    }
    .await;
    stop.cancel();
    let _ = passes.await;
    result
}
