//! PodSandboxStatus and ListPodSandbox: the CRI views of a sandbox.

use std::collections::HashMap;

use ferrolet_proto::cri;

use super::{Result, RuntimeInner};
use crate::sandbox::{Sandbox, SandboxState};
use crate::store::labels_match;

impl Sandbox {
    /// CRI's state.
    pub fn cri_state(&self) -> cri::PodSandboxState {
        match self.status().state {
            SandboxState::Ready => cri::PodSandboxState::SandboxReady,
            SandboxState::NotReady => cri::PodSandboxState::SandboxNotready,
        }
    }

    /// The sandbox as ListPodSandbox shows it.
    pub fn cri_sandbox(&self) -> cri::PodSandbox {
        cri::PodSandbox {
            id: self.meta.id.clone(),
            metadata: Some(self.metadata()),
            state: self.cri_state() as i32,
            created_at: self.meta.created_at,
            labels: self.meta.config.labels.clone(),
            annotations: self.meta.config.annotations.clone(),
            runtime_handler: self.meta.runtime_handler.clone(),
        }
    }

    /// The sandbox's CRI status.
    pub fn cri_status(&self) -> cri::PodSandboxStatus {
        let status = self.status();
        let network = (!status.ips.ip.is_empty()).then(|| cri::PodSandboxNetworkStatus {
            ip: status.ips.ip.clone(),
            additional_ips: status
                .ips
                .additional
                .iter()
                .map(|ip| cri::PodIp { ip: ip.clone() })
                .collect(),
        });
        cri::PodSandboxStatus {
            id: self.meta.id.clone(),
            metadata: Some(self.metadata()),
            state: self.cri_state() as i32,
            created_at: self.meta.created_at,
            network: Some(network.unwrap_or_default()),
            linux: Some(cri::LinuxPodSandboxStatus {
                namespaces: Some(cri::Namespace {
                    options: Some(self.namespace_options()),
                }),
            }),
            labels: self.meta.config.labels.clone(),
            annotations: self.meta.config.annotations.clone(),
            runtime_handler: self.meta.runtime_handler.clone(),
        }
    }

    fn verbose_info(&self) -> HashMap<String, String> {
        let s = self.status();
        let info = serde_json::json!({
            "pid": s.pid,
            "processStatus": match s.state { SandboxState::Ready => "running", SandboxState::NotReady => "stopped" },
            "netNamespaceClosed": !s.network_up,
            "netns": self.meta.netns,
            // Without a pause process there is no image, snapshot or pid, but pinned
            // namespaces.
            "pauseProcess": self.meta.pinned.is_none(),
            "pinnedNamespaces": self.meta.pinned,
            "image": if self.meta.pinned.is_none() { self.meta.image.as_str() } else { "" },
            "snapshotKey": self.meta.pinned.is_none().then_some(&self.meta.id),
            "runtimeHandler": self.meta.runtime_handler,
            "runtimeType": self.meta.runtime_type,
            "cgroupsPath": self.meta.cgroups_path,
            "files": self.meta.files,
            "ips": s.ips,
            "startTimings": s.start_timings,
        });
        HashMap::from([("info".to_string(), info.to_string())])
    }
}

impl RuntimeInner {
    /// PodSandboxStatus (with the statuses of its containers, as CRI 1.32 allows).
    pub async fn pod_sandbox_status(
        &self,
        req: cri::PodSandboxStatusRequest,
    ) -> Result<cri::PodSandboxStatusResponse> {
        let sb = self.sandbox(&req.pod_sandbox_id)?;
        Ok(cri::PodSandboxStatusResponse {
            status: Some(sb.cri_status()),
            info: if req.verbose {
                sb.verbose_info()
            } else {
                HashMap::new()
            },
            containers_statuses: Vec::new(),
            timestamp: crate::store::now_ns(),
        })
    }

    /// ListPodSandbox.
    pub async fn list_pod_sandbox(
        &self,
        req: cri::ListPodSandboxRequest,
    ) -> Result<cri::ListPodSandboxResponse> {
        let filter = req.filter.unwrap_or_default();
        let mut items: Vec<_> = self
            .sandboxes
            .list()
            .into_iter()
            .filter(|s| filter.id.is_empty() || s.meta.id.starts_with(&filter.id))
            .filter(|s| labels_match(&filter.label_selector, &s.meta.config.labels))
            .map(|s| s.cri_sandbox())
            .filter(|s| filter.state.as_ref().is_none_or(|f| f.state == s.state))
            .collect();
        items.sort_by_key(|s| std::cmp::Reverse(s.created_at));
        Ok(cri::ListPodSandboxResponse { items })
    }
}
