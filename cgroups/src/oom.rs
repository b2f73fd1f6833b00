//! Kernel OOM kills, read from `/dev/kmsg` as cadvisor's `oomparser` reads them for the Go
//! kubelet's OOM watcher: the kernel's one-line summary (`oom-kill:constraint=…,oom_memcg=…,
//! task_memcg=…,task=…,pid=…`, kernels ≥ 4.19) names the memory cgroup that ran out (the pod's
//! or the container's own; none when the whole machine did) and the victim's, from which the
//! kubelet tells a container's kill from a system OOM ([`OomScope`]) and ferrolet-cri which of
//! its containers to report `OOMKilled`.
//!
//! The reader is a thread of its own (reads of `/dev/kmsg` block), started at the end of the
//! log so a restart does not report old kills again; it hands each kill to a channel.

use std::fs::File;
use std::io::{ErrorKind, Read, Seek, SeekFrom};
use std::path::Path;

use tokio::sync::mpsc;

/// One OOM kill the kernel reported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OomKill {
    /// The victim's pid.
    pub pid: i32,
    /// The victim's command name.
    pub process: String,
    /// The memory cgroup whose limit was reached (`/` for a system-wide OOM).
    pub oom_memcg: String,
    /// The victim's memory cgroup (its container's, or `/`).
    pub task_memcg: String,
    /// The kernel's constraint (`CONSTRAINT_MEMCG`, `CONSTRAINT_NONE`, …).
    pub constraint: String,
}

/// Which limit an OOM kill was for, seen from one node (`kubelet_oom_events_total`'s `scope`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OomScope {
    /// A container of the node's pods reached its own memory limit.
    Container,
    /// A container of the node's pods was killed for a limit above its own: its pod's (the
    /// pod's containers together), or the QoS or `kubepods` cgroup's.
    Pod,
    /// The machine ran out of memory (no memory cgroup's limit was reached).
    System,
    /// Another cgroup reached its own limit (not a container of the node's pods).
    Other,
}

impl OomScope {
    /// Every scope, for the metric's zero series.
    pub const ALL: [OomScope; 4] = [Self::Container, Self::Pod, Self::System, Self::Other];

    /// The metric's label value.
    pub fn as_str(self) -> &'static str {
        match self {
            OomScope::Container => "container",
            OomScope::Pod => "pod",
            OomScope::System => "system",
            OomScope::Other => "other",
        }
    }
}

impl OomKill {
    /// No memory cgroup's limit was reached: the whole machine ran out (the kernel writes no
    /// `oom_memcg` then).
    pub fn is_global(&self) -> bool {
        self.oom_memcg.trim_end_matches('/').is_empty()
    }

    /// Whether the victim ran in the root memory cgroup (Go's test for a system OOM).
    pub fn in_root_cgroup(&self) -> bool {
        self.task_memcg.trim_end_matches('/').is_empty()
    }

    /// The limit reached, given whether the victim is in a container of the node's pods.
    pub fn scope(&self, in_a_container: bool) -> OomScope {
        if self.is_global() {
            OomScope::System
        } else if !in_a_container {
            OomScope::Other
        } else if self.oom_memcg.trim_end_matches('/') == self.task_memcg.trim_end_matches('/') {
            OomScope::Container
        } else {
            OomScope::Pod
        }
    }

    /// The last part of the victim's memory cgroup: a container's id when the victim ran in
    /// one (the cgroupfs driver names a container's cgroup by its id, the systemd driver a
    /// scope `<prefix>-<id>.scope`); None in the root.
    pub fn victim_cgroup_name(&self) -> Option<&str> {
        let last = self
            .task_memcg
            .trim_end_matches('/')
            .rsplit('/')
            .next()
            .filter(|c| !c.is_empty())?;
        match last.strip_suffix(".scope") {
            Some(scope) => scope.rsplit('-').next(),
            None => Some(last),
        }
    }

