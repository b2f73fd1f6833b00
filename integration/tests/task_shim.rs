//! containerd-shim-ferrolet-v1 beside containerd's Go runc shim, driven by containerd's own
//! client (`ctr`), not by ours: one task lifecycle (a detached container logging to a file, an
//! exec through FIFOs, pause and resume, SIGKILL, deletion) must give the same task events on
//! both shims, in the same order and with the same fields (pids, paths and times aside), the
//! same outputs and exit codes, and leave nothing behind.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Stdio};
use std::time::Duration;

use ferrolet_integration::containerd::{TestNamespace, containerd};
use ferrolet_integration::registry::OPEN_REGISTRY;
use ferrolet_integration::scratch::Scratch;

const GO_SHIM: &str = "io.containerd.runc.v2";
const FERROLET_SHIM: &str = "io.containerd.ferrolet.v1";

fn ctr(ns: &str) -> Command {
    let mut cmd = Command::new("ctr");
    cmd.arg("-a").arg(containerd().socket()).arg("-n").arg(ns);
    cmd
}

/// Runs `ctr` with `args`; (exit code, stdout).
fn run(ns: &str, args: &[&str]) -> (i32, String) {
    let out = ctr(ns).args(args).stdin(Stdio::null()).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

fn ok(ns: &str, args: &[&str]) -> String {
    let (code, out) = run(ns, args);
    assert_eq!(code, 0, "ctr {args:?}: {out}");
    out
}

/// One event line of `ctr events` (`<date> <time> +0000 UTC <namespace> <topic> <json>`), with
/// what differs between runs (pids, times, paths) replaced by its shape.
fn normalize(line: &str, ns: &str) -> Option<String> {
    let mut parts = line.splitn(7, ' ').skip(4);
    let (namespace, topic) = (parts.next()?, parts.next()?);
    if namespace != ns || !topic.starts_with("/tasks/") {
        return None;
    }
    let json: serde_json::Value = serde_json::from_str(parts.next().unwrap_or("{}")).ok()?;
    let mut fields: Vec<String> = json
        .as_object()?
        .iter()
        .map(|(k, v)| {
            let shape = match k.as_str() {
                "pid" => {
                    if v.as_u64().unwrap_or(0) > 0 {
                        "<pid>".to_string()
                    } else {
                        "0".to_string()
                    }
                }
                "exited_at" => "<time>".to_string(),
                "bundle" => "<bundle>".to_string(),
                "rootfs" => format!("<{} mounts>", v.as_array().map_or(0, Vec::len)),
                "io" => format!(
                    "<io {}>",
                    v.as_object()
                        .map(|o| o.keys().cloned().collect::<Vec<_>>().join(","))
                        .unwrap_or_default()
                ),
                _ => v.to_string(),
            };
            format!("{k}={shape}")
        })
        .collect();
    fields.sort();
    Some(format!("{topic} {}", fields.join(" ")))
}

/// SIGKILLs task `id` and waits until containerd reports it stopped.
async fn kill_and_wait(ns: &str, id: &str) {
    ok(ns, &["t", "kill", "-s", "KILL", id]);
    for _ in 0..100 {
        let listing = ok(ns, &["t", "ls"]);
        if listing
            .lines()
            .any(|l| l.starts_with(id) && l.contains("STOPPED"))
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("task {id} in {ns} did not stop after SIGKILL");
}

/// The lifecycle on `runtime`; the normalized events and what the processes said.
async fn lifecycle(runtime: &str, ns: &TestNamespace) -> (Vec<String>, Vec<String>) {
    let name = ns.name.as_str();
    let scratch = Scratch::new("task-shim");
    let image = format!("{OPEN_REGISTRY}/ferrolet/busybox:1");
    ok(name, &["images", "pull", "--plain-http", &image]);

    let mut events = ctr(name)
        .arg("events")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;

    let log = scratch.path().join("c1.log");
    let log_uri = format!("file://{}", log.display());
    ok(
        name,
        &[
            "run",
            "-d",
            "--runtime",
            runtime,
            "--log-uri",
            &log_uri,
            &image,
            "c1",
            "sh",
            "-c",
            "echo from-init; exec sleep 1000",
        ],
    );
    let (code, exec_out) = run(
        name,
        &[
            "t",
            "exec",
            "--exec-id",
            "e1",
            "c1",
            "sh",
            "-c",
            "echo from-exec; exit 4",
        ],
    );
    let mut said = vec![format!("exec exit {code}: {}", exec_out.trim())];
    let (_, ps) = run(name, &["t", "ps", "c1"]);
    said.push(format!("ps lines {}", ps.lines().count()));
    ok(name, &["t", "pause", "c1"]);
    said.push(
        ok(name, &["t", "ls"])
            .lines()
            .nth(1)
            .map(|l| l.split_whitespace().nth(2).unwrap_or("").to_string())
            .unwrap_or_default(),
    );
    ok(name, &["t", "resume", "c1"]);
    kill_and_wait(name, "c1").await;
    ok(name, &["t", "rm", "c1"]);
    ok(name, &["c", "rm", "c1"]);
    said.push(format!(
        "log: {}",
        std::fs::read_to_string(&log).unwrap_or_default().trim()
    ));

    // A logging binary (`binary://`): fds 3 and 4 carry the output, 5 closes when it is ready.
    let logger = scratch.path().join("logger.sh");
    let logged = scratch.path().join("c2.log");
    std::fs::write(
        &logger,
        format!(
            "#!/bin/sh\nexec 5>&-\necho \"$CONTAINER_NAMESPACE/$CONTAINER_ID $*\" > {out}\ncat <&3 >> {out}\n",
            out = logged.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&logger, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let binary_uri = format!("binary://{}?tag=t1", logger.display());
    ok(
        name,
        &[
            "run",
            "-d",
            "--runtime",
            runtime,
            "--log-uri",
            &binary_uri,
            &image,
            "c2",
            "sh",
            "-c",
            "echo via-binary; exec sleep 1000",
        ],
    );
    kill_and_wait(name, "c2").await;
    ok(name, &["t", "rm", "c2"]);
    ok(name, &["c", "rm", "c2"]);
    for _ in 0..100 {
        if std::fs::read_to_string(&logged)
            .unwrap_or_default()
            .contains("via-binary")
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    said.push(format!(
        "binary log: {}",
        std::fs::read_to_string(&logged)
            .unwrap_or_default()
            .trim()
            .replace(name, "<ns>")
    ));
    // Let the last events arrive.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let _ = events.kill();
    let out = events.wait_with_output().unwrap();
    let raw = String::from_utf8_lossy(&out.stdout).into_owned();
    let lines: Vec<String> = raw.lines().filter_map(|l| normalize(l, name)).collect();
    assert!(
        !lines.is_empty(),
        "no task events in namespace {name} from `ctr events`:\n{raw}"
    );

    ok(name, &["images", "rm", "--sync", &image]);
    (lines, said)
}

async fn clean(ns: TestNamespace) {
    ns.leak_checker()
        .shim_sockets(
            containerd().socket(),
            ns.name.clone(),
            ["c1".to_string(), "c2".to_string()],
        )
        .assert_clean()
        .await;
    ns.delete().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_shims_give_the_same_events_outputs_and_exits() {
    let go_ns = containerd().namespace("shim-go").await;
    let (go_events, go_said) = lifecycle(GO_SHIM, &go_ns).await;
    clean(go_ns).await;
    let ours_ns = containerd().namespace("shim-ours").await;
    let (our_events, our_said) = lifecycle(FERROLET_SHIM, &ours_ns).await;
    clean(ours_ns).await;

    assert_eq!(go_said[0], "exec exit 4: from-exec");
    assert_eq!(go_said[go_said.len() - 2], "log: from-init");
    assert_eq!(
        go_said.last().unwrap(),
        "binary log: <ns>/c2 tag t1\nvia-binary"
    );
    assert_eq!(
        go_said, our_said,
        "what the processes said and how they ended"
    );
    assert!(go_events.len() >= 9, "{go_events:#?}");
    assert_eq!(go_events, our_events, "task events, in order");
}
