//! Which CPUs to hand out: Go's `takeByTopologyNUMAPacked` (cpu_assignment.go, the static
//! policy without options). Whole NUMA nodes and sockets first, then whole cores, then
//! single threads, each level preferring the groups with the fewest free CPUs (best fit),
//! ties to the lowest id.

use super::cpuset::CpuSet;
use super::topology::{CpuInfo, CpuTopology};

/// Why CPUs could not be taken; the texts are Go's.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TakeError {
    /// Fewer CPUs are free than asked for.
    #[error("not enough cpus available to satisfy request")]
    NotEnough,
    /// The walk ended short (Go's message; unreachable when the topology is consistent).
    #[error("failed to allocate cpus")]
    Failed,
}

/// `count` CPUs out of `available`, placed by topology.
pub fn take_by_topology(
    topo: &CpuTopology,
    available: &CpuSet,
    count: usize,
) -> Result<CpuSet, TakeError> {
    let mut acc = Accumulator {
        topo,
        free: available.intersection(&topo.all_cpus()),
        needed: count,
        result: CpuSet::new(),
        // Go: NUMA nodes are the upper level unless a socket holds several of them.
        numa_first: topo.num_sockets() >= topo.num_numa_nodes(),
    };
    if acc.satisfied() {
        return Ok(acc.result);
    }
    if acc.needed > acc.free.len() {
        return Err(TakeError::NotEnough);
    }
    if acc.numa_first {
        acc.take_full(Level::Numa);
        if acc.satisfied() {
            return Ok(acc.result);
        }
        acc.take_full(Level::Socket);
    } else {
        acc.take_full(Level::Socket);
        if acc.satisfied() {
            return Ok(acc.result);
        }
        acc.take_full(Level::Numa);
    }
    if acc.satisfied() {
        return Ok(acc.result);
    }
    acc.take_full(Level::Core);
    if acc.satisfied() {
        return Ok(acc.result);
    }
    for cpu in acc.sorted_cpus() {
        acc.take(&std::iter::once(cpu).collect());
        if acc.satisfied() {
            return Ok(acc.result);
        }
    }
    Err(TakeError::Failed)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Level {
    Numa,
    Socket,
    Core,
}

impl Level {
    fn id(self, cpu: &CpuInfo) -> u32 {
        match self {
            Level::Numa => cpu.numa_node,
            Level::Socket => cpu.socket_id,
            Level::Core => cpu.core_id,
        }
    }
}

/// Go's `cpuAccumulator`: what is still free, what is taken, how many are still needed.
struct Accumulator<'a> {
    topo: &'a CpuTopology,
    free: CpuSet,
    needed: usize,
    result: CpuSet,
    numa_first: bool,
}

