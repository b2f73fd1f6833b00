//! What the node's cgroups can enforce, decided the way runc decides when it creates the
//! container: from the mounted hierarchies in `/proc/self/mountinfo` (a v1 hierarchy lists its
//! controllers in its super options) and, on the unified hierarchy, from the root's
//! `cgroup.controllers`. Never from whether a directory exists: any `mkdir -p` of a cgroup path
//! over a list of controller names leaves `/sys/fs/cgroup/<name>` behind with nothing mounted
//! on it, and runc, which reads mountinfo, then fails every container carrying a limit for it
//! (`cannot set hugetlb limit: container could not join or create cgroup`).
//!
//! [`CgroupSupport::node`] detects once per process and logs one line; the spec builders take
//! a `&CgroupSupport`, so tests hand them any node shape.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Where runc, containerd and the kubelet look for the cgroup hierarchies.
const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// Where the kernel lists the huge page sizes it offers (`hugepages-2048kB`, …).
const HUGEPAGES_DIR: &str = "/sys/kernel/mm/hugepages";

/// How the node's cgroups are laid out, as runc sees it (`statfs("/sys/fs/cgroup")`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CgroupMode {
    /// cgroup v1 hierarchies only.
    Legacy,
    /// cgroup v1 hierarchies, plus a cgroup2 mount elsewhere (`/sys/fs/cgroup/unified`):
    /// runc's v1 manager sets every limit through the v1 hierarchies, so a controller bound
    /// to that cgroup2 mount enforces nothing for containers.
    Hybrid,
    /// cgroup2 at `/sys/fs/cgroup`.
    Unified,
}

/// What the node can enforce for a container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CgroupSupport {
    /// The layout.
    pub mode: CgroupMode,
    /// Controllers runc can set limits through: those mounted as v1 hierarchies under the
    /// cgroup root (v1, hybrid), or those in the root's `cgroup.controllers` (unified).
    pub controllers: BTreeSet<String>,
    /// Whether memory+swap can be limited: v1 `memory.memsw.limit_in_bytes` in the mounted
    /// memory hierarchy, v2 `memory.swap.max` in a non-root cgroup.
    pub swap_accounting: bool,
    /// The huge page sizes the kernel offers, in the kubelet's names (`2MB`, `1GB`), smallest
    /// first.
    pub hugepage_sizes: Vec<String>,
}

impl CgroupSupport {
    /// This node's support, detected the first time it is asked for and logged then, in
    /// one line: the kernel's cgroup layout does not change while we run.
    pub fn node() -> &'static CgroupSupport {
        static NODE: OnceLock<CgroupSupport> = OnceLock::new();
        NODE.get_or_init(|| {
            let support = detect(&HostFiles);
            support.log();
            support
        })
    }

    /// Whether the node is on the unified (v2) hierarchy.
    pub fn unified(&self) -> bool {
        self.mode == CgroupMode::Unified
    }

    /// Whether runc can set limits through `controller`.
    pub fn has(&self, controller: &str) -> bool {
        self.controllers.contains(controller)
    }

    /// The start-up line: the layout, the controllers, and what requests will lose on this
    /// node, so nobody has to find out per container.
    fn log(&self) {
        let mode = match self.mode {
            CgroupMode::Legacy => "v1",
            CgroupMode::Hybrid => "v1 (hybrid: limits go through the v1 hierarchies)",
            CgroupMode::Unified => "v2 (unified)",
        };
        let controllers: Vec<&str> = self.controllers.iter().map(String::as_str).collect();
        let mut line = format!("cgroup {mode}, controllers: {}", controllers.join(" "));
        if self.has("hugetlb") {
            line.push_str("; huge page limits are enforced");
        } else {
            let _ = write!(
                line,
                "; hugetlb is not available, so huge page limits are dropped from every \
                 container (node page sizes: {})",
                if self.hugepage_sizes.is_empty() {
                    "none".to_string()
                } else {
                    self.hugepage_sizes.join(" ")
                }
            );
        }
        if !self.swap_accounting {
            line.push_str(
                "; no swap accounting, so memory+swap limits are not set \
                 (memory_swap_limit_in_bytes is dropped)",
            );
        }
        tracing::info!(
            hugetlb = self.has("hugetlb"),
            swap_accounting = self.swap_accounting,
            "{line}"
        );
    }
}

