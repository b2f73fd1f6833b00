//! containerd leases that hold content and snapshots while a pull, import or create is under way.

use std::collections::{HashMap, HashSet};
use std::sync::{LazyLock, Mutex, PoisonError};
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

/// Prefix of every lease id we make.
const LEASE_PREFIX: &str = "ferrolet-";

/// Leases this process made and has not deleted yet: what a call in flight still holds.
static LIVE: LazyLock<Mutex<HashSet<String>>> = LazyLock::new(Mutex::default);

fn live() -> std::sync::MutexGuard<'static, HashSet<String>> {
    LIVE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Whether lease `id` is one of ours that nobody holds any more: made by a process that is
/// gone (a crash mid-call), or by this one and not in flight. Such a lease would pin its
/// content and snapshots until it expired.
pub fn is_abandoned(id: &str) -> bool {
    let Some(rest) = id.strip_prefix(LEASE_PREFIX) else {
        return false;
    };
    let Some(pid) = rest.rsplit('-').next().and_then(|p| p.parse::<u32>().ok()) else {
        return false;
    };
    if pid == std::process::id() {
        return !live().contains(id);
    }
    !std::path::Path::new("/proc").join(pid.to_string()).exists()
}

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
            "{LEASE_PREFIX}{purpose}-{}-{}",
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
        live().insert(id.clone());
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
        // Nobody holds it from here on: if containerd cannot delete it now, the sweeper does.
        live().remove(&self.id);
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
    fn a_lease_is_abandoned_when_its_maker_is_gone_or_no_longer_holds_it() {
        let me = std::process::id();
        let held = format!("ferrolet-pull-1-{me}");
        live().insert(held.clone());
        assert!(!is_abandoned(&held));
        assert!(is_abandoned(&format!("ferrolet-pull-2-{me}")));
        // pid_max is at most 2^22: no process has this pid.
        assert!(is_abandoned("ferrolet-container-3-4294967295"));
        // A live process (pid 1) may still hold it; leases of others are never ours.
        assert!(!is_abandoned("ferrolet-import-4-1"));
        assert!(!is_abandoned("k8s.io-lease-5"));
        assert!(!is_abandoned("ferrolet-no-pid"));
        live().remove(&held);
    }

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
