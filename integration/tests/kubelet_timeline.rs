//! A pod's start timeline end to end (issue #20 acceptance): a static pod with an init
//! container and two app containers has, in `/debug/pods/<ns>/<name>/timeline`, every phase
//! from its source seeing it to its Running status being visible, in order, with durations
//! that add up to the wall time between the first and last marks (within 5 ms), on the
//! read-only port and on the secure one (anonymous requests let in); an app container
//! exiting (restartPolicy Always) appends a new start; `ferrolet trace pod` prints the table;
//! the pod is then removed and nothing leaks. No timing is asserted beyond that
//! consistency (benchmarks measure latency).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test reports failure by panicking

use std::process::Command;
use std::time::{Duration, Instant};

use ferrolet_integration::kubelet::{
    IDLE, KubeletNode, POD_NAMESPACE, container_status, image, is_running, pod_uid, restart_count,
    sh,
};
use ferrolet_integration::pods::LONG;
use ferrolet_integration::workspace_binary;
use serde_json::Value;

/// How far the durations may be from the wall time.
const TOLERANCE_MS: f64 = 5.0;

/// The pod: `setup` (init) then `web` (idles) and `worker`, which exits once the test
/// creates `/trigger/go` and, restarted, idles on.
fn timeline_pod(trigger_dir: &str) -> String {
    let worker = format!(
        "if [ -f /trigger/restarted ]; then {IDLE}; fi; \
         while [ ! -f /trigger/go ]; do sleep 0.1; done; \
         rm -f /trigger/go; touch /trigger/restarted; exit 1"
    );
    format!(
        r#"
        apiVersion: v1
        kind: Pod
        metadata:
          name: timeline
        spec:
          terminationGracePeriodSeconds: 1
          initContainers:
          - name: setup
            image: {image}
            command: {setup}
          containers:
          - name: web
            image: {image}
            command: {idle}
          - name: worker
            image: {image}
            command: {worker}
            volumeMounts:
            - {{name: trigger, mountPath: /trigger}}
          volumes:
          - name: trigger
            hostPath:
              path: {path}
              type: DirectoryOrCreate
        "#,
        image = image("busybox"),
        setup = sh("echo set up"),
        idle = sh(IDLE),
        worker = sh(&worker),
        path = Value::from(trigger_dir),
    )
}

/// GET the pod's timeline from the read-only API: (status, body).
async fn timeline(node: &KubeletNode, pod: &str) -> (u16, String) {
    let path = format!("/debug/pods/{POD_NAMESPACE}/{pod}/timeline");
    let r = node.get(&path).await.unwrap();
    (r.status, r.body)
}

/// GET `path` on the secure port as an anonymous client (this node lets anonymous requests
/// in, and AlwaysAllow authorizes them) that trusts only ferrolet's self-signed certificate.
async fn secure_get(node: &KubeletNode, path: &str) -> (u16, String) {
    let pem = std::fs::read(node.root_dir().join("pki/kubelet.crt")).unwrap();
    let mut builder = reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .timeout(Duration::from_secs(30));
    for cert in reqwest::Certificate::from_pem_bundle(&pem).unwrap() {
        builder = builder.add_root_certificate(cert);
    }
    let url = format!("https://127.0.0.1:{}{path}", node.secure_addr().port());
    let resp = builder.build().unwrap().get(&url).send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.text().await.unwrap())
}

