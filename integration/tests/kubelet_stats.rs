//! `ferrolet`'s Summary API and eviction signals end to end (issue #7 acceptance):
//! `/stats/summary` container memory and CPU agree with the containers' cgroup files within
//! 5 % (on ferrolet-cri, which serves `ListPodSandboxStats`, and on containerd's own CRI, where
//! the pod's figures come from its cgroup); the node's filesystem agrees with statvfs of the
//! root dir; `?only_cpu_and_memory=true` leaves the filesystems out; and an `evictionHard`
//! the node cannot meet (`nodefs.available`: the disk's size) makes DiskPressure true and logged while
//! the static pod, critical as the Go kubelet deems static pods, keeps running. Where the
//! kernel keeps pressure stall information on cgroup v2, node, pods and containers carry it.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test reports failure by panicking

use std::time::{Duration, Instant};

use ferrolet_integration::cgroups;
use ferrolet_integration::kubelet::{
    IDLE, KubeletNode, KubeletOptions, RuntimeNode, container_id, container_status, image,
    is_running, pod_phase, pod_uid, restart_count, sh,
};
use ferrolet_integration::pods::{LONG, pids_with_cmdline};
use serde_json::Value;

const MIB: u64 = 1 << 20;

/// Fills 64 MiB of a memory-backed emptyDir (charged to the container's memory cgroup).
/// `tag` makes the command line unique among the tests running at once.
fn fill_script(tag: &str) -> String {
    format!(
        ": {tag}; dd if=/dev/zero of=/data/blob bs=1M count=64 2>/dev/null; echo filled; {IDLE}"
    )
}

/// Burns some CPU, then idles so the counter stays put.
fn burn_script(tag: &str) -> String {
    format!(": {tag}; i=0; while [ $i -lt 150000 ]; do i=$((i+1)); done; echo burned; {IDLE}")
}

fn stats_pod(tag: &str) -> String {
    format!(
        r#"
        apiVersion: v1
        kind: Pod
        metadata:
          name: stats
        spec:
          terminationGracePeriodSeconds: 5
          containers:
          - name: mem
            image: {busybox}
            command: {fill}
            volumeMounts:
            - {{name: data, mountPath: /data}}
          - name: cpu
            image: {busybox}
            command: {burn}
          volumes:
          - name: data
            emptyDir: {{medium: Memory, sizeLimit: 100Mi}}
        "#,
        busybox = image("busybox"),
        fill = sh(&fill_script(tag)),
        burn = sh(&burn_script(tag)),
    )
}

/// GET `/stats/summary` (with `query`) as JSON.
async fn summary<N: RuntimeNode>(node: &KubeletNode<N>, query: &str) -> Value {
    let path = if query.is_empty() {
        "/stats/summary".to_string()
    } else {
        format!("/stats/summary?{query}")
    };
    let r = node.get(&path).await.unwrap();
    assert_eq!(r.status, 200, "GET {path}: {}", r.body);
    serde_json::from_str(&r.body).unwrap_or_else(|e| panic!("GET {path}: {e}: {:.400}", r.body))
}

fn pod_entry<'a>(summary: &'a Value, uid: &str) -> Option<&'a Value> {
    summary["pods"]
        .as_array()?
        .iter()
        .find(|p| p["podRef"]["uid"] == uid)
}

fn container_entry<'a>(pod: &'a Value, name: &str) -> Option<&'a Value> {
    pod["containers"]
        .as_array()?
        .iter()
        .find(|c| c["name"] == name)
}

/// |a - b| within 5 % of b.
fn close(a: u64, b: u64) -> bool {
    a.abs_diff(b) * 20 <= b
}

/// The host process running `sh -c <script>`, and its cgroup in `controller`.
fn cgroup_for(script: &str, controller: &str) -> String {
    let pids = pids_with_cmdline(&format!("sh -c {script}"));
    assert_eq!(pids.len(), 1, "one process runs {script:?}: {pids:?}");
    cgroups::of_process(pids[0], controller)
        .unwrap_or_else(|| panic!("no {controller} cgroup of {pids:?}"))
}

/// Memory (usage, working set) of a cgroup, as cadvisor and containerd compute them.
fn cgroup_memory(cgroup: &str) -> (u64, u64) {
    let usage = cgroups::memory_usage(cgroup).unwrap();
    let inactive = cgroups::inactive_file(cgroup).unwrap_or(0);
    (usage, usage.saturating_sub(inactive))
}

