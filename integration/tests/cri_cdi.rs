//! CDI devices on ferrolet-cri, and the same scenario on containerd's own CRI: a spec file in
//! a test-private spec directory adds a device node (`/dev/ferrolet-cdi0`, standing for the
//! host's `/dev/null`), a read-only bind mount of a scratch directory, env and a supplementary
//! group. Containers asking for its devices through CRI's `cdi_devices` and through a
//! `cdi.k8s.io/*` annotation see them from inside; one asking for an unknown or ambiguous
//! device fails CreateContainer with a message naming it and adds nothing to containerd; a
//! spec file written after the runtime started is used; a broken one costs only itself.
//!
//! containerd 1.7+ has CDI (on by default from 2.0; `make test-containerd2` runs this on
//! 2.1); containerd 1.6, the machine's, has none: there the test asserts what 1.6 does
//! instead (the request is ignored, the container starts without the device) and says so.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test reports failure by panicking

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ferrolet_integration::containerd::containerd_version;
use ferrolet_integration::containerd_cri::ContainerdCriNode;
use ferrolet_integration::cri::RuntimeApi;
use ferrolet_integration::pods::{
    ContainerBuilder, CriNode, NodeOptions, containerd_runtime_leaks,
};
use ferrolet_integration::scratch::Scratch;
use ferrolet_proto::containerd::Containerd;
use ferrolet_proto::containerd::services::v1::GetContainerRequest;
use ferrolet_proto::cri::{ContainerConfig, PodSandboxConfig};
use serde_json::Value;
use tonic::{Code, Status};

const NODE_DEVICE: &str = "ferrolet.test/dev=null0";
const DATA_DEVICE: &str = "ferrolet.test/dev=data";
const LATE_DEVICE: &str = "ferrolet.test/late=x";
const UNKNOWN_DEVICE: &str = "ferrolet.test/dev=nope";
const AMBIGUOUS_DEVICE: &str = "ferrolet.test/amb=x";
/// Where the device node appears in the container.
const DEVICE_PATH: &str = "/dev/ferrolet-cdi0";
/// Where the scratch directory is mounted.
const MOUNT_PATH: &str = "/cdi-data";
/// The supplementary group the data device adds.
const GID: u32 = 4242;
const HELLO: &str = "hello from the host's scratch\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cdi_devices_and_annotations_apply_on_ferrolet_cri() {
    let dirs = SpecDirs::new("cdi-ferrolet");
    let list = dirs
        .dirs()
        .iter()
        .map(|d| format!("{:?}", d.display().to_string()))
        .collect::<Vec<_>>()
        .join(", ");
    let node = CriNode::start_with(
        "cdi",
        NodeOptions {
            extra_config: format!("cdi_spec_dirs = [{list}]\n"),
            ..Default::default()
        },
    )
    .await;
    let api = node.api().await;
    let busybox = node.pull("busybox").await;
    let pod = node.pod("cdi").build();
    let runtime = Runtime::Ferrolet(&node);
    let outcome = applies(&runtime, &api, &pod, &busybox.reference, &dirs).await;
    for (what, status) in [
        ("unknown", &outcome.unknown),
        ("ambiguous", &outcome.ambiguous),
    ] {
        assert_eq!(status.code(), Code::InvalidArgument, "{what}: {status:?}");
    }
    assert_eq!(
        outcome.unknown.message(),
        format!(
            "CDI device {UNKNOWN_DEVICE:?}: unresolvable (CDI spec files that could not be \
             loaded: {:?})",
            dirs.broken()
        )
    );
    assert!(
        outcome.ambiguous.message().contains("at the same priority"),
        "{}",
        outcome.ambiguous.message()
    );
    assert_eq!(
        outcome.late_attempts, 1,
        "a spec written after start-up is used by the very next CreateContainer"
    );
    eprintln!(
        "[cdi] ferrolet-cri: CDI applied; unknown device → {:?} {:?}; ambiguous → {:?} {:?}; a \
         spec written after start-up used after {:?} ({} CreateContainer call(s))",
        outcome.unknown.code(),
        outcome.unknown.message(),
        outcome.ambiguous.code(),
        outcome.ambiguous.message(),
        outcome.late_after,
        outcome.late_attempts,
    );
    // The broken file is in the log with its path, from start-up on.
    let log = node.cri.log_text();
    let broken = dirs.broken().display().to_string();
    assert!(
        log.lines()
            .any(|l| l.contains("CDI spec file could not be loaded") && l.contains(&broken)),
        "no log line about {broken}:\n{log}"
    );
    node.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_on_containerd_cri() {
    let version = containerd_version();
    let dirs = SpecDirs::new("cdi-containerd");
    let node = ContainerdCriNode::start_with_cdi("cdi", &dirs.dirs()).await;
    let api = node.api().await;
    let busybox = node.pull("busybox").await.reference;
    let pod = node.pod("cdi").build();
    let runtime = Runtime::Containerd(&node);
    if version >= (1, 7) {
        let outcome = applies(&runtime, &api, &pod, &busybox, &dirs).await;
        eprintln!(
            "[cdi] containerd {}.{}: CDI applied; unknown device → {:?} {:?}; ambiguous → {:?} \
             {:?}; a spec written after start-up used after {:?} ({} CreateContainer call(s))",
            version.0,
            version.1,
            outcome.unknown.code(),
            outcome.unknown.message(),
            outcome.ambiguous.code(),
            outcome.ambiguous.message(),
            outcome.late_after,
            outcome.late_attempts,
        );
    } else {
        ignored(&runtime, &api, &pod, &busybox).await;
        eprintln!(
            "[cdi] containerd {}.{}: no CDI; cdi_devices and cdi.k8s.io annotations are \
             ignored and the container runs without the devices",
            version.0, version.1
        );
    }
    node.teardown().await;
}

