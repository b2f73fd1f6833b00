//! The host's checks: swap, kernel modules and sysctls the pod network needs, cgroups and
//! the configured driver, and the ports the kubelet serves.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};

use super::Finding;
use crate::cm::cgroup::Layout;
use crate::config::{Config, SYSTEMD};

/// Where `/proc` is (a scratch dir in tests).
pub struct Proc {
    root: PathBuf,
}

impl Proc {
    /// The machine's `/proc`.
    pub fn system() -> Self {
        Proc {
            root: PathBuf::from("/proc"),
        }
    }

    /// `/proc` at `root`.
    #[cfg(test)]
    pub fn at(root: &Path) -> Self {
        Proc {
            root: root.to_path_buf(),
        }
    }

    fn read(&self, rel: &str) -> Option<String> {
        std::fs::read_to_string(self.root.join(rel)).ok()
    }
}

/// Swap: the Go kubelet refuses to start with swap on unless `failSwapOn` is false (then
/// this warns).
pub fn swap(proc: &Proc, config: Option<&Config>) -> Finding {
    let Some(swaps) = proc.read("swaps") else {
        return Finding::warn("Swap", "cannot read /proc/swaps");
    };
    let devices = crate::node::swap_devices(&swaps);
    if devices.is_empty() {
        return Finding::pass("Swap", "swap is off");
    }
    let message = format!(
        "running with swap on is not supported, please disable swap or set --fail-swap-on \
         flag to false (swap on {})",
        devices.join(", ")
    );
    match config.is_none_or(|c| c.fail_swap_on) {
        true => Finding::fail("Swap", message),
        false => Finding::warn(
            "Swap",
            format!("swap is on ({}); failSwapOn is false", devices.join(", ")),
        ),
    }
}

/// The sysctls a bridged pod network needs (kubeadm's FileContent checks), and overlayfs.
pub fn kernel(proc: &Proc) -> Vec<Finding> {
    let mut out = Vec::new();
    for rel in [
        "sys/net/bridge/bridge-nf-call-iptables",
        "sys/net/ipv4/ip_forward",
    ] {
        let path = format!("/proc/{rel}");
        let name = format!("FileContent-{}", path.replace('/', "-"));
        out.push(match proc.read(rel) {
            None if rel.starts_with("sys/net/bridge") => Finding::fail(
                name,
                format!("{path} does not exist (the br_netfilter module is not loaded: modprobe br_netfilter)"),
            ),
            None => Finding::fail(name, format!("{path} does not exist")),
            Some(v) if v.trim() == "1" => Finding::pass(name, format!("{path} is 1")),
            Some(_) => Finding::fail(name, format!("{path} contents are not set to 1")),
        });
    }
    out.push(match proc.read("filesystems") {
        Some(fs)
            if fs
                .lines()
                .any(|l| l.split_whitespace().last() == Some("overlay")) =>
        {
            Finding::pass("KernelModule-overlay", "overlay filesystem available")
        }
        _ => Finding::warn(
            "KernelModule-overlay",
            "overlay is not in /proc/filesystems (modprobe overlay); the runtime's default \
             snapshotter needs it",
        ),
    });
    out
}

/// The cgroup version (v1 is Go's maintenance mode) and whether the configured driver can
/// work here.
pub fn cgroups(config: &Config) -> Finding {
    let layout = match Layout::detect() {
        Ok(l) => l,
        Err(e) => return Finding::fail("SystemVerification", format!("cgroups: {e}")),
    };
    if config.cgroup_driver == SYSTEMD && !Path::new("/run/systemd/system").exists() {
        return Finding::fail(
            "CgroupDriver",
            "cgroupDriver is systemd but systemd is not running (no /run/systemd/system); \
             use cgroupDriver: cgroupfs",
        );
    }
    let driver = &config.cgroup_driver;
    if layout.mode().is_v2() {
        return Finding::pass("SystemVerification", format!("cgroup v2, driver {driver}"));
    }
    match config.fail_cgroup_v1 {
        true => Finding::fail(
            "SystemVerification",
            "kubelet is configured to not run on a host using cgroup v1 (failCgroupV1)",
        ),
        false => Finding::warn(
            "SystemVerification",
            format!(
                "cgroup v1, driver {driver}: cgroup v1 support is in maintenance mode, please \
                 migrate to cgroup v2"
            ),
        ),
    }
}

