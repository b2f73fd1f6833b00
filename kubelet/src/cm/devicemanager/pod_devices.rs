//! Which devices each container of each pod holds, with the plugin's `Allocate` answer for
//! them (Go's `podDevices`): what container creation hands to the runtime, what the
//! checkpoint stores and what the pod resources API reports.

use std::collections::{BTreeMap, BTreeSet};

use ferrolet_proto::deviceplugin::{ContainerAllocateResponse, Mount};
use ferrolet_proto::prost::Message;

use super::checkpoint::PodDevicesEntry;

/// The NUMA key of devices without topology (Go's `nodeWithoutTopology`).
pub const NO_TOPOLOGY: i64 = -1;

/// One container's devices of one resource.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Allocation {
    /// Device ids by NUMA node ([`NO_TOPOLOGY`] for devices without one).
    pub ids: BTreeMap<i64, Vec<String>>,
    /// What the plugin answered for them.
    pub response: ContainerAllocateResponse,
}

impl Allocation {
    /// Every id, whatever its node.
    pub fn all_ids(&self) -> BTreeSet<String> {
        self.ids.values().flatten().cloned().collect()
    }
}

/// What a container is created with for its devices (Go's `DeviceRunContainerOptions`),
/// every list deduplicated as Go does: the first answer for an env name, a container path or
/// an annotation wins.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunContainerOptions {
    /// Environment variables.
    pub envs: Vec<(String, String)>,
    /// Host paths to mount.
    pub mounts: Vec<Mount>,
    /// Device nodes (host path, container path, permissions).
    pub devices: Vec<ferrolet_proto::deviceplugin::DeviceSpec>,
    /// Container annotations.
    pub annotations: Vec<(String, String)>,
    /// CDI device names.
    pub cdi_devices: Vec<String>,
}

/// Pod UID → container → resource → allocation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodDevices {
    pods: BTreeMap<String, BTreeMap<String, BTreeMap<String, Allocation>>>,
}

impl PodDevices {
    /// Records `container`'s allocation of `resource`.
    pub fn insert(&mut self, pod: &str, container: &str, resource: &str, a: Allocation) {
        self.pods
            .entry(pod.to_string())
            .or_default()
            .entry(container.to_string())
            .or_default()
            .insert(resource.to_string(), a);
    }

    /// Whether pod `uid` holds anything.
    pub fn has_pod(&self, uid: &str) -> bool {
        self.pods.contains_key(uid)
    }

    /// The pods holding devices.
    pub fn pods(&self) -> impl Iterator<Item = &str> {
        self.pods.keys().map(String::as_str)
    }

    /// Forgets the pods `keep` says no to; whether any went.
    pub fn retain_pods(&mut self, keep: impl Fn(&str) -> bool) -> bool {
        let before = self.pods.len();
        self.pods.retain(|uid, _| keep(uid));
        before != self.pods.len()
    }

    /// Forgets pod `uid`.
    pub fn remove_pod(&mut self, uid: &str) -> bool {
        self.pods.remove(uid).is_some()
    }

    /// The ids `container` of `pod` holds of `resource`; None when it holds none.
    pub fn container_devices(
        &self,
        pod: &str,
        container: &str,
        resource: &str,
    ) -> Option<BTreeSet<String>> {
        self.pods
            .get(pod)?
            .get(container)?
            .get(resource)
            .map(Allocation::all_ids)
    }

    /// `container`'s allocations by resource.
    pub fn container(&self, pod: &str, container: &str) -> Option<&BTreeMap<String, Allocation>> {
        self.pods.get(pod)?.get(container)
    }

    /// Every id in use, by resource.
    pub fn devices(&self) -> BTreeMap<String, BTreeSet<String>> {
        let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for containers in self.pods.values() {
            for resources in containers.values() {
                for (resource, a) in resources {
                    out.entry(resource.clone()).or_default().extend(a.all_ids());
                }
            }
        }
        out
    }

