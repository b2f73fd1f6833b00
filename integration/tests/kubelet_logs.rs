//! `ferrolet` container log rotation end to end (issue #6): a container writing steadily past
//! `containerLogMaxSize` gets its log renamed and reopened, at most `containerLogMaxFiles`
//! files are kept, and the current file keeps growing.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test reports failure by panicking

use std::time::{Duration, Instant};

use ferrolet_integration::kubelet::{KubeletNode, KubeletOptions, image, pod_uid, sh};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_are_rotated_by_size_and_count() {
    let node = KubeletNode::start_with(
        "logs",
        KubeletOptions {
            extra_config: "containerLogMaxSize: 4Ki\ncontainerLogMaxFiles: 3".into(),
            ..Default::default()
        },
    )
    .await;
    let busybox = image("busybox");
    node.write_manifest(
        "chatty.yaml",
        &format!(
            r#"
            apiVersion: v1
            kind: Pod
            metadata:
              name: chatty
            spec:
              terminationGracePeriodSeconds: 1
              containers:
              - name: talk
                image: {busybox}
                command: {talk}
            "#,
            talk = sh(
                "trap 'exit 0' TERM; i=0; while :; do echo \"line $i of a chatty container, padded to make it longer\"; i=$((i+1)); sleep 0.02; done"
            ),
        ),
    );
    let pod = node.wait_running(&node.pod_name("chatty")).await;
    let dir = node
        .pod_logs_dir()
        .join(format!(
            "default_{}_{}",
            node.pod_name("chatty"),
            pod_uid(&pod)
        ))
        .join("talk");
    // Rotation is checked every 10 s; wait for at least two rotations.
    let deadline = Instant::now() + Duration::from_secs(60);
    let rotated = loop {
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .map(|d| {
                d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        let rotated: Vec<_> = names
            .iter()
            .filter(|n| n.starts_with("0.log."))
            .cloned()
            .collect();
        if rotated.len() >= 2 {
            assert!(names.contains(&"0.log".to_string()), "{names:?}");
            break rotated;
        }
        assert!(
            Instant::now() < deadline,
            "no rotation in {}: {names:?}",
            dir.display()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    // containerLogMaxFiles 3 = the current file and at most two rotated ones.
    assert!(rotated.len() <= 2, "{rotated:?}");
    // The runtime writes into the reopened file.
    let size = || {
        std::fs::metadata(dir.join("0.log"))
            .map(|m| m.len())
            .unwrap_or(0)
    };
    let before = size();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_ne!(size(), before, "0.log did not change after rotation");
    let text = std::fs::read_to_string(dir.join(&rotated[rotated.len() - 1])).unwrap();
    assert!(text.contains(" stdout F line "), "{text}");
    node.teardown().await;
}
