//! `SetRateLimit`, `ListRateLimits`, `DeleteRateLimit`: the server-wide named rate limits
//! steps reference with `rate_limit: {name}` (issue 27). The wire message is checked and
//! converted once here; the store keeps the rows and the flow claim reads them.

use crate::error::{err, ApiResult};
use crate::Shared;
use orbit_api::v1::{
    DeleteRateLimitRequest, DeleteRateLimitResponse, ListRateLimitsRequest, ListRateLimitsResponse,
    RateLimit, SetRateLimitRequest, SetRateLimitResponse,
};
use orbit_server_kit::payload::{duration_to_ms, ms_to_duration, ms_to_timestamp};
use orbit_server_kit::validate::invalid;
use orbit_server_kit::{ErrorCode, OrbitError};
use orbit_store::RateLimitRow;

/// The longest name accepted.
const MAX_NAME: usize = 128;
/// The longest window accepted: 366 days.
const MAX_PERIOD_MS: u64 = 366 * 24 * 60 * 60 * 1000;

/// A limit as the store takes it.
#[derive(Debug, PartialEq, Eq)]
struct NewLimit {
    name: String,
    limit: u32,
    period_ms: u64,
}

/// A name steps can reference: `[A-Za-z0-9_.-]{1,128}`.
fn name(field: &str, value: &str) -> Result<String, OrbitError> {
    if value.is_empty() || value.len() > MAX_NAME {
        return Err(invalid(field, format!("must be 1 to {MAX_NAME} characters")));
    }
    if !value.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')) {
        return Err(invalid(field, "may only hold letters, digits, `_`, `.` and `-`"));
    }
    Ok(value.to_string())
}

impl TryFrom<SetRateLimitRequest> for NewLimit {
    type Error = OrbitError;

    fn try_from(req: SetRateLimitRequest) -> Result<NewLimit, OrbitError> {
        let limit = req.rate_limit.ok_or_else(|| invalid("rate_limit", "is required"))?;
        let name = name("rate_limit.name", &limit.name)?;
        if limit.limit == 0 {
            return Err(invalid("rate_limit.limit", "must be at least 1"));
        }
        let period = limit.period.ok_or_else(|| invalid("rate_limit.period", "is required"))?;
        let period_ms =
            duration_to_ms(&period).map_err(|e| invalid("rate_limit.period", e.to_string()))?;
        if !(1..=MAX_PERIOD_MS).contains(&period_ms) {
            return Err(invalid("rate_limit.period", "must be between 1 ms and 366 days"));
        }
        Ok(NewLimit { name, limit: limit.limit, period_ms })
    }
}

/// A stored limit on the wire.
fn wire(row: RateLimitRow) -> RateLimit {
    RateLimit {
        name: row.name,
        limit: row.limit,
        period: Some(ms_to_duration(row.period_ms)),
        updated_at: Some(ms_to_timestamp(row.updated_at_ms)),
    }
}

pub(super) async fn set(
    shared: &Shared,
    req: SetRateLimitRequest,
) -> ApiResult<SetRateLimitResponse> {
    let new = NewLimit::try_from(req)?;
    let row = shared.store.set_rate_limit(&new.name, new.limit, new.period_ms).await?;
    tracing::info!(name = %row.name, limit = row.limit, period_ms = row.period_ms, "rate limit set");
    Ok(SetRateLimitResponse { rate_limit: Some(wire(row)) })
}

pub(super) async fn list(
    shared: &Shared,
    req: ListRateLimitsRequest,
) -> ApiResult<ListRateLimitsResponse> {
    let rows = shared.store.list_rate_limits().await?;
    let (rows, next_page_token) = super::page(rows, req.page_size, &req.page_token)?;
    Ok(ListRateLimitsResponse {
        rate_limits: rows.into_iter().map(wire).collect(),
        next_page_token,
    })
}

pub(super) async fn delete(
    shared: &Shared,
    req: DeleteRateLimitRequest,
) -> ApiResult<DeleteRateLimitResponse> {
    let name = name("name", &req.name)?;
    if !shared.store.delete_rate_limit(&name).await? {
        return Err(err(
            ErrorCode::RateLimitNotFound,
            format!("rate limit `{name}` does not exist"),
        ));
    }
    tracing::info!(%name, "rate limit deleted");
    Ok(DeleteRateLimitResponse {})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(name: &str, limit: u32, period_ms: Option<u64>) -> SetRateLimitRequest {
        SetRateLimitRequest {
            rate_limit: Some(RateLimit {
                name: name.into(),
                limit,
                period: period_ms.map(ms_to_duration),
                updated_at: None,
            }),
        }
    }

    fn refused_field(req: SetRateLimitRequest) -> String {
        let e = NewLimit::try_from(req).expect_err("refused");
        assert_eq!(e.code, ErrorCode::InvalidArgument);
        e.details[0].path.clone()
    }

    #[test]
    fn limits_are_checked_with_the_field_named() {
        let ok = NewLimit::try_from(request("api.v1-x_y", 5, Some(1_000))).unwrap();
        assert_eq!(ok, NewLimit { name: "api.v1-x_y".into(), limit: 5, period_ms: 1_000 });
        assert!(NewLimit::try_from(request("a", 1, Some(MAX_PERIOD_MS))).is_ok());
        assert_eq!(refused_field(SetRateLimitRequest { rate_limit: None }), "rate_limit");
        assert_eq!(refused_field(request("", 1, Some(1))), "rate_limit.name");
        assert_eq!(refused_field(request("a b", 1, Some(1))), "rate_limit.name");
        assert_eq!(refused_field(request(&"n".repeat(129), 1, Some(1))), "rate_limit.name");
        assert_eq!(refused_field(request("a", 0, Some(1))), "rate_limit.limit");
        assert_eq!(refused_field(request("a", 1, None)), "rate_limit.period");
        assert_eq!(refused_field(request("a", 1, Some(0))), "rate_limit.period");
        assert_eq!(refused_field(request("a", 1, Some(MAX_PERIOD_MS + 1))), "rate_limit.period");
    }
}
