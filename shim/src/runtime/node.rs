//! Status, UpdateRuntimeConfig and RuntimeConfig: the runtime as a whole.

use ferrolet_proto::cri;

use super::{Result, RuntimeInner};

/// Condition type: the runtime can run containers.
const RUNTIME_READY: &str = "RuntimeReady";
/// Condition type: pods can get a network.
const NETWORK_READY: &str = "NetworkReady";

/// RuntimeConfig: the cgroup driver runc is told to use, which the kubelet's must match.
pub fn runtime_config(systemd_cgroup: bool) -> cri::RuntimeConfigResponse {
    let driver = if systemd_cgroup {
        cri::CgroupDriver::Systemd
    } else {
        cri::CgroupDriver::Cgroupfs
    };
    cri::RuntimeConfigResponse {
        linux: Some(cri::LinuxRuntimeConfiguration {
            cgroup_driver: driver as i32,
        }),
    }
}

impl RuntimeInner {
    /// Status: the runtime is ready when containerd answers; the network when a valid CNI
    /// configuration is present.
    pub async fn status(&self, req: cri::StatusRequest) -> Result<cri::StatusResponse> {
        let runtime = match self.cd.version().version(()).await {
            Ok(_) => condition(RUNTIME_READY, Ok(())),
            Err(e) => condition(
                RUNTIME_READY,
                Err((
                    "ContainerdUnreachable",
                    format!("containerd does not answer: {}", e.message()),
                )),
            ),
        };
        let network = match self.network.config().await {
            Ok(_) => condition(NETWORK_READY, Ok(())),
            Err(e) => condition(
                NETWORK_READY,
                Err((
                    "NetworkPluginNotReady",
                    format!("Network plugin returns error: cni plugin not initialized: {e}"),
                )),
            ),
        };
        let info = if req.verbose {
            let config = serde_json::json!({
                "root": self.opts.root,
                "state": self.opts.state,
                "snapshotter": self.opts.snapshotter,
                "sandboxImage": self.opts.sandbox_image,
                "containerdNamespace": self.cd.namespace(),
                "sandboxes": self.sandboxes.len(),
                "containers": self.containers.len(),
            });
            std::collections::HashMap::from([("config".to_string(), config.to_string())])
        } else {
            Default::default()
        };
        Ok(cri::StatusResponse {
            status: Some(cri::RuntimeStatus {
                conditions: vec![runtime, network],
            }),
            info,
            // The default ("") and each configured handler, as containerd lists its runtimes.
            runtime_handlers: std::iter::once("")
                .chain(self.opts.runtime_handlers.keys().map(String::as_str))
                .map(|name| cri::RuntimeHandler {
                    name: name.to_string(),
                    features: Some(cri::RuntimeHandlerFeatures {
                        recursive_read_only_mounts: false,
                        user_namespaces: self.userns_support.supported(),
                    }),
                })
                .collect(),
            features: Some(cri::RuntimeFeatures {
                supplemental_groups_policy: true,
            }),
        })
    }

    /// UpdateRuntimeConfig: the node's pod CIDR reaches IPAM as `ipRanges`.
    pub async fn update_runtime_config(
        &self,
        req: cri::UpdateRuntimeConfigRequest,
    ) -> Result<cri::UpdateRuntimeConfigResponse> {
        if let Some(cidr) = req
            .runtime_config
            .and_then(|c| c.network_config)
            .map(|n| n.pod_cidr)
        {
            tracing::info!(pod_cidr = %cidr, "pod CIDR updated");
            self.network.set_pod_cidr(&cidr);
        }
        Ok(cri::UpdateRuntimeConfigResponse {})
    }
}

fn condition(kind: &str, state: std::result::Result<(), (&str, String)>) -> cri::RuntimeCondition {
    match state {
        Ok(()) => cri::RuntimeCondition {
            r#type: kind.to_string(),
            status: true,
            reason: String::new(),
            message: String::new(),
        },
        Err((reason, message)) => cri::RuntimeCondition {
            r#type: kind.to_string(),
            status: false,
            reason: reason.to_string(),
            message,
        },
    }
}
