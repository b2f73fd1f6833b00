//! The faults the soak injects, each as a node would meet it, and healed as a supervisor (or
//! an operator) heals it: a daemon killed is started again, a stopped one continued, an
//! outage ends, a full disk is freed.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::Soak;
use crate::containerd::containerd;

/// A kind of fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FaultKind {
    /// `kill -9` of ferrolet, started again after a moment.
    KillKubelet,
    /// `kill -9` of ferrolet-cri, started again after a moment.
    KillRuntime,
    /// `kill -9` of containerd, started again after a moment.
    KillContainerd,
    /// `kill -9` of one containerd shim of the node (its pod's containers die with it).
    KillShim,
    /// `kill -9` of the bridge plugin and its caller in the middle of a CNI ADD or DEL.
    KillCniPlugin,
    /// SIGSTOP of ferrolet-cri for longer than ferrolet's runtimeRequestTimeout.
    StopRuntime,
    /// The API server stops answering for a while.
    ApiUnreachable,
    /// ferrolet's root filesystem full for a while.
    DiskFull,
    /// The image registry gone for a while (pulls fail).
    RegistryGone,
}

/// Every kind, in the order the report lists them.
pub const ALL: [FaultKind; 9] = [
    FaultKind::KillKubelet,
    FaultKind::KillRuntime,
    FaultKind::KillContainerd,
    FaultKind::KillShim,
    FaultKind::KillCniPlugin,
    FaultKind::StopRuntime,
    FaultKind::ApiUnreachable,
    FaultKind::DiskFull,
    FaultKind::RegistryGone,
];

impl FaultKind {
    /// Its name in the report and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::KillKubelet => "kill-ferrolet",
            FaultKind::KillRuntime => "kill-ferrolet-cri",
            FaultKind::KillContainerd => "kill-containerd",
            FaultKind::KillShim => "kill-shim",
            FaultKind::KillCniPlugin => "kill-cni-plugin",
            FaultKind::StopRuntime => "sigstop-ferrolet-cri",
            FaultKind::ApiUnreachable => "api-unreachable",
            FaultKind::DiskFull => "disk-full",
            FaultKind::RegistryGone => "registry-gone",
        }
    }

    /// The kind named `name`.
    pub fn parse(name: &str) -> Option<Self> {
        ALL.into_iter().find(|k| k.name() == name)
    }
}

/// One fault as injected.
#[derive(Clone, Debug)]
pub struct Fault {
    /// Its kind.
    pub kind: FaultKind,
    /// When it began, from the soak's start.
    pub at: Duration,
    /// How long until it was healed.
    pub lasted: Duration,
    /// What exactly was hit.
    pub detail: String,
}

/// How long ferrolet-cri stays stopped: past ferrolet's runtimeRequestTimeout (10 s).
const STOP_FOR: (u64, u64) = (12_000, 18_000);
/// How long an outage (API, registry, full disk) lasts, milliseconds.
const OUTAGE: (u64, u64) = (4_000, 15_000);
/// How long a killed daemon stays down before its supervisor starts it again, milliseconds.
const DOWN: (u64, u64) = (0, 3_000);
/// How long an armed CNI fault waits for an ADD or DEL to hit.
const CNI_WAIT: Duration = Duration::from_secs(60);

impl Soak {
    pub(crate) fn pick_ms(&self, (lo, hi): (u64, u64)) -> Duration {
        Duration::from_millis(self.rng().u64(lo..=hi))
    }

