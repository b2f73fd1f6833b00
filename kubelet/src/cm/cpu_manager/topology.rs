//! The machine's CPU topology (logical CPUs, their cores, sockets and NUMA nodes), as Go's
//! `cpumanager/topology` builds it from cAdvisor's machine info: read here directly from
//! sysfs the way cAdvisor does.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};

use super::cpuset::{CpuSet, CpuSetParseError};

/// Why the topology could not be had.
#[derive(Debug, thiserror::Error)]
pub enum TopologyError {
    /// No CPU at all (Go's `Discover` with zero cores).
    #[error("could not detect number of cpus")]
    NoCpus,
    /// The same CPU id twice in an explicit topology.
    #[error("cpu {0} is listed twice")]
    DuplicateCpu(u32),
    /// A sysfs file could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// A sysfs file held something else than a non-negative id.
    #[error("{path}: unexpected content {content:?}")]
    Content {
        /// The file.
        path: PathBuf,
        /// What it held.
        content: String,
    },
    /// The online CPU list did not parse.
    #[error("{path}: {source}")]
    OnlineList {
        /// The file.
        path: PathBuf,
        /// Why.
        source: CpuSetParseError,
    },
}

/// One logical CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuInfo {
    /// The logical CPU id (`cpuN`).
    pub id: u32,
    /// Its core, unique on the machine. From sysfs this is Go's: the lowest CPU id among the
    /// core's threads (sysfs `core_id` repeats across sockets).
    pub core_id: u32,
    /// Its socket (`physical_package_id`).
    pub socket_id: u32,
    /// Its NUMA node (the socket when the kernel shows no NUMA nodes, as cAdvisor does).
    pub numa_node: u32,
}

/// The logical CPUs and how they group (Go's `CPUTopology`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuTopology {
    /// Every CPU, ascending by id.
    pub cpus: Vec<CpuInfo>,
    num_cores: usize,
    num_sockets: usize,
    num_numa_nodes: usize,
}

impl CpuTopology {
    /// A topology from explicit CPUs (any order; core ids must be unique on the machine).
    pub fn new(mut cpus: Vec<CpuInfo>) -> Result<Self, TopologyError> {
        if cpus.is_empty() {
            return Err(TopologyError::NoCpus);
        }
        cpus.sort_by_key(|c| c.id);
        if let Some(w) = cpus.windows(2).find(|w| w[0].id == w[1].id) {
            return Err(TopologyError::DuplicateCpu(w[0].id));
        }
        let count = |f: fn(&CpuInfo) -> u32| cpus.iter().map(f).collect::<BTreeSet<_>>().len();
        Ok(Self {
            num_cores: count(|c| c.core_id),
            num_sockets: count(|c| c.socket_id),
            num_numa_nodes: count(|c| c.numa_node),
            cpus,
        })
    }

    /// This machine's topology, from `/sys`.
    pub fn discover() -> Result<Self, TopologyError> {
        Self::from_sysfs(Path::new("/sys"))
    }

    /// The topology under a sysfs root (`/sys`, or a scratch tree in tests): the online CPUs
    /// of `devices/system/cpu`, each with `topology/core_id`, `topology/physical_package_id`
    /// and its `nodeN` link. As cAdvisor, a CPU without core or package id is left out.
    pub fn from_sysfs(root: &Path) -> Result<Self, TopologyError> {
        let cpu_dir = root.join("devices/system/cpu");
        let online = online_cpus(&cpu_dir)?;
        let mut found = Vec::new();
        let entries = std::fs::read_dir(&cpu_dir).map_err(read_error(&cpu_dir))?;
        for entry in entries {
            let entry = entry.map_err(read_error(&cpu_dir))?;
            let name = entry.file_name();
            let Some(id) = name
                .to_str()
                .and_then(|n| n.strip_prefix("cpu"))
                .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            if online.as_ref().is_some_and(|o| !o.contains(id)) {
                continue;
            }
            let dir = entry.path();
            let (Some(core), Some(socket)) = (
                read_id(&dir.join("topology/core_id"))?,
                read_id(&dir.join("topology/physical_package_id"))?,
            ) else {
                continue;
            };
            found.push((id, core, socket, numa_node_of(&dir)?));
        }
        let any_numa = found.iter().any(|f| f.3.is_some());
        // Go names a core by its lowest thread: sysfs core ids are only unique per package.
        let mut lowest: BTreeMap<(Option<u32>, u32, u32), u32> = BTreeMap::new();
        for &(id, core, socket, numa) in &found {
            let key = (numa, socket, core);
            let low = lowest.entry(key).or_insert(id);
            *low = (*low).min(id);
        }
        let cpus = found
            .iter()
            .map(|&(id, core, socket, numa)| CpuInfo {
                id,
                core_id: lowest.get(&(numa, socket, core)).copied().unwrap_or(id),
                socket_id: socket,
                numa_node: if any_numa { numa.unwrap_or(0) } else { socket },
            })
            .collect();
        Self::new(cpus)
    }