/// One mount, from a mountinfo line: what the layout needs of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Mount {
    /// Where it is mounted.
    pub mount_point: PathBuf,
    /// What of its file system is at the mount point: for a cgroup hierarchy, the cgroup
    /// relative to the hierarchy's root (`/` unless a sub-tree is mounted, as inside a cgroup
    /// namespace).
    pub root: String,
    /// The file system type (`cgroup`, `cgroup2`, `tmpfs`, …).
    pub fstype: String,
    /// The super block options (for a v1 hierarchy, its controllers among flags).
    pub super_options: String,
}

/// Super options of a v1 cgroup mount that are flags, not controllers.
const V1_FLAGS: &[&str] = &[
    "rw",
    "ro",
    "none",
    "all",
    "noprefix",
    "xattr",
    "clone_children",
    "cpuset_v2_mode",
    "favordynmods",
    "__DEVEL__sane_behavior",
];

impl Mount {
    /// A v1 hierarchy.
    fn is_v1(&self) -> bool {
        self.fstype == "cgroup"
    }

    /// The unified hierarchy.
    fn is_v2(&self) -> bool {
        self.fstype == "cgroup2"
    }

    /// The controllers bound to a v1 hierarchy: its super options without flags and without
    /// `name=` (a named hierarchy such as systemd's has no controller) or `release_agent=`.
    pub(crate) fn v1_controllers(&self) -> Vec<&str> {
        if !self.is_v1() {
            return Vec::new();
        }
        self.super_options
            .split(',')
            .filter(|o| !o.is_empty() && !o.contains('=') && !V1_FLAGS.contains(o))
            .collect()
    }
}

/// Parses mountinfo (`proc(5)`): `id parent major:minor root mount-point options
/// [optional…] - fstype source super-options`, in file order; malformed lines are skipped.
pub(crate) fn parse_mountinfo(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            let sep = fields.iter().position(|f| *f == "-")?;
            Some(Mount {
                root: unescape(fields.get(3)?),
                mount_point: PathBuf::from(unescape(fields.get(4)?)),
                fstype: (*fields.get(sep + 1)?).to_string(),
                super_options: fields.get(sep + 3).copied().unwrap_or("").to_string(),
            })
        })
        .collect()
}