    /// What `container` of `pod` is created with (Go's `deviceRunContainerOptions`).
    pub fn run_options(&self, pod: &str, container: &str) -> RunContainerOptions {
        let mut opts = RunContainerOptions::default();
        let Some(resources) = self.container(pod, container) else {
            return opts;
        };
        let mut envs = BTreeSet::new();
        let mut paths = BTreeSet::new();
        let mut mounts = BTreeSet::new();
        let mut annotations = BTreeSet::new();
        let mut cdi = BTreeSet::new();
        for (resource, a) in resources {
            let r = &a.response;
            for (k, v) in &r.envs {
                if envs.insert(k.clone()) {
                    opts.envs.push((k.clone(), v.clone()));
                } else {
                    tracing::debug!(resource, env = %k, "skipping an env another resource set");
                }
            }
            for d in &r.devices {
                if paths.insert(d.container_path.clone()) {
                    opts.devices.push(d.clone());
                }
            }
            for m in &r.mounts {
                if mounts.insert(m.container_path.clone()) {
                    opts.mounts.push(m.clone());
                }
            }
            for (k, v) in &r.annotations {
                if annotations.insert(k.clone()) {
                    opts.annotations.push((k.clone(), v.clone()));
                }
            }
            for d in &r.cdi_devices {
                if cdi.insert(d.name.clone()) {
                    opts.cdi_devices.push(d.name.clone());
                }
            }
        }
        opts
    }

    /// The checkpoint's entries (Go's `toCheckpointData`).
    pub fn to_entries(&self) -> Vec<PodDevicesEntry> {
        let mut out = Vec::new();
        for (uid, containers) in &self.pods {
            for (container, resources) in containers {
                for (resource, a) in resources {
                    out.push(PodDevicesEntry {
                        pod_uid: uid.clone(),
                        container_name: container.clone(),
                        resource_name: resource.clone(),
                        device_ids: a.ids.clone(),
                        alloc_resp: a.response.encode_to_vec(),
                    });
                }
            }
        }
        out
    }

    /// From the checkpoint's entries (Go's `fromCheckpointData`); an answer that does not
    /// decode is kept empty, as Go keeps going with a nil one.
    pub fn from_entries(entries: Vec<PodDevicesEntry>) -> Self {
        let mut out = Self::default();
        for e in entries {
            let response = ContainerAllocateResponse::decode(e.alloc_resp.as_slice())
                .unwrap_or_else(|err| {
                    tracing::warn!(pod = %e.pod_uid, container = %e.container_name, resource = %e.resource_name, error = %err, "checkpointed Allocate answer does not decode");
                    ContainerAllocateResponse::default()
                });
            out.insert(
                &e.pod_uid,
                &e.container_name,
                &e.resource_name,
                Allocation {
                    ids: e.device_ids,
                    response,
                },
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use ferrolet_proto::deviceplugin::{CdiDevice, DeviceSpec};

    use super::*;

    fn alloc(ids: &[&str], env: (&str, &str), path: &str) -> Allocation {
        Allocation {
            ids: [(NO_TOPOLOGY, ids.iter().map(|s| s.to_string()).collect())].into(),
            response: ContainerAllocateResponse {
                envs: [(env.0.to_string(), env.1.to_string())].into(),
                devices: vec![DeviceSpec {
                    container_path: path.into(),
                    host_path: "/dev/null".into(),
                    permissions: "rw".into(),
                }],
                cdi_devices: vec![CdiDevice {
                    name: "example.com/dev=a".into(),
                }],
                ..Default::default()
            },
        }
    }

    #[test]
    fn run_options_merge_resources_first_answer_winning() {
        let mut p = PodDevices::default();
        p.insert("u", "c", "a.com/x", alloc(&["1"], ("E", "a"), "/dev/x"));
        p.insert("u", "c", "b.com/y", alloc(&["2"], ("E", "b"), "/dev/x"));
        let o = p.run_options("u", "c");
        assert_eq!(o.envs, [("E".to_string(), "a".to_string())]);
        assert_eq!(o.devices.len(), 1);
        assert_eq!(o.cdi_devices, ["example.com/dev=a"]);
        assert_eq!(p.run_options("u", "other"), RunContainerOptions::default());
    }

    #[test]
    fn checkpoint_entries_round_trip() {
        let mut p = PodDevices::default();
        p.insert(
            "u",
            "c",
            "a.com/x",
            alloc(&["1", "2"], ("E", "a"), "/dev/x"),
        );
        p.insert("v", "d", "a.com/x", alloc(&["3"], ("F", "b"), "/dev/y"));
        let back = PodDevices::from_entries(p.to_entries());
        assert_eq!(back, p);
        assert_eq!(
            p.devices()["a.com/x"],
            ["1", "2", "3"].iter().map(|s| s.to_string()).collect()
        );
        assert!(p.retain_pods(|u| u == "u"));
        assert!(!p.has_pod("v"));
    }
}
