//! Which cgroup hierarchy the node has and where, read from the mount table as runc does:
//! cgroup v2 when `/sys/fs/cgroup` is a cgroup2 mount (runc's `IsCgroup2UnifiedMode`),
//! otherwise v1 controllers each at its mount point, with possibly a cgroup2 mount at
//! `/sys/fs/cgroup/unified` beside them (hybrid: still v1 for every resource).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::error::CgroupError;
use super::fs;

/// Where cgroup hierarchies are mounted.
pub const CGROUP_ROOT: &str = "/sys/fs/cgroup";
/// The mount table read by [`Layout::detect`].
pub const MOUNTINFO: &str = "/proc/self/mountinfo";

/// The cgroup v1 controllers a hierarchy can carry (named hierarchies come as `name=<x>`).
const V1_CONTROLLERS: [&str; 14] = [
    "cpu",
    "cpuacct",
    "cpuset",
    "memory",
    "devices",
    "freezer",
    "net_cls",
    "net_prio",
    "blkio",
    "perf_event",
    "hugetlb",
    "pids",
    "rdma",
    "misc",
];

/// Controllers the kubelet cannot run without, on v1.
const REQUIRED_V1: [&str; 5] = ["cpu", "cpuacct", "cpuset", "memory", "pids"];
/// Controllers the kubelet cannot run without, on v2 (cpuacct's usage is in `cpu.stat`).
/// Not cpuset: Go asks a v2 root for the controllers the kernel has, and a kernel without
/// SMP (User-Mode Linux, small VMs) has no cpuset; only the static CPU manager needs it.
const REQUIRED_V2: [&str; 3] = ["cpu", "memory", "pids"];

/// The kind of cgroup hierarchy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Controllers mounted separately (cgroup v1).
    V1,
    /// Cgroup v1 with a cgroup2 mount beside it, unused for resources.
    Hybrid,
    /// One cgroup2 hierarchy at the cgroup root.
    V2,
}

impl Mode {
    /// Whether resources are written the cgroup v2 way.
    pub fn is_v2(self) -> bool {
        self == Mode::V2
    }

    /// The name logs use (`v1`, `hybrid`, `v2`).
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::V1 => "v1",
            Mode::Hybrid => "hybrid",
            Mode::V2 => "v2",
        }
    }
}

/// The node's cgroup hierarchies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    mode: Mode,
    /// v2: the hierarchy; v1: the directory the hierarchies are mounted in.
    root: PathBuf,
    /// v1: controller (or named hierarchy, `systemd`) → its mount point.
    mounts: BTreeMap<String, PathBuf>,
    /// Hybrid: the cgroup2 mount beside the v1 ones.
    unified: Option<PathBuf>,
}

impl Layout {
    /// This node's layout, from [`MOUNTINFO`].
    pub fn detect() -> Result<Layout, CgroupError> {
        let text = std::fs::read_to_string(MOUNTINFO).map_err(|source| CgroupError::Mountinfo {
            path: MOUNTINFO.into(),
            source,
        })?;
        Layout::from_mountinfo(&text)
    }

    /// The layout a mount table (`/proc/self/mountinfo` text) describes.
    pub fn from_mountinfo(text: &str) -> Result<Layout, CgroupError> {
        let root = Path::new(CGROUP_ROOT);
        let unified_at = root.join("unified");
        let mut root_is_v2 = false;
        let mut unified = None;
        let mut mounts: BTreeMap<String, PathBuf> = BTreeMap::new();
        for m in text.lines().filter_map(parse_line) {
            // A later mount on the same point hides an earlier one.
            if m.point == root {
                root_is_v2 = m.fstype == "cgroup2";
            }
            match m.fstype {
                "cgroup2" if m.point == unified_at => unified = Some(m.point.clone()),
                "cgroup" => {
                    for c in v1_controllers(m.super_opts) {
                        // Go takes the shortest mount point of a controller mounted twice.
                        let shorter = mounts
                            .get(&c)
                            .is_none_or(|p| m.point.as_os_str().len() < p.as_os_str().len());
                        if shorter {
                            mounts.insert(c, m.point.clone());
                        }
                    }
                }
                _ => {}
            }
        }
        if root_is_v2 {
            return Ok(Layout::v2_at(root));
        }
        if mounts.is_empty() {
            return Err(CgroupError::NoMounts);
        }
        Ok(Layout {
            mode: if unified.is_some() {
                Mode::Hybrid
            } else {
                Mode::V1
            },
            root: root.to_path_buf(),
            mounts,
            unified,
        })
    }