    /// How many logical CPUs.
    pub fn num_cpus(&self) -> usize {
        self.cpus.len()
    }

    /// How many physical cores.
    pub fn num_cores(&self) -> usize {
        self.num_cores
    }

    /// How many sockets.
    pub fn num_sockets(&self) -> usize {
        self.num_sockets
    }

    /// How many NUMA nodes.
    pub fn num_numa_nodes(&self) -> usize {
        self.num_numa_nodes
    }

    /// Threads per core, as Go counts it (CPUs / cores, 0 without cores).
    pub fn cpus_per_core(&self) -> usize {
        self.num_cpus().checked_div(self.num_cores).unwrap_or(0)
    }

    /// CPUs per socket, as Go counts it (CPUs / sockets, 0 without sockets).
    pub fn cpus_per_socket(&self) -> usize {
        self.num_cpus().checked_div(self.num_sockets).unwrap_or(0)
    }

    /// Every CPU.
    pub fn all_cpus(&self) -> CpuSet {
        self.cpus.iter().map(|c| c.id).collect()
    }

    /// One CPU's placement.
    #[cfg(test)]
    pub fn cpu(&self, id: u32) -> Option<&CpuInfo> {
        self.cpus
            .binary_search_by_key(&id, |c| c.id)
            .ok()
            .map(|i| &self.cpus[i])
    }

    /// The threads of one core.
    #[cfg(test)]
    pub fn cpus_in_core(&self, core_id: u32) -> CpuSet {
        self.select(|c| c.core_id == core_id)
    }

    /// The CPUs of one socket.
    #[cfg(test)]
    pub fn cpus_in_socket(&self, socket_id: u32) -> CpuSet {
        self.select(|c| c.socket_id == socket_id)
    }

    /// The CPUs of one NUMA node.
    pub fn cpus_in_numa_node(&self, numa_node: u32) -> CpuSet {
        self.select(|c| c.numa_node == numa_node)
    }

    fn select(&self, keep: impl Fn(&CpuInfo) -> bool) -> CpuSet {
        self.cpus.iter().filter(|c| keep(c)).map(|c| c.id).collect()
    }
}

fn read_error(path: &Path) -> impl Fn(io::Error) -> TopologyError + '_ {
    move |source| TopologyError::Read {
        path: path.to_path_buf(),
        source,
    }
}

