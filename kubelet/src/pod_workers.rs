//! Pod workers: one task per pod UID. Work for one pod runs one at a time, and only the
//! newest pending work is kept (a burst of updates becomes one sync); different pods sync in
//! parallel. A sync that panics is logged with the pod's name and retried after a back-off,
//! as the Go kubelet requeues a failed sync, instead of leaving the pod without a worker; a
//! sync that failed (its run asks for a retry) runs again after the delay it asked for unless
//! newer work comes first (Go's `completeWork` requeue).

use std::collections::HashMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::types::Pod;

/// How long a worker waits before retrying work that panicked: the Go kubelet's
/// `backOffPeriod` for a failed sync.
const PANIC_BACKOFF: Duration = Duration::from_secs(10);

/// What a worker is asked to do.
#[derive(Clone, Debug)]
pub enum Work {
    /// Drive the pod to its desired state. (Shared, not copied: a worker keeps its work for
    /// a retry while it runs, and a pod with volumes is tens of KiB.)
    Sync(Arc<Pod>),
    /// Stop it with a grace period in seconds and clean up; the worker ends afterwards.
    Kill(Arc<Pod>, i64),
}

struct Slot {
    pending: Mutex<Option<Work>>,
    notify: Notify,
}

/// The workers.
pub struct PodWorkers<F> {
    slots: Mutex<HashMap<String, Arc<Slot>>>,
    run: F,
}

/// What a run asks of its worker: run the same work again after this long (a failed sync),
/// or nothing.
pub type RetryAfter = Option<Duration>;

impl<F, Fut> PodWorkers<F>
where
    F: Fn(String, Work) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = RetryAfter> + Send + 'static,
{
    /// Workers that run `run(uid, work)` for each piece of work.
    pub fn new(run: F) -> Arc<Self> {
        Arc::new(Self {
            slots: Mutex::new(HashMap::new()),
            run,
        })
    }

    /// Queues work for a pod, replacing whatever was still pending (a kill is never replaced
    /// by a sync); starts the pod's worker if it has none.
    pub fn update(self: &Arc<Self>, uid: &str, work: Work) {
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(slot) = slots.get(uid) {
            let mut pending = slot.pending.lock().unwrap_or_else(|p| p.into_inner());
            let keep_kill =
                matches!(pending.as_ref(), Some(Work::Kill(..))) && matches!(work, Work::Sync(_));
            if !keep_kill {
                *pending = Some(work);
            }
            drop(pending);
            slot.notify.notify_one();
            return;
        }
        let slot = Arc::new(Slot {
            pending: Mutex::new(Some(work)),
            notify: Notify::new(),
        });
        slots.insert(uid.to_string(), slot.clone());
        drop(slots);
        let this = self.clone();
        let uid = uid.to_string();
        tokio::spawn(async move { this.work_loop(uid, slot).await });
    }

    /// Whether a pod has a worker.
    pub fn has(&self, uid: &str) -> bool {
        self.slots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains_key(uid)
    }

    async fn work_loop(self: Arc<Self>, uid: String, slot: Arc<Slot>) {
        loop {
            let work = slot
                .pending
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take();
            let Some(work) = work else {
                slot.notify.notified().await;
                continue;
            };
            let killing = matches!(work, Work::Kill(..));
            let retry = work.clone();
            // Boxed so an idle worker holds only this loop: a sync's future is ~20 KiB, and
            // kept inline it stayed allocated for the pod's lifetime (2.4 MiB at 100 pods).
            let run = Box::pin((self.run)(uid.clone(), work));
            let retry_after = match AssertUnwindSafe(run).catch_unwind().await {
                Ok(retry_after) => retry_after,
                Err(panic) => {
                    tracing::error!(
                        pod = %retry.pod_name(),
                        %uid,
                        panic = panic_message(panic.as_ref()),
                        retry_in = ?PANIC_BACKOFF,
                        "pod worker panicked; retrying"
                    );
                    // Newer work, if any arrived meanwhile, is what the retry runs.
                    slot.pending
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .get_or_insert(retry);
                    tokio::time::sleep(PANIC_BACKOFF).await;
                    continue;
                }
            };
            if killing {
                let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
                let mut pending = slot.pending.lock().unwrap_or_else(|p| p.into_inner());
                // A new pod with the same UID may have arrived while we killed: keep going.
                if pending.is_none() {
                    slots.remove(&uid);
                    return;
                }
                if let Some(Work::Kill(..)) = pending.as_ref() {
                    *pending = None;
                    slots.remove(&uid);
                    return;
                }
            } else if let Some(delay) = retry_after {
                requeue(&slot, retry, delay).await;
            }
        }
    }
}

/// Puts `work` back as the slot's pending work once `delay` has passed, unless newer work
/// arrives first (it is what runs then). A wake-up without work (a notification left over from
/// work already taken) keeps the deadline.
async fn requeue(slot: &Slot, work: Work, delay: Duration) {
    let deadline = Instant::now() + delay;
    loop {
        if slot
            .pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
        {
            return;
        }
        tokio::select! {
            _ = slot.notify.notified() => {}
            _ = tokio::time::sleep_until(deadline) => {
                slot.pending
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .get_or_insert(work);
                return;
            }
        }
    }
}