/// Undoes mountinfo's octal escapes (`\040` for a space, `\011`, `\012`, `\134`).
pub(super) fn unescape(field: &str) -> String {
    if !field.contains('\\') {
        return field.to_string();
    }
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| bytes[i] == b'\\' && d.iter().all(|b| (b'0'..=b'7').contains(b)))
            .map(|d| d.iter().fold(0u32, |n, b| n * 8 + u32::from(b - b'0')))
            .and_then(|n| u8::try_from(n).ok());
        match octal {
            Some(b) => {
                out.push(b);
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The layout the mounts make, as runc reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    /// v1, hybrid or unified.
    pub mode: CgroupMode,
    /// Each v1 controller under runc's cgroup root and where it is mounted (the first mount
    /// listed, as runc takes it); empty when unified.
    pub v1: Vec<(String, PathBuf)>,
    /// The cgroup2 mount, if any (the one at `/sys/fs/cgroup` when unified).
    pub v2: Option<Mount>,
}

impl Layout {
    /// Where v1 `controller` is mounted.
    pub fn v1_mount(&self, controller: &str) -> Option<&Path> {
        self.v1
            .iter()
            .find(|(c, _)| c == controller)
            .map(|(_, p)| p.as_path())
    }
}

/// The layout of `mounts`. Unified when the mount on top at `/sys/fs/cgroup` (the last one
/// listed there) is cgroup2, which is what runc's statfs of that path sees. Otherwise the v1
/// hierarchies count under runc's cgroup root only: `/sys/fs/cgroup` when a tmpfs is on it,
/// else the parent of the first v1 mount (runc 1.1 `fs.rootPath`); and, like runc, the first
/// mount listed for a controller is the one used.
pub(crate) fn layout(mounts: &[Mount]) -> Layout {
    let default_root = Path::new(CGROUP_ROOT);
    let top = mounts.iter().rfind(|m| m.mount_point == default_root);
    if let Some(top) = top.filter(|m| m.is_v2()) {
        return Layout {
            mode: CgroupMode::Unified,
            v1: Vec::new(),
            v2: Some(top.clone()),
        };
    }
    let root = if top.is_some_and(|m| m.fstype == "tmpfs") {
        Some(default_root)
    } else {
        mounts
            .iter()
            .find(|m| m.is_v1())
            .and_then(|m| m.mount_point.parent())
    };
    let mut v1: Vec<(String, PathBuf)> = Vec::new();
    let under_root = mounts
        .iter()
        .filter(|m| m.is_v1() && root.is_some_and(|r| m.mount_point.starts_with(r)));
    for m in under_root {
        for c in m.v1_controllers() {
            if !v1.iter().any(|(known, _)| known == c) {
                v1.push((c.to_string(), m.mount_point.clone()));
            }
        }
    }
    let v2 = mounts.iter().find(|m| m.is_v2()).cloned();
    Layout {
        mode: if v2.is_some() {
            CgroupMode::Hybrid
        } else {
            CgroupMode::Legacy
        },
        v1,
        v2,
    }
}

/// The kubelet's names (`2MB`, `1GB`) for the kernel's `hugepages-<n>kB` entries, smallest
/// first; other names are skipped. runc (`cgroups.HugePageSizes`) names them the same way,
/// and that name is what it writes into `hugetlb.<name>.limit_in_bytes`.
pub(crate) fn hugepage_sizes<'a>(entries: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut sizes: Vec<u64> = entries
        .into_iter()
        .filter_map(|e| {
            e.strip_prefix("hugepages-")?
                .strip_suffix("kB")?
                .parse::<u64>()
                .ok()?
                .checked_mul(1024)
        })
        .collect();
    sizes.sort_unstable();
    sizes.dedup();
    sizes.into_iter().map(size_name).collect()
}

/// `2097152` → `2MB`, with the binary units Go's `units.CustomSize` uses for page sizes.
fn size_name(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KB", "MB", "GB", "TB", "PB"];
    let mut unit = 0;
    let mut whole = bytes;
    while whole >= 1024 && whole.is_multiple_of(1024) && unit + 1 < UNITS.len() {
        whole /= 1024;
        unit += 1;
    }
    format!("{whole}{}", UNITS[unit])
}

/// This process's cgroup on the unified hierarchy (the `0::<path>` line of
/// `/proc/self/cgroup`).
fn own_v2_cgroup(proc_self_cgroup: &str) -> Option<&str> {
    proc_self_cgroup
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(str::trim)
}

/// The host files detection reads, so tests can hand it any node.
pub(crate) trait NodeFiles {
    /// A file's text (None when it cannot be read).
    fn read(&self, path: &Path) -> Option<String>;
    /// Whether a file exists.
    fn exists(&self, path: &Path) -> bool;
    /// The names in a directory (sub-directories only when `dirs_only`).
    fn list(&self, dir: &Path, dirs_only: bool) -> Vec<String>;
}

/// The real host.
struct HostFiles;

impl NodeFiles for HostFiles {
    fn read(&self, path: &Path) -> Option<String> {
        std::fs::read_to_string(path).ok()
    }

    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }

    fn list(&self, dir: &Path, dirs_only: bool) -> Vec<String> {
        std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| !dirs_only || e.file_type().is_ok_and(|t| t.is_dir()))
            .filter_map(|e| e.file_name().into_string().ok())
            .collect()
    }
}