/// The spec directories (low, then high priority), the host directory the data device
/// mounts, and the spec files: the main one and a broken one, both in place before the
/// runtime starts.
struct SpecDirs {
    scratch: Scratch,
}

impl SpecDirs {
    fn new(tag: &str) -> Self {
        let scratch = Scratch::new(tag);
        let dirs = Self { scratch };
        for d in [dirs.low(), dirs.high(), dirs.shared()] {
            std::fs::create_dir_all(&d).unwrap();
        }
        std::fs::write(dirs.shared().join("hello"), HELLO).unwrap();
        std::fs::write(
            dirs.low().join("ferrolet-test.yaml"),
            main_spec(&dirs.shared()),
        )
        .unwrap();
        std::fs::write(dirs.broken(), "cdiVersion: 0.7.0\nkind: [not, a, kind\n").unwrap();
        dirs
    }

    fn low(&self) -> PathBuf {
        self.scratch.path().join("etc-cdi")
    }

    fn high(&self) -> PathBuf {
        self.scratch.path().join("run-cdi")
    }

    fn shared(&self) -> PathBuf {
        self.scratch.path().join("shared")
    }

    fn broken(&self) -> PathBuf {
        self.low().join("broken.yaml")
    }

    fn dirs(&self) -> Vec<PathBuf> {
        vec![self.low(), self.high()]
    }
}

/// The main spec: the device node (type and numbers from the host's /dev/null), the mount,
/// env at both levels, the group.
fn main_spec(shared: &Path) -> String {
    format!(
        r#"cdiVersion: "0.7.0"
kind: ferrolet.test/dev
containerEdits:
  env: [FERROLET_CDI_SPEC=1]
devices:
  - name: null0
    containerEdits:
      env: [FERROLET_CDI_NULL0=1]
      deviceNodes:
        - path: {DEVICE_PATH}
          hostPath: /dev/null
          permissions: rw
  - name: data
    containerEdits:
      env: [FERROLET_CDI_DATA=1]
      mounts:
        - hostPath: {shared}
          containerPath: {MOUNT_PATH}
          type: bind
          options: [rbind, ro]
      additionalGids: [{GID}]
"#,
        shared = shared.display()
    )
}

