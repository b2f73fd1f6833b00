//! The container manager (issue #19) on real cgroups, through ferrolet-cri and through
//! containerd's own CRI plugin: the `kubepods` tree with node allocatable (capacity −
//! kubeReserved − systemReserved, as Go writes the cgroup), the QoS cgroups' shares, each QoS
//! class's pod cgroup with Go's values (a Guaranteed pod's summed limits, a Burstable pod's
//! request), the containers inside their pod's cgroup, `podPidsLimit: 64` on every pod cgroup
//! stopping a fork loop at 64 processes, and deleting the pods removing their cgroups, also
//! when ferrolet is killed with SIGKILL meanwhile (the restart sweeps the orphans), a
//! Burstable pod getting its CPU request beside a BestEffort hog, and OOM kills for a pod's
//! limit and for a container's own reported `OOMKilled` (the kernel's record in `/dev/kmsg`
//! says which cgroup ran out) and counted in `/metrics`, and a runtime reporting another cgroup
//! driver (CRI RuntimeConfig) refused at start-up. Values are read from the files of the host's
//! cgroup version (v1 here, v2 on the test node), in that version's units, where the driver
//! under test (cgroupfs here, systemd on the test node) keeps them.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test reports failure by panicking

use std::io::{ErrorKind, Read, Seek, SeekFrom};
use std::os::unix::fs::OpenOptionsExt;

use ferrolet_integration::cgroups::{self, cpu_quota, cpu_weight, memory_limit, weight_of_shares};
use ferrolet_integration::cri::poll;
use ferrolet_integration::kubelet::{
    KubeletNode, RuntimeNode, container_id, container_status, image, init_container_status,
    pod_phase, pod_uid, resources_pod, sh, terminated,
};
use ferrolet_integration::pods::{LONG, pids_with_cmdline};
use serde_json::Value;

const CONFIG: &str = "podPidsLimit: 64
kubeReserved: {memory: 512Mi}
systemReserved: {memory: 256Mi}
";

/// Forks the kernel refused for a pids limit, over `path` and the cgroups below it (v1 counts
/// a refusal in the forking task's own cgroup).
fn refused_forks(path: &str) -> u64 {
    let top = cgroups::dir("pids", path);
    let mut dirs = vec![top];
    let mut total = 0;
    while let Some(dir) = dirs.pop() {
        if let Ok(text) = std::fs::read_to_string(dir.join("pids.events")) {
            total += text
                .strip_prefix("max ")
                .and_then(|n| n.trim().parse::<u64>().ok())
                .unwrap_or(0);
        }
        if let Ok(rd) = std::fs::read_dir(&dir) {
            dirs.extend(
                rd.flatten()
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .map(|e| e.path()),
            );
        }
    }
    total
}

fn mem_total() -> i64 {
    let text = std::fs::read_to_string("/proc/meminfo").unwrap();
    let kb: i64 = text
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .unwrap()
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .unwrap();
    kb * 1024
}

fn online_cpus() -> i64 {
    std::thread::available_parallelism().unwrap().get() as i64
}