impl Work {
    /// The pod's `namespace/name`, for logs.
    fn pod_name(&self) -> String {
        let (Work::Sync(pod) | Work::Kill(pod, _)) = self;
        format!(
            "{}/{}",
            pod.metadata.namespace.as_deref().unwrap_or("default"),
            pod.metadata.name.as_deref().unwrap_or_default()
        )
    }
}

/// The text a panic was raised with, when it was text.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(not text)")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::time::Duration;

    fn pod(name: &str) -> Arc<Pod> {
        let mut p = Pod::default();
        p.metadata.name = Some(name.into());
        Arc::new(p)
    }

    #[tokio::test(start_paused = true)]
    async fn newest_pending_work_wins_and_kills_end_the_worker() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        let workers = PodWorkers::new(move |uid: String, work: Work| {
            let s = s.clone();
            async move {
                let name = match &work {
                    Work::Sync(p) => format!("sync {}", p.metadata.name.clone().unwrap()),
                    Work::Kill(p, g) => format!("kill {} {g}", p.metadata.name.clone().unwrap()),
                };
                tokio::time::sleep(Duration::from_millis(50)).await;
                s.lock().unwrap().push(format!("{uid}: {name}"));
                None
            }
        });
        workers.update("a", Work::Sync(pod("1")));
        tokio::time::sleep(Duration::from_millis(10)).await;
        // While "1" runs, three more arrive: only the last is run.
        workers.update("a", Work::Sync(pod("2")));
        workers.update("a", Work::Sync(pod("3")));
        workers.update("a", Work::Kill(pod("4"), 5));
        workers.update("a", Work::Sync(pod("5")));
        workers.update("b", Work::Sync(pod("x")));
        tokio::time::sleep(Duration::from_millis(300)).await;
        let seen = seen.lock().unwrap().clone();
        assert!(seen.contains(&"a: sync 1".to_string()), "{seen:?}");
        assert!(seen.contains(&"a: kill 4 5".to_string()), "{seen:?}");
        assert!(seen.contains(&"b: sync x".to_string()), "{seen:?}");
        assert!(
            !seen
                .iter()
                .any(|s| s.contains("sync 2") || s.contains("sync 3") || s.contains("sync 5")),
            "{seen:?}"
        );
        assert!(!workers.has("a"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_panicking_sync_is_retried_after_a_back_off_and_other_pods_go_on() {
        let runs = Arc::new(Mutex::new(Vec::new()));
        let r = runs.clone();
        let workers = PodWorkers::new(move |uid: String, _work: Work| {
            let r = r.clone();
            async move {
                let first = !r.lock().unwrap().contains(&uid);
                r.lock().unwrap().push(uid.clone());
                if uid == "a" && first {
                    panic!("sync of a broke");
                }
                None
            }
        });
        workers.update("a", Work::Sync(pod("1")));
        workers.update("b", Work::Sync(pod("x")));
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(runs.lock().unwrap().iter().filter(|u| *u == "a").count(), 1);
        assert!(runs.lock().unwrap().contains(&"b".to_string()));
        assert!(workers.has("a"), "the worker outlives the panic");
        tokio::time::sleep(PANIC_BACKOFF).await;
        assert_eq!(
            runs.lock().unwrap().iter().filter(|u| *u == "a").count(),
            2,
            "retried once after the back-off"
        );
        // Kills still end the worker afterwards.
        workers.update("a", Work::Kill(pod("1"), 0));
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!workers.has("a"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_sync_runs_again_after_its_delay_unless_newer_work_comes_first() {
        let runs = Arc::new(Mutex::new(Vec::new()));
        let r = runs.clone();
        // "bad" syncs fail and ask to be retried in 10 s; the rest succeed.
        let workers = PodWorkers::new(move |_uid: String, work: Work| {
            let r = r.clone();
            async move {
                let (Work::Sync(p) | Work::Kill(p, _)) = &work;
                let name = p.metadata.name.clone().unwrap();
                r.lock().unwrap().push(name.clone());
                (name == "bad" && matches!(work, Work::Sync(_))).then_some(Duration::from_secs(10))
            }
        });
        let count = |name: &str| runs.lock().unwrap().iter().filter(|n| *n == name).count();
        workers.update("a", Work::Sync(pod("bad")));
        tokio::time::sleep(Duration::from_secs(9)).await;
        assert_eq!(count("bad"), 1);
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(count("bad"), 2, "retried after 10 s");
        // Newer work preempts the pending retry and, succeeding, ends the retries.
        tokio::time::sleep(Duration::from_secs(3)).await;
        workers.update("a", Work::Sync(pod("good")));
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(count("good"), 1);
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!((count("bad"), count("good")), (2, 1));
        // A kill during a retry's wait ends the worker without the retry.
        workers.update("a", Work::Sync(pod("bad")));
        tokio::time::sleep(Duration::from_secs(1)).await;
        workers.update("a", Work::Kill(pod("bad"), 0));
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert_eq!(count("bad"), 4, "the failed sync and the kill, no retry");
        assert!(!workers.has("a"));
    }
}