/// Polls `/stats/summary` until the `stats` pod's `mem` container memory and `cpu` container
/// CPU agree with their cgroups within 5 %; returns the last summary. Each round reads the
/// summary, then the cgroup files at once.
async fn assert_agrees_with_cgroups<N: RuntimeNode>(
    node: &KubeletNode<N>,
    uid: &str,
    tag: &str,
) -> Value {
    let mem_cgroup = cgroup_for(&fill_script(tag), "memory");
    let cpu_cgroup = cgroup_for(&burn_script(tag), "cpuacct");
    // The container manager's pod cgroup holds the containers' (and the sandbox's).
    let parent = |cg: &str| cg.rsplit_once('/').map(|(p, _)| p.to_string()).unwrap();
    let (pod_mem_cgroup, pod_cpu_cgroup) = (parent(&mem_cgroup), parent(&cpu_cgroup));
    assert!(
        cgroups::is_pod_cgroup(&pod_mem_cgroup, uid),
        "{mem_cgroup} is not in its pod's cgroup"
    );
    let deadline = Instant::now() + LONG;
    loop {
        let s = summary(node, "").await;
        let (usage, working_set) = cgroup_memory(&mem_cgroup);
        let cpu_ns = cgroups::cpu_usage_ns(&cpu_cgroup).unwrap();
        let (pod_usage, pod_working_set) = cgroup_memory(&pod_mem_cgroup);
        let pod_cpu_ns = cgroups::cpu_usage_ns(&pod_cpu_cgroup).unwrap();
        let pod = pod_entry(&s, uid);
        let mem = pod.and_then(|p| container_entry(p, "mem"));
        let cpu = pod.and_then(|p| container_entry(p, "cpu"));
        let reported = (
            mem.and_then(|c| c["memory"]["usageBytes"].as_u64()),
            mem.and_then(|c| c["memory"]["workingSetBytes"].as_u64()),
            cpu.and_then(|c| c["cpu"]["usageCoreNanoSeconds"].as_u64()),
        );
        // The pod's own figures are its cgroup's, as Go's default stats provider has them.
        let reported_pod = (
            pod.and_then(|p| p["memory"]["usageBytes"].as_u64()),
            pod.and_then(|p| p["memory"]["workingSetBytes"].as_u64()),
            pod.and_then(|p| p["cpu"]["usageCoreNanoSeconds"].as_u64()),
        );
        let agrees = match (reported, reported_pod) {
            ((Some(u), Some(ws), Some(c)), (Some(pu), Some(pws), Some(pc))) => {
                close(u, usage)
                    && close(ws, working_set)
                    && close(c, cpu_ns)
                    && close(pu, pod_usage)
                    && close(pws, pod_working_set)
                    && close(pc, pod_cpu_ns)
            }
            _ => false,
        };
        if agrees {
            // The 64 MiB written to the tmpfs are the container's.
            assert!(working_set >= 64 * MIB, "working set {working_set}");
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "summary (usage, working set, cpu) {reported:?} vs cgroups ({usage}, {working_set}, \
             {cpu_ns}); pod {reported_pod:?} vs its cgroup ({pod_usage}, {pod_working_set}, \
             {pod_cpu_ns}): not within 5% in {LONG:?}\npod entry: {}",
            pod.map(|p| p.to_string()).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Starts the `stats` pod and waits until its containers have filled and burned.
async fn start_stats_pod<N: RuntimeNode>(node: &KubeletNode<N>, tag: &str) -> String {
    node.write_manifest("stats.yaml", &stats_pod(tag));
    let pod = node.wait_running("stats").await;
    node.wait_log_line("stats", "mem", "filled").await;
    node.wait_log_line("stats", "cpu", "burned").await;
    pod_uid(&pod).to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn summary_agrees_with_cgroups_and_statvfs() {
    let node = KubeletNode::start("stats").await;
    let uid = start_stats_pod(&node, "cri").await;
    // Two of ferrolet's 10 s background samples later, the very first request has CPU rates,
    // as the Go kubelet's (cadvisor's housekeeping samples behind it).
    tokio::time::sleep(Duration::from_secs(21)).await;
    let first = summary(&node, "only_cpu_and_memory=true").await;
    let pod = pod_entry(&first, &uid).unwrap();
    assert!(pod["cpu"]["usageNanoCores"].is_u64(), "{pod}");
    for c in ["mem", "cpu"] {
        let entry = container_entry(pod, c).unwrap();
        assert!(entry["cpu"]["usageNanoCores"].is_u64(), "{entry}");
    }
    let s = assert_agrees_with_cgroups(&node, &uid, "cri").await;

    // The node: its name, CPU and memory, nodefs = statvfs of the root dir.
    assert_eq!(s["node"]["nodeName"], node.node_name.as_str());
    assert!(s["node"]["cpu"]["usageCoreNanoSeconds"].as_u64() > Some(0));
    assert!(s["node"]["memory"]["availableBytes"].as_u64() > Some(0));
    let st = nix::sys::statvfs::statvfs(&node.root_dir()).unwrap();
    let fs = &s["node"]["fs"];
    let unit = st.fragment_size();
    assert_eq!(
        fs["capacityBytes"].as_u64(),
        Some(st.blocks() * unit),
        "{fs}"
    );
    assert_eq!(fs["inodes"].as_u64(), Some(st.files()), "{fs}");
    let available = fs["availableBytes"].as_u64().unwrap();
    assert!(
        close(available, st.blocks_available() * unit),
        "{fs} vs {st:?}"
    );
    let image_fs = &s["node"]["runtime"]["imageFs"];
    assert!(image_fs["usedBytes"].as_u64() > Some(0), "{image_fs}");
    assert!(image_fs["capacityBytes"].as_u64() > Some(0), "{image_fs}");
    // The pods' system container is `kubepods`: what eviction's allocatableMemory.available
    // reads, its capacity (available + working set) the cgroup's node allocatable limit.
    let pods = s["node"]["systemContainers"]
        .as_array()
        .and_then(|a| a.iter().find(|c| c["name"] == "pods"))
        .unwrap_or_else(|| panic!("no pods system container: {}", s["node"]));
    let limit = cgroups::memory_limit(&format!("{}/kubepods", node.cgroup_root)).unwrap();
    let m = &pods["memory"];
    assert_eq!(
        m["availableBytes"].as_u64().unwrap() + m["workingSetBytes"].as_u64().unwrap(),
        limit,
        "{pods}"
    );

    // The pod: its own CPU and memory, its network, the memory volume holding the 64 MiB,
    // and its containers' writable layers and logs.
    let pod = pod_entry(&s, &uid).unwrap();
    assert_eq!(pod["podRef"]["name"], node.pod_name("stats").as_str());
    assert!(
        pod["memory"]["workingSetBytes"].as_u64() >= Some(64 * MIB),
        "{pod}"
    );
    assert!(
        pod["cpu"]["usageCoreNanoSeconds"].as_u64() > Some(0),
        "{pod}"
    );
    assert_eq!(pod["network"]["name"], "eth0", "{pod}");
    let volume = pod["volume"]
        .as_array()
        .and_then(|v| v.iter().find(|v| v["name"] == "data"))
        .unwrap_or_else(|| panic!("no volume data: {pod}"));
    assert!(volume["usedBytes"].as_u64() >= Some(64 * MIB), "{volume}");
    let mem = container_entry(pod, "mem").unwrap();
    assert!(mem["rootfs"]["usedBytes"].as_u64().is_some(), "{mem}");
    assert!(mem["logs"]["usedBytes"].as_u64() > Some(0), "{mem}");
    assert!(
        pod["ephemeral-storage"]["usedBytes"].as_u64().is_some(),
        "{pod}"
    );
    assert!(
        pod["process_stats"]["process_count"].as_u64() >= Some(2),
        "{pod}"
    );

    // Pressure stall information (Go 1.34's `psi`) where the kernel keeps it per cgroup.
    let expected = psi_expected();
    for (what, entry) in [("node", &s["node"]), ("pod", pod), ("container", mem)] {
        for resource in ["cpu", "memory", "io"] {
            let psi = entry.get(resource).and_then(|r| r.get("psi"));
            match psi {
                Some(psi) => assert!(
                    expected
                        && psi["some"]["total"].is_u64()
                        && psi["some"]["avg10"].is_number()
                        && psi["full"]["total"].is_u64(),
                    "{what} {resource}: psi {psi} (expected: {expected})"
                ),
                None => assert!(!expected, "{what} {resource}: no psi in {entry}"),
            }
        }
    }

    // CPU and memory only: no filesystems, networks or volumes.
    let small = summary(&node, "only_cpu_and_memory=true").await;
    assert!(small["node"].get("fs").is_none() && small["node"].get("runtime").is_none());
    let pod = pod_entry(&small, &uid).unwrap();
    assert!(
        pod.get("volume").is_none() && pod.get("network").is_none(),
        "{pod}"
    );
    assert!(container_entry(pod, "cpu").unwrap()["cpu"]["usageCoreNanoSeconds"].is_u64());

    node.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn summary_agrees_with_cgroups_on_containerd_cri() {
    let node = KubeletNode::start_on_containerd("stats-cd").await;
    let uid = start_stats_pod(&node, "containerd").await;
    let s = assert_agrees_with_cgroups(&node, &uid, "containerd").await;
    // Without pod sandbox stats from the runtime, the pod's figures are its cgroup's.
    let pod = pod_entry(&s, &uid).unwrap();
    assert!(
        pod["memory"]["workingSetBytes"].as_u64() >= Some(64 * MIB),
        "{pod}"
    );
    assert!(
        pod["cpu"]["usageCoreNanoSeconds"].as_u64() > Some(0),
        "{pod}"
    );
    node.teardown().await;
}

/// Whether the kernel keeps pressure stall information where the Summary API reads it: PSI
/// on, and cgroup v2 (Go's figures come from cadvisor's v2 reader alone).
fn psi_expected() -> bool {
    cgroups::v2() && std::fs::read_to_string("/proc/pressure/cpu").is_ok()
}

/// Polls ferrolet's log until it has `needle`.
async fn wait_log<N: RuntimeNode>(node: &KubeletNode<N>, needle: &str) {
    let deadline = Instant::now() + LONG;
    while !node.kubelet_log().contains(needle) {
        assert!(
            Instant::now() < deadline,
            "no {needle:?} in ferrolet's log within {LONG:?}:\n{}",
            node.kubelet_log()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disk_pressure_is_reported_and_the_static_pod_stays() {
    // A threshold no node meets: the filesystem's size less a page, which the node's own
    // files take (a percentage would not do: a fresh test node's disk may be more than 99 %
    // free); not more than the size, which Go's allocatable check refuses.
    std::fs::create_dir_all(ferrolet_integration::scratch::SCRATCH_ROOT).unwrap();
    let fs = nix::sys::statvfs::statvfs(ferrolet_integration::scratch::SCRATCH_ROOT).unwrap();
    let size = fs.blocks() * fs.fragment_size() - 4096;
    let node = KubeletNode::start_with(
        "pressure",
        KubeletOptions {
            extra_config: format!("evictionHard: {{\"nodefs.available\": \"{size}\"}}"),
            ..Default::default()
        },
    )
    .await;
    node.write_manifest(
        "web.yaml",
        &format!(
            r#"
            apiVersion: v1
            kind: Pod
            metadata:
              name: web
            spec:
              terminationGracePeriodSeconds: 5
              containers:
              - name: main
                image: {busybox}
                command: {idle}
            "#,
            busybox = image("busybox"),
            idle = sh(IDLE),
        ),
    );
    let pod = node.wait_running("web").await;
    let before = container_id(container_status(&pod, "main").unwrap()).to_string();

    // The signal is computed and the pressure reported...
    wait_log(&node, "node condition changed: kubelet has disk pressure").await;
    let log = node.kubelet_log();
    assert!(log.contains("DiskPressure"), "{log}");
    // ...and the eviction manager tries to reclaim, but a static pod is critical.
    wait_log(&node, "Eviction manager: cannot evict a critical pod").await;
    let s = summary(&node, "").await;
    let fs = &s["node"]["fs"];
    let available = fs["availableBytes"].as_u64().unwrap();
    assert!(available < size, "{fs} against a threshold of {size}");

    // The pod runs on, untouched: same container, no restart, not Failed.
    let pod = node.pod("web").await.unwrap();
    assert_eq!(pod_phase(&pod), "Running", "{pod}");
    assert!(pod["status"]["reason"].is_null(), "{pod}");
    let main = container_status(&pod, "main").unwrap();
    assert!(is_running(main), "{pod}");
    assert_eq!(container_id(main), before);
    assert_eq!(restart_count(main), 0);

    node.teardown().await;
}
