//! The server-wide named rate limits on [`Client`]: `AdminService.SetRateLimit`,
//! `ListRateLimits` and `DeleteRateLimit`. A limit allows at most `limit` task starts per
//! window of `period`, per bucket (the name, or the name and a step's evaluated `key:`);
//! windows are aligned to the Unix epoch. Steps take from one with
//! `rate_limit: {name: ...}`. These calls need the admin token when the server checks
//! identities.

use std::time::Duration;

use orbit_api::v1 as pb;

use crate::client::{Client, ClientError};

/// `period` as the wire's duration.
fn wire_period(period: Duration) -> Result<prost_types::Duration, ClientError> {
    prost_types::Duration::try_from(period)
        .map_err(|_| ClientError::Config(format!("rate limit period {period:?} is too long")))
}

impl Client {
    /// Creates or replaces the named rate limit `name`: at most `limit` task starts per
    /// window of `period`. It takes effect at each frontend's next claim; the starts
    /// already taken in the current window stay counted. Returns the limit as stored
    /// (with `updated_at`).
    ///
    /// # Errors
    ///
    /// The server's status: `INVALID_ARGUMENT` for a `limit` of 0, a `period` outside
    /// 1 ms..366 days or a name outside `[A-Za-z0-9_.-]{1,128}`; `PERMISSION_DENIED`
    /// without the admin token.
    pub async fn set_rate_limit(
        &self,
        name: &str,
        limit: u32,
        period: Duration,
    ) -> Result<pb::RateLimit, ClientError> {
        let rate_limit = pb::RateLimit {
            name: name.into(),
            limit,
            period: Some(wire_period(period)?),
            updated_at: None,
        };
        let request = pb::SetRateLimitRequest { rate_limit: Some(rate_limit) };
        let response = self.raw_admin().set_rate_limit(request).await?.into_inner();
        Ok(response.rate_limit.unwrap_or_default())
    }

    /// Every named rate limit, ordered by name.
    ///
    /// # Errors
    ///
    /// The server's status.
    pub async fn list_rate_limits(&self) -> Result<Vec<pb::RateLimit>, ClientError> {
        let mut all = Vec::new();
        let mut page_token = String::new();
        loop {
            let request = pb::ListRateLimitsRequest { page_size: 1000, page_token };
            let page = self.raw_admin().list_rate_limits(request).await?.into_inner();
            all.extend(page.rate_limits);
            if page.next_page_token.is_empty() {
                return Ok(all);
            }
            page_token = page.next_page_token;
        }
    }

    /// Deletes the named rate limit `name`: attempts of steps that reference it stay
    /// queued until it is set again.
    ///
    /// # Errors
    ///
    /// The server's status: `NOT_FOUND` (`RATE_LIMIT_NOT_FOUND`) for an unknown name.
    pub async fn delete_rate_limit(&self, name: &str) -> Result<(), ClientError> {
        let request = pb::DeleteRateLimitRequest { name: name.into() };
        self.raw_admin().delete_rate_limit(request).await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn periods_convert_to_the_wire() {
        let p = wire_period(Duration::from_millis(1_500)).expect("fits");
        assert_eq!((p.seconds, p.nanos), (1, 500_000_000));
        assert!(matches!(wire_period(Duration::MAX), Err(ClientError::Config(_))));
    }
}
