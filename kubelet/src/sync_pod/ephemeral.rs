//! Starting an ephemeral container (`kubectl debug`): as any container (image pull with the
//! pod's pull secrets, env, volume mounts, log file `<name>/0.log`), in the PID namespace of
//! its target when it names one. Go's `startContainer` with an `ephemeralContainerStartSpec`:
//! a target without an instance fails the start with `CreateContainerConfigError` (`unable
//! to find target container …`), and the sync with it; one that is not running is refused by
//! the runtime (`CreateContainerError`). Either way the next sync tries again, since the
//! container never ran.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PodSpec;

use super::{SandboxTarget, fail};
use crate::events::{EventType, reason};
use crate::kubelet::Kubelet;
use crate::pod_actions::PidTarget;
use crate::podspec;
use crate::status::Waiting;
use crate::types::Pod;

impl Kubelet {
    /// Starts `ephemeralContainers[index]`; failures become its waiting reason.
    pub(super) async fn start_ephemeral(
        &self,
        pod: &Pod,
        spec: &PodSpec,
        index: usize,
        pid: Option<&PidTarget>,
        target: &SandboxTarget<'_>,
        waiting: &mut BTreeMap<String, Waiting>,
    ) {
        let Some(ec) = spec.ephemeral_containers.iter().flatten().nth(index) else {
            tracing::warn!(
                index,
                "a step for an ephemeral container the spec does not have"
            );
            return;
        };
        let c = podspec::ephemeral::as_container(ec);
        let target_id = match pid {
            None => None,
            Some(PidTarget { id: Some(id), .. }) => Some(id.as_str()),
            Some(PidTarget { name, id: None }) => {
                let message = format!("unable to find target container {name}");
                let event = format!("Error: {message}");
                self.container_event(pod, &c.name, EventType::Warning, reason::FAILED, &event);
                waiting.insert(c.name, fail("CreateContainerConfigError", message));
                return;
            }
        };
        // Never restarted: its one instance is attempt 0.
        self.start_container(pod, &c, target, 0, target_id, waiting)
            .await;
    }
}
