//! CPU rates from cumulative counters: the previous sample per container, pod and the node,
//! as the Go kubelet's CRI stats provider caches CPU usage to fill `usageNanoCores`.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

#[derive(Clone, Copy, Debug)]
struct Last {
    timestamp_ns: i64,
    usage_ns: u64,
    rate: Option<u64>,
}

/// The last CPU sample of each key (`node`, `pod/<uid>`, a container id).
#[derive(Debug, Default)]
pub struct CpuRates {
    last: Mutex<HashMap<String, Last>>,
}

impl CpuRates {
    /// Billionths of a core used between the previous sample of `key` and this one. The
    /// first sample has no rate; a sample no newer than the last repeats the last rate (two
    /// readers in one instant see the same figure); a counter that went backwards (a
    /// restarted container under a reused key) starts over.
    pub fn rate(&self, key: &str, timestamp_ns: i64, usage_ns: u64) -> Option<u64> {
        let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(prev) = last.get_mut(key) else {
            last.insert(
                key.to_string(),
                Last {
                    timestamp_ns,
                    usage_ns,
                    rate: None,
                },
            );
            return None;
        };
        let elapsed = timestamp_ns.saturating_sub(prev.timestamp_ns);
        if elapsed <= 0 {
            return prev.rate;
        }
        let rate = usage_ns.checked_sub(prev.usage_ns).and_then(|used| {
            u64::try_from(u128::from(used) * 1_000_000_000 / u128::from(elapsed.unsigned_abs()))
                .ok()
        });
        *prev = Last {
            timestamp_ns,
            usage_ns,
            rate,
        };
        rate
    }

    /// Forgets keys `keep` says no to (containers and pods that are gone).
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        self.last
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|k, _| keep(k));
    }

    /// How many keys are remembered.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.last
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}
