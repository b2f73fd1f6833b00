//! The CPU manager's state (the shared pool and the exclusive assignments) and its file,
//! `cpu_manager_state` in the kubelet's root directory, restored and stored as Go's
//! `state.NewCheckpointState` does.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use super::checkpoint::{Checkpoint, CheckpointError, ContainerMap};
use super::cpuset::{CpuSet, CpuSetParseError};
use crate::cm::checkpoint_file::write_atomically;

/// The state file's name (Go's `cpuManagerStateFileName`).
pub const STATE_FILE_NAME: &str = "cpu_manager_state";

/// Pod UID → container name → its exclusive CPUs.
pub type Assignments = BTreeMap<String, BTreeMap<String, CpuSet>>;

/// The shared pool and the exclusive assignments (Go's `stateMemory`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CpuState {
    /// The shared pool (Go's default CPU set): every CPU not assigned exclusively.
    pub default_cpu_set: CpuSet,
    /// Exclusive assignments.
    pub assignments: Assignments,
}

impl CpuState {
    /// A container's exclusive CPUs.
    pub fn cpuset(&self, pod_uid: &str, container: &str) -> Option<&CpuSet> {
        self.assignments.get(pod_uid)?.get(container)
    }

    /// A container's exclusive CPUs, else the shared pool (Go's `GetCPUSetOrDefault`).
    pub fn cpuset_or_default(&self, pod_uid: &str, container: &str) -> CpuSet {
        self.cpuset(pod_uid, container)
            .unwrap_or(&self.default_cpu_set)
            .clone()
    }

    /// Records a container's exclusive CPUs.
    pub fn set_cpuset(&mut self, pod_uid: &str, container: &str, cpus: CpuSet) {
        self.assignments
            .entry(pod_uid.to_string())
            .or_default()
            .insert(container.to_string(), cpus);
    }

    /// Forgets a container's assignment, and its pod once it has none (Go's `Delete`).
    pub fn delete(&mut self, pod_uid: &str, container: &str) {
        if let Some(pod) = self.assignments.get_mut(pod_uid) {
            pod.remove(container);
            if pod.is_empty() {
                self.assignments.remove(pod_uid);
            }
        }
    }

    /// The state as the file holds it.
    pub fn to_checkpoint(&self, policy_name: &str) -> Checkpoint {
        let entries = self
            .assignments
            .iter()
            .map(|(pod, cs)| {
                let cs = cs.iter().map(|(c, s)| (c.clone(), s.to_string()));
                (pod.clone(), cs.collect())
            })
            .collect();
        Checkpoint {
            policy_name: policy_name.to_string(),
            default_cpu_set: self.default_cpu_set.to_string(),
            entries,
        }
    }
}

/// Why the state file could not be used (texts as Go's).
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// The directory could not be made.
    #[error("failed to initialize checkpoint manager: {0}")]
    Init(#[source] io::Error),
    /// The file exists and cannot be used: Go refuses to start until it is removed.
    #[error(
        "could not restore state from checkpoint: {reason}, please drain this node and delete the CPU manager checkpoint file {path:?} before restarting Kubelet"
    )]
    Restore {
        /// What is wrong with it.
        reason: Box<RestoreError>,
        /// The file.
        path: PathBuf,
    },
    /// Writing the file failed.
    #[error("writing {path:?}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
}