    /// A v1 layout over `root` (a scratch tree in tests): each of `hierarchies` is a directory
    /// under it named by its controllers, comma-separated when co-mounted (`cpu,cpuacct`).
    #[cfg(test)]
    pub fn v1_at(root: &Path, hierarchies: &[&str]) -> Layout {
        let mut mounts = BTreeMap::new();
        for h in hierarchies {
            for c in h.split(',') {
                mounts.insert(c.to_string(), root.join(h));
            }
        }
        Layout {
            mode: Mode::V1,
            root: root.to_path_buf(),
            mounts,
            unified: None,
        }
    }

    /// A v2 layout with its hierarchy at `root`.
    pub fn v2_at(root: &Path) -> Layout {
        Layout {
            mode: Mode::V2,
            root: root.to_path_buf(),
            mounts: BTreeMap::new(),
            unified: None,
        }
    }

    /// The kind of hierarchy.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// v2: the hierarchy; v1: where the hierarchies are mounted.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where `controller`'s files are: its v1 mount point, or the v2 hierarchy (whether or not
    /// the controller is enabled there).
    pub fn mount_point(&self, controller: &str) -> Option<&Path> {
        match self.mode {
            Mode::V2 => Some(&self.root),
            _ => self.mounts.get(controller).map(PathBuf::as_path),
        }
    }

    /// Every hierarchy a cgroup is made in, each once: v1 every mount (named ones and the
    /// hybrid cgroup2 one too, as runc's fs manager joins them), v2 the one hierarchy.
    pub fn hierarchies(&self) -> Vec<&Path> {
        if self.mode.is_v2() {
            return vec![&self.root];
        }
        let set: BTreeSet<&Path> = self
            .mounts
            .values()
            .map(PathBuf::as_path)
            .chain(self.unified.as_deref())
            .collect();
        set.into_iter().collect()
    }

    /// The controllers available: v1 the mounted ones (and named hierarchies such as
    /// `systemd`), v2 those in the root's `cgroup.controllers`.
    pub fn controllers(&self) -> Result<BTreeSet<String>, CgroupError> {
        if !self.mode.is_v2() {
            return Ok(self.mounts.keys().cloned().collect());
        }
        let text = fs::read("/", &self.root, "cgroup.controllers")?;
        Ok(text.split_whitespace().map(str::to_string).collect())
    }

    /// Whether the controllers the kubelet needs are here (cpu, cpuacct and cpuset on v1,
    /// memory, pids; hugetlb is optional), as Go's `validateSystemRequirements`.
    pub fn validate_required_controllers(&self) -> Result<(), CgroupError> {
        let have = self.controllers()?;
        let required: &[&str] = if self.mode.is_v2() {
            &REQUIRED_V2
        } else {
            &REQUIRED_V1
        };
        let mut missing: Vec<String> = required
            .iter()
            .filter(|c| !have.contains(**c))
            .map(|c| c.to_string())
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        missing.sort();
        Err(CgroupError::NotMounted(missing))
    }
}

/// The controllers of a v1 mount from its super options (`rw,cpu,cpuacct`,
/// `rw,name=systemd` → `systemd`).
fn v1_controllers(super_opts: &str) -> impl Iterator<Item = String> + '_ {
    super_opts.split(',').filter_map(|o| {
        if let Some(name) = o.strip_prefix("name=") {
            return Some(name.to_string());
        }
        V1_CONTROLLERS.contains(&o).then(|| o.to_string())
    })
}

/// One mount of the table.
struct Mount<'a> {
    point: PathBuf,
    fstype: &'a str,
    super_opts: &'a str,
}

/// A mountinfo line: `id parent maj:min root point opts [optional...] - fstype source super`.
fn parse_line(line: &str) -> Option<Mount<'_>> {
    let fields: Vec<&str> = line.split(' ').collect();
    let point = fields.get(4)?;
    let sep = fields.iter().skip(6).position(|f| *f == "-")? + 6;
    Some(Mount {
        point: PathBuf::from(unescape(point)),
        fstype: fields.get(sep + 1)?,
        super_opts: fields.get(sep + 3).copied().unwrap_or(""),
    })
}