/// A one-device spec of `kind` whose device `name` sets `env`.
fn small_spec(kind: &str, name: &str, env: &str) -> String {
    format!(
        "cdiVersion: 0.3.0\nkind: {kind}\ndevices:\n  - name: {name}\n    containerEdits:\n      env: [{env}]\n"
    )
}

/// The runtime under test: how to reach its containerd and read a container's spec.
enum Runtime<'a> {
    Ferrolet(&'a CriNode),
    Containerd(&'a ContainerdCriNode),
}

impl Runtime<'_> {
    async fn containerd(&self) -> Containerd {
        match self {
            Runtime::Ferrolet(node) => node.ns.client.clone(),
            Runtime::Containerd(node) => node.containerd().await,
        }
    }

    /// The OCI spec the runtime gave container `id`.
    async fn spec(&self, api: &RuntimeApi, id: &str) -> Value {
        match self {
            Runtime::Ferrolet(node) => {
                let record = node
                    .ns
                    .client
                    .containers()
                    .get(GetContainerRequest { id: id.into() })
                    .await
                    .unwrap()
                    .into_inner()
                    .container
                    .unwrap();
                serde_json::from_slice(&record.spec.unwrap().value).unwrap()
            }
            Runtime::Containerd(_) => {
                let (_, info) = api.container_status_verbose(id, true).await.unwrap();
                let info: Value = serde_json::from_str(&info["info"]).unwrap();
                info["runtimeSpec"].clone()
            }
        }
    }
}

/// What the failing and late calls gave.
struct Outcome {
    unknown: Status,
    ambiguous: Status,
    /// CreateContainer calls until a spec file written meanwhile was usable.
    late_attempts: u32,
    /// And how long after writing it.
    late_after: Duration,
}

fn sleeper(name: &str, image: &str) -> ContainerBuilder {
    ContainerBuilder::new(name, image).shell("sleep 3600")
}