impl Accumulator<'_> {
    fn satisfied(&self) -> bool {
        self.needed == 0
    }

    fn free_infos(&self) -> impl Iterator<Item = &CpuInfo> + '_ {
        self.topo.cpus.iter().filter(|c| self.free.contains(c.id))
    }

    /// Free CPUs whose `level` id is `id`.
    fn free_in(&self, level: Level, id: u32) -> CpuSet {
        self.free_infos()
            .filter(|c| level.id(c) == id)
            .map(|c| c.id)
            .collect()
    }

    /// Ids at `level` among free CPUs that are also in group `parent` at `within`.
    fn ids_within(&self, level: Level, within: Option<(Level, u32)>) -> Vec<u32> {
        let ids: CpuSet = self
            .free_infos()
            .filter(|c| within.is_none_or(|(l, id)| l.id(c) == id))
            .map(|c| level.id(c))
            .collect();
        self.sorted(level, ids.iter().collect())
    }

    /// Go's `sort`: fewest free CPUs first, then lowest id.
    fn sorted(&self, level: Level, mut ids: Vec<u32>) -> Vec<u32> {
        ids.sort_by_key(|&id| (self.free_in(level, id).len(), id));
        ids
    }

    /// Go's `sortAvailableNUMANodes` / `sortAvailableSockets` / `sortAvailableCores`: the
    /// upper level sorted on its own, each lower level sorted within each group of the level
    /// above it, concatenated.
    fn sorted_groups(&self, level: Level) -> Vec<u32> {
        let (upper, lower) = if self.numa_first {
            (Level::Numa, Level::Socket)
        } else {
            (Level::Socket, Level::Numa)
        };
        if level == upper {
            return self.ids_within(upper, None);
        }
        let parent = if level == Level::Core { lower } else { upper };
        self.sorted_groups(parent)
            .into_iter()
            .flat_map(|g| self.ids_within(level, Some((parent, g))))
            .collect()
    }

    /// Go's `sortAvailableCPUs`: cores in order, threads of each ascending.
    fn sorted_cpus(&self) -> Vec<u32> {
        self.sorted_groups(Level::Core)
            .into_iter()
            .flat_map(|core| self.free_in(Level::Core, core).iter().collect::<Vec<_>>())
            .collect()
    }

    /// Size of a whole group at `level`, as Go checks freeness.
    fn whole_size(&self, level: Level, id: u32) -> usize {
        match level {
            Level::Numa => self.topo.cpus_in_numa_node(id).len(),
            Level::Socket => self.topo.cpus_per_socket(),
            Level::Core => self.topo.cpus_per_core(),
        }
    }

    /// Go's `takeFullNUMANodes` / `takeFullSockets` / `takeFullCores`.
    fn take_full(&mut self, level: Level) {
        let free: Vec<u32> = self
            .sorted_groups(level)
            .into_iter()
            .filter(|&id| self.free_in(level, id).len() == self.whole_size(level, id))
            .collect();
        for id in free {
            let all: CpuSet = self
                .topo
                .cpus
                .iter()
                .filter(|c| level.id(c) == id)
                .map(|c| c.id)
                .collect();
            if self.needed >= all.len() {
                self.take(&all);
            }
        }
    }

    fn take(&mut self, cpus: &CpuSet) {
        self.result = self.result.union(cpus);
        self.free = self.free.difference(&self.result);
        self.needed = self.needed.saturating_sub(cpus.len());
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::super::topology::testutil::*;
    use super::*;

    fn take(t: &CpuTopology, avail: &str, n: usize) -> String {
        match take_by_topology(t, &CpuSet::parse(avail).unwrap(), n) {
            Ok(s) => s.to_string(),
            Err(e) => format!("ERR:{e}"),
        }
    }

    /// Every available subset × every count of the small topologies, against what Go's
    /// `takeByTopologyNUMAPacked` answered (testdata/take_by_topology.txt, captured from
    /// Kubernetes 1.28.7's cpumanager package).
    #[test]
    fn matches_go_exhaustively_on_small_topologies() {
        let fixture = include_str!("testdata/take_by_topology.txt");
        let topos = [
            ("t2", t2()),
            ("t4ht", t4ht()),
            ("t8s2", t8s2()),
            ("t8s2noht", t8s2noht()),
            ("t8ht", t8ht()),
            ("multi", multi_numa()),
        ];
        let mut checked = 0;
        for line in fixture.lines().filter(|l| !l.starts_with('#')) {
            let f: Vec<&str> = line.split(' ').collect();
            let topo = &topos.iter().find(|(n, _)| *n == f[0]).unwrap().1;
            let avail = if f[1] == "-" { "" } else { f[1] };
            if f[0] == "multi" {
                assert_eq!(take(topo, avail, f[2].parse().unwrap()), f[3], "{line}");
                checked += 1;
                continue;
            }
            for (k, want) in f[2..].iter().enumerate() {
                assert_eq!(take(topo, avail, k + 1), *want, "{line} k={}", k + 1);
                checked += 1;
            }
            let size = CpuSet::parse(avail).unwrap().len();
            if size < topo.num_cpus() {
                assert_eq!(
                    take(topo, avail, size + 1),
                    "ERR:not enough cpus available to satisfy request"
                );
            }
        }
        assert!(checked > 3000, "{checked}");
    }

    #[test]
    fn go_unit_test_table() {
        // cpu_assignment_test.go commonTakeByTopologyTestCases + TestTakeByTopologyNUMAPacked.
        let single = t8ht();
        assert_eq!(
            take(&single, "0,2,4,6", 5),
            "ERR:not enough cpus available to satisfy request"
        );
        assert_eq!(take(&single, "0-7", 0), "");
        assert_eq!(take(&single, "0-7", 1), "0");
        assert_eq!(take(&single, "1,3,5-7", 1), "6");
        assert_eq!(take(&single, "0-7", 2), "0,4");
        assert_eq!(take(&single, "0-7", 8), "0-7");
        assert_eq!(take(&single, "0-3,6", 2), "2,6");
        let multi = multi_numa();
        assert_eq!(take(&multi, "0-79", 40), "0-19,40-59");
        assert_eq!(take(&multi, "0-79", 20), "0-9,40-49");
        assert_eq!(take(&multi, "10-39,50-79", 20), "10-19,50-59");
        assert_eq!(take(&multi, "0-79", 60), "0-29,40-69");
        assert_eq!(take(&multi, "1-39,41-79", 60), "10-39,50-79");
        assert_eq!(take(&multi, "0-79", 64), "0-31,40-71");
    }
}
