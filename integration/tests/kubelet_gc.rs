//! `ferrolet` garbage collection and metrics end to end (issue #7 acceptance):
//! - container GC keeps one dead instance per container (`--maximum-dead-containers-per-container=1`)
//!   of a pod that keeps crashing, and `previous` logs still serve that instance;
//! - image GC, with the thresholds lowered so the image filesystem is always "full", removes
//!   the image of a removed pod but never one a container uses (running or exited) nor the
//!   pinned pause image;
//! - `/metrics` parses with a strict text-format parser and carries every series the issue
//!   lists.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test reports failure by panicking

use std::collections::BTreeSet;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ferrolet_integration::cri::poll;
use ferrolet_integration::kubelet::{
    IDLE, KubeletNode, KubeletOptions, container_id, container_status, image, is_running, pod_uid,
    restart_count, sh, waiting_reason,
};
use ferrolet_integration::pods::LONG;
use ferrolet_integration::prometheus::Exposition;
use ferrolet_proto::cri::{ContainerState, ListImagesRequest};

/// A crash-looping container passes through back-offs of 10 s and 20 s before the window the
/// test needs; this bounds the whole wait generously.
const CRASH_LOOP_LIMIT: Duration = Duration::from_secs(240);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn container_gc_keeps_one_dead_instance_and_previous_logs_work() {
    let node = KubeletNode::start_with(
        "gc-containers",
        KubeletOptions {
            extra_args: vec![
                "--container-gc-period=1s".into(),
                "--maximum-dead-containers-per-container=1".into(),
            ],
            ..Default::default()
        },
    )
    .await;
    // Each instance numbers itself through the emptyDir (it outlives restarts), runs a few
    // seconds and fails, so the pod keeps restarting with back-off.
    let script = "n=$(cat /data/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > /data/n; \
                  echo \"instance $n\"; sleep 6; exit 1";
    node.write_manifest(
        "crash.yaml",
        &format!(
            r#"
            apiVersion: v1
            kind: Pod
            metadata:
              name: crash
            spec:
              terminationGracePeriodSeconds: 1
              restartPolicy: Always
              containers:
              - name: main
                image: {image}
                command: {command}
                volumeMounts:
                - {{name: data, mountPath: /data}}
              volumes:
              - name: data
                emptyDir: {{}}
            "#,
            image = image("busybox"),
            command = sh(script),
        ),
    );

    // Wait for an instance that runs while two or more instances died before it, and the
    // GC has left exactly one of those: the newest.
    let deadline = Instant::now() + CRASH_LOOP_LIMIT;
    let (uid, previous_log, restarts) = loop {
        assert!(
            Instant::now() < deadline,
            "no running instance with exactly one dead one left within {CRASH_LOOP_LIMIT:?}\n{}",
            node.kubelet_log()
                .lines()
                .rev()
                .take(40)
                .collect::<Vec<_>>()
                .join("\n")
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
        let Some(pod) = node.pod("crash").await else {
            continue;
        };
        let Some(status) = container_status(&pod, "main") else {
            continue;
        };
        let restarts = restart_count(status);
        if !is_running(status) || restarts < 2 {
            continue;
        }
        let uid = pod_uid(&pod).to_string();
        let running_id = container_id(status).to_string();
        let (_, containers) = node.runtime_objects(&uid).await;
        let dead: Vec<_> = containers
            .iter()
            .filter(|c| c.state == ContainerState::ContainerExited as i32)
            .map(|c| c.id.clone())
            .collect();
        let running = containers
            .iter()
            .any(|c| c.id == running_id && c.state == ContainerState::ContainerRunning as i32);
        if !running || dead.len() != 1 {
            continue;
        }
        let Ok(previous) = node
            .container_logs_with("crash", "main", "previous=true")
            .await
        else {
            continue;
        };
        // Nothing changed while the log was read: the same instance still runs beside the
        // same dead one.
        let (_, again) = node.runtime_objects(&uid).await;
        let dead_again: Vec<_> = again
            .iter()
            .filter(|c| c.state == ContainerState::ContainerExited as i32)
            .map(|c| c.id.clone())
            .collect();
        let still_running = again
            .iter()
            .any(|c| c.id == running_id && c.state == ContainerState::ContainerRunning as i32);
        if still_running && dead_again == dead {
            break (uid, previous, restarts);
        }
    };
    // The running instance is number restarts + 1; the one kept is the one just before it.
    assert_eq!(
        previous_log,
        format!("instance {restarts}\n"),
        "previous logs serve the newest dead instance"
    );
    // The removed instances' logs went with them: the dead one kept and the running one
    // are all that is left (`<restartCount>.log`).
    let log_dir = node
        .pod_logs_dir()
        .join(format!("default_{}_{uid}", node.pod_name("crash")))
        .join("main");
    let files: BTreeSet<String> = std::fs::read_dir(&log_dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", log_dir.display()))
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    // A newer instance may have started since; older ones must be gone.
    let oldest_kept = restarts - 1;
    assert!(
        files.contains(&format!("{oldest_kept}.log")) && files.contains(&format!("{restarts}.log")),
        "{files:?}"
    );
    assert!(
        (0..oldest_kept).all(|n| !files.contains(&format!("{n}.log"))),
        "logs of removed instances left: {files:?}"
    );
    // Only one sandbox: the GC never touched the live pod's.
    let (sandboxes, _) = node.runtime_objects(&uid).await;
    assert_eq!(sandboxes.len(), 1, "{sandboxes:?}");
    let log = node.kubelet_log();
    assert!(
        log.contains("container garbage collection removed dead containers"),
        "no GC pass reported removing containers"
    );
    node.teardown().await;
}

/// The images CRI lists: (id, tags, pinned).
async fn list_images(node: &KubeletNode) -> Vec<(String, Vec<String>, bool)> {
    node.node
        .images()
        .await
        .list_images(ListImagesRequest::default())
        .await
        .expect("ListImages")
        .into_inner()
        .images
        .into_iter()
        .map(|i| (i.id, i.repo_tags, i.pinned))
        .collect()
}

fn has_tag(images: &[(String, Vec<String>, bool)], tag: &str) -> bool {
    images
        .iter()
        .any(|(_, tags, _)| tags.iter().any(|t| t == tag))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn image_gc_removes_unused_images_but_never_used_or_pinned_ones() {
    let node = KubeletNode::start_with("gc-images", KubeletOptions::image_gc_every_pass()).await;
    let pod = |name: &str, img: &str, policy: &str, script: &str| {
        format!(
            r#"
            apiVersion: v1
            kind: Pod
            metadata:
              name: {name}
            spec:
              terminationGracePeriodSeconds: 1
              restartPolicy: {policy}
              containers:
              - name: main
                image: {image}
                command: {command}
            "#,
            image = image(img),
            command = sh(script),
        )
    };
    // In use and running; in use by an exited container; used, then its pod removed.
    node.write_manifest("running.yaml", &pod("running", "httpd", "Always", IDLE));
    node.write_manifest("done.yaml", &pod("done", "user", "Never", "echo done"));
    node.write_manifest("gone.yaml", &pod("gone", "entry", "Always", IDLE));
    node.wait_running("running").await;
    node.wait_phase("done", "Succeeded").await;
    node.wait_running("gone").await;
    let before = list_images(&node).await;
    let (running_tag, done_tag, gone_tag) = (image("httpd"), image("user"), image("entry"));
    for tag in [&running_tag, &done_tag, &gone_tag] {
        assert!(has_tag(&before, tag), "{tag} not listed: {before:?}");
    }
    let pinned: BTreeSet<String> = before
        .iter()
        .filter(|(_, _, pinned)| *pinned)
        .map(|(id, _, _)| id.clone())
        .collect();
    assert!(!pinned.is_empty(), "no pinned pause image: {before:?}");

    node.remove_manifest("gone.yaml");
    node.wait_pod_gone("gone", LONG).await;
    poll(
        "image GC to remove the removed pod's image",
        LONG,
        || async {
            let now = list_images(&node).await;
            if has_tag(&now, &gone_tag) {
                Err(format!("still listed: {now:?}"))
            } else {
                Ok(())
            }
        },
    )
    .await;

    // Two more passes (each logs that usage is over the threshold) leave the rest alone.
    let passes = |log: &str| {
        log.matches("Disk usage on image filesystem is over the high threshold")
            .count()
    };
    let seen = passes(&node.kubelet_log());
    poll("two more image GC passes", LONG, || async {
        let n = passes(&node.kubelet_log());
        if n >= seen + 2 {
            Ok(())
        } else {
            Err(format!("{} passes since", n - seen))
        }
    })
    .await;
    let after = list_images(&node).await;
    assert!(has_tag(&after, &running_tag), "{after:?}");
    assert!(has_tag(&after, &done_tag), "{after:?}");
    for id in &pinned {
        assert!(
            after.iter().any(|(i, _, _)| i == id),
            "pinned {id} removed: {after:?}"
        );
    }
    let metrics = node.metrics().await;
    let collected = metrics
        .family("kubelet_image_garbage_collected_total")
        .expect("kubelet_image_garbage_collected_total");
    let space: f64 = collected
        .with_labels(&[("reason", "space")])
        .iter()
        .map(|s| s.value)
        .sum();
    assert!(space >= 1.0, "{collected:?}");
    node.teardown().await;
}

/// The value of the one sample of `family` with labels `labels` (a counter or gauge).
fn value(m: &Exposition, family: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let f = m.family(family)?;
    let samples = f.with_labels(labels);
    (samples.len() == 1).then(|| samples[0].value)
}

/// The `_count` of histogram `family` with labels `labels`.
fn histogram_count(m: &Exposition, family: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let f = m.family(family)?;
    assert_eq!(f.kind, "histogram", "{family}");
    f.with_labels(labels)
        .into_iter()
        .find(|s| s.name.ends_with("_count"))
        .map(|s| s.value)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_parse_and_carry_every_listed_series() {
    let node = KubeletNode::start("gc-metrics").await;
    node.write_manifest(
        "web.yaml",
        &format!(
            r#"
            apiVersion: v1
            kind: Pod
            metadata:
              name: web
            spec:
              containers:
              - name: httpd
                image: {image}
                readinessProbe:
                  httpGet: {{path: /, port: 8080}}
                  periodSeconds: 1
            "#,
            image = image("httpd"),
        ),
    );
    // An image that does not exist: its pulls fail, so the error counter has a series.
    node.write_manifest(
        "bad.yaml",
        &format!(
            r#"
            apiVersion: v1
            kind: Pod
            metadata:
              name: bad
            spec:
              terminationGracePeriodSeconds: 1
              containers:
              - name: main
                image: {missing}
            "#,
            missing = image("busybox").replace("busybox", "no-such-image"),
        ),
    );
    node.wait_running("web").await;
    node.wait_pod(
        "bad",
        |p| {
            container_status(p, "main")
                .and_then(waiting_reason)
                .is_some_and(|r| r == "ErrImagePull" || r == "ImagePullBackOff")
        },
        LONG,
    )
    .await;

    // Gauges follow the relists, and the resync (10 s here) makes `sync` passes: poll until
    // the whole picture is there.
    let m = poll("/metrics to carry every listed series", LONG, || async {
        let m = node.metrics().await;
        let mut missing = Vec::new();
        let mut want = |ok: bool, what: &str| {
            if !ok {
                missing.push(what.to_string());
            }
        };
        want(
            histogram_count(&m, "kubelet_pod_start_duration_seconds", &[]).unwrap_or(0.0) >= 1.0,
            "kubelet_pod_start_duration_seconds",
        );
        for op in ["create", "sync"] {
            want(
                histogram_count(
                    &m,
                    "kubelet_pod_worker_duration_seconds",
                    &[("operation_type", op)],
                )
                .unwrap_or(0.0)
                    >= 1.0,
                &format!("kubelet_pod_worker_duration_seconds{{operation_type={op}}}"),
            );
        }
        for family in [
            "kubelet_pleg_relist_duration_seconds",
            "kubelet_pleg_relist_interval_seconds",
        ] {
            want(
                histogram_count(&m, family, &[]).unwrap_or(0.0) >= 1.0,
                family,
            );
        }
        for op in [
            "version",
            "run_podsandbox",
            "podsandbox_status",
            "list_podsandbox",
            "list_containers",
            "create_container",
            "start_container",
            "container_status",
            "image_status",
            "pull_image",
        ] {
            let total = value(
                &m,
                "kubelet_runtime_operations_total",
                &[("operation_type", op)],
            )
            .unwrap_or(0.0);
            let timed = histogram_count(
                &m,
                "kubelet_runtime_operations_duration_seconds",
                &[("operation_type", op)],
            )
            .unwrap_or(0.0);
            want(
                total >= 1.0 && timed >= 1.0,
                &format!("kubelet_runtime_operations_total/duration{{operation_type={op}}}"),
            );
        }
        want(
            value(
                &m,
                "kubelet_runtime_operations_errors_total",
                &[("operation_type", "pull_image")],
            )
            .unwrap_or(0.0)
                >= 1.0,
            "kubelet_runtime_operations_errors_total{operation_type=pull_image}",
        );
        // Both sandboxes run (the bad pod's too: only its image is missing).
        want(
            value(&m, "kubelet_running_pods", &[]) == Some(2.0),
            "kubelet_running_pods == 2",
        );
        want(
            value(
                &m,
                "kubelet_running_containers",
                &[("container_state", "running")],
            ) == Some(1.0),
            "kubelet_running_containers{container_state=running} == 1",
        );
        let web = node.pod_name("web");
        let probe = [
            ("probe_type", "Readiness"),
            ("result", "successful"),
            ("container", "httpd"),
            ("pod", web.as_str()),
            ("namespace", "default"),
        ];
        want(
            value(&m, "prober_probe_total", &probe).unwrap_or(0.0) >= 1.0,
            "prober_probe_total{probe_type=Readiness,result=successful}",
        );
        want(
            histogram_count(&m, "prober_probe_duration_seconds", &probe[2..]).unwrap_or(0.0) >= 1.0,
            "prober_probe_duration_seconds",
        );
        if missing.is_empty() {
            Ok(m)
        } else {
            Err(format!("missing: {missing:?}"))
        }
    })
    .await;

    for family in [
        "process_resident_memory_bytes",
        "process_cpu_seconds_total",
        "process_start_time_seconds",
    ] {
        assert!(
            value(&m, family, &[]).is_some_and(|v| v > 0.0),
            "{family}: {:?}",
            m.family(family)
        );
    }
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let started = value(&m, "process_start_time_seconds", &[]).unwrap();
    assert!(
        started <= now + 1.0 && started > now - 3600.0,
        "start {started} vs now {now}"
    );
    // HELP and TYPE as the Go kubelet writes them.
    let relist = m.family("kubelet_pleg_relist_duration_seconds").unwrap();
    assert_eq!(
        relist.help,
        "[ALPHA] Duration in seconds for relisting pods in PLEG."
    );
    assert_eq!(
        m.family("kubelet_runtime_operations_total")
            .map(|f| f.kind.as_str()),
        Some("counter")
    );
    assert_eq!(
        m.family("kubelet_running_pods").map(|f| f.kind.as_str()),
        Some("gauge")
    );
    // The pull error is counted in the operations too, and the histogram's count agrees
    // with the counter for a call made once.
    assert_eq!(
        value(
            &m,
            "kubelet_runtime_operations_total",
            &[("operation_type", "run_podsandbox")]
        ),
        histogram_count(
            &m,
            "kubelet_runtime_operations_duration_seconds",
            &[("operation_type", "run_podsandbox")]
        )
    );
    // The prober's series are served alone as well.
    let probes = node.get("/metrics/probes").await.unwrap();
    assert_eq!(probes.status, 200, "{}", probes.body);
    let probes = ferrolet_integration::prometheus::parse(&probes.body)
        .unwrap_or_else(|e| panic!("/metrics/probes: {e}\n{}", probes.body));
    assert!(probes.family("prober_probe_total").is_some());
    assert!(probes.family("kubelet_running_pods").is_none());
    let other = node.get("/metrics/nothing-here").await.unwrap();
    assert_eq!(other.status, 404);
    node.teardown().await;
}