    /// Injects a fault of `kind` and heals it; `None` when there was nothing to hit (no shim
    /// ran, no CNI call came), so it does not count.
    pub async fn inject(&self, kind: FaultKind) -> Option<Fault> {
        let at = self.started.elapsed();
        let began = Instant::now();
        let detail = match kind {
            FaultKind::KillKubelet => {
                let pid = self.cluster.node.kubelet_pid();
                self.cluster.node.kill_kubelet();
                tokio::time::sleep(self.pick_ms(DOWN)).await;
                self.restart_kubelet().await;
                format!("ferrolet pid {pid}")
            }
            FaultKind::KillRuntime => {
                let pid = self.cluster.node.node.cri.pid();
                self.cluster.node.node.cri.kill();
                tokio::time::sleep(self.pick_ms(DOWN)).await;
                self.restart_runtime().await;
                format!("ferrolet-cri pid {pid}")
            }
            FaultKind::KillContainerd => {
                let pid = containerd().pid();
                let down = self.pick_ms(DOWN);
                tokio::task::spawn_blocking(move || {
                    containerd().kill();
                    std::thread::sleep(down);
                    containerd().start_again();
                })
                .await
                .ok()?;
                format!("containerd pid {pid}, down {down:?}")
            }
            FaultKind::KillShim => {
                let ns = &self.cluster.node.node.ns.name;
                let shims = crate::leak::shim_pids(containerd().socket(), ns);
                if shims.is_empty() {
                    return None;
                }
                let pid = shims[self.rng().usize(..shims.len())];
                let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
                format!("shim pid {pid} of {}", shims.len())
            }
            FaultKind::KillCniPlugin => {
                let command = if self.rng().bool() { "ADD" } else { "DEL" };
                let marker = self.chaos_dir.join(format!("chaos-{command}"));
                std::fs::write(&marker, "").ok()?;
                let deadline = Instant::now() + CNI_WAIT;
                while marker.exists() && Instant::now() < deadline {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                // Whoever consumed it removed it: a still-present marker hit nothing.
                if std::fs::remove_file(&marker).is_ok() {
                    return None;
                }
                format!("bridge killed mid-{command}")
            }
            FaultKind::StopRuntime => {
                let pid = self.cluster.node.node.cri.pid();
                let hold = self.pick_ms(STOP_FOR);
                let target = Pid::from_raw(pid as i32);
                let _ = kill(target, Signal::SIGSTOP);
                tokio::time::sleep(hold).await;
                let _ = kill(target, Signal::SIGCONT);
                format!("ferrolet-cri pid {pid} stopped {hold:?}")
            }
            FaultKind::ApiUnreachable => {
                let hold = self.pick_ms(OUTAGE);
                self.cluster.api.pause().await;
                tokio::time::sleep(hold).await;
                if let Err(e) = self.cluster.api.resume().await {
                    self.log(&format!("API server did not come back: {e:#}"));
                }
                format!("for {hold:?}")
            }
            FaultKind::DiskFull => {
                let hold = self.pick_ms(OUTAGE);
                let file = self.cluster.node.root_dir().join(".soak-fill");
                let filled = tokio::task::spawn_blocking({
                    let file = file.clone();
                    move || fill(&file)
                })
                .await
                .unwrap_or(0);
                tokio::time::sleep(hold).await;
                let _ = std::fs::remove_file(&file);
                format!("{} MiB written until full, for {hold:?}", filled >> 20)
            }
            FaultKind::RegistryGone => {
                let hold = self.pick_ms(OUTAGE);
                self.registry_lock().kill();
                tokio::time::sleep(hold).await;
                self.registry_lock().restart();
                format!("for {hold:?}")
            }
        };
        Some(Fault {
            kind,
            at,
            lasted: began.elapsed(),
            detail,
        })
    }

    /// Starts ferrolet again as its supervisor would, until it stays up.
    pub async fn restart_kubelet(&self) {
        loop {
            match self.cluster.node.try_restart_kubelet().await {
                Ok(()) => return,
                Err(e) => {
                    self.log(&format!("ferrolet did not come up; again in 1 s: {e}"));
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    }

    /// Starts ferrolet-cri again as its supervisor would, until it stays up (it refuses to
    /// start while containerd cannot be asked).
    pub async fn restart_runtime(&self) {
        loop {
            let cri = &self.cluster.node.node.cri;
            cri.kill();
            let started = tokio::task::block_in_place(|| cri.try_spawn(Duration::from_secs(60)));
            match started {
                Ok(()) => return,
                Err(e) => {
                    self.log(&format!("ferrolet-cri did not come up; again in 1 s: {e}"));
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    }
}

/// The bridge plugin wrapped so that a fault can kill it, and the wrapper, part-way through
/// one ADD or DEL: when `chaos-<COMMAND>` exists beside it, the first call of that command to
/// remove it runs bridge for 0–90 ms, kills it, and dies by SIGKILL itself.
pub fn chaos_bridge_plugin(real_bridge: &Path) -> String {
    format!(
        r#"#!/bin/sh
d=$(dirname "$0")
in=$(mktemp)
cat > "$in"
if rm "$d/chaos-$CNI_COMMAND" 2>/dev/null; then
  {bridge} < "$in" > /dev/null 2>&1 &
  sleep 0.0$(od -An -N1 -tu1 /dev/urandom | tr -dc 0-9 | tail -c 1)
  kill -9 $! 2>/dev/null
  rm -f "$in"
  kill -9 $$
fi
{bridge} < "$in"
rc=$?
rm -f "$in"
exit $rc
"#,
        bridge = real_bridge.display()
    )
}

/// Writes zeros to `file` until its filesystem is full; how many bytes went in.
fn fill(file: &PathBuf) -> u64 {
    use std::io::Write;
    let Ok(mut f) = std::fs::File::create(file) else {
        return 0;
    };
    let chunk = vec![0u8; 1 << 20];
    let mut written = 0u64;
    while let Ok(n) = f.write(&chunk) {
        if n == 0 {
            break;
        }
        written += n as u64;
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_named_and_parsed_back() {
        for k in ALL {
            assert_eq!(FaultKind::parse(k.name()), Some(k));
        }
        assert_eq!(FaultKind::parse("nope"), None);
    }
}
