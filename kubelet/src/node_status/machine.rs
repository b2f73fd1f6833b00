//! Facts about the machine the Node reports, read from the host as cAdvisor's `MachineInfo`
//! does for the Go kubelet: ids, kernel, OS image, CPUs, memory, hugepages and the capacity of
//! the filesystem holding the kubelet's root directory. Reading blocks: call [`read`] from
//! `spawn_blocking`.

use std::path::Path;

/// One hugepage size the kernel supports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HugePages {
    /// The page size in bytes.
    pub page_bytes: i64,
    /// Pages reserved (`nr_hugepages`).
    pub pages: i64,
}

/// What the machine is.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MachineInfo {
    /// /etc/machine-id.
    pub machine_id: String,
    /// /sys/class/dmi/id/product_uuid; empty when unreadable (not root, no DMI).
    pub system_uuid: String,
    /// /proc/sys/kernel/random/boot_id.
    pub boot_id: String,
    /// `uname -r`.
    pub kernel_version: String,
    /// `PRETTY_NAME` of /etc/os-release.
    pub os_image: String,
    /// The host name (`uname -n`), lowercased.
    pub hostname: String,
    /// Online logical CPUs.
    pub num_cores: u32,
    /// MemTotal in bytes.
    pub memory_bytes: i64,
    /// Every supported hugepage size, smallest first.
    pub hugepages: Vec<HugePages>,
    /// Size in bytes of the filesystem holding the root dir; `None` when statvfs fails.
    pub rootfs_capacity: Option<i64>,
}

fn read_trimmed(path: impl AsRef<Path>) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// Reads the machine's facts; `root_dir` is the kubelet's root directory.
pub fn read(root_dir: &Path) -> MachineInfo {
    let uts = nix::sys::utsname::uname().ok();
    let uts_field = |f: fn(&nix::sys::utsname::UtsName) -> &std::ffi::OsStr| {
        uts.as_ref()
            .map(|u| f(u).to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    MachineInfo {
        machine_id: read_trimmed("/etc/machine-id"),
        system_uuid: read_trimmed("/sys/class/dmi/id/product_uuid"),
        boot_id: read_trimmed("/proc/sys/kernel/random/boot_id"),
        kernel_version: uts_field(|u| u.release()),
        os_image: std::fs::read_to_string("/etc/os-release")
            .ok()
            .and_then(|t| pretty_name(&t))
            .unwrap_or_else(|| "Linux".into()),
        hostname: uts_field(|u| u.nodename()).to_lowercase(),
        num_cores: std::fs::read_to_string("/sys/devices/system/cpu/online")
            .ok()
            .and_then(|t| count_cpu_list(&t))
            .or_else(|| {
                std::thread::available_parallelism()
                    .ok()
                    .and_then(|n| u32::try_from(n.get()).ok())
            })
            .unwrap_or(0),
        memory_bytes: i64::try_from(crate::node::memory_capacity()).unwrap_or(i64::MAX),
        hugepages: hugepages(Path::new("/sys/kernel/mm/hugepages")),
        rootfs_capacity: nix::sys::statvfs::statvfs(root_dir).ok().and_then(|s| {
            let bytes = u128::from(s.blocks()) * u128::from(s.fragment_size());
            i64::try_from(bytes).ok()
        }),
    }
}

/// `PRETTY_NAME` of an os-release file, unquoted.
pub fn pretty_name(text: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.trim().strip_prefix("PRETTY_NAME="))
        .map(|v| v.trim().trim_matches(|c| c == '"' || c == '\'').to_string())
        .filter(|v| !v.is_empty())
}

/// The number of CPUs in a kernel CPU list (`0-3,6,8-9`).
pub fn count_cpu_list(text: &str) -> Option<u32> {
    let mut n = 0u32;
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        n += match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (a.parse::<u32>().ok()?, b.parse::<u32>().ok()?);
                b.checked_sub(a)? + 1
            }
            None => {
                part.parse::<u32>().ok()?;
                1
            }
        };
    }
    (n > 0).then_some(n)
}

/// The page size of a sysfs hugepages directory name (`hugepages-2048kB`), in bytes.
pub fn hugepage_size(dir_name: &str) -> Option<i64> {
    let kb = dir_name
        .strip_prefix("hugepages-")?
        .strip_suffix("kB")?
        .parse::<i64>()
        .ok()?;
    kb.checked_mul(1024)
}

fn hugepages(dir: &Path) -> Vec<HugePages> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<HugePages> = entries
        .flatten()
        .filter_map(|e| {
            let page_bytes = hugepage_size(&e.file_name().to_string_lossy())?;
            let pages = read_trimmed(e.path().join("nr_hugepages"))
                .parse()
                .unwrap_or(0);
            Some(HugePages { page_bytes, pages })
        })
        .collect();
    out.sort_by_key(|h| h.page_bytes);
    out
}
