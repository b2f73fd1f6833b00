//! Container logs through ferrolet-cri: the CRI log format with stream and partial tags,
//! ReopenContainerLog after a rotation, and nothing lost when a container writes fast.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test reports failure by panicking

use std::path::Path;

use ferrolet_integration::cri::{poll, reassemble};
use ferrolet_integration::pods::{ContainerBuilder, CriNode, LONG, log_file, read_log};

/// The largest line the reference (containerd's CRI) writes before splitting it.
const MAX_LINE: usize = 16 * 1024;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lines_are_in_cri_format_with_streams_and_partial_tags() {
    let node = CriNode::start("logfmt").await;
    let api = node.api().await;
    let busybox = node.pull("busybox").await;
    let pod = node.pod("logfmt").build();
    let pod_id = api.run_pod(&pod).await.unwrap();
    let config = ContainerBuilder::new("writer", &busybox.reference)
        .shell(
            "echo out1; echo err1 >&2; echo out2; head -c 40000 /dev/zero | tr '\\0' x; echo; \
             printf 'no newline at the end'",
        )
        .build();
    let id = api.run_container(&pod_id, &pod, &config).await.unwrap();
    let status = api.wait_exited(&id, LONG).await;
    assert_eq!(status.exit_code, 0, "{status:?}");
    let log = log_file(&pod, "writer.log");
    assert_eq!(status.log_path, log.display().to_string());
    // Output without a final newline still reaches the log when the stream ends: as a P line
    // (containerd's CRI: no newline was written) or an F line.
    let tail = "no newline at the end";
    let lines = poll("the unterminated last line in the log", LONG, || async {
        let lines = read_log(&log);
        let out = reassemble(&lines, "stdout");
        if out.trim_end_matches('\n').ends_with(tail) {
            Ok(lines)
        } else {
            Err(format!("{} lines", lines.len()))
        }
    })
    .await;

    let long = "x".repeat(40_000);
    let stdout = reassemble(&lines, "stdout");
    let expected = format!("out1\nout2\n{long}\n{tail}");
    assert!(
        stdout == expected || stdout == format!("{expected}\n"),
        "stdout as logged: {stdout:.200?}"
    );
    assert_eq!(reassemble(&lines, "stderr"), "err1\n");
    let pieces: Vec<_> = lines
        .iter()
        .filter(|l| l.stream == "stdout" && l.message.starts_with('x'))
        .collect();
    assert!(
        pieces.len() >= 3,
        "40000 bytes in lines of at most {MAX_LINE}: {} pieces",
        pieces.len()
    );
    let (last, partials) = pieces.split_last().unwrap();
    assert!(
        partials.iter().all(|l| l.partial),
        "all but the last piece are P"
    );
    assert!(!last.partial, "the last piece is F");
    assert!(
        lines.iter().all(|l| l.message.len() <= MAX_LINE),
        "no line longer than {MAX_LINE}"
    );
    node.teardown().await;
}

/// `line<N>` numbers on stdout of `path`.
fn counter_values(path: &Path) -> Vec<u64> {
    read_log(path)
        .iter()
        .filter(|l| l.stream == "stdout" && !l.partial)
        .map(|l| {
            l.message
                .strip_prefix("line")
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("unexpected line {:?}", l.message))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reopen_after_a_rename_continues_in_a_new_file_without_losing_lines() {
    let node = CriNode::start("logreopen").await;
    let api = node.api().await;
    let busybox = node.pull("busybox").await;
    let pod = node.pod("logreopen").build();
    let pod_id = api.run_pod(&pod).await.unwrap();
    let config = ContainerBuilder::new("counter", &busybox.reference)
        .shell("i=0; while :; do echo line$i; i=$((i+1)); sleep 0.1; done")
        .build();
    let id = api.run_container(&pod_id, &pod, &config).await.unwrap();
    let log = log_file(&pod, "counter.log");
    poll("five lines", LONG, || async {
        let n = counter_values(&log).len();
        if n >= 5 {
            Ok(())
        } else {
            Err(format!("{n} lines"))
        }
    })
    .await;

    let rotated = log.with_extension("log.1");
    std::fs::rename(&log, &rotated).unwrap();
    api.reopen_log(&id).await.unwrap();
    let fresh = poll("three lines in the reopened file", LONG, || async {
        let v = counter_values(&log);
        if v.len() >= 3 {
            Ok(v)
        } else {
            Err(format!("{} lines", v.len()))
        }
    })
    .await;
    let old = counter_values(&rotated);
    let contiguous = |v: &[u64]| v.windows(2).all(|w| w[1] == w[0] + 1);
    assert!(
        contiguous(&old) && old.first() == Some(&0),
        "rotated file: {old:?}"
    );
    assert!(contiguous(&fresh), "new file: {fresh:?}");
    assert_eq!(
        fresh.first().copied(),
        old.last().map(|n| n + 1),
        "the new file continues where the old one stopped"
    );

    // A container that does not run has no log to reopen.
    api.stop_container(&id, 0).await.unwrap();
    assert!(
        api.reopen_log(&id).await.is_err(),
        "reopen of an exited container"
    );
    node.teardown().await;
}

/// Bytes the container wrote to `stream`, as the log holds them, and the lines of that
/// stream that are not `expected` (at most a few, for the message).
fn payload(path: &Path, stream: &str, expected: &str) -> (usize, Vec<String>) {
    let lines = read_log(path);
    let text = reassemble(&lines, stream);
    let odd = text
        .split_terminator('\n')
        .filter(|l| *l != expected)
        .take(3)
        .map(|l| format!("{l:.120}"))
        .collect();
    (text.len(), odd)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_megabytes_written_fast_all_reach_the_log() {
    const TOTAL: usize = 50_000_000;
    let node = CriNode::start("logbulk").await;
    let api = node.api().await;
    let busybox = node.pull("busybox").await;
    let pod = node.pod("logbulk").build();
    let pod_id = api.run_pod(&pod).await.unwrap();
    // 500 000 lines of 99 characters and a newline.
    let line = "0123456789".repeat(10)[..99].to_string();
    let config = ContainerBuilder::new("flood", &busybox.reference)
        .shell(&format!("yes {line} | head -c {TOTAL}"))
        .build();
    let id = api.run_container(&pod_id, &pod, &config).await.unwrap();
    let status = api.wait_exited(&id, LONG * 3).await;
    assert_eq!(status.exit_code, 0, "{status:?}");
    let log = log_file(&pod, "flood.log");
    let (bytes, odd) = poll("all 50 MB in the log", LONG, || async {
        let (bytes, odd) = payload(&log, "stdout", &line);
        if bytes >= TOTAL {
            Ok((bytes, odd))
        } else {
            Err(format!("{bytes} bytes"))
        }
    })
    .await;
    assert_eq!(bytes, TOTAL);
    assert!(
        odd.is_empty(),
        "lines that are not what was written: {odd:?}"
    );
    node.teardown().await;
}