/// The ports the kubelet is configured to serve: each must be free (kubeadm's `Port-N`).
pub fn ports(config: &Config) -> Vec<Finding> {
    let mut wanted = Vec::new();
    if config.enable_server {
        wanted.push(("kubelet API", config.address, config.port));
    }
    wanted.push(("read-only API", config.address, config.read_only_port));
    wanted.push(("healthz", config.healthz_bind_address, config.healthz_port));
    wanted
        .into_iter()
        .filter(|(_, _, port)| *port != 0)
        .map(|(what, ip, port)| {
            let addr = SocketAddr::new(ip, port);
            let name = format!("Port-{port}");
            match TcpListener::bind(addr) {
                Ok(_) => Finding::pass(name, format!("{addr} is free for the {what}")),
                Err(e) => Finding::fail(
                    name,
                    format!("Port {port} is in use ({what} on {addr}: {e})"),
                ),
            }
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::check::Level;

    fn proc_with(files: &[(&str, &str)]) -> (tempfile::TempDir, Proc) {
        let dir = tempfile::tempdir().unwrap();
        for (rel, text) in files {
            let path = dir.path().join(rel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        let proc = Proc::at(dir.path());
        (dir, proc)
    }

    const HEADER: &str = "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n";

    #[test]
    fn swap_on_fails_unless_fail_swap_on_is_false() {
        let (_d, off) = proc_with(&[("swaps", HEADER)]);
        assert_eq!(swap(&off, None).level, Level::Pass);
        let on =
            format!("{HEADER}/swapfile                               file\t\t65532\t\t0\t\t-2\n");
        let (_d, on) = proc_with(&[("swaps", &on)]);
        let f = swap(&on, None);
        assert_eq!(f.level, Level::Fail);
        assert!(f.message.contains("please disable swap") && f.message.contains("/swapfile"));
        let lenient = Config {
            fail_swap_on: false,
            ..Config::default()
        };
        assert_eq!(swap(&on, Some(&lenient)).level, Level::Warn);
    }

    #[test]
    fn sysctls_and_modules() {
        let (_d, good) = proc_with(&[
            ("sys/net/bridge/bridge-nf-call-iptables", "1\n"),
            ("sys/net/ipv4/ip_forward", "1\n"),
            ("filesystems", "nodev\tproc\n\toverlay\nnodev\toverlay\n"),
        ]);
        let f = kernel(&good);
        assert!(f.iter().all(|f| f.level == Level::Pass), "{f:?}");
        let (_d, bad) = proc_with(&[("sys/net/ipv4/ip_forward", "0\n"), ("filesystems", "")]);
        let lines: Vec<String> = kernel(&bad).iter().map(ToString::to_string).collect();
        assert_eq!(
            lines,
            [
                "[fail] FileContent--proc-sys-net-bridge-bridge-nf-call-iptables: \
                 /proc/sys/net/bridge/bridge-nf-call-iptables does not exist (the br_netfilter \
                 module is not loaded: modprobe br_netfilter)",
                "[fail] FileContent--proc-sys-net-ipv4-ip_forward: /proc/sys/net/ipv4/ip_forward \
                 contents are not set to 1",
                "[warn] KernelModule-overlay: overlay is not in /proc/filesystems (modprobe \
                 overlay); the runtime's default snapshotter needs it",
            ]
        );
    }

    #[test]
    fn a_taken_port_fails_by_number() {
        let taken = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = taken.local_addr().unwrap().port();
        let config = Config {
            address: "127.0.0.1".parse().unwrap(),
            port,
            healthz_port: 0,
            ..Config::default()
        };
        let f = ports(&config);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].level, Level::Fail);
        assert_eq!(f[0].name, format!("Port-{port}"));
        assert!(f[0].message.starts_with(&format!("Port {port} is in use")));
        drop(taken);
        assert_eq!(ports(&config)[0].level, Level::Pass);
    }
}
