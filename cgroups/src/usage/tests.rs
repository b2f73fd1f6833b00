use std::path::Path;

use super::*;

fn write(root: &Path, rel: &str, text: &str) {
    let path = root.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

#[test]
fn reads_v1() {
    let tmp = tempfile::tempdir().unwrap();
    let r = tmp.path();
    write(r, "cpuacct/kubepods/pod1/cpuacct.usage", "4000457548170\n");
    write(r, "memory/kubepods/pod1/memory.usage_in_bytes", "1000000\n");
    write(
        r,
        "memory/kubepods/pod1/memory.stat",
        "cache 5\ninactive_file 1\ntotal_inactive_file 200000\ntotal_rss 600000\ntotal_pgfault 42\ntotal_pgmajfault 2\n",
    );
    write(
        r,
        "memory/kubepods/pod1/memory.limit_in_bytes",
        "9223372036854771712\n",
    );
    write(r, "pids/kubepods/pod1/pids.current", "3\n");
    let h = Hierarchy::at(r, false);
    assert_eq!(
        h.read("/kubepods/pod1").unwrap(),
        Usage {
            cpu_usage_ns: Some(4_000_457_548_170),
            memory: Some(MemoryUsage {
                usage: 1_000_000,
                working_set: 800_000,
                rss: 600_000,
                page_faults: 42,
                major_page_faults: 2,
                limit: None,
                swap: None,
            }),
            pids: Some(3),
            pressure: Pressure::default(),
        }
    );
    // memsw counts memory and swap together.
    write(
        r,
        "memory/kubepods/pod1/memory.memsw.usage_in_bytes",
        "1001808\n",
    );
    write(r, "memory/kubepods/pod1/memory.limit_in_bytes", "4096\n");
    let m = h.read("kubepods/pod1").unwrap().memory.unwrap();
    assert_eq!((m.swap, m.limit), (Some(1808), Some(4096)));
    // More inactive file cache than usage: the working set floors at 0.
    write(
        r,
        "memory/kubepods/pod1/memory.stat",
        "total_inactive_file 2000000\n",
    );
    assert_eq!(
        h.read("/kubepods/pod1")
            .unwrap()
            .memory
            .unwrap()
            .working_set,
        0
    );

    assert_eq!(h.read("/kubepods/none").unwrap(), Usage::default());
    write(r, "memory/kubepods/pod1/memory.usage_in_bytes", "lots\n");
    let err = h.read("/kubepods/pod1").unwrap_err().to_string();
    assert!(
        err.contains("memory.usage_in_bytes") && err.contains("lots"),
        "{err}"
    );
}

#[test]
fn reads_v2() {
    let tmp = tempfile::tempdir().unwrap();
    let r = tmp.path();
    write(r, "cgroup.controllers", "cpu memory pids\n");
    write(
        r,
        "kubepods/pod1/cpu.stat",
        "usage_usec 1500\nuser_usec 1000\nsystem_usec 500\n",
    );
    write(r, "kubepods/pod1/memory.current", "1048576\n");
    write(r, "kubepods/pod1/memory.max", "2097152\n");
    write(
        r,
        "kubepods/pod1/memory.stat",
        "anon 4096\nfile 8192\ninactive_file 1024\npgfault 30\npgmajfault 3\n",
    );
    let h = Hierarchy::detect_at(r);
    assert!(h.is_unified());
    let u = h.read("/kubepods/pod1").unwrap();
    assert_eq!(
        u,
        Usage {
            cpu_usage_ns: Some(1_500_000),
            memory: Some(MemoryUsage {
                usage: 1_048_576,
                working_set: 1_048_576 - 1024,
                rss: 4096,
                page_faults: 30,
                major_page_faults: 3,
                limit: Some(2_097_152),
                // No memory.swap.current: 0, as containerd reads it.
                swap: Some(0),
            }),
            pids: None,
            pressure: Pressure::default(),
        }
    );
    write(r, "kubepods/pod1/memory.max", "max\n");
    write(r, "kubepods/pod1/memory.swap.current", "512\n");
    write(r, "kubepods/pod1/pids.current", "7\n");
    let u = h.read("/kubepods/pod1").unwrap();
    let m = u.memory.unwrap();
    assert_eq!((m.limit, m.swap, u.pids), (None, Some(512), Some(7)));
}

#[test]
fn a_path_out_of_the_hierarchy_is_refused() {
    let h = Hierarchy::at("/nonexistent", false);
    for bad in ["/kubepods/../../etc", "/", "", "."] {
        assert!(
            matches!(h.read(bad), Err(UsageError::BadCgroup(_))),
            "{bad:?}"
        );
    }
}

#[test]
fn processes_name_their_cgroup_per_version() {
    let proc_cgroup = "4:memory:/process_api/d7\n3:cpuset:/\n0::/user.slice\n";
    assert_eq!(
        cgroup_of_process(proc_cgroup, false, "memory").as_deref(),
        Some("/process_api/d7")
    );
    assert_eq!(
        cgroup_of_process(proc_cgroup, false, "cpuset").as_deref(),
        Some("/")
    );
    assert_eq!(
        cgroup_of_process(proc_cgroup, true, "memory").as_deref(),
        Some("/user.slice")
    );
    assert_eq!(parse_keyed("a 1\nb x\nc 3").len(), 2);
}

#[test]
fn reads_this_hosts_own_cgroups() {
    // The real files of our own cgroups must parse, v1 or v2.
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    let h = Hierarchy::detect();
    let cgroup = cgroup_of_process(&own, h.is_unified(), "memory").unwrap();
    let usage = if cgroup == "/" {
        h.read_root()
    } else {
        h.read(&cgroup)
    }
    .unwrap();
    assert!(
        usage.memory.is_some() || h.is_unified(),
        "{cgroup}: {usage:?}"
    );
    if !h.is_unified() {
        let root = h.read_root().unwrap();
        assert!(root.cpu_usage_ns.unwrap() > 0 && root.memory.unwrap().usage > 0);
    }
}

#[test]
fn oom_kills_per_version() {
    let tmp = tempfile::tempdir().unwrap();
    let r = tmp.path();
    let v1 = Hierarchy::at(r, false);
    assert_eq!(v1.oom_kills("/kubepods/pod1/c1"), None);
    write(
        r,
        "memory/kubepods/pod1/c1/memory.oom_control",
        "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n",
    );
    assert_eq!(v1.oom_kills("/kubepods/pod1/c1"), Some(0));
    // A hybrid host: the unified hierarchy's count counts too.
    write(
        r,
        "unified/kubepods/pod1/c1/memory.events",
        "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n",
    );
    assert_eq!(v1.oom_kills("/kubepods/pod1/c1"), Some(1));
    let v2 = Hierarchy::at(r.join("unified"), true);
    assert_eq!(v2.oom_kills("kubepods/pod1/c1"), Some(1));
    assert_eq!(v2.oom_kills("/kubepods/../.."), None);
}

#[test]
fn pressure_files_on_v2() {
    let tmp = tempfile::tempdir().unwrap();
    let r = tmp.path();
    write(r, "cgroup.controllers", "cpu memory io\n");
    write(
        r,
        "kubepods/pod1/cpu.pressure",
        "some avg10=1.50 avg60=0.25 avg300=0.05 total=123456\nfull avg10=0.50 avg60=0.00 avg300=0.00 total=789\n",
    );
    write(
        r,
        "kubepods/pod1/io.pressure",
        "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
    );
    let h = Hierarchy::detect_at(r);
    let p = h.read("/kubepods/pod1").unwrap().pressure;
    let cpu = p.cpu.unwrap();
    assert_eq!(
        (cpu.some.total, cpu.some.avg10, cpu.some.avg60),
        (123456, 1.5, 0.25)
    );
    assert_eq!((cpu.full.total, cpu.full.avg10), (789, 0.5));
    assert_eq!(p.memory, None);
    assert_eq!(p.io.unwrap().some.total, 0);
    // The machine's CPU line of kernels before 5.13 has no `full`.
    let only_some = parse_psi("some avg10=0.00 avg60=0.00 avg300=0.00 total=5\n").unwrap();
    assert_eq!(
        (only_some.some.total, only_some.full),
        (5, PsiLine::default())
    );
    for bad in [
        "",
        "full avg10=1 total=2",
        "some avg10=x total=1",
        "other total=1",
    ] {
        assert_eq!(parse_psi(bad), None, "{bad:?}");
    }
    write(r, "kubepods/pod1/memory.pressure", "garbage\n");
    let err = h.read("/kubepods/pod1").unwrap_err().to_string();
    assert!(err.contains("memory.pressure"), "{err}");
}

#[test]
fn this_kernels_pressure_files_parse() {
    // /proc/pressure has the root cgroup's format; a kernel without PSI has none.
    for file in ["cpu", "memory", "io"] {
        let path = Path::new("/proc/pressure").join(file);
        match read_psi(&path) {
            Ok(Some(psi)) => println!("{file}: {psi:?}"),
            Ok(None) => println!("{file}: no PSI on this kernel"),
            Err(e) => panic!("{e}"),
        }
    }
}

#[test]
fn a_container_is_found_below_its_pod_by_id() {
    let dir = tempfile::tempdir().unwrap();
    let r = dir.path();
    write(r, "cgroup.controllers", "cpu memory\n");
    write(
        r,
        "kubepods.slice/pod.slice/ferrolet-cri-abc123.scope/cpu.stat",
        "",
    );
    write(
        r,
        "kubepods.slice/pod.slice/cri-containerd-def456.scope/cpu.stat",
        "",
    );
    write(r, "kubepods/pod1/789/cpu.stat", "");
    write(r, "kubepods/pod1/cpu.stat", "");
    let h = Hierarchy::detect_at(r);
    let find = |cg: &str, id: &str| h.child_with(cg, id);
    assert_eq!(
        find("/kubepods.slice/pod.slice", "abc123").as_deref(),
        Some("/kubepods.slice/pod.slice/ferrolet-cri-abc123.scope")
    );
    assert_eq!(
        find("kubepods.slice/pod.slice", "def456").as_deref(),
        Some("/kubepods.slice/pod.slice/cri-containerd-def456.scope")
    );
    assert_eq!(
        find("/kubepods/pod1", "789").as_deref(),
        Some("/kubepods/pod1/789")
    );
    assert_eq!(find("/kubepods/pod1", "nothere"), None);
    assert_eq!(find("/kubepods/pod1", ""), None);
    assert_eq!(find("/kubepods/missing", "789"), None);
    assert_eq!(find("/../etc", "789"), None);
}
