//! The shim's tasks: a container (its bundle, OCI runtime, cgroup) with its init process and
//! exec'd processes, and what each process has: state, exit, stdio, parked `Wait` calls.

use std::collections::BTreeMap;
use std::path::PathBuf;

use ferrolet_proto::task_shim::ProcessStatus;
use prost_types::Timestamp;

use crate::cgroup::{Cgroup, OomWatch};
use crate::pump::Pump;
use crate::runtime::Runtime;

/// A process's lifecycle state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Created (init) or registered (exec), not started.
    Created,
    /// Started.
    Running,
    /// Frozen by `Pause`.
    Paused,
    /// Exited and reaped.
    Stopped,
}

impl State {
    /// containerd's status number.
    pub fn status(self) -> ProcessStatus {
        match self {
            State::Created => ProcessStatus::Created,
            State::Running => ProcessStatus::Running,
            State::Paused => ProcessStatus::Paused,
            State::Stopped => ProcessStatus::Stopped,
        }
    }
}

/// The stdio names a process was given.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StdioNames {
    /// Stdin FIFO.
    pub stdin: String,
    /// Stdout FIFO or URI.
    pub stdout: String,
    /// Stderr FIFO or URI.
    pub stderr: String,
    /// Has a terminal.
    pub terminal: bool,
}

/// A `Wait` call to answer when the process exits: (connection, stream id).
pub type Waiter = (usize, u32);

/// A process of a container.
#[derive(Debug)]
pub struct Process {
    /// Exec id; empty for the init process.
    pub exec_id: String,
    /// Pid, 0 until created (init) or started (exec).
    pub pid: u32,
    /// Lifecycle state.
    pub state: State,
    /// Exit status and time once stopped.
    pub exit: Option<(u32, Timestamp)>,
    /// Whether containerd has been told of the exit (TaskExit sent, waiters answered).
    pub exit_published: bool,
    /// Its stdio names.
    pub stdio: StdioNames,
    /// An exec's OCI Process JSON, until it starts.
    pub spec: Vec<u8>,
    /// Copies stdin (FIFO) into the process.
    pub stdin: Option<Pump>,
    /// Copies a terminal's output into the stdout FIFO.
    pub output: Option<Pump>,
    /// The terminal's master side, for resizes.
    pub console: Option<std::fs::File>,
    /// Parked `Wait` calls.
    pub waiters: Vec<Waiter>,
}

impl Process {
    /// A process not yet running.
    pub fn new(exec_id: &str, stdio: StdioNames) -> Self {
        Self {
            exec_id: exec_id.to_string(),
            pid: 0,
            state: State::Created,
            exit: None,
            exit_published: false,
            stdio,
            spec: Vec::new(),
            stdin: None,
            output: None,
            console: None,
            waiters: Vec::new(),
        }
    }

    /// Whether it has started and not exited.
    pub fn alive(&self) -> bool {
        matches!(self.state, State::Running | State::Paused)
            || (self.state == State::Created && self.pid != 0)
    }

    /// Exit status (0 until exited).
    pub fn exit_status(&self) -> u32 {
        self.exit.as_ref().map_or(0, |e| e.0)
    }

    /// Exit time, if exited.
    pub fn exited_at(&self) -> Option<Timestamp> {
        self.exit.as_ref().map(|e| e.1)
    }
}

/// A container: its init and its execs.
#[derive(Debug)]
pub struct Container {
    /// Container id.
    pub id: String,
    /// Bundle directory.
    pub bundle: PathBuf,
    /// The OCI runtime.
    pub runtime: Runtime,
    /// The init process.
    pub init: Process,
    /// Exec'd processes by id.
    pub execs: BTreeMap<String, Process>,
    /// Its cgroup, found once the init exists.
    pub cgroup: Option<Cgroup>,
    /// OOM watch, polled under the container's token.
    pub oom: Option<OomWatch>,
    /// The rootfs was mounted by us (and is unmounted on delete).
    pub rootfs_mounted: bool,
    /// When the init exits, kill what is left in its cgroup (it shares a PID namespace, so
    /// the kernel will not).
    pub kill_all_on_exit: bool,
    /// Poll token of the OOM watch.
    pub token: usize,
}

impl Container {
    /// The process `exec_id` names (empty: init).
    pub fn process(&self, exec_id: &str) -> Option<&Process> {
        if exec_id.is_empty() {
            Some(&self.init)
        } else {
            self.execs.get(exec_id)
        }
    }

    /// Mutable [`Container::process`].
    pub fn process_mut(&mut self, exec_id: &str) -> Option<&mut Process> {
        if exec_id.is_empty() {
            Some(&mut self.init)
        } else {
            self.execs.get_mut(exec_id)
        }
    }

    /// Whether any exec is still running.
    pub fn execs_running(&self) -> bool {
        self.execs.values().any(Process::alive)
    }
}

/// The spec fields the shim needs from a bundle's `config.json`.
#[derive(Debug, Default, serde::Deserialize)]
pub struct BundleSpec {
    /// Annotations (the pod's sandbox id groups containers into one shim).
    #[serde(default)]
    pub annotations: std::collections::HashMap<String, String>,
    /// Linux section.
    #[serde(default)]
    pub linux: Option<LinuxSpec>,
}

/// `config.json`'s `linux`.
#[derive(Debug, Default, serde::Deserialize)]
pub struct LinuxSpec {
    /// Namespaces.
    #[serde(default)]
    pub namespaces: Vec<NamespaceSpec>,
}

/// One namespace entry.
#[derive(Debug, Default, serde::Deserialize)]
pub struct NamespaceSpec {
    /// `pid`, `network`, ….
    #[serde(rename = "type")]
    pub kind: String,
    /// Joins this namespace when set.
    #[serde(default)]
    pub path: String,
}

impl BundleSpec {
    /// Reads `<bundle>/config.json`.
    pub fn read(bundle: &std::path::Path) -> std::io::Result<Self> {
        let text = std::fs::read(bundle.join("config.json"))?;
        serde_json::from_slice(&text).map_err(std::io::Error::other)
    }

    /// Whether the container has no PID namespace of its own (the Go shim's
    /// `ShouldKillAllOnExit`).
    pub fn shares_pid_namespace(&self) -> bool {
        match &self.linux {
            Some(l) => !l
                .namespaces
                .iter()
                .any(|n| n.kind == "pid" && n.path.is_empty()),
            None => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pid_namespace_sharing() {
        let own: BundleSpec = serde_json::from_str(
            r#"{"linux":{"namespaces":[{"type":"pid"},{"type":"network","path":"/x"}]}}"#,
        )
        .unwrap();
        assert!(!own.shares_pid_namespace());
        let joined: BundleSpec = serde_json::from_str(
            r#"{"linux":{"namespaces":[{"type":"pid","path":"/proc/1/ns/pid"}]}}"#,
        )
        .unwrap();
        assert!(joined.shares_pid_namespace());
        let host: BundleSpec =
            serde_json::from_str(r#"{"linux":{"namespaces":[]},"annotations":{"a":"b"}}"#).unwrap();
        assert!(host.shares_pid_namespace());
        assert_eq!(host.annotations["a"], "b");
    }
}
