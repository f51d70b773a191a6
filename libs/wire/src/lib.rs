//! Conversions between Orbit's domain types and the `orbit.v1` wire messages.
//!
//! The frontend and the owner both answer with the same wire shapes, so the mapping lives
//! here once: history events ([`history_event`]), store projections ([`execution_info`]),
//! folded state ([`describe`], [`execution_result`]), task errors and status names, and a
//! worker's result as a frontend hands it to the owner ([`task_result`]).
//!
//! Reads never send a stored payload that would break the response: see
//! [`READ_MAX_PAYLOAD_BYTES`].
//!
//! Everything here is pure: no IO and no clock. Payload and time conversions come from
//! `orbit_server_kit::payload`; this crate only decides which domain field goes where.

/// The largest payload a read sends as is: larger (or too deep) stored values are sent as
/// the truncation marker `{"$orbit_truncated": {"bytes": N, "depth": D}}`. Half the 4 MiB
/// message limit, the same as the default `max_payload_bytes` every value is written under,
/// so only rows an older version wrote (or written under a raised limit) are truncated.
pub const READ_MAX_PAYLOAD_BYTES: u64 = orbit_server_kit::payload::DEFAULT_MAX_PAYLOAD_BYTES;

mod describe;
mod event;
mod info;
mod result;
mod status;
mod task;

pub use describe::{buffered_signals, describe, pending_work, unit_summaries, PendingWork};
pub use event::{event_payload, history_event};
pub use info::{completed_result, execution_info, execution_result, info_from_state};
pub use result::{task_result, task_result_from_wire};
pub use status::{execution_status, status_of, unit_status};
pub use task::{task_error, task_error_from_wire, task_name, task_timeouts, TaskTimeouts};