    /// The victim's container id and pod UID as the cgroupfs driver lays them out
    /// (`…/pod<uid>/<container id>`) or the systemd driver
    /// (`…/kubepods-burstable-pod<uid>.slice/<prefix>-<container id>.scope`, the uid's `-`
    /// escaped as `_`); None when the victim is not in a pod's container.
    pub fn container(&self) -> Option<(String, String)> {
        let mut parts = self.task_memcg.trim_end_matches('/').rsplit('/');
        let mut container = parts.next().filter(|c| !c.is_empty())?;
        let mut pod = parts.next()?.to_string();
        if let Some(scope) = container.strip_suffix(".scope") {
            container = scope.rsplit('-').next()?;
            let slice = pod.strip_suffix(".slice")?;
            pod = slice.rsplit('-').next()?.replace('_', "-");
        }
        let uid = pod.strip_prefix("pod")?;
        (!uid.is_empty()).then(|| (container.to_string(), uid.to_string()))
    }

    /// The Go kubelet's `SystemOOM` event message.
    pub fn system_oom_message(&self) -> String {
        let mut message = "System OOM encountered".to_string();
        if !self.process.is_empty() && self.pid != 0 {
            message.push_str(&format!(
                ", victim process: {}, pid: {}",
                self.process, self.pid
            ));
        }
        message
    }
}

/// The text of one `/dev/kmsg` record (`<prio>,<seq>,<usec>,<flags>;<text>`), without the
/// continuation lines.
fn record_text(record: &str) -> &str {
    let first = record.lines().next().unwrap_or("");
    first.split_once(';').map_or(first, |(_, text)| text)
}

/// The kill a kmsg record reports, if it is the kernel's `oom-kill:` summary line.
pub fn parse_record(record: &str) -> Option<OomKill> {
    let fields = record_text(record).strip_prefix("oom-kill:")?;
    // `cpuset=` and `nodemask=` may hold commas (`0-1,3`): take the named fields, splitting at
    // a comma only where the next `key=` starts.
    let mut kill = OomKill {
        pid: 0,
        process: String::new(),
        oom_memcg: String::new(),
        task_memcg: String::new(),
        constraint: String::new(),
    };
    for (key, value) in key_values(fields) {
        match key {
            "constraint" => kill.constraint = value.to_string(),
            "oom_memcg" => kill.oom_memcg = value.to_string(),
            "task_memcg" => kill.task_memcg = value.to_string(),
            "task" => kill.process = value.to_string(),
            "pid" => kill.pid = value.parse().ok()?,
            _ => {}
        }
    }
    (kill.pid > 0 && !kill.task_memcg.is_empty()).then_some(kill)
}

const KEYS: [&str; 9] = [
    "constraint",
    "nodemask",
    "cpuset",
    "mems_allowed",
    "oom_memcg",
    "task_memcg",
    "task",
    "pid",
    "uid",
];

fn key_values(text: &str) -> Vec<(&str, &str)> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some((key, after)) = rest.split_once('=') {
        // The value runs to the next ",<known key>=" (or the end).
        let end = after
            .match_indices(',')
            .map(|(i, _)| i)
            .find(|&i| {
                KEYS.iter().any(|k| {
                    after[i + 1..].starts_with(k) && after[i + 1 + k.len()..].starts_with('=')
                })
            })
            .unwrap_or(after.len());
        out.push((key, &after[..end]));
        rest = after.get(end + 1..).unwrap_or("");
    }
    out
}

/// Starts the reader thread on `path` (`/dev/kmsg`) from the end of the log; kills arrive on
/// the returned channel until the receiver is dropped. The log is opened on the blocking pool.
pub async fn watch(path: &Path) -> std::io::Result<mpsc::Receiver<OomKill>> {
    let path = path.to_path_buf();
    tokio::task::spawn_blocking(move || start(&path))
        .await
        .map_err(std::io::Error::other)?
}

fn start(path: &Path) -> std::io::Result<mpsc::Receiver<OomKill>> {
    let mut file = File::open(path)?;
    // kmsg seeks by record: SEEK_END skips everything already logged.
    file.seek(SeekFrom::End(0))?;
    let (tx, rx) = mpsc::channel(64);
    std::thread::Builder::new()
        .name("oom-watcher".into())
        .spawn(move || read_records(file, &tx))?;
    Ok(rx)
}