/// Undoes mountinfo's octal escapes (`\040` for a space).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let code = b
            .get(i + 1..i + 4)
            .filter(|d| b[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)))
            .and_then(|d| u8::from_str_radix(std::str::from_utf8(d).ok()?, 8).ok());
        match code {
            Some(c) => {
                out.push(c);
                i += 4;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// This VM's cgroup lines of /proc/self/mountinfo: v1 controllers each on its own, a named
    /// systemd hierarchy and a cgroup2 mount at `unified` (hybrid), no hugetlb.
    const HYBRID_MOUNTINFO: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
36 31 0:33 / /sys/fs/cgroup/devices rw,relatime - cgroup cgroup rw,devices
37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
38 31 0:35 / /sys/fs/cgroup/blkio rw,relatime - cgroup cgroup rw,blkio
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

    /// A systemd distribution on cgroup v2 only.
    const V2_MOUNTINFO: &str = "\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
35 24 0:30 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
";

    /// Cgroup v1 with co-mounted controllers (the directories `cpu` and `cpuacct` are symlinks to
    /// `cpu,cpuacct`, which mountinfo does not show), no pids, memory mounted a second time
    /// deeper, a mount point with an escaped space.
    const COMOUNTED_MOUNTINFO: &str = "\
25 18 0:22 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
27 25 0:24 / /sys/fs/cgroup/systemd rw,nosuid,nodev,noexec,relatime shared:11 - cgroup cgroup rw,xattr,name=systemd
30 25 0:27 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:14 - cgroup cgroup rw,cpu,cpuacct
31 25 0:28 / /sys/fs/cgroup/net_cls,net_prio rw,nosuid,nodev,noexec,relatime shared:15 - cgroup cgroup rw,net_cls,net_prio
32 25 0:29 / /sys/fs/cgroup/cpuset rw,nosuid,nodev,noexec,relatime shared:16 - cgroup cgroup rw,cpuset,clone_children
33 25 0:30 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:17 - cgroup cgroup rw,memory
34 60 0:30 / /var/lib/some\\040where/memory rw,relatime shared:17 - cgroup cgroup rw,memory
35 25 0:31 / /sys/fs/cgroup/hugetlb rw,nosuid,nodev,noexec,relatime shared:18 - cgroup cgroup rw,hugetlb
";

    #[test]
    fn this_vms_hybrid_layout() {
        let l = Layout::from_mountinfo(HYBRID_MOUNTINFO).unwrap();
        assert_eq!(l.mode(), Mode::Hybrid);
        assert!(!l.mode().is_v2());
        assert_eq!(
            l.mount_point("cpu").unwrap(),
            Path::new("/sys/fs/cgroup/cpu")
        );
        assert_eq!(
            l.mount_point("cpuacct").unwrap(),
            Path::new("/sys/fs/cgroup/cpuacct")
        );
        assert_eq!(
            l.mount_point("systemd").unwrap(),
            Path::new("/sys/fs/cgroup/systemd")
        );
        assert_eq!(l.mount_point("hugetlb"), None);
        let controllers = l.controllers().unwrap();
        let expected = [
            "blkio", "cpu", "cpuacct", "cpuset", "devices", "freezer", "memory", "pids", "systemd",
        ];
        assert_eq!(controllers.iter().collect::<Vec<_>>(), expected);
        // A cgroup is made in each v1 hierarchy and in the cgroup2 one beside them.
        let h = l.hierarchies();
        assert_eq!(h.len(), 10);
        assert!(h.contains(&Path::new("/sys/fs/cgroup/unified")));
        l.validate_required_controllers().unwrap();
    }

    #[test]
    fn pure_v2_layout() {
        let l = Layout::from_mountinfo(V2_MOUNTINFO).unwrap();
        assert_eq!(l.mode(), Mode::V2);
        assert_eq!(l.root(), Path::new("/sys/fs/cgroup"));
        assert_eq!(l.hierarchies(), [Path::new("/sys/fs/cgroup")]);
        assert_eq!(
            l.mount_point("memory").unwrap(),
            Path::new("/sys/fs/cgroup")
        );
    }

    #[test]
    fn comounted_v1_layout() {
        let l = Layout::from_mountinfo(COMOUNTED_MOUNTINFO).unwrap();
        assert_eq!(l.mode(), Mode::V1);
        let cpu = Path::new("/sys/fs/cgroup/cpu,cpuacct");
        assert_eq!(l.mount_point("cpu").unwrap(), cpu);
        assert_eq!(l.mount_point("cpuacct").unwrap(), cpu);
        // The shortest mount point of a controller mounted twice, as Go picks.
        assert_eq!(
            l.mount_point("memory").unwrap(),
            Path::new("/sys/fs/cgroup/memory")
        );
        assert_eq!(l.hierarchies().len(), 6);
        let err = l.validate_required_controllers().unwrap_err();
        assert_eq!(
            err.to_string(),
            "system validation failed - Following Cgroup subsystem not mounted: [pids]"
        );
    }

    #[test]
    fn mountinfo_edge_cases() {
        assert!(matches!(
            Layout::from_mountinfo("22 1 8:1 / / rw - ext4 /dev/sda1 rw\n"),
            Err(CgroupError::NoMounts)
        ));
        // A cgroup2 mount over the tmpfs at the root hides it: v2.
        let stacked =
            format!("{HYBRID_MOUNTINFO}50 31 0:40 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n");
        assert_eq!(Layout::from_mountinfo(&stacked).unwrap().mode(), Mode::V2);
        let spaced = "34 60 0:30 / /mnt/a\\040b rw - cgroup cgroup rw,memory\n";
        let l = Layout::from_mountinfo(spaced).unwrap();
        assert_eq!(l.mount_point("memory").unwrap(), Path::new("/mnt/a b"));
    }
}
