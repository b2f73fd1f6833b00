//! `ferrolet` lifecycle hooks end to end (issue #7 acceptance): a postStart hook writes a
//! file the app waits for and prints; a preStop hook runs before the container gets SIGTERM,
//! both writing to a hostPath the test reads after the pod is gone; a failing postStart hook
//! gets the container killed (`FailedPostStartHook`) and restarted with back-off.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test reports failure by panicking

use ferrolet_integration::kubelet::{
    IDLE, KubeletNode, container_status, image, last_terminated, restart_count, sh,
};
use ferrolet_integration::pods::LONG;
use serde_json::Value;

fn waiting(status: &Value) -> Option<(&str, &str)> {
    let w = &status["state"]["waiting"];
    Some((
        w["reason"].as_str()?,
        w["message"].as_str().unwrap_or_default(),
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_start_and_pre_stop_hooks_run_around_the_container() {
    let node = KubeletNode::start("hooks").await;
    let out = node.host_dir().join("out");
    std::fs::create_dir_all(&out).unwrap();
    // The app waits for what postStart writes; SIGTERM and preStop append to a hostPath file,
    // so their order shows there.
    let app = "while [ ! -f /tmp/hook ]; do sleep 0.1; done; cat /tmp/hook; \
               trap 'echo TERM >> /out/order; exit 0' TERM; echo started >> /out/order; \
               sleep 100000 & wait";
    node.write_manifest(
        "hooks.yaml",
        &format!(
            r#"
            apiVersion: v1
            kind: Pod
            metadata:
              name: hooks
            spec:
              terminationGracePeriodSeconds: 10
              containers:
              - name: main
                image: {image}
                command: {app}
                lifecycle:
                  postStart:
                    exec:
                      command: ["sh", "-c", "echo written by postStart > /tmp/hook"]
                  preStop:
                    exec:
                      command: ["sh", "-c", "echo preStop >> /out/order"]
                volumeMounts:
                - {{name: out, mountPath: /out}}
              volumes:
              - name: out
                hostPath: {{path: {out}, type: Directory}}
            "#,
            image = image("busybox"),
            app = sh(app),
            out = out.display(),
        ),
    );
    node.wait_running("hooks").await;
    node.wait_log_line("hooks", "main", "written by postStart")
        .await;
    node.remove_manifest("hooks.yaml");
    node.wait_pod_gone("hooks", LONG).await;
    let order = std::fs::read_to_string(out.join("order")).unwrap();
    assert_eq!(order, "started\npreStop\nTERM\n");
    node.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_post_start_hook_kills_the_container() {
    let node = KubeletNode::start("poststart-fails").await;
    node.write_manifest(
        "bad.yaml",
        &format!(
            r#"
            apiVersion: v1
            kind: Pod
            metadata:
              name: bad
            spec:
              terminationGracePeriodSeconds: 5
              containers:
              - name: main
                image: {image}
                command: {idle}
                lifecycle:
                  postStart:
                    exec:
                      command: ["sh", "-c", "echo boom; exit 3"]
            "#,
            image = image("busybox"),
            idle = sh(IDLE),
        ),
    );
    let pod = node
        .wait_pod(
            "bad",
            |p| {
                container_status(p, "main").is_some_and(|c| {
                    restart_count(c) >= 1 && last_terminated(c).is_some() && waiting(c).is_some()
                })
            },
            LONG,
        )
        .await;
    let c = container_status(&pod, "main").unwrap();
    let last = last_terminated(c).unwrap();
    assert_eq!(last["message"], "FailedPostStartHook", "{c:#}");
    let (reason, message) = waiting(c).unwrap();
    match reason {
        // Go's reason for the start that failed, until the back-off takes over.
        "PostStartHookError" => assert!(
            message.starts_with(
                "Exec lifecycle hook ([sh -c echo boom; exit 3]) for Container \"main\" in Pod"
            ) && message.ends_with("message: \"boom\\n\""),
            "{message}"
        ),
        "CrashLoopBackOff" => {}
        other => panic!("waiting for {other}: {c:#}"),
    }
    let log = node.kubelet_log();
    assert!(
        log.contains("FailedPostStartHook")
            && log.contains("Exec lifecycle hook ([sh -c echo boom; exit 3])"),
        "no FailedPostStartHook line in the kubelet log"
    );
    node.teardown().await;
}