/// Detects the node's support from `files`.
pub(crate) fn detect(files: &impl NodeFiles) -> CgroupSupport {
    let mountinfo = files
        .read(Path::new("/proc/self/mountinfo"))
        .unwrap_or_else(|| {
            // Without it nothing can be shown to be mounted: limits that need a controller
            // we cannot vouch for (huge pages, swap) are dropped rather than failing pods.
            tracing::warn!("cannot read /proc/self/mountinfo; assuming no cgroup controllers");
            String::new()
        });
    let layout = layout(&parse_mountinfo(&mountinfo));
    let (controllers, swap_accounting) = match (&layout.mode, &layout.v2) {
        (CgroupMode::Unified, Some(v2)) => {
            let controllers = files
                .read(&v2.mount_point.join("cgroup.controllers"))
                .unwrap_or_default()
                .split_whitespace()
                .map(str::to_string)
                .collect();
            (controllers, v2_swap_accounting(files, v2))
        }
        _ => {
            // The mounted memory hierarchy's root has the memsw files when swap is accounted
            // (`swapaccount=1`, or a kernel that accounts by default).
            let swap = layout
                .v1_mount("memory")
                .is_some_and(|m| files.exists(&m.join("memory.memsw.limit_in_bytes")));
            (layout.v1.iter().map(|(c, _)| c.clone()).collect(), swap)
        }
    };
    let entries = files.list(Path::new(HUGEPAGES_DIR), false);
    CgroupSupport {
        mode: layout.mode,
        controllers,
        swap_accounting,
        hugepage_sizes: hugepage_sizes(entries.iter().map(String::as_str)),
    }
}

/// `memory.swap.max` exists in a non-root cgroup when swap is accounted. containerd and the
/// kubelet look in their own cgroup; the root has no such file, so from the root we look in
/// its children, which answer the same question.
fn v2_swap_accounting(files: &impl NodeFiles, v2: &Mount) -> bool {
    let own = files
        .read(Path::new("/proc/self/cgroup"))
        .and_then(|t| own_v2_cgroup(&t).map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("/"));
    // The path is relative to the hierarchy's root; the mount shows `v2.root` at its top.
    let rel = own.strip_prefix(&v2.root).unwrap_or(&own);
    let rel = rel.strip_prefix("/").unwrap_or(rel);
    if !rel.as_os_str().is_empty() {
        return files.exists(&v2.mount_point.join(rel).join("memory.swap.max"));
    }
    files
        .list(&v2.mount_point, true)
        .iter()
        .any(|child| files.exists(&v2.mount_point.join(child).join("memory.swap.max")))
}

