//! Per-volume back-off after a failed set-up or tear-down (Go's exponential back-off of
//! volume operations: 500 ms doubling to 2m2s), with the last error kept for the pod's
//! waiting message. A pod sync or a change of what the volume is made of asks for a retry at
//! once: the next attempt then does not wait out the window.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use tokio::time::Instant;

use super::desired::VolumeKey;

/// The first window after a failure (Go's `initialDurationBeforeRetry`).
pub const INITIAL_RETRY: Duration = Duration::from_millis(500);
/// The longest window (Go's `maxDurationBeforeRetry`).
pub const MAX_RETRY: Duration = Duration::from_secs(122);

/// The last failure of one volume's operation.
#[derive(Clone, Debug)]
pub struct Failure {
    /// What went wrong (Go's event message).
    pub message: String,
    /// When the failed attempt started.
    pub attempt_started: Instant,
    /// The current window.
    pub delay: Duration,
    /// When the next attempt may start.
    pub retry_at: Instant,
}

/// Failures by volume.
#[derive(Debug, Default)]
pub struct Retries {
    failures: BTreeMap<VolumeKey, Failure>,
    /// Volumes to retry as soon as they are not in flight, whatever their window.
    asap: BTreeSet<VolumeKey>,
}

impl Retries {
    /// Records a failed attempt of `key` started at `started`, finished at `now`.
    pub fn failed(&mut self, key: &VolumeKey, message: String, started: Instant, now: Instant) {
        let delay = match self.failures.get(key) {
            Some(f) => (f.delay * 2).min(MAX_RETRY),
            None => INITIAL_RETRY,
        };
        let retry_at = if self.asap.remove(key) {
            now
        } else {
            now + delay
        };
        let failure = Failure {
            message,
            attempt_started: started,
            delay,
            retry_at,
        };
        self.failures.insert(key.clone(), failure);
    }

    /// Notes that an attempt of `key` starts: a retry asked for before is served by it.
    pub fn started(&mut self, key: &VolumeKey) {
        self.asap.remove(key);
    }

    /// Forgets `key`'s failures (it succeeded, or is no longer wanted).
    pub fn succeeded(&mut self, key: &VolumeKey) {
        self.failures.remove(key);
        self.asap.remove(key);
    }

    /// Whether `key` may be tried at `now`.
    pub fn ready(&self, key: &VolumeKey, now: Instant) -> bool {
        self.failures.get(key).is_none_or(|f| f.retry_at <= now)
    }

    /// Lets `key` be tried at once (after the attempt in flight, if any).
    pub fn retry_now(&mut self, key: &VolumeKey, now: Instant) {
        if let Some(f) = self.failures.get_mut(key) {
            f.retry_at = f.retry_at.min(now);
        }
        self.asap.insert(key.clone());
    }

    /// `key`'s last failure.
    pub fn get(&self, key: &VolumeKey) -> Option<&Failure> {
        self.failures.get(key)
    }

    /// The earliest window end still ahead of `now`.
    pub fn next_retry(&self, now: Instant) -> Option<Instant> {
        self.failures
            .values()
            .map(|f| f.retry_at)
            .filter(|t| *t > now)
            .min()
    }

    /// Forgets what is not `wanted` any more.
    pub fn retain(&mut self, wanted: impl Fn(&VolumeKey) -> bool) {
        self.failures.retain(|k, _| wanted(k));
        self.asap.retain(|k| wanted(k));
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn windows_double_up_to_the_maximum_and_reset_on_success() {
        let mut r = Retries::default();
        let k = VolumeKey::new("u", "v");
        let t0 = Instant::now();
        assert!(r.ready(&k, t0));
        r.failed(&k, "no".into(), t0, t0);
        assert_eq!(r.get(&k).unwrap().delay, INITIAL_RETRY);
        assert!(!r.ready(&k, t0));
        assert!(r.ready(&k, t0 + INITIAL_RETRY));
        assert_eq!(r.next_retry(t0), Some(t0 + INITIAL_RETRY));
        for _ in 0..12 {
            r.failed(&k, "no".into(), t0, t0);
        }
        assert_eq!(r.get(&k).unwrap().delay, MAX_RETRY);
        // A retry asked for now opens the window at once; the attempt serves it.
        r.retry_now(&k, t0);
        assert!(r.ready(&k, t0));
        r.started(&k);
        r.failed(&k, "again".into(), t0, t0);
        assert!(!r.ready(&k, t0));
        assert_eq!(r.get(&k).unwrap().message, "again");
        // Asked for while an attempt is in flight: the next one follows it at once.
        r.started(&k);
        r.retry_now(&k, t0);
        r.failed(&k, "again".into(), t0, t0);
        assert!(r.ready(&k, t0));
        r.succeeded(&k);
        assert!(r.get(&k).is_none());
        r.failed(&k, "no".into(), t0, t0);
        assert_eq!(r.get(&k).unwrap().delay, INITIAL_RETRY);
        r.retain(|_| false);
        assert!(r.get(&k).is_none());
    }
}
