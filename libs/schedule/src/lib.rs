//! Orbit's schedule model, pure (no IO, no clock): what a schedule is and when it fires.
//!
//! - [`def`]: the stored form of a schedule (spec and action) as JSON, what the store keeps
//!   in `schedules.spec` and what the frontend builds from the API's messages.
//! - [`spec`]: a compiled [`Spec`] (cron expressions and intervals in an IANA time zone,
//!   start/end) and [`Spec::next_after`], with the DST rules; [`jitter_ms`].
//! - [`policy`]: the catch-up and overlap decisions of one scheduler pass ([`plan`]).
//!
//! Every time is epoch milliseconds (UTC), as the store keeps them; callers pass "now".

pub mod def;
pub mod policy;
pub mod spec;

pub use def::{ActionDef, CatchUp, IntervalDef, Overlap, ScheduleDef, SpecDef};
pub use policy::{plan, Plan, Prior, Start, Tick, MAX_BUFFERED, ON_TIME_MS, RECHECK_MS};
pub use spec::{execution_id, jitter_ms, rfc3339, Spec, SpecError};
