//! Debounce and singleton starts (`dedupe:`, issue 27 item 6; docs/flow-control.md,
//! "Debounce and singleton starts"): the rows of the [`StartDedupe`](crate::StartDedupe)
//! role.
//!
//! **One row per (workflow, key)**, claimed by [`StartDedupe::claim_dedupe`] in one
//! `INSERT … ON CONFLICT DO UPDATE` that decides from the row it finds (so two frontends
//! starting one key at once get one answer: the database serializes them on the key):
//! - no row, or a row that is no longer *live*: the start's own row (it opened a window;
//!   [`DedupeClaim::claimed`]);
//! - a live row: its execution id. A `keep: last` start into a `keep: last` row also
//!   replaces the pending input and pushes the fire time to `now + window`, never past the
//!   first start + [`orbit_definition::dedupe::MAX_DEBOUNCE_WINDOWS`] windows.
//!
//! A `keep: first` row is live until its window ends; a `keep: last` row until the
//! scheduler moves it, due, to the fires ([`StartDedupe::claim_debounce_fires`]), after
//! which a start of the key opens a new debounce. A fire stays until the scheduler has
//! started its execution ([`StartDedupe::finish_debounce_fire`]); its claim is a lease,
//! so a scheduler that dies mid-fire leaves it to the next pass (the owner's start is
//! idempotent by execution id). Times are the callers' clocks, epoch milliseconds.
//!
//! [`StartDedupe::claim_dedupe`]: crate::StartDedupe::claim_dedupe
//! [`StartDedupe::claim_debounce_fires`]: crate::StartDedupe::claim_debounce_fires
//! [`StartDedupe::finish_debounce_fire`]: crate::StartDedupe::finish_debounce_fire

pub use orbit_definition::Keep;
use serde_json::Value;

/// A start of a workflow that declares `dedupe:`, as the frontend claims it.
#[derive(Debug, Clone, PartialEq)]
pub struct DedupeStart {
    /// Workflow name.
    pub workflow: String,
    /// The evaluated key.
    pub key: String,
    /// The declaration's `keep`.
    pub keep: Keep,
    /// The id this start would create (or reserve) if it opens a window.
    pub execution_id: String,
    /// The definition version the start pins.
    pub version: String,
    /// Its hash.
    pub definition_hash: String,
    /// The start's input.
    pub input: Value,
    /// The start's memo (a JSON object), if it gave one: it goes with the input.
    pub memo: Option<Value>,
    /// The start request's priority (0: unset).
    pub priority: u32,
    /// The declaration's window, milliseconds.
    pub window_ms: u64,
    /// The longest a debounce may wait after its first start, milliseconds.
    pub max_delay_ms: u64,
}

/// The row a start found or made.
#[derive(Debug, Clone, PartialEq)]
pub struct DedupeRow {
    /// Whose execution: `first` (created at once) or `last` (reserved until it fires).
    pub keep: Keep,
    /// The execution of the window.
    pub execution_id: String,
    /// When the window opened.
    pub first_at_ms: u64,
    /// `first`: when the window ends; `last`: when the debounce fires.
    pub window_end_ms: u64,
    /// The pinned version of the start kept (the first, or the latest for `last`).
    pub version: String,
    /// Its hash.
    pub definition_hash: String,
    /// Its input.
    pub input: Value,
    /// Its memo, if it gave one.
    pub memo: Option<Value>,
    /// Its priority (0: unset).
    pub priority: u32,
}

/// What [`StartDedupe::claim_dedupe`](crate::StartDedupe::claim_dedupe) answered.
#[derive(Debug, Clone, PartialEq)]
pub struct DedupeClaim {
    /// The key's row after the claim.
    pub row: DedupeRow,
    /// Whether this start opened the window (the row holds its execution id).
    pub claimed: bool,
}

/// A due debounce, claimed by a scheduler for one lease.
#[derive(Debug, Clone, PartialEq)]
pub struct DebounceFire {
    /// The reserved execution id.
    pub execution_id: String,
    /// Workflow name.
    pub workflow: String,
    /// The pinned version of the last start.
    pub version: String,
    /// Its hash.
    pub definition_hash: String,
    /// The last start's input.
    pub input: Value,
    /// The last start's memo, if it gave one.
    pub memo: Option<Value>,
    /// Its priority (0: unset).
    pub priority: u32,
    /// When the debounce became due.
    pub fire_at_ms: u64,
}

/// The stored `keep`.
pub(crate) fn keep_of(text: &str) -> crate::Result<Keep> {
    match text {
        "first" => Ok(Keep::First),
        "last" => Ok(Keep::Last),
        other => Err(crate::StoreError::corrupt("start_dedupe keep", other)),
    }
}

/// Debounce and singleton starts: the frontend claims keys and reads reserved ids, the
/// scheduler fires due debounces and sweeps ended windows.
#[async_trait::async_trait]
pub trait StartDedupe: Send + Sync {
    /// Claims `start.key` at `now_ms` (see the module docs): the key's row after this start,
    /// and whether this start opened it. One statement; concurrent claims of one key see
    /// each other.
    async fn claim_dedupe(&self, start: &DedupeStart, now_ms: u64) -> crate::Result<DedupeClaim>;

    /// The fire time of a reserved (`keep: last`) execution id not started yet, pending or
    /// being fired; `None` for any other id.
    async fn pending_start(&self, execution_id: &str) -> crate::Result<Option<u64>>;

    /// Moves up to `limit` debounces due at `now_ms` to the fires and claims, for
    /// `lease_ms`, those and the fires whose earlier claim ran out: what the caller must
    /// start now, then [`StartDedupe::finish_debounce_fire`].
    async fn claim_debounce_fires(
        &self,
        now_ms: u64,
        lease_ms: u64,
        limit: u32,
    ) -> crate::Result<Vec<DebounceFire>>;

    /// Forgets a fire once its execution is started (or refused for good); false when
    /// there was none.
    async fn finish_debounce_fire(&self, execution_id: &str) -> crate::Result<bool>;

    /// The earliest time a debounce falls due or a fire's claim runs out.
    async fn next_debounce_at(&self) -> crate::Result<Option<u64>>;

    /// Deletes up to `limit` `keep: first` rows whose window ended by `now_ms`; how many.
    async fn sweep_start_dedupe(&self, now_ms: u64, limit: u32) -> crate::Result<u64>;
}
