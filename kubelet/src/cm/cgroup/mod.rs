//! The cgroup drivers, as Go's `cgroup_manager_linux.go` over runc's `cgroups/fs` (v1),
//! `cgroups/fs2` (v2) and `cgroups/systemd` managers: make, update, find and destroy a cgroup
//! by its driver-neutral name, list its processes and sub-cgroups, read its usage.
//!
//! Both drivers write the same files; they differ in where a name lives and who makes it.
//! cgroupfs: `/kubepods/burstable/pod<uid>`, made with mkdir. systemd:
//! `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice`, each a
//! transient slice unit that systemd makes, given the limits as unit properties too.
//!
//! Synchronous (file system calls); async callers run it in `spawn_blocking`.
//!
//! - [`layout`]: which hierarchy the node has (v1, hybrid, v2) and where.
//! - [`name`]: a cgroup's name as components (Go's `CgroupName`).
//! - [`systemd`]: slices as transient units over systemd's D-Bus API.
//! - `v1`, `v2`: the files each hierarchy is written through.
//! - `fs`: cgroup file operations (also on a plain scratch tree, for tests).
//! - `tests` (scratch trees) and `real_tree` (one ignored round trip on the real tree, root).

mod current;
pub mod error;
mod fs;
pub mod layout;
pub mod name;
pub mod systemd;
mod v1;
mod v2;

#[cfg(test)]
mod real_tree;
#[cfg(test)]
mod tests;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

pub use current::Current;
pub use error::CgroupError;
pub use layout::Layout;
pub use name::CgroupName;
pub use systemd::Systemd;

use crate::cm::ResourceConfig;
use crate::podspec::resources::hugepage_unit_size;

/// Attempts at removing a cgroup some process or the kernel still holds (runc's
/// `RemovePaths`), the delay doubling from the first.
const REMOVE_ATTEMPTS: u32 = 5;
const REMOVE_FIRST_DELAY: Duration = Duration::from_millis(10);

/// Makes, updates and removes cgroups on one node's hierarchy.
#[derive(Clone, Debug)]
pub struct CgroupManager {
    layout: Layout,
    hugepage_sizes: Vec<String>,
    /// The systemd driver's connection; the cgroupfs driver without.
    systemd: Option<Systemd>,
}

impl CgroupManager {
    /// A cgroupfs driver manager over `layout`.
    pub fn new(layout: Layout) -> CgroupManager {
        CgroupManager {
            layout,
            hugepage_sizes: Vec::new(),
            systemd: None,
        }
    }

    /// The systemd driver over `layout`, through `systemd`.
    pub fn with_systemd(mut self, systemd: Systemd) -> CgroupManager {
        self.systemd = Some(systemd);
        self
    }

