//! A cgroup's name independent of the driver, as Go's `CgroupName`: its components from the
//! root (`["kubepods", "burstable", "pod<uid>"]`), the root being none.

use std::fmt;
use std::path::{Path, PathBuf};

use super::error::CgroupError;

/// A cgroup's name as components from the root (Go's `CgroupName`).
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CgroupName(Vec<String>);

impl CgroupName {
    /// The root cgroup (Go's `RootCgroupName`).
    #[cfg(test)]
    pub fn root() -> CgroupName {
        CgroupName(Vec::new())
    }

    /// This name with `child` below it (Go's `NewCgroupName`): a component may not hold `/`,
    /// nor `_` (kept free for the systemd driver's escaping), nor be empty, `.` or `..`.
    pub fn join(&self, child: &str) -> Result<CgroupName, CgroupError> {
        if child.is_empty()
            || child == "."
            || child == ".."
            || child.contains('/')
            || child.contains('_')
        {
            return Err(CgroupError::InvalidName(child.to_string()));
        }
        let mut components = self.0.clone();
        components.push(child.to_string());
        Ok(CgroupName(components))
    }

    /// The name of a cgroupfs path, `/` being the root (Go's `ParseCgroupfsToCgroupName`);
    /// empty components (`//`, a trailing `/`) are dropped.
    pub fn from_cgroupfs(path: &str) -> CgroupName {
        CgroupName(
            path.split('/')
                .filter(|c| !c.is_empty())
                .map(str::to_string)
                .collect(),
        )
    }

    /// The cgroupfs path (`/kubepods/burstable/pod<uid>`, `/` for the root), cleaned as Go's
    /// `path.Join` and runc's `CleanPath`: `.` dropped, `..` never above the root.
    pub fn to_cgroupfs(&self) -> String {
        format!("/{}", self.clean().join("/"))
    }

    /// The systemd driver's slice unit for this name: the last level of [`Self::to_systemd`]
    /// (`kubepods-burstable-pod12_34.slice`); the root is `-.slice`.
    pub fn to_systemd_unit(&self) -> String {
        let path = self.to_systemd();
        match path.rsplit('/').next() {
            Some(unit) if !unit.is_empty() => unit.to_string(),
            _ => "-.slice".to_string(),
        }
    }

    /// The systemd driver's cgroup path (Go's `ToSystemd`):
    /// `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod12_34.slice`.
    pub fn to_systemd(&self) -> String {
        crate::podspec::sandbox::systemd_cgroup(&self.to_cgroupfs())
    }

    /// The name of a systemd driver cgroup path or slice (Go's `ParseSystemdToCgroupName`):
    /// the last component, `.slice` dropped, split at `-`, `_` unescaped.
    pub fn from_systemd(path: &str) -> CgroupName {
        let last = path.rsplit('/').find(|c| !c.is_empty()).unwrap_or("");
        let unit = last.strip_suffix(".slice").unwrap_or(last);
        if unit.is_empty() || unit == "-" {
            return CgroupName(Vec::new());
        }
        CgroupName(unit.split('-').map(|c| c.replace('_', "-")).collect())
    }

    /// The last component; none for the root.
    pub fn last(&self) -> Option<&str> {
        self.clean().last().copied()
    }

    /// The components from the root.
    #[cfg(test)]
    pub fn components(&self) -> &[String] {
        &self.0
    }

    /// Whether this is the root cgroup.
    pub fn is_root(&self) -> bool {
        self.clean().is_empty()
    }

    /// The parent's name; the root is its own parent.
    pub fn parent(&self) -> CgroupName {
        let mut c = self.clean();
        c.pop();
        CgroupName(c.into_iter().map(str::to_string).collect())
    }

    /// This cgroup's directory under a hierarchy mounted at `mount`.
    pub fn dir_in(&self, mount: &Path) -> PathBuf {
        self.clean()
            .iter()
            .fold(mount.to_path_buf(), |p, c| p.join(c))
    }

    /// The components as the cgroupfs path has them (cleaned).
    pub(super) fn clean(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for c in &self.0 {
            match c.as_str() {
                "" | "." => {}
                ".." => {
                    out.pop();
                }
                c => out.push(c),
            }
        }
        out
    }
}

impl fmt::Display for CgroupName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_cgroupfs())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn cgroupfs_names_round_trip_as_go() {
        let pod = CgroupName::root()
            .join("kubepods")
            .unwrap()
            .join("burstable")
            .unwrap()
            .join("pod1234-abcd")
            .unwrap();
        assert_eq!(pod.to_cgroupfs(), "/kubepods/burstable/pod1234-abcd");
        assert_eq!(CgroupName::from_cgroupfs(&pod.to_cgroupfs()), pod);
        assert_eq!(pod.parent().to_cgroupfs(), "/kubepods/burstable");
        assert_eq!(pod.to_string(), "/kubepods/burstable/pod1234-abcd");
    }

    #[test]
    fn systemd_names_as_go() {
        let pod = CgroupName::from_cgroupfs("/kubepods/burstable/pod12-34");
        assert_eq!(pod.to_systemd_unit(), "kubepods-burstable-pod12_34.slice");
        assert_eq!(
            pod.to_systemd(),
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod12_34.slice"
        );
        assert_eq!(CgroupName::from_systemd(&pod.to_systemd()), pod);
        assert_eq!(
            CgroupName::from_systemd("kubepods-burstable-pod12_34.slice"),
            pod
        );
        assert_eq!(CgroupName::root().to_systemd(), "/");
        assert_eq!(CgroupName::root().to_systemd_unit(), "-.slice");
        assert_eq!(CgroupName::from_systemd("/"), CgroupName::root());
        assert_eq!(CgroupName::from_systemd("-.slice"), CgroupName::root());
        assert_eq!(
            CgroupName::from_cgroupfs("/kubepods").to_systemd(),
            "/kubepods.slice"
        );
    }

    #[test]
    fn root_and_custom_cgroup_roots() {
        // cgroupRoot "/" is the root (no components); "/custom" is one component.
        assert_eq!(CgroupName::from_cgroupfs("/"), CgroupName::root());
        assert_eq!(CgroupName::from_cgroupfs(""), CgroupName::root());
        assert_eq!(CgroupName::root().to_cgroupfs(), "/");
        assert!(CgroupName::root().is_root());
        let custom = CgroupName::from_cgroupfs("/custom");
        assert_eq!(custom.components(), ["custom"]);
        assert_eq!(
            custom.join("kubepods").unwrap().to_cgroupfs(),
            "/custom/kubepods"
        );
        assert_eq!(CgroupName::from_cgroupfs("/a/b/").components(), ["a", "b"]);
    }

    #[test]
    fn bad_components_are_refused_and_dotdot_cannot_escape() {
        for bad in ["a/b", "a_b", "", ".", ".."] {
            assert!(CgroupName::root().join(bad).is_err(), "{bad}");
        }
        let sneaky = CgroupName::from_cgroupfs("/../../etc");
        assert_eq!(sneaky.to_cgroupfs(), "/etc");
        assert_eq!(
            sneaky.dir_in(Path::new("/sys/fs/cgroup/memory")),
            Path::new("/sys/fs/cgroup/memory/etc")
        );
    }
}