/// What is wrong with an existing state file.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    /// It could not be read.
    #[error("{0}")]
    Read(#[source] io::Error),
    /// Its content or checksum.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// It was written by another policy.
    #[error("configured policy {configured:?} differs from state checkpoint policy {file:?}")]
    PolicyDiffers {
        /// The policy we run.
        configured: String,
        /// The policy in the file.
        file: String,
    },
    /// The shared pool does not parse.
    #[error("could not parse default cpu set {text:?}: {source}")]
    DefaultCpuSet {
        /// As written.
        text: String,
        /// Why.
        source: CpuSetParseError,
    },
    /// An assignment does not parse.
    #[error("could not parse cpuset {text:?} for container {container:?} in pod {pod:?}: {source}")]
    ContainerCpuSet {
        /// As written.
        text: String,
        /// The container.
        container: String,
        /// The pod UID.
        pod: String,
        /// Why.
        source: CpuSetParseError,
    },
    /// The file was absent and the first one could not be written.
    #[error("{0}")]
    Store(#[source] io::Error),
}

/// The state file of one policy.
#[derive(Clone, Debug)]
pub struct StateFile {
    path: PathBuf,
    policy_name: String,
}

impl StateFile {
    /// Opens `dir/cpu_manager_state` for `policy_name` and restores its state, writing an
    /// empty state when there is no file (Go's `NewCheckpointState`). `containers` (the
    /// runtime's) are only needed to migrate a V1 file.
    pub fn restore(
        dir: &Path,
        policy_name: &str,
        containers: &ContainerMap,
    ) -> Result<(StateFile, CpuState), StateError> {
        std::fs::create_dir_all(dir).map_err(StateError::Init)?;
        let file = StateFile {
            path: dir.join(STATE_FILE_NAME),
            policy_name: policy_name.to_string(),
        };
        let state = file
            .read(containers)
            .map_err(|reason| StateError::Restore {
                reason: Box::new(reason),
                path: file.path.clone(),
            })?;
        Ok((file, state))
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn read(&self, containers: &ContainerMap) -> Result<CpuState, RestoreError> {
        let blob = match std::fs::read(&self.path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let empty = CpuState::default();
                write_atomically(&self.path, self.checkpoint_text(&empty).as_bytes())
                    .map_err(RestoreError::Store)?;
                return Ok(empty);
            }
            Err(e) => return Err(RestoreError::Read(e)),
        };
        let cp = Checkpoint::unmarshal(&blob, containers)?;
        if cp.policy_name != self.policy_name {
            return Err(RestoreError::PolicyDiffers {
                configured: self.policy_name.clone(),
                file: cp.policy_name,
            });
        }
        let default_cpu_set =
            CpuSet::parse(&cp.default_cpu_set).map_err(|source| RestoreError::DefaultCpuSet {
                text: cp.default_cpu_set.clone(),
                source,
            })?;
        let mut assignments = Assignments::new();
        for (pod, containers) in cp.entries {
            let mut parsed = BTreeMap::new();
            for (container, text) in containers {
                let cpus =
                    CpuSet::parse(&text).map_err(|source| RestoreError::ContainerCpuSet {
                        text: text.clone(),
                        container: container.clone(),
                        pod: pod.clone(),
                        source,
                    })?;
                parsed.insert(container, cpus);
            }
            // Go keeps a pod with no containers as it was read.
            assignments.insert(pod, parsed);
        }
        Ok(CpuState {
            default_cpu_set,
            assignments,
        })
    }

    /// Writes `state` (Go's `storeState`): whole or not at all.
    pub fn store(&self, state: &CpuState) -> Result<(), StateError> {
        write_atomically(&self.path, self.checkpoint_text(state).as_bytes()).map_err(|source| {
            StateError::Write {
                path: self.path.clone(),
                source,
            }
        })
    }

    fn checkpoint_text(&self, state: &CpuState) -> String {
        state.to_checkpoint(&self.policy_name).marshal()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn restore(dir: &Path, policy: &str) -> Result<(StateFile, CpuState), StateError> {
        StateFile::restore(dir, policy, &ContainerMap::new())
    }

    #[test]
    fn a_fresh_none_state_is_what_go_writes() {
        let dir = tempfile::tempdir().unwrap();
        let (file, state) = restore(&dir.path().join("root"), "none").unwrap();
        assert_eq!(state, CpuState::default());
        // Byte-identical to Go's first start with the none policy, mode 0600 as Go's
        // os.CreateTemp makes it.
        assert_eq!(
            std::fs::read_to_string(file.path()).unwrap(),
            r#"{"policyName":"none","defaultCpuSet":"","checksum":1353318690}"#
        );
        let mode = std::fs::metadata(file.path()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(
            std::fs::read_dir(dir.path().join("root")).unwrap().count(),
            1
        );
    }

    #[test]
    fn store_then_restore() {
        let dir = tempfile::tempdir().unwrap();
        let (file, mut state) = restore(dir.path(), "static").unwrap();
        state.default_cpu_set = CpuSet::parse("0,2").unwrap();
        state.set_cpuset("pod-a", "init", CpuSet::parse("1,3").unwrap());
        file.store(&state).unwrap();
        // What Go's static policy wrote in the same situation.
        assert_eq!(
            std::fs::read_to_string(file.path()).unwrap(),
            r#"{"policyName":"static","defaultCpuSet":"0,2","entries":{"pod-a":{"init":"1,3"}},"checksum":2148913289}"#
        );
        let (_, again) = restore(dir.path(), "static").unwrap();
        assert_eq!(again, state);
    }

    #[test]
    fn restore_errors_are_gos() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(STATE_FILE_NAME);
        let err = |content: &str, policy: &str| {
            std::fs::write(&path, content).unwrap();
            restore(dir.path(), policy).unwrap_err().to_string()
        };
        let tail = format!(
            ", please drain this node and delete the CPU manager checkpoint file {path:?} before restarting Kubelet"
        );
        assert_eq!(
            err(
                r#"{"policyName":"none","defaultCpuSet":"","checksum":1353318690}"#,
                "static"
            ),
            format!(
                "could not restore state from checkpoint: configured policy \"static\" differs from state checkpoint policy \"none\"{tail}"
            )
        );
        assert_eq!(
            err(
                r#"{"policyName":"static","defaultCpuSet":"0-1","checksum":1}"#,
                "static"
            ),
            format!("could not restore state from checkpoint: checkpoint is corrupted{tail}")
        );
        // state_checkpoint_test.go's unparsable fixtures.
        assert_eq!(
            err(
                r#"{"policyName": "none", "defaultCPUSet": "1.3", "entries": {}, "checksum": 3021697696}"#,
                "none"
            ),
            format!(
                "could not restore state from checkpoint: could not parse default cpu set \"1.3\": strconv.Atoi: parsing \"1.3\": invalid syntax{tail}"
            )
        );
        assert_eq!(
            err(
                r#"{"policyName": "none", "defaultCPUSet": "1-3", "entries": {"pod": {"container1": "4-6", "container2": "asd"}}, "checksum": 962272150}"#,
                "none"
            ),
            format!(
                "could not restore state from checkpoint: could not parse cpuset \"asd\" for container \"container2\" in pod \"pod\": strconv.Atoi: parsing \"asd\": invalid syntax{tail}"
            )
        );
    }

    #[test]
    fn delete_drops_an_empty_pod() {
        let mut s = CpuState::default();
        s.set_cpuset("p", "a", CpuSet::parse("1").unwrap());
        s.set_cpuset("p", "b", CpuSet::parse("2").unwrap());
        s.delete("p", "a");
        assert_eq!(s.cpuset("p", "b").unwrap().to_string(), "2");
        s.delete("p", "b");
        assert!(s.assignments.is_empty());
        s.delete("gone", "x");
        s.default_cpu_set = CpuSet::parse("0").unwrap();
        assert_eq!(s.cpuset_or_default("p", "a").to_string(), "0");
    }
}