/// The whole scenario on a runtime with CDI.
async fn applies(
    runtime: &Runtime<'_>,
    api: &RuntimeApi,
    pod: &PodSandboxConfig,
    image: &str,
    dirs: &SpecDirs,
) -> Outcome {
    let pod_id = api.run_pod(pod).await.unwrap();

    // Both devices through the CRI field.
    let config = sleeper("by-field", image)
        .cdi_device(NODE_DEVICE)
        .cdi_device(DATA_DEVICE)
        .build();
    let id = api
        .run_container(&pod_id, pod, &config)
        .await
        .unwrap_or_else(|e| panic!("a container with {NODE_DEVICE} and {DATA_DEVICE}: {e}"));
    assert_device_node(api, &id).await;
    assert_eq!(
        api.exec_ok(&id, &["cat", &format!("{MOUNT_PATH}/hello")])
            .await,
        HELLO
    );
    let write = api
        .exec_sync(&id, &["touch", &format!("{MOUNT_PATH}/new")], 30)
        .await
        .unwrap();
    assert_ne!(write.exit_code, 0, "the CDI mount is read-only");
    let env = api.exec_ok(&id, &["env"]).await;
    for var in [
        "FERROLET_CDI_SPEC=1",
        "FERROLET_CDI_NULL0=1",
        "FERROLET_CDI_DATA=1",
    ] {
        assert!(env.lines().any(|l| l == var), "{var} not in:\n{env}");
    }
    let groups = api.exec_ok(&id, &["id", "-G"]).await;
    assert!(
        groups.split_whitespace().any(|g| g == GID.to_string()),
        "group {GID} not in {groups:?}"
    );
    let spec = runtime.spec(api, &id).await;
    let rule = spec["linux"]["resources"]["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["major"] == 1 && r["minor"] == 3 && r["access"] == "rw");
    assert!(
        rule.is_some_and(|r| r["allow"] == true && r["type"] == "c"),
        "no allow rule c 1:3 rw: {}",
        spec["linux"]["resources"]["devices"]
    );

    // One device through an annotation: it alone, with its spec's env.
    let config = sleeper("by-annotation", image)
        .annotation("cdi.k8s.io/ferrolet-test", NODE_DEVICE)
        .build();
    let id = api.run_container(&pod_id, pod, &config).await.unwrap();
    assert_device_node(api, &id).await;
    let env = api.exec_ok(&id, &["env"]).await;
    assert!(env.lines().any(|l| l == "FERROLET_CDI_NULL0=1"), "{env}");
    assert!(env.lines().any(|l| l == "FERROLET_CDI_SPEC=1"), "{env}");
    assert!(!env.contains("FERROLET_CDI_DATA"), "{env}");
    let mounted = api.exec_sync(&id, &["test", "-e", MOUNT_PATH], 30).await;
    assert_eq!(
        mounted.unwrap().exit_code,
        1,
        "{MOUNT_PATH} without its device"
    );

    // Both forms naming the same devices: each applied once.
    let config = sleeper("both-forms", image)
        .cdi_device(NODE_DEVICE)
        .annotation(
            "cdi.k8s.io/ferrolet-test",
            &format!("{DATA_DEVICE},{NODE_DEVICE}"),
        )
        .build();
    let id = api.create_container(&pod_id, pod, &config).await.unwrap();
    let spec = runtime.spec(api, &id).await;
    let count = |list: &Value, key: &str, want: &str| {
        list.as_array()
            .map_or(0, |l| l.iter().filter(|x| x[key] == want).count())
    };
    assert_eq!(count(&spec["linux"]["devices"], "path", DEVICE_PATH), 1);
    assert_eq!(count(&spec["mounts"], "destination", MOUNT_PATH), 1);
    let env = spec["process"]["env"].as_array().unwrap();
    assert_eq!(
        env.iter().filter(|e| *e == "FERROLET_CDI_SPEC=1").count(),
        1
    );

    // An unknown device: refused, naming it, and nothing made.
    let unknown = refused(
        runtime,
        api,
        &pod_id,
        pod,
        &sleeper("unknown", image).cdi_device(UNKNOWN_DEVICE).build(),
        UNKNOWN_DEVICE,
    )
    .await;

    // Two spec files of the same directory defining one device: ambiguous.
    for file in ["amb-1.yaml", "amb-2.yaml"] {
        std::fs::write(
            dirs.high().join(file),
            small_spec("ferrolet.test/amb", "x", &format!("FROM={file}")),
        )
        .unwrap();
    }
    let ambiguous = refused(
        runtime,
        api,
        &pod_id,
        pod,
        &sleeper("ambiguous", image)
            .cdi_device(AMBIGUOUS_DEVICE)
            .build(),
        AMBIGUOUS_DEVICE,
    )
    .await;

    // A spec file written now, while the runtime runs: used. ferrolet-cri reads the
    // directories at each resolution; containerd 2.x learns of it through its inotify watch,
    // a moment later.
    std::fs::write(
        dirs.high().join("late.yaml"),
        small_spec("ferrolet.test/late", "x", "FERROLET_CDI_LATE=1"),
    )
    .unwrap();
    let written = Instant::now();
    let config = sleeper("late", image).cdi_device(LATE_DEVICE).build();
    let mut late_attempts = 0;
    let id = loop {
        late_attempts += 1;
        match api.create_container(&pod_id, pod, &config).await {
            Ok(id) => break id,
            Err(e) if written.elapsed() > Duration::from_secs(10) => {
                panic!("{LATE_DEVICE}, written {:?} ago: {e}", written.elapsed())
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    };
    let late_after = written.elapsed();
    api.start_container(&id).await.unwrap();
    let env = api.exec_ok(&id, &["env"]).await;
    assert!(env.lines().any(|l| l == "FERROLET_CDI_LATE=1"), "{env}");

    api.stop_pod(&pod_id).await.unwrap();
    api.remove_pod(&pod_id).await.unwrap();
    Outcome {
        unknown,
        ambiguous,
        late_attempts,
        late_after,
    }
}

/// The device node as the container sees it: a char device 1:3 at its path, writable.
async fn assert_device_node(api: &RuntimeApi, id: &str) {
    let listing = api.exec_ok(id, &["ls", "-l", DEVICE_PATH]).await;
    let fields: Vec<&str> = listing.split_whitespace().collect();
    assert!(listing.starts_with('c'), "not a char device: {listing}");
    assert!(
        fields.windows(2).any(|w| w == ["1,", "3"]),
        "not 1:3: {listing}"
    );
    let write = api
        .exec_sync(id, &["sh", "-c", &format!("echo x > {DEVICE_PATH}")], 30)
        .await
        .unwrap();
    assert_eq!(
        write.exit_code,
        0,
        "writing {DEVICE_PATH}: {}",
        String::from_utf8_lossy(&write.stderr)
    );
}

/// CreateContainer of `config` fails naming `device`, and containerd holds no object
/// (container, task, lease, active snapshot) after the call that it did not hold before.
async fn refused(
    runtime: &Runtime<'_>,
    api: &RuntimeApi,
    pod_id: &str,
    pod: &PodSandboxConfig,
    config: &ContainerConfig,
    device: &str,
) -> Status {
    let client = runtime.containerd().await;
    let before = containerd_runtime_leaks(&client).await;
    let listed = api.list_containers(None).await.unwrap().len();
    let err = api
        .create_container(pod_id, pod, config)
        .await
        .err()
        .unwrap_or_else(|| panic!("CreateContainer with {device} succeeded"));
    assert!(
        err.message().contains(device),
        "the error does not name {device}: {err:?}"
    );
    // "Nothing new" rather than "the same": the previous create's lease may go meanwhile.
    // ferrolet-cri undoes a failed create before answering; containerd's CRI leaves the
    // snapshot it prepared to its garbage collector, which takes it a moment later.
    let settle = match runtime {
        Runtime::Ferrolet(_) => Duration::ZERO,
        Runtime::Containerd(_) => Duration::from_secs(15),
    };
    let answered = Instant::now();
    loop {
        let added: Vec<String> = containerd_runtime_leaks(&client)
            .await
            .into_iter()
            .filter(|o| !before.contains(o))
            .collect();
        if added.is_empty() {
            break;
        }
        assert!(
            answered.elapsed() < settle,
            "a refused CreateContainer left containerd objects {:?} after it answered: {added:?}",
            answered.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if answered.elapsed() > Duration::from_millis(100) {
        eprintln!(
            "[cdi] the objects of the refused create of {device} went {:?} after the answer",
            answered.elapsed()
        );
    }
    assert_eq!(api.list_containers(None).await.unwrap().len(), listed);
    err
}

/// containerd 1.6: CDI requests are ignored; the container runs without the devices.
async fn ignored(runtime: &Runtime<'_>, api: &RuntimeApi, pod: &PodSandboxConfig, image: &str) {
    let pod_id = api.run_pod(pod).await.unwrap();
    let config = sleeper("ignored", image)
        .cdi_device(NODE_DEVICE)
        .cdi_device(UNKNOWN_DEVICE)
        .annotation("cdi.k8s.io/ferrolet-test", DATA_DEVICE)
        .build();
    let id = api
        .run_container(&pod_id, pod, &config)
        .await
        .unwrap_or_else(|e| panic!("containerd 1.6 ignores CDI requests, yet: {e}"));
    let present = api
        .exec_sync(&id, &["test", "-e", DEVICE_PATH], 30)
        .await
        .unwrap();
    assert_eq!(
        present.exit_code, 1,
        "{DEVICE_PATH} on a runtime without CDI"
    );
    let env = api.exec_ok(&id, &["env"]).await;
    assert!(!env.contains("FERROLET_CDI"), "{env}");
    let spec = runtime.spec(api, &id).await;
    assert!(
        !spec["linux"]["devices"].to_string().contains(DEVICE_PATH),
        "{}",
        spec["linux"]["devices"]
    );
    api.stop_pod(&pod_id).await.unwrap();
    api.remove_pod(&pod_id).await.unwrap();
}
