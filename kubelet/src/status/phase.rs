//! The pod phase from its container statuses, as the Go kubelet's `getPhase` (1.32, without
//! the later per-container restart rules): Pending while init containers have not all
//! succeeded or a container waits for its first start; Running while anything runs or will be
//! restarted; Succeeded/Failed once everything stopped for good per `restartPolicy`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ContainerStatus;

use super::containers::is_sidecar;
use crate::types::Pod;

/// `Pending`.
pub const PENDING: &str = "Pending";
/// `Running`.
pub const RUNNING: &str = "Running";
/// `Succeeded`.
pub const SUCCEEDED: &str = "Succeeded";
/// `Failed`.
pub const FAILED: &str = "Failed";

/// Whether a phase is final.
pub fn is_terminal(phase: &str) -> bool {
    phase == SUCCEEDED || phase == FAILED
}

/// The phase. `statuses` holds init and app container statuses together; `initialized` says
/// whether an app container is running in the runtime (so restarting sidecars do not send an
/// initialized pod back to Pending).
pub fn phase(pod: &Pod, statuses: &[ContainerStatus], initialized: bool) -> &'static str {
    let Some(spec) = pod.spec.as_ref() else {
        return PENDING;
    };
    let by_name: BTreeMap<&str, &ContainerStatus> =
        statuses.iter().map(|s| (s.name.as_str(), s)).collect();
    let restart_policy = spec.restart_policy.as_deref().unwrap_or("Always");
    let init = spec.init_containers.as_deref().unwrap_or_default();

    let mut pending_init = 0;
    let mut pending_sidecars = 0;
    let mut failed_init = 0;
    for c in init.iter().filter(|c| !is_sidecar(c)) {
        let Some(st) = by_name.get(c.name.as_str()).and_then(|s| s.state.as_ref()) else {
            pending_init += 1;
            continue;
        };
        let last = by_name
            .get(c.name.as_str())
            .and_then(|s| s.last_state.as_ref())
            .and_then(|l| l.terminated.as_ref());
        if st.running.is_some() {
            pending_init += 1;
        } else if let Some(t) = &st.terminated {
            if t.exit_code != 0 {
                failed_init += 1;
            }
        } else if st.waiting.is_some() {
            match last {
                Some(t) if t.exit_code != 0 => failed_init += 1,
                Some(_) => {}
                None => pending_init += 1,
            }
        } else {
            pending_init += 1;
        }
    }

    let (mut unknown, mut running, mut waiting, mut stopped, mut succeeded) = (0, 0, 0, 0, 0);
    for c in init.iter().filter(|c| is_sidecar(c)) {
        let Some(s) = by_name.get(c.name.as_str()) else {
            unknown += 1;
            continue;
        };
        let Some(st) = s.state.as_ref() else {
            pending_sidecars += 1;
            unknown += 1;
            continue;
        };
        if st.running.is_some() {
            if s.started != Some(true) {
                pending_sidecars += 1;
            }
            running += 1;
        } else if st.terminated.is_some() {
            // A stopped sidecar does not count towards the phase.
        } else if st.waiting.is_some() {
            let restarting = s
                .last_state
                .as_ref()
                .is_some_and(|l| l.terminated.is_some());
            if !restarting {
                pending_sidecars += 1;
                waiting += 1;
            }
        } else {
            pending_sidecars += 1;
            unknown += 1;
        }
    }

    for c in &spec.containers {
        let Some(s) = by_name.get(c.name.as_str()) else {
            unknown += 1;
            continue;
        };
        let Some(st) = s.state.as_ref() else {
            unknown += 1;
            continue;
        };
        if st.running.is_some() {
            running += 1;
        } else if let Some(t) = &st.terminated {
            stopped += 1;
            if t.exit_code == 0 {
                succeeded += 1;
            }
        } else if st.waiting.is_some() {
            if s.last_state
                .as_ref()
                .is_some_and(|l| l.terminated.is_some())
            {
                stopped += 1;
            } else {
                waiting += 1;
            }
        } else {
            unknown += 1;
        }
    }

    if failed_init > 0 && restart_policy == "Never" {
        return FAILED;
    }
    if pending_init > 0 || (pending_sidecars > 0 && !initialized) || waiting > 0 {
        return PENDING;
    }
    if running > 0 && unknown == 0 {
        return RUNNING;
    }
    if running == 0 && stopped > 0 && unknown == 0 {
        // Static pods never get a terminal phase from podIsTerminal (Go's TODO), so only the
        // restart policy decides.
        if restart_policy == "Always" {
            return RUNNING;
        }
        if stopped == succeeded {
            return SUCCEEDED;
        }
        if restart_policy == "Never" {
            return FAILED;
        }
        return RUNNING;
    }
    PENDING
}