#[cfg(test)]
pub(crate) mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::collections::HashMap;

    use super::*;

    /// This VM: v1 controllers each in its own hierarchy, `name=systemd`, cgroup2 at
    /// `/sys/fs/cgroup/unified` (where hugetlb is bound), no v1 hugetlb.
    pub(crate) const HYBRID_NO_HUGETLB: &str = "\
22 27 0:21 / /proc rw,relatime - proc proc rw
23 27 0:22 / /sys rw,relatime - sysfs sysfs rw
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard
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

    /// A systemd v1 host (Debian 10 / CentOS 7 style): co-mounted `cpu,cpuacct` and
    /// `net_cls,net_prio`, hugetlb mounted, systemd's named hierarchy, no cgroup2.
    pub(crate) const LEGACY_WITH_HUGETLB: &str = "\
25 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw,errors=remount-ro
18 25 0:17 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
26 18 0:22 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
27 26 0:23 / /sys/fs/cgroup/systemd rw,nosuid,nodev,noexec,relatime shared:10 - cgroup cgroup rw,xattr,release_agent=/lib/systemd/systemd-cgroups-agent,name=systemd
30 26 0:26 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:11 - cgroup cgroup rw,cpu,cpuacct
31 26 0:27 / /sys/fs/cgroup/net_cls,net_prio rw,nosuid,nodev,noexec,relatime shared:12 - cgroup cgroup rw,net_cls,net_prio
32 26 0:28 / /sys/fs/cgroup/hugetlb rw,nosuid,nodev,noexec,relatime shared:13 - cgroup cgroup rw,hugetlb
33 26 0:29 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:14 - cgroup cgroup rw,memory
34 26 0:30 / /sys/fs/cgroup/cpuset rw,nosuid,nodev,noexec,relatime shared:15 - cgroup cgroup rw,cpuset
35 26 0:31 / /sys/fs/cgroup/devices rw,nosuid,nodev,noexec,relatime shared:16 - cgroup cgroup rw,devices
36 26 0:32 / /sys/fs/cgroup/pids rw,nosuid,nodev,noexec,relatime shared:17 - cgroup cgroup rw,pids
37 26 0:33 / /sys/fs/cgroup/freezer rw,nosuid,nodev,noexec,relatime shared:18 - cgroup cgroup rw,freezer
38 26 0:34 / /sys/fs/cgroup/blkio rw,nosuid,nodev,noexec,relatime shared:19 - cgroup cgroup rw,blkio
39 26 0:35 / /sys/fs/cgroup/perf_event rw,nosuid,nodev,noexec,relatime shared:20 - cgroup cgroup rw,perf_event
";

    /// The same host without the hugetlb hierarchy (a kernel without it, or not mounted).
    pub(crate) fn legacy_without_hugetlb() -> String {
        LEGACY_WITH_HUGETLB
            .lines()
            .filter(|l| !l.contains("hugetlb"))
            .map(|l| format!("{l}\n"))
            .collect()
    }

    /// A systemd v2 host (Debian 11+, Ubuntu 22.04): cgroup2 at /sys/fs/cgroup.
    pub(crate) const UNIFIED: &str = "\
25 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw,errors=remount-ro
18 25 0:17 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
26 18 0:22 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
";

    /// A fake node: file contents, existing paths, directory listings.
    #[derive(Default)]
    pub(crate) struct FakeNode {
        pub files: HashMap<PathBuf, String>,
        pub dirs: HashMap<PathBuf, Vec<String>>,
    }

    impl FakeNode {
        pub(crate) fn new(mountinfo: &str) -> Self {
            let mut node = FakeNode::default();
            node.file("/proc/self/mountinfo", mountinfo);
            node.dir(HUGEPAGES_DIR, &["hugepages-1048576kB", "hugepages-2048kB"]);
            node
        }
        pub(crate) fn file(&mut self, path: &str, text: &str) -> &mut Self {
            self.files.insert(PathBuf::from(path), text.to_string());
            self
        }
        pub(crate) fn dir(&mut self, path: &str, names: &[&str]) -> &mut Self {
            self.dirs.insert(
                PathBuf::from(path),
                names.iter().map(|n| n.to_string()).collect(),
            );
            self
        }
    }

    impl NodeFiles for FakeNode {
        fn read(&self, path: &Path) -> Option<String> {
            self.files.get(path).cloned()
        }
        fn exists(&self, path: &Path) -> bool {
            self.files.contains_key(path) || self.dirs.contains_key(path)
        }
        fn list(&self, dir: &Path, _dirs_only: bool) -> Vec<String> {
            self.dirs.get(dir).cloned().unwrap_or_default()
        }
    }

    /// This VM's shape: hybrid, hugetlb not mounted, swap accounted, 2MB and 1GB pages.
    pub(crate) fn v1_without_hugetlb() -> CgroupSupport {
        let mut node = FakeNode::new(HYBRID_NO_HUGETLB);
        node.file("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes", "")
            .file("/sys/fs/cgroup/unified/cgroup.controllers", "hugetlb\n");
        detect(&node)
    }

    /// A v1 node with hugetlb mounted and swap accounted.
    pub(crate) fn v1_with_hugetlb() -> CgroupSupport {
        let mut node = FakeNode::new(LEGACY_WITH_HUGETLB);
        node.file("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes", "");
        detect(&node)
    }

    /// A v1 node without hugetlb and without swap accounting.
    pub(crate) fn v1_without_swap() -> CgroupSupport {
        detect(&FakeNode::new(&legacy_without_hugetlb()))
    }

    /// A unified node with every controller and swap accounted.
    pub(crate) fn v2() -> CgroupSupport {
        let mut node = FakeNode::new(UNIFIED);
        node.file(
            "/sys/fs/cgroup/cgroup.controllers",
            "cpuset cpu io memory hugetlb pids rdma misc\n",
        )
        .file("/proc/self/cgroup", "0::/ferrolet\n")
        .file("/sys/fs/cgroup/ferrolet/memory.swap.max", "max\n");
        detect(&node)
    }

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn hybrid_without_a_v1_hugetlb_mount() {
        let mut node = FakeNode::new(HYBRID_NO_HUGETLB);
        node.file("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes", "")
            // hugetlb is bound to the cgroup2 mount here, which runc's v1 manager ignores.
            .file("/sys/fs/cgroup/unified/cgroup.controllers", "hugetlb\n");
        let s = detect(&node);
        assert_eq!(s.mode, CgroupMode::Hybrid);
        assert_eq!(
            s.controllers,
            set(&[
                "blkio", "cpu", "cpuacct", "cpuset", "devices", "freezer", "memory", "pids"
            ])
        );
        assert!(!s.has("hugetlb") && !s.has("systemd") && !s.has("name=systemd"));
        assert!(s.swap_accounting);
        assert!(!s.unified());
        assert_eq!(s.hugepage_sizes, ["2MB", "1GB"]);
    }

    #[test]
    fn an_empty_hugetlb_directory_is_not_a_controller() {
        // The directory exists (mkdir -p left it) but nothing is mounted on it.
        let mut node = FakeNode::new(HYBRID_NO_HUGETLB);
        node.dir("/sys/fs/cgroup/hugetlb", &[]);
        assert!(!detect(&node).has("hugetlb"));
    }

    #[test]
    fn legacy_with_co_mounted_controllers_and_hugetlb() {
        let mut node = FakeNode::new(LEGACY_WITH_HUGETLB);
        node.file(
            "/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes",
            "9223372036854771712\n",
        );
        let s = detect(&node);
        assert_eq!(s.mode, CgroupMode::Legacy);
        assert_eq!(
            s.controllers,
            set(&[
                "blkio",
                "cpu",
                "cpuacct",
                "cpuset",
                "devices",
                "freezer",
                "hugetlb",
                "memory",
                "net_cls",
                "net_prio",
                "perf_event",
                "pids"
            ])
        );
        assert!(s.swap_accounting);

        let mounts = parse_mountinfo(LEGACY_WITH_HUGETLB);
        let l = layout(&mounts);
        assert_eq!(
            l.v1_mount("cpuacct"),
            Some(Path::new("/sys/fs/cgroup/cpu,cpuacct"))
        );
        assert_eq!(
            l.v1_mount("net_prio"),
            Some(Path::new("/sys/fs/cgroup/net_cls,net_prio"))
        );
        let systemd = mounts
            .iter()
            .find(|m| m.mount_point.ends_with("systemd"))
            .unwrap();
        assert!(systemd.v1_controllers().is_empty(), "{systemd:?}");
    }

    #[test]
    fn legacy_without_hugetlb_or_swap_accounting() {
        let node = FakeNode::new(&legacy_without_hugetlb());
        let s = detect(&node);
        assert_eq!(s.mode, CgroupMode::Legacy);
        assert!(!s.has("hugetlb"));
        assert!(s.has("cpuset") && s.has("cpuacct"));
        assert!(!s.swap_accounting, "no memory.memsw.* files");
    }

    #[test]
    fn unified_reads_the_root_controllers_and_swap_from_our_cgroup() {
        let mut node = FakeNode::new(UNIFIED);
        node.file(
            "/sys/fs/cgroup/cgroup.controllers",
            "cpuset cpu io memory hugetlb pids rdma misc\n",
        )
        .file(
            "/proc/self/cgroup",
            "0::/system.slice/ferrolet-cri.service\n",
        )
        .file(
            "/sys/fs/cgroup/system.slice/ferrolet-cri.service/memory.swap.max",
            "max\n",
        );
        let s = detect(&node);
        assert_eq!(s.mode, CgroupMode::Unified);
        assert!(s.unified());
        assert!(s.has("hugetlb") && s.has("cpuset") && s.has("io"));
        assert!(!s.has("blkio"));
        assert!(s.swap_accounting);

        // No hugetlb in the root's controllers (a kernel without it).
        node.file(
            "/sys/fs/cgroup/cgroup.controllers",
            "cpuset cpu io memory pids\n",
        );
        assert!(!detect(&node).has("hugetlb"));
    }

    #[test]
    fn unified_swap_from_the_root_cgroup_looks_at_a_child() {
        let mut node = FakeNode::new(UNIFIED);
        node.file("/sys/fs/cgroup/cgroup.controllers", "cpu memory pids\n")
            .file("/proc/self/cgroup", "0::/\n");
        assert!(!detect(&node).swap_accounting);
        node.dir("/sys/fs/cgroup", &["init.scope", "kubepods"])
            .file("/sys/fs/cgroup/kubepods/memory.swap.max", "max\n");
        assert!(detect(&node).swap_accounting);
    }

    #[test]
    fn unified_inside_a_cgroup_namespace() {
        // The mount shows a sub-tree; /proc/self/cgroup names our cgroup from the same root.
        let mut node = FakeNode::new(
            "26 18 0:22 /kubepods/pod1 /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n",
        );
        node.file("/sys/fs/cgroup/cgroup.controllers", "cpu memory pids\n")
            .file("/proc/self/cgroup", "0::/kubepods/pod1/ctr\n")
            .file("/sys/fs/cgroup/ctr/memory.swap.max", "max\n");
        let s = detect(&node);
        assert!(s.unified() && s.swap_accounting && !s.has("hugetlb"));
    }

    #[test]
    fn the_mount_on_top_at_the_cgroup_root_decides_the_mode() {
        // A tmpfs mounted over a cgroup2 root later hides it: runc's statfs sees the tmpfs.
        let text = format!(
            "{UNIFIED}40 26 0:40 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n\
             41 40 0:41 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
        );
        let s = detect(&FakeNode::new(&text));
        assert_eq!(s.mode, CgroupMode::Hybrid);
        assert_eq!(s.controllers, set(&["memory"]));
    }

    #[test]
    fn nothing_readable_means_nothing_available() {
        let node = FakeNode::default();
        let s = detect(&node);
        assert_eq!(s.mode, CgroupMode::Legacy);
        assert!(s.controllers.is_empty());
        assert!(!s.swap_accounting);
        assert!(s.hugepage_sizes.is_empty());
    }

    #[test]
    fn mountinfo_fields_are_parsed_and_unescaped() {
        let text = "\
50 31 0:40 /kubepods /sys/fs/cgroup/my\\040cpu rw,relatime shared:3 master:1 - cgroup cgroup rw,cpu,clone_children,favordynmods
51 31 0:41 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw,nsdelegate
bad line without a separator
";
        let mounts = parse_mountinfo(text);
        assert_eq!(mounts.len(), 2);
        assert_eq!(mounts[0].mount_point, Path::new("/sys/fs/cgroup/my cpu"));
        assert_eq!(mounts[0].root, "/kubepods");
        assert_eq!(mounts[0].fstype, "cgroup");
        assert_eq!(mounts[0].v1_controllers(), ["cpu"]);
        assert!(mounts[1].is_v2());
        assert!(mounts[1].v1_controllers().is_empty());
        assert_eq!(unescape("a\\134b\\011c"), "a\\b\tc");
        assert_eq!(unescape("trailing\\04"), "trailing\\04");
    }

    #[test]
    fn v1_hierarchies_outside_the_cgroup_root_do_not_count() {
        // runc looks for controllers under its cgroup root only.
        let text = format!(
            "{}60 27 0:50 / /mnt/hugetlb rw - cgroup cgroup rw,hugetlb\n",
            HYBRID_NO_HUGETLB
        );
        let node = FakeNode::new(&text);
        assert!(!detect(&node).has("hugetlb"));
    }

    #[test]
    fn hugepage_sizes_are_named_like_the_kubelet() {
        assert_eq!(
            hugepage_sizes([
                "hugepages-2048kB",
                "hugepages-1048576kB",
                "hugepages-64kB",
                "hugepages-32768kB",
                "nr_hugepages",
                "hugepages-xkB",
            ]),
            ["64KB", "2MB", "32MB", "1GB"]
        );
        assert!(hugepage_sizes([]).is_empty());
    }

    #[test]
    fn the_start_up_line_names_what_is_dropped() {
        // Only checks it does not panic on any shape; the text is for people.
        for text in [HYBRID_NO_HUGETLB, LEGACY_WITH_HUGETLB, UNIFIED, ""] {
            detect(&FakeNode::new(text)).log();
        }
    }
}