    /// The driver's name (`cgroupfs`, `systemd`).
    pub fn driver(&self) -> &'static str {
        if self.systemd.is_some() {
            "systemd"
        } else {
            "cgroupfs"
        }
    }

    /// The name whose cgroupfs path is where the driver keeps `name`.
    fn on_disk(&self, name: &CgroupName) -> CgroupName {
        if self.systemd.is_some() {
            CgroupName::from_cgroupfs(&name.to_systemd())
        } else {
            name.clone()
        }
    }

    /// The node's huge page sizes (`2MB`, `1GB`): with them, every create and update limits
    /// each size the config does not name to 0, as Go's `maybeSetHugetlb` does; without, only
    /// the config's sizes are written.
    pub fn with_hugepage_sizes(mut self, sizes: Vec<String>) -> CgroupManager {
        self.hugepage_sizes = sizes;
        self
    }

    /// The hierarchy managed.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// `name`'s directory in `controller`'s hierarchy (v2: the one hierarchy).
    #[cfg(test)]
    pub fn dir(&self, controller: &str, name: &CgroupName) -> Option<PathBuf> {
        let name = self.on_disk(name);
        self.layout.mount_point(controller).map(|m| name.dir_in(m))
    }

    /// Whether `name` exists, as Go's `Exists`: v1 in each mounted hierarchy of cpu, cpuacct,
    /// cpuset, memory, systemd, pids and hugetlb; v2 with each of the kubelet's available
    /// controllers enabled for it.
    pub fn exists(&self, name: &CgroupName) -> bool {
        let name = &self.on_disk(name);
        if self.layout.mode().is_v2() {
            let (Ok(needed), Ok(enabled)) = (
                v2::supported_controllers(&self.layout),
                v2::enabled_controllers(&self.layout, name),
            ) else {
                return false;
            };
            return needed.is_subset(&enabled);
        }
        const CHECKED: [&str; 7] = [
            "cpu", "cpuacct", "cpuset", "memory", "systemd", "pids", "hugetlb",
        ];
        CHECKED
            .iter()
            .filter_map(|c| self.layout.mount_point(c).map(|m| name.dir_in(m)))
            .all(|d| d.is_dir())
    }

    /// Makes `name` (and its missing parents) in every hierarchy, then writes `config`.
    /// With the systemd driver the slice unit is started first, its limits given; systemd
    /// pulls in the parent slices.
    pub fn create(&self, name: &CgroupName, config: &ResourceConfig) -> Result<(), CgroupError> {
        if let Some(systemd) = &self.systemd {
            systemd.start_slice(
                &name.to_systemd_unit(),
                &name.parent().to_systemd_unit(),
                config,
            )?;
        }
        let on_disk = self.on_disk(name);
        if self.layout.mode().is_v2() {
            v2::create(&self.layout, &on_disk)?;
        } else {
            v1::create(&self.layout, &on_disk)?;
        }
        self.write(&on_disk, config)
    }

    /// Writes what `config` sets to the existing cgroup `name`.
    pub fn update(&self, name: &CgroupName, config: &ResourceConfig) -> Result<(), CgroupError> {
        if let Some(systemd) = &self.systemd {
            systemd.set_properties(&name.to_systemd_unit(), config)?;
        }
        self.write(&self.on_disk(name), config)
    }

    /// Writes `config` into the files of the cgroup at `name` (on disk).
    fn write(&self, name: &CgroupName, config: &ResourceConfig) -> Result<(), CgroupError> {
        let hugetlb = self.hugetlb_limits(config);
        if self.layout.mode().is_v2() {
            v2::set(&self.layout, name, config, &hugetlb)
        } else {
            v1::set(&self.layout, name, config, &hugetlb)
        }
    }

    /// Removes `name` and every cgroup below it (a runtime's container cgroups), deepest
    /// first, in every hierarchy; a missing one is removed already. A cgroup still busy is
    /// tried again a few times, as runc's `RemovePaths`.
    pub fn destroy(&self, name: &CgroupName) -> Result<(), CgroupError> {
        if name.is_root() {
            return Err(CgroupError::DestroyRoot);
        }
        if let Some(systemd) = &self.systemd {
            systemd.stop(&name.to_systemd_unit())?;
        }
        let name = &self.on_disk(name);
        let mut left: Vec<PathBuf> = self
            .layout
            .hierarchies()
            .into_iter()
            .map(|h| name.dir_in(h))
            .collect();
        let mut delay = REMOVE_FIRST_DELAY;
        let mut last_error = None;
        for attempt in 0..REMOVE_ATTEMPTS {
            if attempt > 0 {
                std::thread::sleep(delay);
                delay *= 2;
            }
            left.retain(|dir| {
                let removed = fs::remove_tree(dir);
                // A removal may report an error for a directory that went anyway.
                let still_there = dir.exists();
                if still_there {
                    let cause = removed
                        .err()
                        .unwrap_or_else(|| std::io::Error::other("still present after removal"));
                    last_error = Some((dir.clone(), cause));
                }
                still_there
            });
            if left.is_empty() {
                return Ok(());
            }
        }
        let (path, source) =
            last_error.unwrap_or_else(|| (PathBuf::new(), std::io::Error::other("not removed")));
        Err(error::io_error(&name.to_cgroupfs(), "rmdir", path, source))
    }

    /// The processes in `name` and the cgroups below it, in every hierarchy (Go's `Pids`);
    /// a cgroup that cannot be read is skipped.
    pub fn pids(&self, name: &CgroupName) -> Vec<i32> {
        let name = &self.on_disk(name);
        let mut pids = BTreeSet::new();
        for h in self.layout.hierarchies() {
            fs::procs_below(&name.dir_in(h), &mut pids);
        }
        pids.into_iter().collect()
    }

    /// The names (last components) of the cgroups right below `name`, in any hierarchy,
    /// sorted. With the systemd driver, only slices: a runtime's scopes are not the kubelet's.
    pub fn children(&self, name: &CgroupName) -> Vec<String> {
        let systemd = self.systemd.is_some();
        let on_disk = self.on_disk(name);
        let names: BTreeSet<String> = self
            .layout
            .hierarchies()
            .into_iter()
            .flat_map(|h| fs::sub_dirs(&on_disk.dir_in(h)))
            .filter_map(|d| d.file_name()?.to_str().map(str::to_string))
            .filter_map(|d| {
                if !systemd {
                    return Some(d);
                }
                d.ends_with(".slice")
                    .then(|| CgroupName::from_systemd(&d).last().map(str::to_string))
                    .flatten()
            })
            .collect();
        names.into_iter().collect()
    }

    /// The huge page limits to write: the config's by size name, then 0 for each node size it
    /// does not name; a page size without a name is skipped, as Go logs and skips it.
    fn hugetlb_limits(&self, config: &ResourceConfig) -> Vec<(String, i64)> {
        let mut limits: Vec<(String, i64)> = config
            .hugepage_limits
            .iter()
            .filter_map(|(bytes, limit)| Some((hugepage_unit_size(*bytes)?, *limit)))
            .collect();
        for size in &self.hugepage_sizes {
            if !limits.iter().any(|(s, _)| s == size) {
                limits.push((size.clone(), 0));
            }
        }
        limits
    }
}

/// `name`'s directory in `controller`'s hierarchy, which `setting` needs.
fn controller_dir(
    layout: &Layout,
    name: &CgroupName,
    controller: &'static str,
    setting: &'static str,
) -> Result<PathBuf, CgroupError> {
    layout
        .mount_point(controller)
        .map(|m| name.dir_in(m))
        .ok_or_else(|| CgroupError::MissingController {
            cgroup: name.to_cgroupfs(),
            controller,
            setting,
        })
}