/// A Guaranteed pod of two containers with a pod overhead (as a RuntimeClass would set it).
fn guaranteed_yaml(first: &str, second: &str) -> String {
    format!(
        r#"
        apiVersion: v1
        kind: Pod
        metadata:
          name: guaranteed
        spec:
          terminationGracePeriodSeconds: 1
          overhead: {{cpu: 100m, memory: 16Mi}}
          containers:
          - name: main
            image: {image}
            command: {first}
            resources: {{limits: {{cpu: 500m, memory: 64Mi}}}}
          - name: side
            image: {image}
            command: {second}
            resources: {{limits: {{cpu: 250m, memory: 32Mi}}}}
        "#,
        image = image("busybox"),
        first = sh(first),
        second = sh(second),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qos_and_pod_cgroups_with_go_s_values() {
    let node = KubeletNode::start_with_config("cgroups", CONFIG).await;
    scenario(node, 310_000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qos_and_pod_cgroups_with_go_s_values_on_containerd_cri() {
    let node = KubeletNode::start_on_containerd_with_config("cd-cgroups", CONFIG).await;
    scenario(node, 320_000).await;
}

async fn scenario<N: RuntimeNode>(node: KubeletNode<N>, base: u32) {
    let marker = |k: u32| format!("sleep {}", base + k);
    let kubepods = format!("{}/kubepods", node.cgroup_root);
    // Node allocatable as Go writes it on the cgroup: capacity − kube − system reserved.
    let allocatable = mem_total() - (512 << 20) - (256 << 20);
    assert_eq!(memory_limit(&kubepods), Some(allocatable as u64));
    assert_eq!(
        cpu_weight(&kubepods),
        weight_of_shares(online_cpus() as u64 * 1024)
    );
    assert_eq!(
        cpu_weight(&format!("{kubepods}/besteffort")),
        weight_of_shares(2)
    );

    node.write_manifest("g.yaml", &guaranteed_yaml(&marker(0), &marker(5)));
    node.write_manifest(
        "b.yaml",
        &resources_pod("burstable", "{requests: {cpu: 500m}}", &marker(1)),
    );
    node.write_manifest("e.yaml", &resources_pod("besteffort", "{}", &marker(2)));
    // A fork loop in a pod of its own: the inner shell forks until the pod's 64 processes are
    // reached and gives up; its children stay with the container's init, which then becomes
    // a sleep without forking.
    node.write_manifest(
        "f.yaml",
        &resources_pod(
            "forker",
            "{}",
            &format!(
                "sh -c 'i=0; while [ $i -lt 200 ]; do {} & i=$((i+1)); done'; exec {}",
                marker(3),
                marker(4)
            ),
        ),
    );
    let mut uids = Vec::new();
    for name in ["guaranteed", "burstable", "besteffort"] {
        let pod = node.wait_running(name).await;
        uids.push(pod_uid(&pod).to_string());
    }
    let (g, b, e) = (&uids[0], &uids[1], &uids[2]);
    let forker = node.wait_running("forker").await;
    let fpath = format!("{kubepods}/besteffort/pod{}", pod_uid(&forker));
    let pauses = pause_processes(&node, &forker).await;
    let gpath = format!("{kubepods}/pod{g}");
    let bpath = format!("{kubepods}/burstable/pod{b}");
    let epath = format!("{kubepods}/besteffort/pod{e}");
    // Guaranteed, right under kubepods: the containers' limits summed plus the overhead,
    // 500m + 250m + 100m of CPU and 64 + 32 + 16 MiB of memory.
    assert_eq!(memory_limit(&gpath), Some(112 << 20));
    assert_eq!(cpu_weight(&gpath), weight_of_shares(870));
    assert_eq!(cpu_quota(&gpath), Some((85_000, 100_000)));
    // Burstable: its request's shares, no quota; the QoS cgroup carries the request.
    assert_eq!(cpu_weight(&bpath), weight_of_shares(512));
    assert_eq!(cpu_quota(&bpath), None);
    assert_eq!(
        cpu_weight(&format!("{kubepods}/burstable")),
        weight_of_shares(512)
    );
    assert_eq!(cpu_weight(&epath), weight_of_shares(2));
    for path in [&gpath, &bpath, &epath] {
        assert_eq!(cgroups::pids_max(path), Some(64), "{path}");
    }
    // The containers run inside their pod's cgroup.
    for (marker, path) in [
        (marker(0), &gpath),
        (marker(5), &gpath),
        (marker(1), &bpath),
        (marker(2), &epath),
    ] {
        let pids = pids_with_cmdline(&marker);
        assert_eq!(pids.len(), 1, "{marker}: {pids:?}");
        let own = cgroups::of_process(pids[0], "memory").unwrap();
        assert!(
            own.starts_with(&cgroups::node_path(path)),
            "{marker} in {own}, not under {path}"
        );
    }
    // The loop forks until the kernel refuses (the forking cgroup's pids.events counts it);
    // the inner shell then gives up and exits, leaving one slot free.
    poll("the fork loop stopped at the limit", LONG, || async {
        let current = cgroups::pids_current(&fpath) as usize;
        let refused = refused_forks(&fpath);
        let loopers = pids_with_cmdline(&marker(3)).len();
        let init = pids_with_cmdline(&marker(4)).len();
        // The container's init (and the pause process, if the runtime runs one) count
        // besides the loop's sleeps.
        if refused > 0
            && init == 1
            && loopers + 1 + pauses == current
            && (63..=64).contains(&current)
        {
            Ok(())
        } else {
            Err(format!(
                "pids.current {current}, {refused} forks refused, {loopers} loop processes, init {init}"
            ))
        }
    })
    .await;
    // The node stays responsive: ferrolet answers and still reports the pods.
    assert_eq!(node.pods().await["items"].as_array().unwrap().len(), 4);
    node.remove_manifest("f.yaml");
    node.wait_pod_gone("forker", LONG).await;
    for (file, name) in [
        ("g.yaml", "guaranteed"),
        ("b.yaml", "burstable"),
        ("e.yaml", "besteffort"),
    ] {
        node.remove_manifest(file);
        node.wait_pod_gone(name, LONG).await;
    }
    poll("the pod cgroups removed", LONG, || async {
        let left: Vec<&String> = [&gpath, &bpath, &epath, &fpath]
            .into_iter()
            .filter(|p| cgroups::exists(p))
            .collect();
        if left.is_empty() {
            Ok(())
        } else {
            Err(format!("still there: {left:?}"))
        }
    })
    .await;
    node.teardown().await;
}

/// ferrolet killed with SIGKILL while its pods are being deleted: after the restart the pods
/// it no longer wants are killed and their cgroups removed (housekeeping's sweep), as Go's
/// `cleanupOrphanedPodCgroups` does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphaned_pod_cgroups_are_removed_after_a_kill_9() {
    let node = KubeletNode::start_with_config("cgroups-kill9", "").await;
    let kubepods = format!("{}/kubepods", node.cgroup_root);
    let mut paths = Vec::new();
    for (i, name) in ["orphan-a", "orphan-b"].into_iter().enumerate() {
        node.write_manifest(
            &format!("{name}.yaml"),
            // A grace period longer than the trap's sleep, so that the containers (and
            // so the cgroups) outlive the kill below however fast the deletion starts.
            &resources_pod(
                name,
                "{requests: {cpu: 100m}}",
                &format!("trap 'sleep 6; exit 0' TERM; sleep {} & wait", 330_000 + i),
            )
            .replace(
                "terminationGracePeriodSeconds: 1",
                "terminationGracePeriodSeconds: 30",
            ),
        );
    }
    for name in ["orphan-a", "orphan-b"] {
        let pod = node.wait_running(name).await;
        let path = format!("{kubepods}/burstable/pod{}", pod_uid(&pod));
        assert!(cgroups::exists(&path), "{path}");
        paths.push(path);
    }
    // Deleted, then ferrolet dies while the containers are still in their grace period.
    node.remove_manifest("orphan-a.yaml");
    node.remove_manifest("orphan-b.yaml");
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    node.kill_kubelet();
    assert!(
        paths.iter().all(|p| cgroups::exists(p)),
        "the cgroups went before the kill"
    );
    node.restart_kubelet().await;
    poll("the orphaned pod cgroups removed", LONG, || async {
        let left: Vec<&String> = paths.iter().filter(|p| cgroups::exists(p)).collect();
        if left.is_empty() {
            Ok(())
        } else {
            Err(format!("still there: {left:?}"))
        }
    })
    .await;
    assert!(pids_with_cmdline("sleep 330000").is_empty());
    node.teardown().await;
}

/// CPU time (ns) a cgroup has used, over every CPU.
fn cpu_used(path: &str) -> u64 {
    cgroups::cpu_usage_ns(path).unwrap()
}

/// A BestEffort pod burning both CPUs beside a Burstable pod that asks for `cpu: 500m` and
/// also tries to burn both: the QoS and pod cgroups' shares (the request's 512 against
/// BestEffort's 2) give the Burstable pod at least 80 % of its request over 10 s, whatever
/// else the machine runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burstable_pod_gets_its_cpu_request_beside_a_best_effort_hog() {
    let node = KubeletNode::start_with_config("cgroups-cpu", "").await;
    let kubepods = format!("{}/kubepods", node.cgroup_root);
    let burn = |tag: &str| format!(": {tag}; while :; do :; done & while :; do :; done & wait");
    node.write_manifest("hog.yaml", &resources_pod("hog", "{}", &burn("hog-340000")));
    node.write_manifest(
        "want.yaml",
        &resources_pod("want", "{requests: {cpu: 500m}}", &burn("want-340001")),
    );
    let hog = node.wait_running("hog").await;
    let want = node.wait_running("want").await;
    let hog_path = format!("{kubepods}/besteffort/pod{}", pod_uid(&hog));
    let want_path = format!("{kubepods}/burstable/pod{}", pod_uid(&want));
    // Both loops of both pods running before the clock starts.
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    let window = std::time::Duration::from_secs(10);
    let (hog0, want0) = (cpu_used(&hog_path), cpu_used(&want_path));
    let started = std::time::Instant::now();
    tokio::time::sleep(window).await;
    let (hog1, want1) = (cpu_used(&hog_path), cpu_used(&want_path));
    let elapsed = started.elapsed().as_secs_f64();
    let cores = |a: u64, b: u64| (b - a) as f64 / 1e9 / elapsed;
    let (hog_cores, want_cores) = (cores(hog0, hog1), cores(want0, want1));
    eprintln!(
        "over {elapsed:.1} s: Burstable (500m asked) {want_cores:.3} cores, \
         BestEffort hog {hog_cores:.3} cores"
    );
    assert!(
        want_cores >= 0.8 * 0.5,
        "the Burstable pod got {want_cores:.3} cores of its 0.5 (the hog {hog_cores:.3})"
    );
    node.remove_manifest("hog.yaml");
    node.remove_manifest("want.yaml");
    node.wait_pod_gone("hog", LONG).await;
    node.wait_pod_gone("want", LONG).await;
    node.teardown().await;
}

/// The kernel's log from the moment it is opened, read without blocking.
struct Kmsg(std::fs::File);

impl Kmsg {
    fn open() -> Self {
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open("/dev/kmsg")
            .unwrap();
        // kmsg seeks by record: the end skips everything logged so far.
        file.seek(SeekFrom::End(0)).unwrap();
        Self(file)
    }

    /// The text of the `oom-kill:` records logged since the last call.
    fn oom_kills(&mut self) -> Vec<String> {
        let mut found = Vec::new();
        let mut buf = vec![0u8; 8192];
        loop {
            match self.0.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    let record = String::from_utf8_lossy(&buf[..n]);
                    let text = record.lines().next().unwrap_or_default();
                    let text = text.split_once(';').map_or(text, |(_, t)| t);
                    if text.starts_with("oom-kill:") {
                        found.push(text.to_string());
                    }
                }
                // Records overwritten before we read them.
                Err(e) if e.kind() == ErrorKind::BrokenPipe => continue,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => panic!("reading /dev/kmsg: {e}"),
            }
        }
        found
    }
}

