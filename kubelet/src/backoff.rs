//! Per-key exponential back-off, as the Go kubelet's `flowcontrol.Backoff`: crash-looping
//! containers and failing image pulls wait 10 s, then 20 s, 40 s, ... up to 5 min; a key that
//! has not failed for twice the maximum (10 min) starts again from the initial delay.
//!
//! Every method takes the instant to judge at, so callers pass `Instant::now()` and tests pass
//! made-up instants without sleeping.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One key's state.
#[derive(Clone, Copy, Debug)]
struct Entry {
    /// The current window.
    backoff: Duration,
    /// When `next` last ran for the key.
    last_update: Instant,
}

/// Per-key exponential back-off: 10 s doubling to 300 s, reset after 600 s without a failure
/// (crash loops, image pulls).
#[derive(Debug)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    reset_after: Duration,
    entries: Mutex<HashMap<String, Entry>>,
}

impl Backoff {
    /// A back-off starting at `initial`, doubling up to `max`, forgotten after `reset_after`
    /// without a failure.
    pub fn new(initial: Duration, max: Duration, reset_after: Duration) -> Self {
        Self {
            initial,
            max,
            reset_after,
            entries: Mutex::new(HashMap::new()),
        }
    }

    /// The kubelet's crash-loop back-off: 10 s, max 300 s, reset after 600 s.
    pub fn crash_loop() -> Self {
        Self::new(
            Duration::from_secs(10),
            Duration::from_secs(300),
            Duration::from_secs(600),
        )
    }

    /// The kubelet's image-pull back-off: 10 s, max 300 s, reset after 600 s.
    pub fn image_pull() -> Self {
        Self::crash_loop()
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        // A panic while holding the lock cannot leave a map half-updated: keep using it.
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether an entry last updated at `last` has gone stale by `at` (Go's `hasExpired`).
    fn expired(&self, at: Instant, last: Instant) -> bool {
        at.saturating_duration_since(last) > self.reset_after
    }

    /// The time left of the window opened by the last [`Backoff::next`] for `key`, judged at
    /// `since` (normally now); `None` when the key may go ahead (Go's `IsInBackOffSinceUpdate`).
    pub fn in_backoff(&self, key: &str, since: Instant) -> Option<Duration> {
        let entries = self.entries();
        let entry = entries.get(key)?;
        if self.expired(since, entry.last_update) {
            return None;
        }
        let elapsed = since.saturating_duration_since(entry.last_update);
        entry
            .backoff
            .checked_sub(elapsed)
            .filter(|left| !left.is_zero())
    }

    /// The time left of the window counted from `event` (when the container last finished),
    /// judged at `now`; `None` when the key may go ahead (Go's `IsInBackOffSince`, which the Go
    /// kubelet uses with the container's finish time).
    #[cfg(test)]
    pub fn in_backoff_since_event(
        &self,
        key: &str,
        event: Instant,
        now: Instant,
    ) -> Option<Duration> {
        let entries = self.entries();
        let entry = entries.get(key)?;
        if self.expired(event, entry.last_update) {
            return None;
        }
        let elapsed = now.saturating_duration_since(event);
        entry
            .backoff
            .checked_sub(elapsed)
            .filter(|left| !left.is_zero())
    }

    /// Records a failure at `now`: the first one (or the first after `reset_after` quiet) opens
    /// the initial window, each further one doubles it up to the maximum.
    pub fn next(&self, key: &str, now: Instant) {
        let mut entries = self.entries();
        let backoff = match entries.get(key) {
            Some(entry) if !self.expired(now, entry.last_update) => {
                entry.backoff.saturating_mul(2).min(self.max)
            }
            _ => self.initial,
        };
        entries.insert(
            key.to_string(),
            Entry {
                backoff,
                last_update: now,
            },
        );
    }

    /// The current window of `key` (zero when it has none), as Go's `Get`, for messages.
    #[cfg(test)]
    pub fn current(&self, key: &str) -> Duration {
        self.entries()
            .get(key)
            .map(|e| e.backoff)
            .unwrap_or_default()
    }

    /// Forgets `key`, so its next failure starts from the initial window.
    pub fn reset(&self, key: &str) {
        self.entries().remove(key);
    }

    /// Forgets every key that starts with `prefix` (all of a pod's containers, `<uid>/`).
    pub fn forget_prefix(&self, prefix: &str) {
        self.entries().retain(|k, _| !k.starts_with(prefix));
    }

    /// Drops entries not updated for `reset_after` (they would restart from the initial
    /// window anyway); the kubelet calls it from housekeeping.
    pub fn gc(&self, now: Instant) {
        let reset_after = self.reset_after;
        self.entries()
            .retain(|_, e| now.saturating_duration_since(e.last_update) <= reset_after);
    }

    /// How many keys are tracked.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries().len()
    }

    /// Whether no key is tracked.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn first_failure_opens_the_initial_window_and_it_closes() {
        let b = Backoff::crash_loop();
        let t0 = Instant::now();
        assert_eq!(b.in_backoff("k", t0), None, "no entry: go ahead");
        b.next("k", t0);
        assert_eq!(b.in_backoff("k", t0), Some(S(10)));
        assert_eq!(b.in_backoff("k", t0 + S(4)), Some(S(6)));
        assert_eq!(b.in_backoff("k", t0 + S(10)), None);
        assert_eq!(b.in_backoff("k", t0 + S(11)), None);
        assert_eq!(b.current("k"), S(10));
    }