/// The `online` list; `None` when the file is absent (no CPU hotplug: all are online).
fn online_cpus(cpu_dir: &Path) -> Result<Option<CpuSet>, TopologyError> {
    let path = cpu_dir.join("online");
    match std::fs::read_to_string(&path) {
        Ok(s) => CpuSet::parse(s.trim())
            .map(Some)
            .map_err(|source| TopologyError::OnlineList { path, source }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(TopologyError::Read { path, source }),
    }
}

/// A one-number sysfs file; `None` when it does not exist.
/// A core or package id; Linux writes -1 for one it does not know (User-Mode Linux, some VMs
/// and platforms), which counts as 0: the CPUs it cannot place share one package.
fn read_id(path: &Path) -> Result<Option<u32>, TopologyError> {
    match std::fs::read_to_string(path) {
        Ok(s) => match s.trim().parse::<i64>() {
            Ok(-1) => Ok(Some(0)),
            Ok(id) => u32::try_from(id)
                .map(Some)
                .map_err(|_| TopologyError::Content {
                    path: path.to_path_buf(),
                    content: s,
                }),
            Err(_) => Err(TopologyError::Content {
                path: path.to_path_buf(),
                content: s,
            }),
        },
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(TopologyError::Read {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// The NUMA node a CPU directory links to (`nodeN`), if any.
fn numa_node_of(cpu_path: &Path) -> Result<Option<u32>, TopologyError> {
    let entries = std::fs::read_dir(cpu_path).map_err(read_error(cpu_path))?;
    for entry in entries {
        let entry = entry.map_err(read_error(cpu_path))?;
        let node = entry
            .file_name()
            .to_str()
            .and_then(|n| n.strip_prefix("node"))
            .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|n| n.parse().ok());
        if node.is_some() {
            return Ok(node);
        }
    }
    Ok(None)
}

#[cfg(test)]
pub(crate) mod testutil {
    use super::{CpuInfo, CpuTopology};

    /// A topology from `(core, socket, numa)` per CPU id 0, 1, ….
    pub fn topo(cpus: &[(u32, u32, u32)]) -> CpuTopology {
        let cpus = (0u32..)
            .zip(cpus)
            .map(|(id, &(core_id, socket_id, numa_node))| CpuInfo {
                id,
                core_id,
                socket_id,
                numa_node,
            })
            .collect();
        match CpuTopology::new(cpus) {
            Ok(t) => t,
            Err(e) => panic!("test topology: {e}"),
        }
    }

    /// 2 CPUs, 2 cores, 1 socket (this kind of machine).
    pub fn t2() -> CpuTopology {
        topo(&[(0, 0, 0), (1, 0, 0)])
    }

    /// 4 CPUs: 2 cores × 2 threads, siblings {0,2} and {1,3} as Linux numbers them.
    pub fn t4ht() -> CpuTopology {
        topo(&[(0, 0, 0), (1, 0, 0), (0, 0, 0), (1, 0, 0)])
    }

    /// 8 CPUs: 2 sockets (= NUMA nodes) × 2 cores × 2 threads.
    pub fn t8s2() -> CpuTopology {
        topo(&[
            (0, 0, 0),
            (1, 0, 0),
            (2, 1, 1),
            (3, 1, 1),
            (0, 0, 0),
            (1, 0, 0),
            (2, 1, 1),
            (3, 1, 1),
        ])
    }

    /// 8 CPUs: 2 sockets × 4 cores, no SMT (Go's `topoDualSocketNoHT`).
    pub fn t8s2noht() -> CpuTopology {
        topo(&[
            (0, 0, 0),
            (1, 0, 0),
            (2, 0, 0),
            (3, 0, 0),
            (4, 1, 1),
            (5, 1, 1),
            (6, 1, 1),
            (7, 1, 1),
        ])
    }

    /// 8 CPUs: 1 socket × 4 cores × 2 threads (Go's `topoSingleSocketHT`).
    pub fn t8ht() -> CpuTopology {
        topo(&[
            (0, 0, 0),
            (1, 0, 0),
            (2, 0, 0),
            (3, 0, 0),
            (0, 0, 0),
            (1, 0, 0),
            (2, 0, 0),
            (3, 0, 0),
        ])
    }

    /// 80 CPUs: 2 sockets, 4 NUMA nodes, 40 cores × 2 threads (Go's
    /// `topoDualSocketMultiNumaPerSocketHT`).
    pub fn multi_numa() -> CpuTopology {
        let cpus: Vec<_> = (0..80u32)
            .map(|i| {
                let c = i % 40;
                (c, c / 20, c / 10)
            })
            .collect();
        topo(&cpus)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::testutil::*;
    use super::*;

    fn write(root: &Path, rel: &str, content: &str) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
    }

    /// A scratch sysfs: `(cpu, core_id, package, numa node)`.
    fn sysfs(cpus: &[(u32, u32, u32, Option<u32>)], online: Option<&str>) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for &(id, core, pkg, node) in cpus {
            write(
                root,
                &format!("devices/system/cpu/cpu{id}/topology/core_id"),
                &format!("{core}\n"),
            );
            write(
                root,
                &format!("devices/system/cpu/cpu{id}/topology/physical_package_id"),
                &format!("{pkg}\n"),
            );
            if let Some(n) = node {
                std::fs::create_dir_all(root.join(format!("devices/system/cpu/cpu{id}/node{n}")))
                    .unwrap();
            }
        }
        std::fs::create_dir_all(root.join("devices/system/cpu/cpufreq")).unwrap();
        if let Some(o) = online {
            write(root, "devices/system/cpu/online", o);
        }
        dir
    }

    #[test]
    fn sysfs_two_sockets_with_smt() {
        // core_id repeats across packages; Go's unique core id is the lowest sibling.
        let dir = sysfs(
            &[
                (0, 0, 0, Some(0)),
                (1, 1, 0, Some(0)),
                (2, 0, 1, Some(1)),
                (3, 1, 1, Some(1)),
                (4, 0, 0, Some(0)),
                (5, 1, 0, Some(0)),
                (6, 0, 1, Some(1)),
                (7, 1, 1, Some(1)),
            ],
            Some("0-7\n"),
        );
        let t = CpuTopology::from_sysfs(dir.path()).unwrap();
        assert_eq!(t, t8s2());
        assert_eq!(
            (
                t.num_cpus(),
                t.num_cores(),
                t.num_sockets(),
                t.num_numa_nodes()
            ),
            (8, 4, 2, 2)
        );
        assert_eq!((t.cpus_per_core(), t.cpus_per_socket()), (2, 4));
        assert_eq!(t.cpus_in_core(2).to_string(), "2,6");
        assert_eq!(t.cpus_in_socket(1).to_string(), "2-3,6-7");
        assert_eq!(t.cpus_in_numa_node(0).to_string(), "0-1,4-5");
        assert_eq!(t.cpu(6).unwrap().core_id, 2);
    }

    #[test]
    fn sysfs_offline_and_incomplete_cpus_are_left_out() {
        let dir = sysfs(
            &[(0, 0, 0, Some(0)), (1, 1, 0, Some(0)), (2, 2, 0, Some(0))],
            Some("0-1"),
        );
        write(dir.path(), "devices/system/cpu/cpu3/topology/core_id", "3");
        let t = CpuTopology::from_sysfs(dir.path()).unwrap();
        assert_eq!(t, t2());
    }

    #[test]
    fn sysfs_without_numa_uses_the_socket_and_without_online_takes_all() {
        let dir = sysfs(&[(0, 0, 0, None), (1, 0, 1, None)], None);
        let t = CpuTopology::from_sysfs(dir.path()).unwrap();
        assert_eq!(t, topo(&[(0, 0, 0), (1, 1, 1)]));
    }

    #[test]
    fn an_unknown_package_is_package_zero() {
        // User-Mode Linux: physical_package_id is -1 on every CPU.
        let dir = sysfs(&[(0, 0, 0, None), (1, 1, 0, None)], Some("0-1\n"));
        for cpu in 0..2 {
            write(
                dir.path(),
                &format!("devices/system/cpu/cpu{cpu}/topology/physical_package_id"),
                "-1\n",
            );
        }
        let t = CpuTopology::from_sysfs(dir.path()).unwrap();
        assert_eq!(t, topo(&[(0, 0, 0), (1, 0, 0)]));
        write(
            dir.path(),
            "devices/system/cpu/cpu0/topology/physical_package_id",
            "-2\n",
        );
        assert!(matches!(
            CpuTopology::from_sysfs(dir.path()),
            Err(TopologyError::Content { .. })
        ));
    }

    #[test]
    fn sysfs_errors() {
        let dir = sysfs(&[], Some("0"));
        assert!(matches!(
            CpuTopology::from_sysfs(dir.path()),
            Err(TopologyError::NoCpus)
        ));
        let dir = sysfs(&[(0, 0, 0, None)], Some("0"));
        write(
            dir.path(),
            "devices/system/cpu/cpu0/topology/core_id",
            "x\n",
        );
        assert!(matches!(
            CpuTopology::from_sysfs(dir.path()),
            Err(TopologyError::Content { .. })
        ));
        let dir = sysfs(&[(0, 0, 0, None)], Some("zero"));
        assert!(matches!(
            CpuTopology::from_sysfs(dir.path()),
            Err(TopologyError::OnlineList { .. })
        ));
    }

    #[test]
    fn this_machine() {
        // Whatever the machine, its topology is self-consistent.
        let t = CpuTopology::discover().unwrap();
        assert!(t.num_cpus() >= 1);
        assert_eq!(t.all_cpus().len(), t.num_cpus());
        assert!(t.num_cores() <= t.num_cpus());
    }

    #[test]
    fn explicit_constructor_checks() {
        assert!(matches!(
            CpuTopology::new(vec![]),
            Err(TopologyError::NoCpus)
        ));
        let c = CpuInfo {
            id: 1,
            core_id: 0,
            socket_id: 0,
            numa_node: 0,
        };
        assert!(matches!(
            CpuTopology::new(vec![c, c]),
            Err(TopologyError::DuplicateCpu(1))
        ));
        let t = multi_numa();
        assert_eq!(
            (
                t.num_cpus(),
                t.num_cores(),
                t.num_sockets(),
                t.num_numa_nodes()
            ),
            (80, 40, 2, 4)
        );
    }
}
