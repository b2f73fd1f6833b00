//! Hooks with a scripted ExecSync and the scripted HTTP server: Go's messages, the preStop
//! bound and the grace left for StopContainer.
#![allow(clippy::unwrap_used)]

use std::sync::Mutex;

use k8s_openapi::api::core::v1::{ExecAction, HTTPGetAction, SleepAction, TCPSocketAction};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::*;
use crate::prober::test_server;

/// Answers every exec with `answer`; records the commands.
struct Scripted {
    answer: Box<dyn Fn() -> Result<ExecSyncResponse, CriError> + Send + Sync>,
    seen: Mutex<Vec<(String, Vec<String>, i64)>>,
}

impl ExecSync for Scripted {
    fn exec_sync<'a>(
        &'a self,
        container_id: &'a str,
        cmd: Vec<String>,
        timeout_secs: i64,
    ) -> BoxFut<'a, Result<ExecSyncResponse, CriError>> {
        self.seen
            .lock()
            .unwrap()
            .push((container_id.to_string(), cmd, timeout_secs));
        let answer = (self.answer)();
        Box::pin(async move { answer })
    }
}

fn runner(
    answer: impl Fn() -> Result<ExecSyncResponse, CriError> + Send + Sync + 'static,
) -> (HookRunner, Arc<Scripted>) {
    let exec = Arc::new(Scripted {
        answer: Box::new(answer),
        seen: Mutex::new(Vec::new()),
    });
    (HookRunner::with_exec(exec.clone()), exec)
}

fn exit(code: i32, stdout: &str, stderr: &str) -> Result<ExecSyncResponse, CriError> {
    Ok(ExecSyncResponse {
        stdout: stdout.as_bytes().to_vec(),
        stderr: stderr.as_bytes().to_vec(),
        exit_code: code,
    })
}

fn pod() -> Pod {
    let mut p = Pod::default();
    p.metadata.name = Some("web-node".into());
    p.metadata.namespace = Some("default".into());
    p.metadata.uid = Some("u1".into());
    p
}

fn container() -> Container {
    Container {
        name: "main".into(),
        ..Default::default()
    }
}

fn exec_hook(cmd: &[&str]) -> LifecycleHandler {
    LifecycleHandler {
        exec: Some(ExecAction {
            command: Some(cmd.iter().map(|s| s.to_string()).collect()),
        }),
        ..Default::default()
    }
}

fn target<'a>(pod: &'a Pod, c: &'a Container, ip: &'a str) -> HookTarget<'a> {
    HookTarget {
        pod,
        container: c,
        container_id: "cid",
        pod_ip: ip,
    }
}

#[tokio::test]
async fn exec_hooks_run_in_the_container_and_fail_with_go_messages() {
    let (p, c) = (pod(), container());
    let (ok, exec) = runner(|| exit(0, "fine", ""));
    ok.run(&exec_hook(&["sh", "-c", "echo hi"]), target(&p, &c, ""))
        .await
        .unwrap();
    assert_eq!(
        exec.seen.lock().unwrap().as_slice(),
        [(
            "cid".to_string(),
            vec!["sh".to_string(), "-c".into(), "echo hi".into()],
            0
        )]
    );
    let (failing, _) = runner(|| exit(1, "boom\n", "bad\n"));
    let err = failing
        .run(&exec_hook(&["sh", "-c", "exit 1"]), target(&p, &c, ""))
        .await
        .unwrap_err();
    assert_eq!(
        err.message,
        "Exec lifecycle hook ([sh -c exit 1]) for Container \"main\" in Pod \"web-node_default(u1)\" \
         failed - error: command 'sh -c exit 1' exited with 1: bad\n, message: \"boom\\nbad\\n\""
    );
    let (gone, _) = runner(|| {
        Err(CriError::Call {
            method: "ExecSync",
            status: tonic::Status::not_found("no such container"),
        })
    });
    let err = gone
        .run(&exec_hook(&["true"]), target(&p, &c, ""))
        .await
        .unwrap_err();
    assert!(err.message.contains("no such container"), "{}", err.message);
}

