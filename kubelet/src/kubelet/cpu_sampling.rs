//! CPU samples taken in the background, as cadvisor's housekeeping takes them for the Go
//! kubelet: a CPU rate (`usageNanoCores`) needs two samples, and without them the first
//! `/stats/summary` after a pod starts (or after ferrolet does) would have none.

use std::sync::Arc;
use std::time::Duration;

use super::Kubelet;

/// How often pods' and containers' CPU counters are sampled (cadvisor's housekeeping
/// interval as the Go kubelet sets it).
const SAMPLING_PERIOD: Duration = Duration::from_secs(10);

impl Kubelet {
    /// Starts the sampling loop; it ends with the runtime. Each pass is a CPU-and-memory
    /// summary whose only lasting effect is the samples the provider keeps.
    pub(super) fn spawn_cpu_sampling(self: &Arc<Self>) {
        let kubelet = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(SAMPLING_PERIOD);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                if let Err(e) = kubelet.summary_of(crate::stats::Scope::CpuAndMemory).await {
                    tracing::debug!(error = %e, "sampling CPU usage");
                }
            }
        });
    }
}
