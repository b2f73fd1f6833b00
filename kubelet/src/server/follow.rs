//! Streams a CRI log file to a client: from the start or the last N lines, rendered by
//! [`crate::cri_log`], and with `follow` on as the file grows (woken by inotify on the log's
//! directory, or by polling where inotify is unavailable), across rotations (a new file at the
//! same path), until the client goes, the byte limit is reached, or the container no longer
//! runs and the file is drained.

use std::io::{self, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use inotify::{Inotify, WatchMask};
use tokio::io::{AsyncReadExt, AsyncSeekExt};
use tokio::sync::mpsc;

use crate::cri_log::{RenderOptions, Renderer, tail_start};

/// Whether the container writing the log still runs.
pub type RunningCheck = Arc<dyn Fn() -> bool + Send + Sync>;

/// What to stream.
#[derive(Clone, Debug, Default)]
pub struct FollowOptions {
    /// Start at the last N lines (None: at the beginning).
    pub tail: Option<usize>,
    /// Keep streaming as the file grows.
    pub follow: bool,
    /// Rendering: timestamps, since, byte limit.
    pub render: RenderOptions,
}

/// How often the writer is checked while following, and the wake-up when inotify is quiet.
const CHECK_PERIOD: Duration = Duration::from_secs(1);
/// Poll period when inotify is unavailable.
const POLL_PERIOD: Duration = Duration::from_millis(250);
/// Read size.
const CHUNK: usize = 64 * 1024;

type Watch = inotify::EventStream<[u8; 1024]>;

/// Watches the log's directory: writes, and files appearing or going (rotation).
fn watch(path: &Path) -> io::Result<Watch> {
    let inotify = Inotify::init()?;
    let dir = path.parent().unwrap_or(Path::new("/"));
    inotify.watches().add(
        dir,
        WatchMask::MODIFY
            | WatchMask::CREATE
            | WatchMask::MOVED_TO
            | WatchMask::DELETE
            | WatchMask::CLOSE_WRITE,
    )?;
    inotify.into_event_stream([0u8; 1024])
}

/// Streams `file` (opened from `path`) into `tx` per `opts`; returns when done or when the
/// receiver is dropped.
pub async fn stream(
    file: std::fs::File,
    path: PathBuf,
    opts: FollowOptions,
    running: RunningCheck,
    tx: mpsc::Sender<Bytes>,
) {
    if let Err(e) = stream_inner(file, &path, opts, running, &tx).await {
        tracing::debug!(path = %path.display(), error = %e, "streaming a container log");
    }
}

/// Positions a file at the start of its last `tail` lines (blocking work, off the runtime).
async fn seek_tail(mut file: std::fs::File, tail: Option<usize>) -> io::Result<std::fs::File> {
    tokio::task::spawn_blocking(move || {
        let start = match tail {
            Some(n) => tail_start(&mut file, n)?,
            None => 0,
        };
        file.seek(SeekFrom::Start(start))?;
        Ok(file)
    })
    .await
    .map_err(io::Error::other)?
}

async fn send(tx: &mpsc::Sender<Bytes>, out: &mut Vec<u8>) -> bool {
    if out.is_empty() {
        return true;
    }
    tx.send(Bytes::from(std::mem::take(out))).await.is_ok()
}

async fn stream_inner(
    file: std::fs::File,
    path: &Path,
    opts: FollowOptions,
    running: RunningCheck,
    tx: &mpsc::Sender<Bytes>,
) -> io::Result<()> {
    // Go: without follow, tailLines=0 writes nothing.
    if !opts.follow && opts.tail == Some(0) {
        return Ok(());
    }
    let ino = file.metadata()?.ino();
    let mut file = tokio::fs::File::from_std(seek_tail(file, opts.tail).await?);
    let mut ino = ino;
    let mut renderer = Renderer::new(opts.render.clone());
    let mut pending: Vec<u8> = Vec::new();
    let mut out: Vec<u8> = Vec::new();
    let mut chunk = vec![0u8; CHUNK];
    let mut watcher: Option<Watch> = None;
    let mut watch_tried = false;
    let mut last_check: Option<Instant> = None;
    let mut stopping = false;
    loop {
        let n = file.read(&mut chunk).await?;
        if n > 0 {
            pending.extend_from_slice(&chunk[..n]);
            if let Some(end) = pending.iter().rposition(|b| *b == b'\n') {
                let rest = pending.split_off(end + 1);
                for line in pending.split_inclusive(|b| *b == b'\n') {
                    renderer.push_line(line, &mut out);
                }
                pending = rest;
            }
            if renderer.done() {
                send(tx, &mut out).await;
                return Ok(());
            }
            if !send(tx, &mut out).await {
                return Ok(());
            }
            continue;
        }
        // At the end of the file.
        if !opts.follow || stopping {
            if !pending.is_empty() {
                renderer.push_incomplete(&pending, &mut out);
            }
            renderer.finish(&mut out);
            send(tx, &mut out).await;
            return Ok(());
        }
        if last_check.is_none_or(|t| t.elapsed() >= CHECK_PERIOD) {
            last_check = Some(Instant::now());
            let check = running.clone();
            let alive = tokio::task::spawn_blocking(move || check())
                .await
                .unwrap_or(false);
            if !alive {
                // Drain whatever was written since, then stop.
                stopping = true;
                continue;
            }
        }
        // The file may have been rotated (a new file at the path) or truncated.
        match tokio::fs::metadata(path).await {
            Ok(meta) if meta.ino() != ino => match tokio::fs::File::open(path).await {
                Ok(f) => {
                    file = f;
                    ino = meta.ino();
                    pending.clear();
                    continue;
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            },
            Ok(meta) => {
                let pos = file.stream_position().await?;
                if meta.len() < pos {
                    file.seek(SeekFrom::Start(0)).await?;
                    pending.clear();
                    continue;
                }
            }
            Err(_) => {}
        }
        if watcher.is_none() && !watch_tried {
            watch_tried = true;
            watcher = watch(path)
                .inspect_err(
                    |e| tracing::debug!(error = %e, "inotify unavailable; polling the log"),
                )
                .ok();
            // Something may have been written while the watch was being set up.
            continue;
        }
        // Show text written without a newline yet (a prompt) instead of holding it back.
        renderer.flush_partial(&mut out);
        if !send(tx, &mut out).await {
            return Ok(());
        }
        let wait = if watcher.is_some() {
            CHECK_PERIOD
        } else {
            POLL_PERIOD
        };
        tokio::select! {
            () = tx.closed() => return Ok(()),
            () = tokio::time::sleep(wait) => {}
            event = next_event(&mut watcher) => {
                if event.is_none() {
                    // The watch ended: fall back to polling.
                    watcher = None;
                }
            }
        }
    }
}

/// The next inotify event, never when there is no watcher.
async fn next_event(watcher: &mut Option<Watch>) -> Option<()> {
    match watcher {
        Some(w) => match w.next().await {
            Some(Ok(_)) => Some(()),
            Some(Err(_)) | None => None,
        },
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::io::Write;
    use std::sync::atomic::{AtomicBool, Ordering};

    fn line(i: usize) -> String {
        format!("2024-05-01T10:00:{:02}Z stdout F line {i}\n", i % 60)
    }

    async fn collect(mut rx: mpsc::Receiver<Bytes>) -> String {
        let mut out = Vec::new();
        while let Some(b) = rx.recv().await {
            out.extend_from_slice(&b);
        }
        String::from_utf8(out).unwrap()
    }

    fn start(path: &Path, opts: FollowOptions, alive: Arc<AtomicBool>) -> mpsc::Receiver<Bytes> {
        let (tx, rx) = mpsc::channel(4);
        let file = std::fs::File::open(path).unwrap();
        let running: RunningCheck = Arc::new(move || alive.load(Ordering::SeqCst));
        tokio::spawn(stream(file, path.to_path_buf(), opts, running, tx));
        rx
    }

    #[tokio::test]
    async fn reads_the_whole_file_or_its_tail() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0.log");
        let text: String = (0..1000).map(line).collect();
        std::fs::write(&path, text + "2024-05-01T10:00:00Z stdout F unfinished").unwrap();
        let alive = Arc::new(AtomicBool::new(false));
        let all = collect(start(&path, FollowOptions::default(), alive.clone())).await;
        assert_eq!(all.lines().count(), 1001);
        assert!(all.ends_with("line 999\nunfinished"));
        let tail = collect(start(
            &path,
            FollowOptions {
                tail: Some(2),
                ..Default::default()
            },
            alive.clone(),
        ))
        .await;
        assert_eq!(tail, "line 998\nline 999\nunfinished");
        let none = collect(start(
            &path,
            FollowOptions {
                tail: Some(0),
                ..Default::default()
            },
            alive,
        ))
        .await;
        assert_eq!(none, "");
    }

    #[tokio::test]
    async fn follows_growth_and_rotation_until_the_container_stops() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0.log");
        std::fs::write(&path, line(1)).unwrap();
        let alive = Arc::new(AtomicBool::new(true));
        let opts = FollowOptions {
            follow: true,
            ..Default::default()
        };
        let mut rx = start(&path, opts, alive.clone());
        let first = tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&first[..], b"line 1\n");

        // Appends arrive promptly (inotify, or the poll).
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        f.write_all(b"2024-05-01T10:00:02Z stdout P li").unwrap();
        f.flush().unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        f.write_all(b"ne 2\n2024-05-01T10:00:02Z stdout F \n")
            .unwrap();
        f.flush().unwrap();
        let got = tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .unwrap()
            .unwrap();
        let mut got = got.to_vec();
        if got != b"line 2\n" && got.len() < 8 {
            got.extend_from_slice(
                &tokio::time::timeout(Duration::from_secs(5), rx.recv())
                    .await
                    .unwrap()
                    .unwrap(),
            );
        }
        assert!(
            String::from_utf8_lossy(&got).starts_with("line 2\n"),
            "{got:?}"
        );

        // Rotation: the file is renamed away and a new one takes its place.
        std::fs::rename(&path, dir.path().join("0.log.20240501")).unwrap();
        std::fs::write(&path, line(3)).unwrap();
        let mut seen = String::new();
        while !seen.contains("line 3\n") {
            let b = tokio::time::timeout(Duration::from_secs(5), rx.recv())
                .await
                .unwrap()
                .unwrap();
            seen.push_str(std::str::from_utf8(&b).unwrap());
        }

        // The container stops: what it wrote last still comes, then the stream ends.
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(line(4).as_bytes())
            .unwrap();
        alive.store(false, Ordering::SeqCst);
        let rest = tokio::time::timeout(Duration::from_secs(5), collect(rx))
            .await
            .unwrap();
        assert!(rest.contains("line 4\n"), "{rest:?}");
    }

    #[tokio::test]
    async fn stops_when_the_client_goes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0.log");
        std::fs::write(&path, line(1)).unwrap();
        let (tx, mut rx) = mpsc::channel(4);
        let file = std::fs::File::open(&path).unwrap();
        let running: RunningCheck = Arc::new(|| true);
        let task = tokio::spawn(stream(
            file,
            path.clone(),
            FollowOptions {
                follow: true,
                ..Default::default()
            },
            running,
            tx,
        ));
        rx.recv().await.unwrap();
        drop(rx);
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .unwrap()
            .unwrap();
    }

    #[tokio::test]
    async fn limit_bytes_ends_a_follow() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0.log");
        std::fs::write(&path, line(1) + &line(2)).unwrap();
        let opts = FollowOptions {
            follow: true,
            render: RenderOptions {
                limit_bytes: Some(10),
                ..Default::default()
            },
            ..Default::default()
        };
        let out = tokio::time::timeout(
            Duration::from_secs(5),
            collect(start(&path, opts, Arc::new(AtomicBool::new(true)))),
        )
        .await
        .unwrap();
        assert_eq!(out, "line 1\nlin");
    }
}
