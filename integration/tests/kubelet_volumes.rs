//! `ferrolet` volumes end to end (issue #6 acceptance): emptyDir on disk shared by two
//! containers, emptyDir `medium: Memory` as a tmpfs of its `sizeLimit`, hostPath
//! `DirectoryOrCreate` creating its directory, and hostPath `type: File` on a missing path
//! keeping the pod waiting with the path named until the file appears.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test reports failure by panicking

use ferrolet_integration::kubelet::{
    IDLE, KubeletNode, container_status, image, is_running, pod_phase, pod_uid, sh, waiting_reason,
};
use ferrolet_integration::pods::LONG;
use ferrolet_integration::scratch::mounts_under;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_dir_and_host_path_volumes() {
    let node = KubeletNode::start("volumes").await;
    let busybox = image("busybox");

    // emptyDir on disk, shared by a writer and a reader.
    node.write_manifest(
        "share.yaml",
        &format!(
            r#"
            apiVersion: v1
            kind: Pod
            metadata:
              name: share
            spec:
              containers:
              - name: writer
                image: {busybox}
                command: {writer}
                volumeMounts:
                - {{name: data, mountPath: /data}}
              - name: reader
                image: {busybox}
                command: {reader}
                volumeMounts:
                - {{name: data, mountPath: /shared}}
              volumes:
              - name: data
                emptyDir: {{}}
            "#,
            writer = sh(&format!("echo written-by-writer > /data/f; {IDLE}")),
            reader = sh(&format!(
                "while [ ! -s /shared/f ]; do sleep 0.2; done; cat /shared/f; {IDLE}"
            )),
        ),
    );

    // emptyDir in memory with a size limit: a tmpfs of that size, seen from inside.
    node.write_manifest(
        "memory.yaml",
        &format!(
            r#"
            apiVersion: v1
            kind: Pod
            metadata:
              name: memory
            spec:
              containers:
              - name: main
                image: {busybox}
                command: {script}
                volumeMounts:
                - {{name: cache, mountPath: /cache}}
              volumes:
              - name: cache
                emptyDir:
                  medium: Memory
                  sizeLimit: 16Mi
            "#,
            script = sh(&format!(
                "grep ' /cache ' /proc/mounts; df -k /cache | tail -n 1; echo listed; {IDLE}"
            )),
        ),
    );

    // hostPath DirectoryOrCreate: made by the kubelet, written by the container.
    let created = node.host_dir().join("created").join("sub");
    node.write_manifest(
        "hostdir.yaml",
        &format!(
            r#"
            apiVersion: v1
            kind: Pod
            metadata:
              name: hostdir
            spec:
              containers:
              - name: main
                image: {busybox}
                command: {script}
                volumeMounts:
                - {{name: host, mountPath: /host}}
              volumes:
              - name: host
                hostPath:
                  path: {path}
                  type: DirectoryOrCreate
            "#,
            script = sh(&format!("echo from-the-pod > /host/hello; {IDLE}")),
            path = serde_json::Value::from(created.display().to_string()),
        ),
    );

    // hostPath File on a path that does not exist (yet).
    let missing = node.host_dir().join("missing.conf");
    node.write_manifest(
        "hostfile.yaml",
        &format!(
            r#"
            apiVersion: v1
            kind: Pod
            metadata:
              name: hostfile
            spec:
              containers:
              - name: main
                image: {busybox}
                command: {script}
                volumeMounts:
                - {{name: conf, mountPath: /etc/app.conf}}
              volumes:
              - name: conf
                hostPath:
                  path: {path}
                  type: File
            "#,
            script = sh(&format!("cat /etc/app.conf; {IDLE}")),
            path = serde_json::Value::from(missing.display().to_string()),
        ),
    );

    node.wait_running("share").await;
    let log = node
        .wait_log_line("share", "reader", "written-by-writer")
        .await;
    assert_eq!(log, "written-by-writer\n");

    let memory = node.wait_running("memory").await;
    let log = node.wait_log_line("memory", "main", "listed").await;
    let lines: Vec<&str> = log.lines().collect();
    let mount = lines.first().copied().unwrap_or_default();
    let fields: Vec<&str> = mount.split_whitespace().collect();
    assert_eq!(
        fields.get(1..3),
        Some(&["/cache", "tmpfs"][..]),
        "/proc/mounts line: {log:?}"
    );
    assert!(
        fields
            .get(3)
            .is_some_and(|opts| opts.split(',').any(|o| o == "size=16384k")),
        "tmpfs options: {log:?}"
    );
    let df: Vec<&str> = lines
        .get(1)
        .copied()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(df.get(1), Some(&"16384"), "df -k: {log:?}");
    // The tmpfs is the kubelet's, under its root dir, while the pod runs.
    let uid = pod_uid(&memory).to_string();
    let volume_mounts: Vec<_> = mounts_under(&node.root_dir())
        .into_iter()
        .filter(|p| p.display().to_string().contains(&uid))
        .collect();
    assert!(
        !volume_mounts.is_empty(),
        "no mount of pod {uid} under {}",
        node.root_dir().display()
    );

    node.wait_running("hostdir").await;
    assert!(created.is_dir(), "{} not created", created.display());
    let hello = created.join("hello");
    ferrolet_integration::cri::poll("the pod to write into the hostPath", LONG, || async {
        std::fs::read_to_string(&hello).map_err(|e| e.to_string())
    })
    .await;
    assert_eq!(std::fs::read_to_string(&hello).unwrap(), "from-the-pod\n");

    // The missing file keeps the pod waiting, with the path named in its status.
    let shown = missing.display().to_string();
    let waiting = node
        .wait_pod(
            "hostfile",
            |p| {
                container_status(p, "main").is_some_and(|c| waiting_reason(c).is_some())
                    && p["status"].to_string().contains(&shown)
            },
            LONG,
        )
        .await;
    assert_eq!(pod_phase(&waiting), "Pending", "{waiting:#}");
    let main = container_status(&waiting, "main").unwrap();
    assert!(!is_running(main), "{main}");
    assert!(!missing.exists(), "the kubelet created the File");
    // Once the file exists, the pod starts.
    std::fs::write(&missing, "setting=1\n").unwrap();
    node.wait_running("hostfile").await;
    let log = node.wait_log_line("hostfile", "main", "setting=1").await;
    assert_eq!(log, "setting=1\n");

    // A hostPath is the host's: removing the pod leaves what it wrote.
    node.remove_manifest("hostdir.yaml");
    node.wait_pod_gone("hostdir", LONG).await;
    assert_eq!(std::fs::read_to_string(&hello).unwrap(), "from-the-pod\n");

    node.teardown().await;
}