/// Polls the timeline until `pred` holds; returns it.
async fn wait_timeline(node: &KubeletNode, pod: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + LONG;
    loop {
        let (status, body) = timeline(node, pod).await;
        if status == 200 {
            let v: Value = serde_json::from_str(&body).unwrap();
            if pred(&v) {
                return v;
            }
        }
        assert!(
            Instant::now() < deadline,
            "timeline of {pod} not as wanted within {LONG:?}: {status} {body}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn starts(v: &Value) -> &[Value] {
    v["starts"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
}

/// A start's marks as (phase, container).
fn marks(start: &Value) -> Vec<(String, String)> {
    start["marks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["phase"].as_str().unwrap().to_string(),
                m["container"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// Where (phase, container) is among `marks`.
fn position(marks: &[(String, String)], phase: &str, container: &str) -> usize {
    marks
        .iter()
        .position(|(p, c)| p == phase && c == container)
        .unwrap_or_else(|| panic!("no {phase} {container:?} in {marks:?}"))
}

/// Every `(phase, container)` of `order` is there, each after the one before.
fn assert_in_order(marks: &[(String, String)], order: &[(&str, &str)]) {
    let at: Vec<usize> = order.iter().map(|(p, c)| position(marks, p, c)).collect();
    for (w, pair) in at.windows(2).zip(order.windows(2)) {
        assert!(
            w[0] < w[1],
            "{:?} is not before {:?} in {marks:?}",
            pair[0],
            pair[1]
        );
    }
}

fn nanos(rfc3339: &str) -> i128 {
    rfc3339
        .parse::<jiff::Timestamp>()
        .unwrap_or_else(|e| panic!("{rfc3339}: {e}"))
        .as_nanosecond()
}

/// The durations add up to the total, and the total is the wall time between the first and
/// the last marks' timestamps; offsets grow; the time order of the marks holds.
fn assert_adds_up(start: &Value) {
    let marks = start["marks"].as_array().unwrap();
    let sum: f64 = marks
        .iter()
        .map(|m| m["durationMs"].as_f64().unwrap())
        .sum();
    let total = start["totalMs"].as_f64().unwrap();
    let first = nanos(marks[0]["at"].as_str().unwrap());
    let last = nanos(marks[marks.len() - 1]["at"].as_str().unwrap());
    let wall = (last - first) as f64 / 1e6;
    assert!(
        (sum - wall).abs() <= TOLERANCE_MS,
        "durations {sum} ms vs wall {wall} ms"
    );
    assert!(
        (total - wall).abs() <= TOLERANCE_MS,
        "total {total} ms vs wall {wall} ms"
    );
    assert_eq!(start["startedAt"], marks[0]["at"]);
    let times: Vec<i128> = marks
        .iter()
        .map(|m| nanos(m["at"].as_str().unwrap()))
        .collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
    for m in marks {
        assert!(m["durationMs"].as_f64().unwrap() >= 0.0, "{m}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pods_start_timeline_has_every_phase_in_order_and_restarts_append_starts() {
    let anonymous = "authentication:\n  anonymous:\n    enabled: true\n";
    let node = KubeletNode::start_with_config("timeline", anonymous).await;
    let trigger = node.host_dir().join("trigger");
    node.write_manifest(
        "timeline.yaml",
        &timeline_pod(&trigger.display().to_string()),
    );
    let running = node.wait_running("timeline").await;
    let uid = pod_uid(&running).to_string();
    let name = node.pod_name("timeline");

    // The first start: every phase, in order, once its status is visible, and ferrolet-cri's
    // account of its RunPodSandbox (asked for off the start's path).
    let v = wait_timeline(&node, &name, |v| {
        starts(v).first().is_some_and(|s| {
            s["finished"] == true && s.pointer("/sandboxRuntime/cniAddMs").is_some()
        })
    })
    .await;
    let first = &starts(&v)[0];
    assert_eq!(
        (first["start"].as_u64(), first["trigger"].as_str()),
        (Some(1), Some("created"))
    );
    assert_eq!(first["uid"], uid.as_str());
    let got = marks(first);
    let mut order = vec![
        ("seen", ""),
        ("admitted", ""),
        ("worker_started", ""),
        ("volumes_ready", ""),
        ("sandbox_ready", ""),
        ("image_ready", "setup"),
        ("container_created", "setup"),
        ("container_started", "setup"),
        ("container_exited", "setup"),
    ];
    for app in ["web", "worker"] {
        // Each app container after the init container, its own phases in order.
        assert_in_order(
            &got,
            &[
                ("container_exited", "setup"),
                ("image_ready", app),
                ("container_created", app),
                ("container_started", app),
                ("running_seen", ""),
            ],
        );
    }
    order.extend([("running_seen", ""), ("status_visible", "")]);
    assert_in_order(&got, &order);
    // A pull, when there was one, is just before its image was ready.
    for (i, (phase, c)) in got.iter().enumerate() {
        if phase == "image_pulling" {
            assert!(
                got[i + 1..]
                    .iter()
                    .any(|m| m.0 == "image_ready" && &m.1 == c)
            );
        }
    }
    assert_eq!(got.last().map(|m| m.0.as_str()), Some("status_visible"));
    assert_adds_up(first);
    let sandbox = &first["sandboxRuntime"];
    for part in ["filesMs", "netnsMs", "cniAddMs"] {
        let ms = sandbox[part].as_f64().unwrap_or(-1.0);
        assert!(ms > 0.0, "{part}: {sandbox}");
    }
    // The pod shares no PID namespace, so ferrolet-cri runs it without a pause process.
    assert!(sandbox.get("pauseMs").is_none(), "{sandbox}");
    // The CNI ADD is inside the sandbox phase.
    let sandbox_phase = first["marks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["phase"] == "sandbox_ready")
        .and_then(|m| m["durationMs"].as_f64())
        .unwrap();
    let longest = sandbox["cniAddMs"].as_f64().unwrap();
    assert!(
        longest < sandbox_phase,
        "{sandbox} in a {sandbox_phase} ms phase"
    );

    // The secure port serves the same.
    let path = format!("/debug/pods/{POD_NAMESPACE}/{name}/timeline");
    let (status, body) = secure_get(&node, &path).await;
    assert_eq!(status, 200, "{body}");
    let secure: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(&starts(&secure)[0], first);

    // worker exits once: restartPolicy Always restarts it, and that is a new start.
    std::fs::write(trigger.join("go"), "").unwrap();
    let v = wait_timeline(&node, &name, |v| {
        starts(v).len() == 2 && starts(v)[1]["finished"] == true
    })
    .await;
    let again = &starts(&v)[1];
    assert_eq!(again["start"].as_u64(), Some(2));
    assert_eq!(again["trigger"], "restarted");
    assert_eq!(again["uid"], uid.as_str());
    let got = marks(again);
    assert_in_order(
        &got,
        &[
            ("worker_started", ""),
            ("image_ready", "worker"),
            ("container_created", "worker"),
            ("container_started", "worker"),
            ("running_seen", ""),
            ("status_visible", ""),
        ],
    );
    assert!(
        !got.iter().any(|(_, c)| c == "web" || c == "setup"),
        "only worker restarted: {got:?}"
    );
    assert_adds_up(again);
    let pod = node.pod("timeline").await.unwrap();
    let worker = container_status(&pod, "worker").unwrap();
    assert!(is_running(worker) && restart_count(worker) == 1, "{worker}");
    // The first start is still there, unchanged.
    assert_eq!(&starts(&v)[0], first);

    // The table `ferrolet trace pod` prints.
    let out = Command::new(workspace_binary("ferrolet"))
        .args([
            "trace",
            "pod",
            &name,
            "--namespace",
            POD_NAMESPACE,
            "--address",
        ])
        .arg(format!("http://{}", node.read_only_addr()))
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{table}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{table}");
    assert!(
        table.starts_with(&format!("pod {POD_NAMESPACE}/{name}\n")),
        "{table}"
    );
    assert!(table.contains("start 1 (created)") && table.contains("start 2 (restarted)"));
    assert_eq!(
        table
            .lines()
            .filter(|l| l.starts_with("status_visible"))
            .count(),
        2
    );

    // The start metrics were observed.
    let metrics = node.get("/metrics").await.unwrap().body;
    for family in [
        "kubelet_pod_worker_start_duration_seconds_count",
        "kubelet_pod_start_sli_duration_seconds_count",
        "kubelet_pod_start_total_duration_seconds_count",
        "kubelet_pod_start_duration_seconds_count",
        "kubelet_runtime_operations_duration_seconds_count{operation_type=\"run_podsandbox\"}",
    ] {
        assert!(metrics.contains(family), "no {family} in /metrics");
    }

    // A pod never seen has no timeline, and says so.
    let (status, body) = timeline(&node, "nope").await;
    assert_eq!(status, 404, "{body}");
    assert!(
        body.contains("no start timeline of pod default/nope"),
        "{body}"
    );

    // Removed, the pod goes and leaves nothing behind (teardown's leak checks); its timeline
    // stays for reading.
    node.remove_manifest("timeline.yaml");
    node.wait_pod_gone("timeline", LONG).await;
    assert_eq!(timeline(&node, &name).await.0, 200);
    node.teardown().await;
}
