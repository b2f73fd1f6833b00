//! User namespaces for pods (`hostUsers: false`), Go's `pkg/kubelet/userns`: each such pod
//! gets its own range of `idsPerPod` (65536) host ids from the kubelet's range (the `kubelet`
//! entry of /etc/subuid and /etc/subgid, else everything above 65535), recorded in
//! `<root-dir>/pods/<uid>/userns` (Go's JSON) so a restart reads the same ranges back, and
//! released when the pod's directory goes. The runtime gets it as CRI `UserNamespace` mode
//! POD for the sandbox and every container, and as the mappings of every mount (it idmaps
//! them: files the kubelet made as host root read as the pod's root; fsGroup is unchanged).

mod allocator;
mod mappings;

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use ferrolet_proto::cri;

use self::allocator::Allocator;
use self::mappings::UserNamespace;
use crate::types::Pod;

/// Go's feature gate (beta, on by default since 1.33).
pub const GATE: &str = "UserNamespacesSupport";

/// Go's default `userNamespaces.idsPerPod`, and the unit every range is a multiple of.
const UNIT: u32 = 65536;

/// What the user namespace manager reports.
#[derive(Debug, thiserror::Error)]
pub enum UsernsError {
    /// Every range is taken.
    #[error("could not find an empty slot to allocate a user namespace")]
    Exhausted,
    /// A pod's file does not hold what we write.
    #[error("user namespace of pod {uid}: {why}")]
    BadRecord {
        /// The pod.
        uid: String,
        /// Go's words.
        why: String,
    },
    /// The kubelet's range or `idsPerPod` is unusable (Go's start-up checks).
    #[error("{0}")]
    Config(String),
    /// The pod asks for what this node cannot give.
    #[error("{0}")]
    Refused(String),
    /// A file operation failed.
    #[error("{what} {path:?}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// On what.
        path: PathBuf,
        /// The failure.
        #[source]
        source: std::io::Error,
    },
}

impl UsernsError {
    fn io(what: &'static str, path: &Path, source: std::io::Error) -> Self {
        Self::Io {
            what,
            path: path.to_path_buf(),
            source,
        }
    }
}

/// The manager: the allocations, and what the runtime said of its handlers.
pub struct UsernsManager {
    enabled: bool,
    pods_dir: PathBuf,
    alloc: Mutex<Allocator>,
    /// Runtime handler → supports user namespaces, from the last CRI Status.
    handlers: Mutex<Option<BTreeMap<String, bool>>>,
}

impl UsernsManager {
    /// Go's `MakeUserNsManager`: the range checked against `idsPerPod` and `maxPods`, then
    /// every pod directory's file read back. Blocking.
    pub fn new(
        root_dir: &Path,
        enabled: bool,
        ids_per_pod: Option<i64>,
        max_pods: u32,
    ) -> Result<Self, UsernsError> {
        let range = if enabled {
            mappings::kubelet_range(Path::new("/etc/subuid"), Path::new("/etc/subgid"))?
        } else {
            (UNIT, u32::MAX - UNIT + 1)
        };
        Self::with_range(root_dir, enabled, ids_per_pod, max_pods, range)
    }