    #[test]
    fn doubles_up_to_the_maximum() {
        let b = Backoff::crash_loop();
        let mut t = Instant::now();
        let mut windows = Vec::new();
        for _ in 0..8 {
            b.next("k", t);
            windows.push(b.current("k").as_secs());
            // Restart as soon as allowed, as the sync loop does.
            t += b.current("k");
        }
        assert_eq!(windows, [10, 20, 40, 80, 160, 300, 300, 300]);
    }

    #[test]
    fn resets_after_a_quiet_period() {
        let b = Backoff::crash_loop();
        let t0 = Instant::now();
        b.next("k", t0);
        b.next("k", t0 + S(10));
        assert_eq!(b.current("k"), S(20));
        // Exactly the reset period is not yet quiet enough (Go: strictly greater).
        b.next("k", t0 + S(610));
        assert_eq!(b.current("k"), S(40));
        // Ran for more than 10 minutes: back to the start.
        b.next("k", t0 + S(1211));
        assert_eq!(b.current("k"), S(10));
        // An expired entry is not in back-off either.
        b.next("j", t0);
        assert_eq!(b.in_backoff("j", t0 + S(601)), None);
    }

    #[test]
    fn since_event_counts_from_the_event() {
        let b = Backoff::crash_loop();
        let t0 = Instant::now();
        b.next("k", t0);
        b.next("k", t0 + S(1));
        // 20 s window counted from a finish at t0+30, judged at t0+35: 15 s left.
        assert_eq!(
            b.in_backoff_since_event("k", t0 + S(30), t0 + S(35)),
            Some(S(15))
        );
        assert_eq!(b.in_backoff_since_event("k", t0 + S(30), t0 + S(50)), None);
        // A finish long after the last update: the entry is stale.
        assert_eq!(
            b.in_backoff_since_event("k", t0 + S(700), t0 + S(701)),
            None
        );
        assert_eq!(b.in_backoff_since_event("x", t0, t0), None);
    }

    #[test]
    fn keys_are_independent_and_can_be_forgotten() {
        let b = Backoff::image_pull();
        let t0 = Instant::now();
        b.next("uid1/a", t0);
        b.next("uid1/b", t0);
        b.next("uid2/a", t0);
        b.next("uid2/a", t0);
        assert_eq!(b.current("uid2/a"), S(20));
        assert_eq!(b.current("uid1/a"), S(10));
        b.reset("uid1/a");
        assert_eq!(b.in_backoff("uid1/a", t0), None);
        b.forget_prefix("uid2/");
        assert_eq!(b.len(), 1);
        assert!(b.in_backoff("uid1/b", t0).is_some());
    }

    #[test]
    fn gc_drops_stale_entries_only() {
        let b = Backoff::new(S(1), S(4), S(8));
        let t0 = Instant::now();
        b.next("old", t0);
        b.next("new", t0 + S(5));
        b.gc(t0 + S(9));
        assert_eq!(b.len(), 1);
        assert_eq!(b.current("new"), S(1));
        b.gc(t0 + S(14));
        assert!(b.is_empty());
    }
}
