//! Resources the node cannot enforce (issue #14): a pod whose containers carry the Go kubelet's
//! huge page limits (2MB and 1GB, limit 0: it sends one for every page size the kernel has)
//! starts on a node without a mounted hugetlb controller, also when an empty `hugetlb`
//! directory stands where its mount would be, on ferrolet-cri as on containerd's CRI.
//!
//! The empty directory is what any `mkdir -p` of a cgroup path over a list of controller names
//! leaves behind; runc (which reads mountinfo) cannot set a hugetlb limit through it, so a
//! runtime that took the directory for the controller failed every such container.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test reports failure by panicking

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use ferrolet_integration::containerd_cri::ContainerdCriNode;
use ferrolet_integration::cri::RuntimeApi;
use ferrolet_integration::kubelet::image;
use ferrolet_integration::pods::{ContainerBuilder, CriNode, PodCgroup};
use ferrolet_proto::containerd::services::v1::GetContainerRequest;
use ferrolet_proto::cri::{
    ContainerState, HugepageLimit, LinuxContainerResources, PodSandboxConfig,
};
use serde_json::Value;

/// Where a v1 hugetlb hierarchy would be mounted.
const HUGETLB_DIR: &str = "/sys/fs/cgroup/hugetlb";

/// The containers' memory limit (64 MiB), which they read back from their own cgroup.
const MEMORY_LIMIT: i64 = 64 << 20;

