//! containerd leases that hold content and snapshots while a pull, import or create is under way.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ferrolet_proto::containerd::Containerd;
use ferrolet_proto::containerd::services::v1::CreateRequest as CreateLeaseRequest;
use ferrolet_proto::containerd::services::v1::DeleteRequest as DeleteLeaseRequest;
use tonic::Code;

/// containerd label that keeps a lease alive only until this time, so a crashed call cannot
/// pin content forever.
const LEASE_EXPIRE: &str = "containerd.io/gc.expire";
/// How long a lease outlives a caller that never deletes it.
const LEASE_LIFETIME: Duration = Duration::from_secs(3600);

/// containerd refused a lease call.
#[derive(Debug, thiserror::Error)]
#[error("containerd: {op} {id}: {status}")]
pub struct LeaseError {
    op: &'static str,
    id: String,
    #[source]
    status: tonic::Status,
}

/// A containerd lease that expires by itself if we never get to delete it.
pub struct Lease {
    /// The lease id, for the `containerd-lease` header.
    pub id: String,
}

impl Lease {
    /// Creates a lease `ferrolet-<purpose>-<unique>` that expires after an hour.
    pub async fn create(cd: &Containerd, purpose: &str) -> Result<Self, LeaseError> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO);
        let id = format!(
            "ferrolet-{purpose}-{}-{}",
            now.as_nanos(),
            std::process::id()
        );
        let expire = format_expiry(now + LEASE_LIFETIME);
        let labels = HashMap::from([(LEASE_EXPIRE.to_string(), expire)]);
        cd.leases()
            .create(CreateLeaseRequest {
                id: id.clone(),
                labels,
            })
            .await
            .map_err(|status| LeaseError {
                op: "create lease",
                id: id.clone(),
                status,
            })?;
        Ok(Self { id })
    }

    /// Deletes the lease, letting containerd collect whatever nothing else references at its
    /// next garbage collection.
    pub async fn delete(self, cd: &Containerd) -> Result<(), LeaseError> {
        self.delete_with(cd, false).await
    }

    /// Deletes the lease; with `collect`, containerd garbage-collects before answering (after a
    /// failure, so that what the lease held is gone when the caller returns).
    pub async fn delete_with(self, cd: &Containerd, collect: bool) -> Result<(), LeaseError> {
        match cd
            .leases()
            .delete(DeleteLeaseRequest {
                id: self.id.clone(),
                sync: collect,
            })
            .await
        {
            Ok(_) => Ok(()),
            Err(s) if s.code() == Code::NotFound => Ok(()),
            Err(status) => Err(LeaseError {
                op: "delete lease",
                id: self.id,
                status,
            }),
        }
    }
}

/// Formats a time since the epoch as RFC 3339 UTC in whole seconds, the form containerd's
/// `gc.expire` label is parsed from.
fn format_expiry(since_epoch: Duration) -> String {
    let secs = i64::try_from(since_epoch.as_secs()).unwrap_or(i64::MAX);
    match jiff::Timestamp::from_second(secs) {
        Ok(t) => jiff::fmt::temporal::DateTimePrinter::new()
            .precision(Some(0))
            .timestamp_to_string(&t),
        // Beyond jiff's range (year 9999): never, in effect.
        Err(_) => "9999-12-31T23:59:59Z".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expiry_is_rfc3339_in_whole_seconds() {
        assert_eq!(format_expiry(Duration::ZERO), "1970-01-01T00:00:00Z");
        assert_eq!(
            format_expiry(Duration::from_secs(951_782_400)),
            "2000-02-29T00:00:00Z"
        );
        assert_eq!(
            format_expiry(Duration::from_secs(1_795_317_296)),
            "2026-11-22T03:14:56Z"
        );
        // Sub-second parts are dropped, as before.
        assert_eq!(
            format_expiry(Duration::from_millis(1_795_317_296_999)),
            "2026-11-22T03:14:56Z"
        );
    }
}
