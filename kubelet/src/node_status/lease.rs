//! The node's heartbeat Lease (`coordination.k8s.io/v1`, `kube-node-lease/<node>`), as the Go
//! kubelet's lease controller (`component-helpers/apimachinery/lease`): ensured to exist
//! (retrying 100 ms doubling to 7 s), then renewed every quarter of the lease duration with 4 %
//! jitter, an update on the last seen version; a conflict re-reads it, five failures wait for
//! the next round. Once the Node exists the Lease is owned by it.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference};
use kube::api::{Api, PostParams};

use crate::kube_client::ApiHandle;

/// The namespace of node leases.
pub const LEASE_NAMESPACE: &str = "kube-node-lease";

/// Go's `maxUpdateRetries`.
const MAX_UPDATE_RETRIES: usize = 5;

/// Go's `maxBackoff` for ensuring the lease exists.
const MAX_BACKOFF: Duration = Duration::from_secs(7);

/// Go's `JitterUntil` factor on the renew interval.
pub const JITTER: f64 = 0.04;

/// The renew interval: a quarter of the lease duration (Go's
/// `nodeLeaseRenewIntervalFraction`), 10 s for the default 40 s.
pub fn renew_interval(lease_duration_secs: u32) -> Duration {
    Duration::from_secs(u64::from(lease_duration_secs)) / 4
}

/// The wait before the next renewal: `interval` plus up to 4 % of it, `fraction` ∈ [0, 1)
/// choosing how much (Go's `wait.Jitter`).
pub fn jittered(interval: Duration, fraction: f64) -> Duration {
    interval + interval.mul_f64(JITTER * fraction.clamp(0.0, 1.0))
}

/// A cheap fraction in [0, 1) for jitter; the clock's nanoseconds are random enough for
/// spreading heartbeats.
fn jitter_fraction() -> f64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    f64::from(nanos % 1_000_000) / 1_000_000.0
}

/// The ensure-exists back-off's next step: doubled, at most 7 s.
pub fn ensure_backoff(step: Duration) -> Duration {
    (step * 2).min(MAX_BACKOFF)
}

/// The reference from the Lease to its Node.
pub fn node_owner(node: &Node) -> Option<OwnerReference> {
    Some(OwnerReference {
        api_version: "v1".into(),
        kind: "Node".into(),
        name: node.metadata.name.clone()?,
        uid: node.metadata.uid.clone()?,
        ..Default::default()
    })
}

/// The Lease to write: `base` (or a new one) renewed at `now`, with the Node as owner when
/// known and not yet set (Go's `newLease` with the kubelet's `setNodeOwnerFunc`).
pub fn new_lease(
    base: Option<&Lease>,
    node_name: &str,
    duration_secs: u32,
    owner: Option<OwnerReference>,
    now: Timestamp,
) -> Lease {
    let mut lease = base.cloned().unwrap_or_else(|| Lease {
        metadata: ObjectMeta {
            name: Some(node_name.into()),
            namespace: Some(LEASE_NAMESPACE.into()),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(node_name.into()),
            lease_duration_seconds: i32::try_from(duration_secs).ok(),
            ..Default::default()
        }),
    });
    lease.spec.get_or_insert_with(Default::default).renew_time = Some(MicroTime(now));
    let owned = lease
        .metadata
        .owner_references
        .as_ref()
        .is_some_and(|o| !o.is_empty());
    if let (false, Some(owner)) = (owned, owner) {
        lease.metadata.owner_references = Some(vec![owner]);
    }
    lease
}

/// The lease loop's state.
pub struct LeaseController {
    api: ApiHandle,
    duration_secs: u32,
    latest: Option<Lease>,
    /// The Node's owner reference, once known.
    owner: Option<OwnerReference>,
}

impl LeaseController {
    /// A controller for `api`'s node with leases of `duration_secs`.
    pub fn new(api: ApiHandle, duration_secs: u32) -> Self {
        Self {
            api,
            duration_secs,
            latest: None,
            owner: None,
        }
    }

    fn leases(&self) -> Api<Lease> {
        Api::namespaced(self.api.client(), LEASE_NAMESPACE)
    }

    /// The owner reference: the Node's uid, read once it exists.
    async fn owner(&mut self) -> Option<OwnerReference> {
        if self.owner.is_none() {
            let nodes: Api<Node> = Api::all(self.api.client());
            match nodes.get_opt(self.api.node_name()).await {
                Ok(Some(node)) => self.owner = node_owner(&node),
                Ok(None) => {}
                Err(e) => tracing::debug!(error = %e, "failed to get node for the lease's owner"),
            }
        }
        self.owner.clone()
    }

    /// Gets the Lease, creating it when absent; `(lease, created)` (Go's `ensureLease`).
    async fn ensure(&mut self) -> Result<(Lease, bool), kube::Error> {
        match self.leases().get_opt(self.api.node_name()).await? {
            Some(l) => Ok((l, false)),
            None => {
                let owner = self.owner().await;
                let lease = new_lease(
                    None,
                    self.api.node_name(),
                    self.duration_secs,
                    owner,
                    Timestamp::now(),
                );
                let created = self.leases().create(&PostParams::default(), &lease).await?;
                Ok((created, true))
            }
        }
    }

    /// [`Self::ensure`] until it succeeds (Go's `backoffEnsureLease`).
    async fn backoff_ensure(&mut self) -> (Lease, bool) {
        let mut sleep = Duration::from_millis(100);
        loop {
            match self.ensure().await {
                Ok(r) => return r,
                Err(e) => {
                    tracing::error!(error = %e, "failed to ensure lease exists, will retry in {sleep:?}");
                }
            }
            sleep = ensure_backoff(sleep);
            tokio::time::sleep(sleep).await;
        }
    }

    /// Renews `base`, re-reading it on conflicts (Go's `retryUpdateLease`).
    async fn retry_update(&mut self, mut base: Lease) -> Result<(), String> {
        for _ in 0..MAX_UPDATE_RETRIES {
            let owner = self.owner().await;
            let lease = new_lease(
                Some(&base),
                self.api.node_name(),
                self.duration_secs,
                owner,
                Timestamp::now(),
            );
            match self
                .leases()
                .replace(self.api.node_name(), &PostParams::default(), &lease)
                .await
            {
                Ok(l) => {
                    self.latest = Some(l);
                    return Ok(());
                }
                Err(kube::Error::Api(s)) if s.is_conflict() => {
                    base = self.backoff_ensure().await.0;
                }
                Err(e) => tracing::error!(error = %e, "failed to update lease"),
            }
        }
        Err(format!(
            "failed {MAX_UPDATE_RETRIES} attempts to update lease"
        ))
    }

    /// One round (Go's `sync`).
    pub async fn sync(&mut self) {
        if let Some(latest) = self.latest.clone()
            && self.retry_update(latest).await.is_ok()
        {
            return;
        }
        let (lease, created) = self.backoff_ensure().await;
        self.latest = Some(lease.clone());
        if !created && let Err(e) = self.retry_update(lease).await {
            tracing::error!(error = %e, "will retry updating lease");
        }
    }

    /// Renews forever, `renew_interval` plus jitter after each round ends.
    pub async fn run(mut self) {
        let interval = renew_interval(self.duration_secs);
        loop {
            self.sync().await;
            tokio::time::sleep(jittered(interval, jitter_fraction())).await;
        }
    }
}