    fn with_range(
        root_dir: &Path,
        enabled: bool,
        ids_per_pod: Option<i64>,
        max_pods: u32,
        (first, count): (u32, u32),
    ) -> Result<Self, UsernsError> {
        let bad = |s: String| Err(UsernsError::Config(s));
        let len = match ids_per_pod {
            None => UNIT,
            Some(n)
                if let Ok(n) = u32::try_from(n)
                    && n >= UNIT
                    && n.is_multiple_of(UNIT) =>
            {
                n
            }
            Some(n) => {
                return bad(format!(
                    "invalid configuration: userNamespaces.idsPerPod: {n} must be a positive multiple of {UNIT}"
                ));
            }
        };
        if ids_per_pod.is_some() && !enabled {
            return bad(format!(
                "invalid configuration: userNamespaces.idsPerPod requires feature gate {GATE}"
            ));
        }
        if !first.is_multiple_of(len) {
            return bad(format!(
                "kubelet user assigned ID {first} is not a multiple of {len}"
            ));
        }
        if first < len {
            return bad(format!(
                "kubelet user assigned ID {first} must be greater or equal to {len}"
            ));
        }
        if !count.is_multiple_of(len) {
            return bad(format!(
                "kubelet user assigned IDs length {count} is not a multiple of {len}"
            ));
        }
        if enabled && count / len < max_pods {
            return bad(format!(
                "kubelet user assigned IDs are not enough to support {max_pods} pods"
            ));
        }
        let m = Self {
            enabled,
            pods_dir: root_dir.join("pods"),
            alloc: Mutex::new(Allocator::new(first, count, len)),
            handlers: Mutex::new(None),
        };
        if enabled {
            m.recover()?;
        }
        Ok(m)
    }

