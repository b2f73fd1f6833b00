//! The device manager at the points Go's kubelet calls it: admission gives a pod's containers
//! their devices (after the CPU manager, as Go's topology manager asks its providers in that
//! order), the predicates see allocatable raised to the devices in use, and a container is
//! created with what the plugin answered (env, mounts, device nodes, annotations, CDI
//! devices) after `PreStartContainer`.

use std::collections::BTreeSet;
use std::sync::PoisonError;
use std::sync::atomic::Ordering;

use ferrolet_proto::cri;
use k8s_openapi::api::core::v1::Container;

use super::Kubelet;
use crate::admission::{Rejection, unexpected_admission_error};
use crate::cm::devicemanager::{AdmitContext, RunContainerOptions};
use crate::types::{Pod, uid_of};

/// The annotation prefix CDI devices are named under for runtimes that read annotations
/// (Go's `cdi.k8s.io/devicemanager_<pod uid>-<container>`).
const CDI_ANNOTATION_PREFIX: &str = "cdi.k8s.io/devicemanager_";
/// The longest name part of an annotation key (a qualified name's).
const MAX_ANNOTATION_NAME: usize = 63;

impl Kubelet {
    /// The pods whose devices stay theirs (Go's `GetActivePods` over its pod manager): known
    /// to a source, not rejected, not finished unless still being killed.
    fn device_active_pods(&self) -> BTreeSet<String> {
        self.pods
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter(|(_, s)| !s.rejected && !s.terminated && !s.removed)
            .filter(|(_, s)| {
                s.terminating
                    || !s
                        .status
                        .phase
                        .as_deref()
                        .is_some_and(crate::status::phase::is_terminal)
            })
            .map(|(uid, _)| uid.clone())
            .collect()
    }

    /// Admission's device allocation; a failure rejects the pod with Go's
    /// `UnexpectedAdmissionError`.
    pub(super) async fn allocate_devices(&self, pod: &Pod) -> Result<(), Rejection> {
        let active = self
            .sources_ready
            .load(Ordering::Relaxed)
            .then(|| self.device_active_pods());
        let ctx = AdmitContext {
            active: active.as_ref(),
        };
        self.devices
            .allocate(pod, &ctx)
            .await
            .map_err(|e| unexpected_admission_error(&e))
    }

    /// What container `c` of `pod` gets from its device plugins, `PreStartContainer` done.
    pub(crate) async fn device_options(
        &self,
        pod: &Pod,
        c: &Container,
    ) -> Result<RunContainerOptions, String> {
        let active = self.device_active_pods().contains(&uid_of(pod));
        self.devices
            .run_container_options(pod, c, active)
            .await
            .map_err(|e| e.to_string())
    }
}

/// Lays a container's device options onto its CRI config as Go's runtime manager does:
/// device env first (the container's own win, being later), device mounts before the
/// volumes', device nodes, the plugin's annotations under the kubelet's own, CDI devices in
/// the CRI field and in Go's annotation.
pub(crate) fn apply(
    config: &mut cri::ContainerConfig,
    opts: RunContainerOptions,
    pod_uid: &str,
    container: &str,
) {
    let envs = opts
        .envs
        .into_iter()
        .map(|(key, value)| cri::KeyValue { key, value });
    config.envs = envs.chain(std::mem::take(&mut config.envs)).collect();
    let mounts = opts.mounts.into_iter().map(|m| cri::Mount {
        container_path: m.container_path,
        host_path: m.host_path,
        readonly: m.read_only,
        ..Default::default()
    });
    config.mounts = mounts.chain(std::mem::take(&mut config.mounts)).collect();
    let devices = opts.devices.into_iter().map(|d| cri::Device {
        container_path: d.container_path,
        host_path: d.host_path,
        permissions: d.permissions,
    });
    config.devices = devices.chain(std::mem::take(&mut config.devices)).collect();
    for (k, v) in opts.annotations {
        config.annotations.entry(k).or_insert(v);
    }
    if !opts.cdi_devices.is_empty() {
        let name = format!("devicemanager_{pod_uid}-{container}");
        if name.len() <= MAX_ANNOTATION_NAME {
            let mut names = opts.cdi_devices.clone();
            names.sort();
            config.annotations.insert(
                format!("{CDI_ANNOTATION_PREFIX}{pod_uid}-{container}"),
                names.join(","),
            );
        }
        config.cdi_devices = opts
            .cdi_devices
            .into_iter()
            .map(|name| cri::CdiDevice { name })
            .collect();
    }
}

#[cfg(test)]
mod tests {
    use ferrolet_proto::deviceplugin::{DeviceSpec, Mount};

    use super::*;

    #[test]
    fn device_options_go_first_and_yield_to_the_kubelets_own() {
        let mut config = cri::ContainerConfig {
            envs: vec![cri::KeyValue {
                key: "A".into(),
                value: "pod".into(),
            }],
            annotations: [("io.kubernetes.x".to_string(), "kubelet".to_string())].into(),
            ..Default::default()
        };
        let opts = RunContainerOptions {
            envs: vec![("A".into(), "device".into())],
            mounts: vec![Mount {
                container_path: "/m".into(),
                host_path: "/h".into(),
                read_only: true,
            }],
            devices: vec![DeviceSpec {
                container_path: "/dev/x".into(),
                host_path: "/dev/null".into(),
                permissions: "rw".into(),
            }],
            annotations: vec![
                ("io.kubernetes.x".into(), "plugin".into()),
                ("vendor/a".into(), "1".into()),
            ],
            cdi_devices: vec!["v.com/c=b".into(), "v.com/c=a".into()],
        };
        apply(&mut config, opts, "0123", "main");
        assert_eq!(config.envs[0].value, "device");
        assert_eq!(config.envs[1].value, "pod");
        assert!(config.mounts[0].readonly);
        assert_eq!(config.devices[0].container_path, "/dev/x");
        assert_eq!(config.annotations["io.kubernetes.x"], "kubelet");
        assert_eq!(config.annotations["vendor/a"], "1");
        assert_eq!(
            config.annotations["cdi.k8s.io/devicemanager_0123-main"],
            "v.com/c=a,v.com/c=b"
        );
        assert_eq!(config.cdi_devices.len(), 2);
    }
}