fn read_records(mut file: File, tx: &mpsc::Sender<OomKill>) {
    // One read returns one record; 8 KiB holds the longest the kernel writes.
    let mut buf = vec![0u8; 8192];
    loop {
        match file.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => {
                let record = String::from_utf8_lossy(&buf[..n]);
                if let Some(kill) = parse_record(&record)
                    && tx.blocking_send(kill).is_err()
                {
                    return;
                }
            }
            // Records were overwritten before we read them: go on with the next one.
            Err(e) if e.kind() == ErrorKind::BrokenPipe => continue,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => {
                tracing::warn!(error = %e, "reading kernel messages for OOM kills; OOM watching stops");
                return;
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_level_kill() {
        let rec = "6,1234,5678901,-;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),\
                   cpuset=0-1,mems_allowed=0,oom_memcg=/kubepods/burstable/pod1f2e,\
                   task_memcg=/kubepods/burstable/pod1f2e/0a1b2c,task=stress,pid=4321,uid=0\n";
        let k = parse_record(rec).unwrap();
        assert_eq!(k.pid, 4321);
        assert_eq!(k.process, "stress");
        assert_eq!(k.oom_memcg, "/kubepods/burstable/pod1f2e");
        assert_eq!(k.constraint, "CONSTRAINT_MEMCG");
        assert_eq!(k.container(), Some(("0a1b2c".into(), "1f2e".into())));
        assert_eq!(k.victim_cgroup_name(), Some("0a1b2c"));
        assert!(!k.is_global() && !k.in_root_cgroup());
        assert_eq!(k.scope(true), OomScope::Pod);
        assert_eq!(k.scope(false), OomScope::Other);
    }

    #[test]
    fn a_container_level_kill() {
        let rec = "6,1235,5678902,-;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),\
                   cpuset=0a1b2c,mems_allowed=0,oom_memcg=/r/kubepods/pod1f2e/0a1b2c,\
                   task_memcg=/r/kubepods/pod1f2e/0a1b2c/,task=sh,pid=99,uid=0";
        let k = parse_record(rec).unwrap();
        assert_eq!(k.scope(true), OomScope::Container);
        assert_eq!(k.container(), Some(("0a1b2c".into(), "1f2e".into())));
        // cgroupsPerQOS off: the container's cgroup sits right under cgroupRoot.
        let flat = OomKill {
            task_memcg: "/ferrolet/0a1b2c".into(),
            ..k
        };
        assert_eq!(flat.container(), None);
        assert_eq!(flat.victim_cgroup_name(), Some("0a1b2c"));
    }

    #[test]
    fn a_kill_under_the_systemd_driver() {
        let rec = "6,1236,5678903,-;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),\
                   cpuset=x,mems_allowed=0,oom_memcg=/kubepods.slice/kubepods-burstable.slice/\
                   kubepods-burstable-pod1f2e_99.slice/ferrolet-cri-0a1b2c.scope,\
                   task_memcg=/kubepods.slice/kubepods-burstable.slice/\
                   kubepods-burstable-pod1f2e_99.slice/ferrolet-cri-0a1b2c.scope,task=sh,pid=9,uid=0";
        let k = parse_record(rec).unwrap();
        assert_eq!(k.container(), Some(("0a1b2c".into(), "1f2e-99".into())));
        assert_eq!(k.victim_cgroup_name(), Some("0a1b2c"));
        assert_eq!(k.scope(true), OomScope::Container);
    }

    #[test]
    fn a_system_oom_with_a_comma_in_the_cpuset() {
        let rec = "6,9,1,-;oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=0-1,3,\
                   mems_allowed=0,global_oom,task_memcg=/,task=hog,pid=77,uid=0";
        let k = parse_record(rec).unwrap();
        assert!(k.is_global() && k.in_root_cgroup());
        assert_eq!(k.scope(false), OomScope::System);
        assert_eq!(k.container(), None);
        assert_eq!(k.victim_cgroup_name(), None);
        assert_eq!((k.pid, k.process.as_str()), (77, "hog"));
        assert_eq!(
            k.system_oom_message(),
            "System OOM encountered, victim process: hog, pid: 77"
        );
        let nameless = OomKill {
            process: String::new(),
            ..k
        };
        assert_eq!(nameless.system_oom_message(), "System OOM encountered");
    }

    #[test]
    fn other_records_are_not_kills() {
        assert_eq!(
            parse_record("6,1,1,-;Memory cgroup out of memory: Killed process 1"),
            None
        );
        assert_eq!(parse_record("garbage"), None);
        assert_eq!(parse_record("6,1,1,-;oom-kill:task=x,pid=notanumber"), None);
    }
}