#[tokio::test]
async fn http_hooks_count_any_answer_and_fail_on_errors() {
    let server = test_server::start().await;
    let (p, c) = (pod(), container());
    let (hooks, _) = runner(|| exit(0, "", ""));
    let get = |path: &str, port: u16| LifecycleHandler {
        http_get: Some(HTTPGetAction {
            path: Some(path.into()),
            port: IntOrString::Int(i32::from(port)),
            ..Default::default()
        }),
        ..Default::default()
    };
    let port = server.addr.port();
    hooks
        .run(&get("/ok", port), target(&p, &c, "127.0.0.1"))
        .await
        .unwrap();
    // A hook's status code does not matter.
    hooks
        .run(&get("/missing", port), target(&p, &c, "127.0.0.1"))
        .await
        .unwrap();
    let head = server.heads().pop().unwrap().to_ascii_lowercase();
    assert!(head.contains("user-agent: kube-lifecycle/1.32"), "{head}");

    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = closed.local_addr().unwrap().port();
    drop(closed);
    let err = hooks
        .run(&get("/stop", dead), target(&p, &c, "127.0.0.1"))
        .await
        .unwrap_err();
    assert!(
        err.message.starts_with(
            "HTTP lifecycle hook (/stop) for Container \"main\" in Pod \"web-node_default(u1)\" failed - error: Get \""
        ),
        "{}",
        err.message
    );
    // Without a host and a pod IP there is nowhere to send it.
    let err = hooks
        .run(&get("/ok", port), target(&p, &c, ""))
        .await
        .unwrap_err();
    assert!(
        err.message
            .ends_with("failed - error: failed to find networking container"),
        "{}",
        err.message
    );
}

#[tokio::test]
async fn sleep_hooks_sleep_and_tcp_hooks_are_invalid() {
    let (p, c) = (pod(), container());
    let (hooks, _) = runner(|| exit(0, "", ""));
    let sleep = LifecycleHandler {
        sleep: Some(SleepAction { seconds: 1 }),
        ..Default::default()
    };
    let started = Instant::now();
    hooks.run(&sleep, target(&p, &c, "")).await.unwrap();
    assert!(started.elapsed() >= Duration::from_secs(1));
    let tcp = LifecycleHandler {
        tcp_socket: Some(TCPSocketAction {
            port: IntOrString::Int(80),
            ..Default::default()
        }),
        ..Default::default()
    };
    let err = hooks.run(&tcp, target(&p, &c, "")).await.unwrap_err();
    assert!(
        err.message
            .starts_with("Cannot run handler: invalid handler")
    );
}

#[tokio::test]
async fn pre_stop_hooks_are_cut_at_the_grace_period() {
    let (p, c) = (pod(), container());
    let (hooks, _) = runner(|| exit(0, "", ""));
    let long = LifecycleHandler {
        sleep: Some(SleepAction { seconds: 30 }),
        ..Default::default()
    };
    let run = hooks.pre_stop(&long, target(&p, &c, ""), 1).await;
    assert_eq!(
        run,
        PreStopRun {
            spent: 1,
            failed: false
        }
    );
    let spent = run.spent;
    assert_eq!(remaining_grace(1, spent), MIN_GRACE_AFTER_HOOK);
    let (failing, _) = runner(|| exit(3, "", ""));
    let run = failing
        .pre_stop(&exec_hook(&["false"]), target(&p, &c, ""), 30)
        .await;
    assert_eq!(
        run,
        PreStopRun {
            spent: 0,
            failed: true
        }
    );
}

#[test]
fn the_grace_left_is_at_least_two_seconds() {
    assert_eq!(remaining_grace(30, 5), 25);
    assert_eq!(remaining_grace(30, 29), 2);
    assert_eq!(remaining_grace(3, 10), 2);
    assert_eq!(remaining_grace(i64::MIN, 1), 2);
}

#[test]
fn pods_print_as_go_prints_them() {
    assert_eq!(format_pod(&pod()), "web-node_default(u1)");
    assert_eq!(format_pod(&Pod::default()), "_()");
}