/// Field `key` of an `oom-kill:` record (`oom_memcg`, `task_memcg`, ...).
fn kmsg_field<'a>(record: &'a str, key: &str) -> &'a str {
    let start = record
        .find(&format!("{key}="))
        .map(|i| i + key.len() + 1)
        .unwrap_or_else(|| panic!("no {key} in {record}"));
    record[start..].split(',').next().unwrap_or_default()
}

/// The kernel's OOM kill record of container `cid`, polled from `kmsg` (records of other
/// tests' kills are passed over).
async fn oom_record(kmsg: &mut Kmsg, seen: &mut Vec<String>, cid: &str) -> String {
    let deadline = std::time::Instant::now() + LONG;
    loop {
        seen.extend(kmsg.oom_kills());
        if let Some(r) = seen.iter().find(|r| {
            let task = kmsg_field(r, "task_memcg");
            task.ends_with(&format!("/{cid}")) || task.ends_with(&format!("-{cid}.scope"))
        }) {
            return r.clone();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no OOM kill of {cid} in /dev/kmsg; seen: {seen:#?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// The init container fills a memory-backed emptyDir with 48Mi, which stays charged to the
/// pod's cgroup after it exits; the app container's shell then grows by 32Mi, well within its
/// own 64Mi but beyond the pod's (64Mi: Go's PodLimits, the larger of the app containers' sum
/// and the largest init container's), so the kernel kills for the pod's limit.
fn pod_level_oom() -> String {
    format!(
        r#"
        apiVersion: v1
        kind: Pod
        metadata:
          name: pod-oom
        spec:
          restartPolicy: Never
          terminationGracePeriodSeconds: 1
          volumes:
          - name: cache
            emptyDir: {{medium: Memory}}
          initContainers:
          - name: fill
            image: {image}
            command: {fill}
            resources: {{limits: {{memory: 64Mi}}}}
            volumeMounts: [{{name: cache, mountPath: /cache}}]
          containers:
          - name: grow
            image: {image}
            command: {grow}
            resources: {{limits: {{memory: 64Mi}}}}
        "#,
        image = image("busybox"),
        fill = sh("head -c 50331648 /dev/zero > /cache/fill"),
        grow = sh(r"x=$(head -c 33554432 /dev/zero | tr '\0' a); echo survived"),
    )
}

/// One container at its own 32Mi limit. A second, idle one (`idle`, its command) raises the
/// pod's limit to 64Mi: with the first alone the pod's limit would equal the container's, and
/// the pod's cgroup, which also holds the sandbox, would run out first.
fn container_level_oom(idle: &str) -> String {
    format!(
        r#"
        apiVersion: v1
        kind: Pod
        metadata:
          name: ctr-oom
        spec:
          restartPolicy: Never
          terminationGracePeriodSeconds: 1
          containers:
          - name: hog
            image: {image}
            command: {hog}
            resources: {{limits: {{memory: 32Mi}}}}
          - name: idle
            image: {image}
            command: {idle}
            resources: {{limits: {{memory: 32Mi}}}}
        "#,
        image = image("busybox"),
        hog = sh(r"x=$(head -c 67108864 /dev/zero | tr '\0' a); echo survived"),
        idle = sh(&format!("exec {idle}")),
    )
}

/// Waits until `container` of pod `name` is terminated `OOMKilled`; returns the pod.
async fn wait_oom_killed<N: RuntimeNode>(
    node: &KubeletNode<N>,
    name: &str,
    container: &str,
) -> Value {
    node.wait_pod(
        name,
        |p| {
            container_status(p, container)
                .and_then(terminated)
                .is_some_and(|t| t["reason"] == "OOMKilled")
        },
        LONG,
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oom_kills_are_reported_oom_killed() {
    let node = KubeletNode::start_with_config("oom", "").await;
    oom_scenario(node, "sleep 350000").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oom_kills_are_reported_oom_killed_on_containerd_cri() {
    let node = KubeletNode::start_on_containerd_with_config("cd-oom", "").await;
    oom_scenario(node, "sleep 350001").await;
}

async fn oom_scenario<N: RuntimeNode>(node: KubeletNode<N>, idle: &str) {
    let burstable = format!("{}/kubepods/burstable", node.cgroup_root);
    let mut kmsg = Kmsg::open();
    let mut seen = Vec::new();
    node.write_manifest("pod-oom.yaml", &pod_level_oom());
    node.write_manifest("ctr-oom.yaml", &container_level_oom(idle));

    // For the pod's limit: the kernel names the pod's cgroup as the one that ran out.
    let pod = wait_oom_killed(&node, "pod-oom", "grow").await;
    let uid = pod_uid(&pod).to_string();
    let grow = container_status(&pod, "grow").unwrap();
    assert_eq!(terminated(grow).unwrap()["exitCode"], 137);
    assert_eq!(pod_phase(&pod), "Failed");
    let fill = init_container_status(&pod, "fill").unwrap();
    assert_eq!(terminated(fill).unwrap()["reason"], "Completed");
    let cid = container_id(grow).to_string();
    let record = oom_record(&mut kmsg, &mut seen, &cid).await;
    eprintln!("pod-level OOM: {record}");
    let pod_cgroup = format!("{burstable}/pod{uid}");
    assert_eq!(
        kmsg_field(&record, "oom_memcg"),
        cgroups::node_path(&pod_cgroup)
    );
    assert!(
        cgroups::is_container_cgroup(kmsg_field(&record, "task_memcg"), &pod_cgroup, &cid),
        "{record}"
    );
    let api = node.node.api().await;
    let own = api.container_status(&cid).await.unwrap();
    eprintln!(
        "pod-level OOM: the runtime says {:?} ({}), ferrolet OOMKilled",
        own.reason, own.exit_code
    );

    // For the container's own limit: the container's cgroup ran out.
    let pod = wait_oom_killed(&node, "ctr-oom", "hog").await;
    let ctr_uid = pod_uid(&pod).to_string();
    let hog = container_status(&pod, "hog").unwrap();
    assert_eq!(terminated(hog).unwrap()["exitCode"], 137);
    let idle_status = container_status(&pod, "idle").unwrap();
    assert!(idle_status["state"]["running"].is_object(), "{idle_status}");
    let hog_id = container_id(hog).to_string();
    let record = oom_record(&mut kmsg, &mut seen, &hog_id).await;
    eprintln!("container-level OOM: {record}");
    let pod_cgroup = format!("{burstable}/pod{ctr_uid}");
    let own_cgroup = kmsg_field(&record, "task_memcg");
    assert!(
        cgroups::is_container_cgroup(own_cgroup, &pod_cgroup, &hog_id),
        "{record}"
    );
    assert_eq!(kmsg_field(&record, "oom_memcg"), own_cgroup);
    let own = api.container_status(&hog_id).await.unwrap();
    eprintln!(
        "container-level OOM: the runtime says {:?} ({}), ferrolet OOMKilled",
        own.reason, own.exit_code
    );

    // The watcher counted both, each for the limit reached.
    poll("the OOM kills counted", LONG, || async {
        let m = node.metrics().await;
        let count = |scope: &str| {
            m.family("kubelet_oom_events_total")
                .map(|f| f.with_labels(&[("scope", scope)]))
                .and_then(|s| s.first().map(|s| s.value))
                .unwrap_or(0.0)
        };
        let (pod, container) = (count("pod"), count("container"));
        if pod >= 1.0 && container >= 1.0 {
            eprintln!("kubelet_oom_events_total: pod {pod}, container {container}");
            Ok(())
        } else {
            Err(format!("pod {pod}, container {container}"))
        }
    })
    .await;

    for (file, name) in [("pod-oom.yaml", "pod-oom"), ("ctr-oom.yaml", "ctr-oom")] {
        node.remove_manifest(file);
        node.wait_pod_gone(name, LONG).await;
    }
    assert!(pids_with_cmdline(idle).is_empty());
    node.teardown().await;
}

/// 1 if the pod's ready sandbox has a pause process (containerd's CRI always runs one;
/// ferrolet-cri only for pods that share a PID namespace or set sysctls), else 0.
async fn pause_processes<N: RuntimeNode>(node: &KubeletNode<N>, pod: &Value) -> usize {
    let info = node.ready_sandbox_info(pod).await;
    usize::from(info["pid"].as_u64().expect("the sandbox's pid") > 0)
}

/// ferrolet with the cgroupfs driver against a runtime driving cgroups through systemd
/// (ferrolet-cri's `systemd_cgroup`, containerd's `SystemdCgroup`): the runtime's CRI
/// RuntimeConfig says so, and ferrolet stops at start-up naming both sides instead of handing
/// the runtime cgroup paths it cannot use.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_with_another_cgroup_driver_is_refused_at_start() {
    use ferrolet_integration::pods::{CriNode, NodeOptions};
    use ferrolet_integration::scratch::Scratch;
    // With the systemd driver under test the harness gives every ferrolet-cri the option.
    let extra_config = if cgroups::systemd_driver() {
        String::new()
    } else {
        "systemd_cgroup = true".to_string()
    };
    let cri = CriNode::start_with(
        "driver-mismatch",
        NodeOptions {
            extra_config,
            ..Default::default()
        },
    )
    .await;
    let scratch = Scratch::new("kubelet-driver-mismatch");
    let config = scratch.path().join("config.yaml");
    std::fs::write(
        &config,
        "apiVersion: kubelet.config.k8s.io/v1beta1\n\
         kind: KubeletConfiguration\n\
         cgroupDriver: cgroupfs\n\
         cgroupsPerQOS: false\n\
         enforceNodeAllocatable: []\n\
         enableServer: false\n\
         healthzPort: 0\n\
         readOnlyPort: 0\n",
    )
    .unwrap();
    let (status, text) = ferrolet_integration::kubelet::run_ferrolet_to_exit(
        &config,
        &scratch.path().join("root"),
        &cri.cri.endpoint(),
        &scratch.path().join("ferrolet.log"),
    )
    .await;
    assert!(!status.success(), "ferrolet started:\n{text}");
    let want = "cgroup driver mismatch: ferrolet is configured with cgroupDriver \"cgroupfs\", \
                but the container runtime reports \"systemd\" (CRI RuntimeConfig)";
    assert!(text.contains(want), "no {want:?} in:\n{text}");
    println!(
        "refused: {}",
        text.lines()
            .find(|l| l.contains("mismatch"))
            .unwrap_or_default()
    );
    cri.teardown().await;
}

/// The `MemoryQoS` gate (Go's alpha, acted on only on cgroup v2): `memory.min` protects what
/// a Burstable pod asks for on its container, its pod, the Burstable QoS cgroup and
/// `kubepods`; the container's `memory.high` sits `memoryThrottlingFactor` of the way from
/// request to limit, page-rounded. On v1 the gate is accepted and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_qos_protects_requests_and_throttles_towards_limits() {
    let node = KubeletNode::start_with_config(
        "memory-qos",
        "featureGates: {MemoryQoS: true}\nmemoryThrottlingFactor: 0.8",
    )
    .await;
    let marker = "sleep 3741";
    node.write_manifest(
        "b.yaml",
        &resources_pod(
            "burstable",
            "{requests: {memory: 64Mi}, limits: {memory: 128Mi}}",
            &format!("exec {marker}"),
        ),
    );
    let pod = node.wait_running("burstable").await;
    assert!(
        !node.kubelet_log().contains("featureGates.MemoryQoS"),
        "the gate is acted on, not reported as ignored"
    );
    let kubepods = format!("{}/kubepods", node.cgroup_root);
    let ppath = format!("{kubepods}/burstable/pod{}", pod_uid(&pod));
    let pids = pids_with_cmdline(marker);
    assert_eq!(pids.len(), 1, "{pids:?}");
    let container = cgroups::of_process(pids[0], "memory").unwrap();
    let min = |cgroup: &str| cgroups::read("memory", cgroup, "memory.min");
    if cgroups::v2() {
        let request = (64u64 << 20).to_string();
        // floor((64Mi + 0.8 × 64Mi) / 4096) × 4096
        assert_eq!(
            cgroups::read("memory", &container, "memory.high"),
            "120795136"
        );
        for cgroup in [
            container.as_str(),
            &ppath,
            &format!("{kubepods}/burstable"),
            &kubepods,
        ] {
            assert_eq!(min(cgroup), request, "memory.min of {cgroup}");
        }
        println!(
            "memory.min {request} on the container {container}, its pod, burstable, kubepods; memory.high 120795136"
        );
    } else {
        assert!(!cgroups::dir("memory", &ppath).join("memory.min").exists());
    }
    node.teardown().await;
}