/// The two tests run one after the other: one of them puts the directory in place for a while,
/// and the other's first half must see the node without it.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_hugepage_limits_run_on_ferrolet_cri_without_hugetlb() {
    let _serial = SERIAL.lock().await;
    assert_hugetlb_not_mounted();
    if Path::new(HUGETLB_DIR).exists() {
        eprintln!("{HUGETLB_DIR} exists already: skipping the run without it");
    } else {
        on_ferrolet_cri("hpcri-none", false).await;
    }
    let stray = StrayDir::create(HUGETLB_DIR);
    on_ferrolet_cri("hpcri-dir", true).await;
    stray.remove();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_hugepage_limits_run_on_containerd_cri_without_hugetlb() {
    let _serial = SERIAL.lock().await;
    assert_hugetlb_not_mounted();
    if Path::new(HUGETLB_DIR).exists() {
        eprintln!("{HUGETLB_DIR} exists already: skipping the run without it");
    } else {
        on_containerd_cri("hpcd-none").await;
    }
    let stray = StrayDir::create(HUGETLB_DIR);
    on_containerd_cri("hpcd-dir").await;
    stray.remove();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unified_keys_on_a_v1_node_fail_at_start_as_under_containerd() {
    // Both runtimes pass `unified` to runc as asked; runc's v1 manager refuses it when the
    // task is created. The Go kubelet sends it only on cgroup v2.
    if ferrolet_integration::cgroups::v2() {
        eprintln!("a cgroup v2 node: unified keys are valid here");
        return;
    }
    let cgroup = PodCgroup::new("unified-cri");
    let (node, api, pod) = ferrolet_cri_node("unified-cri", &cgroup).await;
    let ours = start_with_unified(&api, &pod).await;
    node.teardown().await;
    drop(cgroup);
    let cgroup = PodCgroup::new("unified-cd");
    let (node, api, pod) = containerd_cri_node("unified-cd", &cgroup).await;
    let theirs = start_with_unified(&api, &pod).await;
    let pods = api.list_pods(None).await.unwrap();
    for p in &pods {
        remove_pod(&api, &p.id).await;
    }
    node.teardown().await;
    drop(cgroup);
    for (runtime, message) in [("ferrolet-cri", ours), ("containerd", theirs)] {
        assert!(
            message.contains("cannot use unified on cgroup v1"),
            "{runtime}: {message}"
        );
    }
}

/// Creates a container with `memory.high` in `unified` in a new pod: creation succeeds,
/// StartContainer fails; its message.
async fn start_with_unified(api: &RuntimeApi, pod: &PodSandboxConfig) -> String {
    let pod_id = api.run_pod(pod).await.unwrap();
    let mut config = ContainerBuilder::new("unified", &image("busybox"))
        .shell("sleep 3600")
        .build();
    if let Some(linux) = config.linux.as_mut() {
        linux.resources = Some(LinuxContainerResources {
            unified: HashMap::from([("memory.high".to_string(), "max".to_string())]),
            ..Default::default()
        });
    }
    let id = api.create_container(&pod_id, pod, &config).await.unwrap();
    let err = api.start_container(&id).await.unwrap_err();
    err.message().to_string()
}

/// ferrolet-cri started after the directory question is settled (it decides once, at
/// start-up): the pod runs, the specs carry no huge page limits, and the start-up line said
/// so once rather than once per container.
async fn on_ferrolet_cri(tag: &str, stray_dir: bool) {
    let cgroup = PodCgroup::new(tag);
    let (node, api, pod) = ferrolet_cri_node(tag, &cgroup).await;
    let (pod_id, containers) = run_kubelet_shaped_pod(&api, &pod).await;
    for id in &containers {
        let record = node
            .ns
            .client
            .containers()
            .get(GetContainerRequest { id: id.clone() })
            .await
            .unwrap()
            .into_inner()
            .container
            .unwrap();
        let spec: Value = serde_json::from_slice(&record.spec.unwrap().value).unwrap();
        assert_no_hugepage_limits(&spec, &format!("ferrolet-cri ({tag}) container {id}"));
    }
    let log = node.cri.log_text();
    let lines = log
        .lines()
        .filter(|l| l.contains("huge page limits"))
        .collect::<Vec<_>>();
    assert_eq!(
        lines.len(),
        1,
        "one start-up line about huge pages (stray dir: {stray_dir}), not one per container:\n{}",
        lines.join("\n")
    );
    assert!(
        lines[0].contains("hugetlb is not available"),
        "{}",
        lines[0]
    );
    remove_pod(&api, &pod_id).await;
    node.teardown().await;
    drop(cgroup);
}

/// containerd's CRI on the same node, the reference. Its default configuration
/// (`disable_hugetlb_controller = true`) never applies huge page limits at all; with it set
/// to false it would decide from the directory (`os.ReadDir("/sys/fs/cgroup/hugetlb")`).
async fn on_containerd_cri(tag: &str) {
    let cgroup = PodCgroup::new(tag);
    let (node, api, pod) = containerd_cri_node(tag, &cgroup).await;
    let (pod_id, containers) = run_kubelet_shaped_pod(&api, &pod).await;
    for id in &containers {
        let (_, info) = api.container_status_verbose(id, true).await.unwrap();
        let info: Value = serde_json::from_str(&info["info"]).unwrap();
        assert_no_hugepage_limits(
            &info["runtimeSpec"],
            &format!("containerd ({tag}) container {id}"),
        );
    }
    remove_pod(&api, &pod_id).await;
    node.teardown().await;
    drop(cgroup);
}

/// A ferrolet-cri node with busybox pulled, and a pod config under `cgroup` (the kubelet
/// gives every pod one). The caller makes the cgroup first, so that a panicking test drops
/// the node (whose panic clean-up removes the pods) before the cgroup it removes.
async fn ferrolet_cri_node(
    tag: &str,
    cgroup: &PodCgroup,
) -> (CriNode, RuntimeApi, PodSandboxConfig) {
    let node = CriNode::start(tag).await;
    let api = node.api().await;
    node.pull("busybox").await;
    let pod = node.pod("resources").cgroup_parent(&cgroup.path).build();
    (node, api, pod)
}

/// The same on containerd's CRI.
async fn containerd_cri_node(
    tag: &str,
    cgroup: &PodCgroup,
) -> (ContainerdCriNode, RuntimeApi, PodSandboxConfig) {
    let node = ContainerdCriNode::start(tag).await;
    let api = node.api().await;
    node.pull("busybox").await;
    let pod = node.pod("resources").cgroup_parent(&cgroup.path).build();
    (node, api, pod)
}

/// A pod with two containers as the Go kubelet 1.28 fills them on this node
/// (`generateLinuxContainerResources`): a burstable one (requests cpu 100m, memory 32Mi;
/// limits cpu 500m, memory 64Mi) and a best-effort one, both with a limit of 0 for every huge
/// page size. Each must be running, and running with its memory limit. Returns the ids.
async fn run_kubelet_shaped_pod(api: &RuntimeApi, pod: &PodSandboxConfig) -> (String, Vec<String>) {
    let pod_id = api.run_pod(pod).await.unwrap();
    let hugepages = || {
        ["2MB", "1GB"]
            .map(|size| HugepageLimit {
                page_size: size.into(),
                limit: 0,
            })
            .to_vec()
    };
    let burstable = LinuxContainerResources {
        cpu_period: 100_000,
        cpu_quota: 50_000,
        cpu_shares: 102,
        memory_limit_in_bytes: MEMORY_LIMIT,
        oom_score_adj: 999,
        hugepage_limits: hugepages(),
        unified: HashMap::new(),
        // The kubelet's ConfigureNoSwap on a v1 node with swap accounting (as here).
        memory_swap_limit_in_bytes: if swap_accounted() { MEMORY_LIMIT } else { 0 },
        ..Default::default()
    };
    let besteffort = LinuxContainerResources {
        cpu_period: 100_000,
        cpu_shares: 2,
        oom_score_adj: 1000,
        hugepage_limits: hugepages(),
        ..Default::default()
    };
    let mut ids = Vec::new();
    for (name, resources) in [("burstable", burstable), ("besteffort", besteffort)] {
        let mut config = ContainerBuilder::new(name, &image("busybox"))
            .shell("sleep 3600")
            .build();
        if let Some(linux) = config.linux.as_mut() {
            linux.resources = Some(resources.clone());
        }
        let id = api
            .run_container(&pod_id, pod, &config)
            .await
            .unwrap_or_else(|e| {
                panic!("container {name} with the kubelet's huge page limits: {e}")
            });
        let status = api.container_status(&id).await.unwrap();
        assert_eq!(
            status.state,
            ContainerState::ContainerRunning as i32,
            "{name}: {status:?}"
        );
        // It runs, inside a cgroup with the limits it asked for.
        let own_limit = if ferrolet_integration::cgroups::v2() {
            "/sys/fs/cgroup/memory.max"
        } else {
            "/sys/fs/cgroup/memory/memory.limit_in_bytes"
        };
        let limit = api.exec_ok(&id, &["cat", own_limit]).await;
        if resources.memory_limit_in_bytes != 0 {
            assert_eq!(limit.trim(), MEMORY_LIMIT.to_string(), "{name}");
        }
        ids.push(id);
    }
    (pod_id, ids)
}

/// Stops and removes the pod (and its containers) through CRI.
async fn remove_pod(api: &RuntimeApi, pod_id: &str) {
    api.stop_pod(pod_id).await.unwrap();
    api.remove_pod(pod_id).await.unwrap();
}

fn assert_no_hugepage_limits(spec: &Value, what: &str) {
    let resources = &spec["linux"]["resources"];
    assert!(
        resources.is_object(),
        "{what}: no linux.resources in {spec}"
    );
    assert!(
        resources
            .get("hugepageLimits")
            .is_none_or(|h| h.as_array().is_some_and(Vec::is_empty)),
        "{what}: {resources}"
    );
}

/// The test is about a node without hugetlb: refuse to run on one that has it mounted.
fn assert_hugetlb_not_mounted() {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let mounted = mountinfo.lines().any(|l| {
        let Some((_, after)) = l.split_once(" - ") else {
            return false;
        };
        let fields: Vec<&str> = after.split(' ').collect();
        fields.first() == Some(&"cgroup")
            && fields
                .get(2)
                .is_some_and(|o| o.split(',').any(|c| c == "hugetlb"))
    });
    assert!(
        !mounted,
        "this test needs a node without a v1 hugetlb hierarchy; this one has it mounted"
    );
}

/// Whether the mounted memory hierarchy accounts swap (what the kubelet checks).
fn swap_accounted() -> bool {
    Path::new("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes").exists()
}

/// An empty directory with nothing mounted on it, made for the test and removed after it,
/// also when the test panics. Only a directory this guard made is removed, and only while it
/// is empty (`remove_dir`), so a real mount or someone else's directory is never touched.
struct StrayDir {
    path: PathBuf,
    made: bool,
}

impl StrayDir {
    fn create(path: &str) -> Self {
        let path = PathBuf::from(path);
        let made = match std::fs::create_dir(&path) {
            Ok(()) => true,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let empty = std::fs::read_dir(&path)
                    .map(|mut d| d.next().is_none())
                    .unwrap_or(false);
                assert!(empty, "{} exists and is not empty", path.display());
                false
            }
            Err(e) => panic!("creating {}: {e}", path.display()),
        };
        StrayDir { path, made }
    }

    /// Removes it, checking nothing was written into it meanwhile: a runtime that did would
    /// have taken the directory for a hierarchy.
    fn remove(mut self) {
        let left: Vec<_> = std::fs::read_dir(&self.path)
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        assert!(
            left.is_empty(),
            "written into {}: {left:?}",
            self.path.display()
        );
        self.remove_if_made();
    }

    fn remove_if_made(&mut self) {
        if std::mem::take(&mut self.made)
            && let Err(e) = std::fs::remove_dir(&self.path)
        {
            eprintln!("removing {}: {e}", self.path.display());
        }
    }
}

impl Drop for StrayDir {
    fn drop(&mut self) {
        self.remove_if_made();
    }
}