    /// Reads every pod directory's file back (Go refuses to start on a bad one).
    fn recover(&self) -> Result<(), UsernsError> {
        let rd = match std::fs::read_dir(&self.pods_dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(UsernsError::io("reading", &self.pods_dir, e)),
        };
        let mut alloc = self.lock();
        for entry in rd.flatten() {
            let uid = entry.file_name().to_string_lossy().into_owned();
            if let Some(content) = mappings::read(&entry.path())? {
                let (from, length) = UserNamespace::parse(&uid, &content)?;
                alloc.record(&uid, from, length)?;
                tracing::info!(
                    uid,
                    first_id = from,
                    length,
                    "user namespace range recovered"
                );
            }
        }
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Allocator> {
        self.alloc.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the gate is on.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Remembers what the runtime's Status said of its handlers' user namespace support.
    pub fn observe_status(&self, status: &cri::StatusResponse) {
        let handlers = status
            .runtime_handlers
            .iter()
            .map(|h| {
                let userns = h.features.as_ref().is_some_and(|f| f.user_namespaces);
                (h.name.clone(), userns)
            })
            .collect();
        *self.handlers.lock().unwrap_or_else(|p| p.into_inner()) = Some(handlers);
    }

    /// Whether runtime handler statuses have been seen.
    pub fn knows_handlers(&self) -> bool {
        self.handlers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
    }

    /// Go's `HandlerSupportsUserNamespaces`.
    fn handler_supports(&self, handler: &str) -> Result<bool, String> {
        let handlers = self.handlers.lock().unwrap_or_else(|p| p.into_inner());
        let Some(handlers) = handlers.as_ref() else {
            return Err("runtime handlers are not set".into());
        };
        handlers
            .get(handler)
            .copied()
            .ok_or_else(|| format!("the handler {handler:?} is not known"))
    }

    /// Go's `GetOrCreateUserNamespaceMappings`: NODE for a pod that keeps the node's user
    /// namespace (nothing with the gate off), POD with the pod's range for `hostUsers:
    /// false` (allocated and written on first use). Blocking (the pod's file).
    pub fn mappings(
        &self,
        pod: &Pod,
        runtime_handler: &str,
    ) -> Result<Option<cri::UserNamespace>, UsernsError> {
        let host_users = pod.spec.as_ref().and_then(|s| s.host_users);
        let node = || cri::UserNamespace {
            mode: cri::NamespaceMode::Node as i32,
            uids: Vec::new(),
            gids: Vec::new(),
        };
        match (host_users, self.enabled) {
            (None, true) | (Some(true), true) => return Ok(Some(node())),
            (None, false) => return Ok(None),
            (Some(_), false) => {
                return Err(UsernsError::Refused(format!(
                    "the feature gate {GATE:?} is disabled: can't set spec.HostUsers"
                )));
            }
            (Some(false), true) => {}
        }
        let supported = self.handler_supports(runtime_handler);
        if supported != Ok(true) {
            let mut msg = if runtime_handler.is_empty() {
                "can't set `spec.hostUsers: false`, runtime does not support user namespaces"
                    .to_string()
            } else {
                format!(
                    "can't set `spec.hostUsers: false`, RuntimeClass handler {runtime_handler:?} does not support user namespaces"
                )
            };
            if let Err(e) = supported {
                msg = format!("{msg}: {e}");
            }
            return Err(UsernsError::Refused(msg));
        }
        let uid = crate::types::uid_of(pod);
        let dir = self.pods_dir.join(&uid);
        let mut alloc = self.lock();
        let (first, length) = match mappings::read(&dir)? {
            Some(content) => {
                let (from, length) = UserNamespace::parse(&uid, &content)?;
                alloc.record(&uid, from, length)?;
                (from, length)
            }
            None => {
                let first = alloc.allocate(&uid)?;
                let length = alloc.len();
                if let Err(e) = mappings::write(&dir, &UserNamespace::single(first, length)) {
                    alloc.release(&uid);
                    return Err(e);
                }
                tracing::info!(
                    uid,
                    first_id = first,
                    length,
                    "user namespace range allocated"
                );
                (first, length)
            }
        };
        let m = cri::IdMapping {
            host_id: first,
            container_id: 0,
            length,
        };
        Ok(Some(cri::UserNamespace {
            mode: cri::NamespaceMode::Pod as i32,
            uids: vec![m],
            gids: vec![m],
        }))
    }

    /// Frees pod `uid`'s range (its directory has gone, or is going).
    pub fn release(&self, uid: &str) {
        if !self.enabled {
            return;
        }
        if self.lock().release(uid) {
            let _ = std::fs::remove_file(self.pods_dir.join(uid).join(mappings::MAPPINGS_FILE));
            tracing::info!(uid, "user namespace range released");
        }
    }

    /// Go's `CleanupOrphanedPodUsernsAllocations`: frees what belongs to no known pod, on
    /// disk or in memory.
    pub fn cleanup_orphans(&self, known: impl Fn(&str) -> bool, on_disk: &[String]) {
        if !self.enabled {
            return;
        }
        let found: HashSet<&str> = on_disk.iter().map(String::as_str).collect();
        for uid in on_disk {
            if !known(uid) {
                self.release(uid);
            }
        }
        let held = self.lock().pods();
        for uid in held {
            if !found.contains(uid.as_str()) {
                self.release(&uid);
            }
        }
    }
}

/// Sets the pod's user namespace on a container's config: its namespace options, and the
/// mappings of every mount (the runtime idmaps them), as Go's kubelet sends them.
pub fn apply_to_container(config: &mut cri::ContainerConfig, userns: Option<&cri::UserNamespace>) {
    let Some(userns) = userns else {
        return;
    };
    if let Some(ns) = config
        .linux
        .get_or_insert_with(Default::default)
        .security_context
        .get_or_insert_with(Default::default)
        .namespace_options
        .as_mut()
    {
        ns.userns_options = Some(userns.clone());
    }
    if userns.mode == cri::NamespaceMode::Pod as i32 {
        for m in &mut config.mounts {
            m.uid_mappings = userns.uids.clone();
            m.gid_mappings = userns.gids.clone();
        }
    }
}

/// The user namespace of a sandbox config, as set by [`apply_to_sandbox`].
pub fn of_sandbox(config: &cri::PodSandboxConfig) -> Option<&cri::UserNamespace> {
    config
        .linux
        .as_ref()?
        .security_context
        .as_ref()?
        .namespace_options
        .as_ref()?
        .userns_options
        .as_ref()
}

/// Sets the pod's user namespace on its sandbox config.
pub fn apply_to_sandbox(config: &mut cri::PodSandboxConfig, userns: Option<cri::UserNamespace>) {
    if let Some(ns) = config
        .linux
        .get_or_insert_with(Default::default)
        .security_context
        .get_or_insert_with(Default::default)
        .namespace_options
        .as_mut()
    {
        ns.userns_options = userns;
    }
}

#[cfg(test)]
mod tests;
