//! The CRI log writer: copies a container's stdout and stderr FIFOs into its `log_path`, one
//! entry per line, `<RFC3339Nano UTC timestamp> <stdout|stderr> <P|F> <text>\n`, as
//! containerd's `internal/cri/io/logger.go` does and the kubelet's log reader parses.
//!
//! Line rules, as containerd's: `\n` or `\r\n` ends a line (the terminator is not logged); a
//! line longer than [`MAX_LINE_SIZE`] becomes partial (`P`) entries of exactly that size and
//! a final full (`F`) entry; text left without a newline at EOF is logged as `P`.
//! Where containerd takes the time per line, we take it once per read from the FIFO, so the
//! cost of formatting the timestamp does not grow with the number of lines.
//! Both streams share one writer behind a mutex, and every read becomes one `write`, so
//! entries never interleave mid-line.
//!
//! With a size limit (the kubelet's `containerLogMaxSize`, when it says so), a log that
//! reaches it is not written further until the kubelet has rotated it (ReopenContainerLog):
//! the pumps stop reading, the container's writes wait on the full pipe, and nothing is lost.
//! A kubelet that does not rotate within [`ROTATION_WAIT`] (it is down) is not waited for
//! again until the next reopen: the log then grows as it would without a limit.
//!
//! Attach ([`LogHandle::attach`]) subscribes to the same reads: each chunk is handed to every
//! attached client through a bounded channel before it is logged. A client that falls
//! [`ATTACH_BUFFER`] chunks behind is disconnected (its channel dropped) rather than let slow
//! the log or the container down.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use tokio::net::unix::pipe::Receiver;
use tokio::sync::{mpsc, watch};

use super::io::{IoError, OpenedIo};

/// containerd's default `max_container_log_line_size`.
pub const MAX_LINE_SIZE: usize = 16 * 1024;

/// How much one pump reads from its FIFO before writing (a pipe holds 64 KiB by default).
const READ_BUF: usize = 128 * 1024;

/// How long a log at its size limit waits for the kubelet's rotation. Both kubelets look at
/// logs every 10 s (ferrolet every 200 ms while one is near its limit); a log that fills
/// between two passes must outwait a whole period plus a late pass, or it is given up on
/// just before the rotation comes and grows unbounded until the next one.
pub const ROTATION_WAIT: std::time::Duration = std::time::Duration::from_secs(15);

/// Chunks (each one read, at most [`READ_BUF`] bytes) an attached client may lag behind.
pub const ATTACH_BUFFER: usize = 64;

/// The attached clients of one output stream.
#[derive(Default)]
struct Subscribers(Mutex<Vec<mpsc::Sender<Bytes>>>);

impl Subscribers {
    fn add(&self) -> mpsc::Receiver<Bytes> {
        let (tx, rx) = mpsc::channel(ATTACH_BUFFER);
        self.lock().push(tx);
        rx
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<mpsc::Sender<Bytes>>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Hands `chunk` to every client; drops those gone or too far behind.
    fn send(&self, chunk: &Bytes, container_id: &str, stream: Stream) {
        let mut subs = self.lock();
        if subs.is_empty() {
            return;
        }
        subs.retain(|tx| match tx.try_send(chunk.clone()) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Full(_)) => {
                tracing::warn!(container = %container_id, stream = stream.as_str(), "attached client too slow; disconnecting it");
                false
            }
            Err(mpsc::error::TrySendError::Closed(_)) => false,
        });
    }

    /// At EOF: every client's stream ends.
    fn close(&self) {
        self.lock().clear();
    }
}

/// An attach's view of the output: chunks as they are read, until EOF.
#[derive(Debug, Default)]
pub struct Attached {
    /// stdout chunks, when asked for.
    pub stdout: Option<mpsc::Receiver<Bytes>>,
    /// stderr chunks, when asked for and the container has a stderr (no tty).
    pub stderr: Option<mpsc::Receiver<Bytes>>,
}

/// Which output stream an entry came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    /// The process's stdout.
    Stdout,
    /// The process's stderr.
    Stderr,
}

impl Stream {
    /// The name in the log (`stdout` / `stderr`).
    pub fn as_str(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }
}

/// `t` as RFC 3339 in UTC with nine fraction digits, e.g. `2016-10-06T00:17:09.669794202Z`.
pub fn timestamp(t: SystemTime) -> String {
    let (secs, nanos) = match t.duration_since(UNIX_EPOCH) {
        Ok(d) => (saturating_i64(d.as_secs()), d.subsec_nanos()),
        Err(e) => {
            // Before the epoch: floor to whole seconds, nanoseconds counting forwards.
            let d = e.duration();
            let (s, n) = (saturating_i64(d.as_secs()), d.subsec_nanos());
            if n == 0 {
                (-s, 0)
            } else {
                (-s - 1, 1_000_000_000 - n)
            }
        }
    };
    match jiff::Timestamp::new(secs, nanos as i32) {
        Ok(utc) => jiff::fmt::temporal::DateTimePrinter::new()
            .precision(Some(9))
            .timestamp_to_string(&utc),
        // Only a clock millennia off gets here; a fixed stamp keeps the line.
        Err(_) => "0000-01-01T00:00:00.000000000Z".to_string(),
    }
}

fn saturating_i64(secs: u64) -> i64 {
    i64::try_from(secs).unwrap_or(i64::MAX)
}

/// Turns one stream's bytes into CRI log entries, across reads.
#[derive(Debug)]
pub struct LineFormatter {
    stream: Stream,
    max_line: usize,
    /// The current line's text not yet logged (never more than `max_line` + 1 bytes).
    pending: Vec<u8>,
    /// `<timestamp> <stream> `, rebuilt per push.
    head: Vec<u8>,
}

impl LineFormatter {
    /// A formatter for `stream`; `max_line` 0 means lines are never split.
    pub fn new(stream: Stream, max_line: usize) -> Self {
        Self {
            stream,
            max_line,
            pending: Vec::new(),
            head: Vec::with_capacity(48),
        }
    }

    fn set_time(&mut self, at: SystemTime) {
        self.head.clear();
        self.head.extend_from_slice(timestamp(at).as_bytes());
        self.head.push(b' ');
        self.head.extend_from_slice(self.stream.as_str().as_bytes());
        self.head.push(b' ');
    }

    /// Appends to `out` the entries that `chunk` (read at `at`) completes.
    pub fn push(&mut self, at: SystemTime, chunk: &[u8], out: &mut Vec<u8>) {
        self.set_time(at);
        let mut rest = chunk;
        while let Some(i) = find_newline(rest) {
            let (line, tail) = (&rest[..i], &rest[i + 1..]);
            if self.pending.is_empty() {
                complete(out, &self.head, line, self.max_line);
            } else {
                self.pending.extend_from_slice(line);
                complete(out, &self.head, &self.pending, self.max_line);
                self.pending.clear();
            }
            rest = tail;
        }
        if rest.is_empty() {
            return;
        }
        self.pending.extend_from_slice(rest);
        if self.max_line == 0 {
            return;
        }
        // A trailing '\r' may be half of a "\r\n" terminator, so it does not count yet.
        let text = self.pending.len() - usize::from(self.pending.last() == Some(&b'\r'));
        if text <= self.max_line {
            return;
        }
        let mut done = 0;
        while text - done > self.max_line {
            entry(
                out,
                &self.head,
                b'P',
                &self.pending[done..done + self.max_line],
            );
            done += self.max_line;
        }
        self.pending.drain(..done);
    }

    /// At EOF: appends what is left of an unterminated line as partial entries.
    pub fn finish(&mut self, at: SystemTime, out: &mut Vec<u8>) {
        if self.pending.is_empty() {
            return;
        }
        self.set_time(at);
        let mut rest = &self.pending[..];
        while self.max_line > 0 && rest.len() > self.max_line {
            entry(out, &self.head, b'P', &rest[..self.max_line]);
            rest = &rest[self.max_line..];
        }
        entry(out, &self.head, b'P', rest);
        self.pending.clear();
    }
}

/// Formats `data`, the whole of a stream read at `at` and ending at EOF, as CRI log entries.
pub fn format_lines(stream: Stream, at: SystemTime, data: &[u8], max_line: usize) -> Vec<u8> {
    let mut f = LineFormatter::new(stream, max_line);
    let mut out = Vec::new();
    f.push(at, data, &mut out);
    f.finish(at, &mut out);
    out
}

fn find_newline(s: &[u8]) -> Option<usize> {
    // `skip_until` searches with std's own memchr, which is fast even in unoptimised builds.
    let mut r = s;
    let skipped = std::io::BufRead::skip_until(&mut r, b'\n').unwrap_or(0);
    (skipped > 0 && s[skipped - 1] == b'\n').then(|| skipped - 1)
}

/// Logs a terminated line (terminator already removed but for a '\r' of "\r\n").
fn complete(out: &mut Vec<u8>, head: &[u8], line: &[u8], max_line: usize) {
    let mut rest = line.strip_suffix(b"\r").unwrap_or(line);
    while max_line > 0 && rest.len() > max_line {
        entry(out, head, b'P', &rest[..max_line]);
        rest = &rest[max_line..];
    }
    entry(out, head, b'F', rest);
}

fn entry(out: &mut Vec<u8>, head: &[u8], tag: u8, text: &[u8]) {
    out.reserve(head.len() + text.len() + 3);
    out.extend_from_slice(head);
    out.push(tag);
    out.push(b' ');
    out.extend_from_slice(text);
    out.push(b'\n');
}

/// The log file both pumps write to; `None` while discarding.
struct Sink {
    path: PathBuf,
    container_id: String,
    file: Mutex<Option<File>>,
    /// Set after a failed write, so a full disk logs one warning, not one per read.
    failing: AtomicBool,
    /// The size at which the kubelet rotates the log; 0: none known.
    max_size: u64,
    /// Bytes in the current file.
    written: AtomicU64,
    /// Counts reopens, so a pump waiting at the limit sees the rotation.
    reopens: watch::Sender<u64>,
    /// The kubelet did not rotate in time: write on without waiting until the next reopen.
    gave_up: AtomicBool,
}

impl Sink {
    fn discards(&self) -> bool {
        self.path.as_os_str().is_empty()
    }

    fn at_limit(&self) -> bool {
        self.max_size > 0
            && self.written.load(Ordering::Relaxed) >= self.max_size
            && !self.gave_up.load(Ordering::Relaxed)
    }

    /// Waits until the log is rotated (or [`ROTATION_WAIT`] passes) while it is at its limit.
    async fn wait_for_rotation(&self) {
        let mut reopens = self.reopens.subscribe();
        // A reopen between the check and the subscription already freed it.
        if !self.at_limit() {
            return;
        }
        if tokio::time::timeout(ROTATION_WAIT, reopens.changed())
            .await
            .is_err()
            && !self.gave_up.swap(true, Ordering::Relaxed)
        {
            tracing::warn!(container = %self.container_id, path = %self.path.display(), limit = self.max_size, "log at its size limit and not rotated in time; writing on");
        }
    }

    fn write_blocking(&self, buf: &[u8]) {
        let mut file = self.file.lock().unwrap_or_else(|p| p.into_inner());
        let Some(f) = file.as_mut() else { return };
        match f.write_all(buf) {
            Ok(()) => {
                self.written.fetch_add(buf.len() as u64, Ordering::Relaxed);
                if self.failing.swap(false, Ordering::Relaxed) {
                    tracing::info!(container = %self.container_id, path = %self.path.display(), "log writes work again");
                }
            }
            Err(e) => {
                // Keep draining the FIFO regardless: a stuck reader would block the container.
                if !self.failing.swap(true, Ordering::Relaxed) {
                    tracing::warn!(container = %self.container_id, path = %self.path.display(), error = %e, "writing container log; dropping output until writes work again");
                }
            }
        }
    }

    /// Writes `buf` off the runtime and hands it back, emptied, for reuse.
    async fn write(self: &Arc<Self>, buf: Vec<u8>) -> Vec<u8> {
        if buf.is_empty() {
            return buf;
        }
        let sink = self.clone();
        match tokio::task::spawn_blocking(move || {
            sink.write_blocking(&buf);
            buf
        })
        .await
        {
            Ok(mut buf) => {
                buf.clear();
                buf
            }
            Err(e) => {
                tracing::warn!(container = %self.container_id, error = %e, "log write task failed");
                Vec::new()
            }
        }
    }
}

fn open_log(path: &PathBuf) -> Result<File, IoError> {
    // containerd makes the directory too (0755); kubelets create it, other clients may not.
    if let Some(dir) = path.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(dir)
            .map_err(|source| IoError::OpenLog {
                path: path.clone(),
                source,
            })?;
    }
    OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o640)
        .open(path)
        .map_err(|source| IoError::OpenLog {
            path: path.clone(),
            source,
        })
}

struct Shared {
    sink: Arc<Sink>,
    done: watch::Receiver<bool>,
    placeholders: Mutex<Vec<File>>,
    /// Attached clients per stream (stdout, stderr); None for a stream the process lacks.
    attached: [Option<Arc<Subscribers>>; 2],
}

/// Handle to a container's log pumps (clone-able).
#[derive(Clone)]
pub struct LogHandle {
    inner: Arc<Shared>,
}

impl std::fmt::Debug for LogHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogHandle")
            .field("container_id", &self.inner.sink.container_id)
            .field("path", &self.inner.sink.path)
            .field("running", &self.running())
            .finish()
    }
}

/// Starts copying stdout/stderr into `log_path` in the CRI log format; an empty `log_path`
/// discards output (still draining the FIFOs). The file is opened `O_APPEND|O_CREAT` 0640;
/// its parent directory must exist. Call [`OpenedIo::task_created`] before, or
/// [`LogHandle::task_created`] after, or the pumps never see EOF.
pub fn start(
    mut io: OpenedIo,
    log_path: PathBuf,
    container_id: String,
    max_size: u64,
) -> Result<LogHandle, IoError> {
    let runtime = tokio::runtime::Handle::try_current().map_err(|_| IoError::NoRuntime)?;
    let file = if log_path.as_os_str().is_empty() {
        None
    } else {
        Some(open_log(&log_path)?)
    };
    let written = file
        .as_ref()
        .and_then(|f| f.metadata().ok())
        .map_or(0, |m| m.len());
    let sink = Arc::new(Sink {
        path: log_path,
        container_id,
        file: Mutex::new(file),
        failing: AtomicBool::new(false),
        max_size,
        written: AtomicU64::new(written),
        reopens: watch::channel(0).0,
        gave_up: AtomicBool::new(false),
    });
    let (done_tx, done) = watch::channel(false);
    let stdout = io.take_stdout();
    let stderr = io.take_stderr();
    let attached = [
        stdout.as_ref().map(|_| Arc::new(Subscribers::default())),
        stderr.as_ref().map(|_| Arc::new(Subscribers::default())),
    ];
    let [out_subs, err_subs] = attached.clone();
    let pumps_sink = sink.clone();
    runtime.spawn(async move {
        let out = async {
            if let (Some(rx), Some(subs)) = (stdout, out_subs) {
                pump(rx, Stream::Stdout, &pumps_sink, &subs).await;
            }
        };
        let err = async {
            if let (Some(rx), Some(subs)) = (stderr, err_subs) {
                pump(rx, Stream::Stderr, &pumps_sink, &subs).await;
            }
        };
        tokio::join!(out, err);
        // Close the file off the runtime: close(2) may flush on network filesystems.
        let closing = pumps_sink.clone();
        let _ = tokio::task::spawn_blocking(move || {
            closing
                .file
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take();
        })
        .await;
        done_tx.send_replace(true);
    });
    Ok(LogHandle {
        inner: Arc::new(Shared {
            sink,
            done,
            placeholders: Mutex::new(io.take_placeholders()),
            attached,
        }),
    })
}

/// Copies one FIFO into the sink (and to attached clients) until EOF.
async fn pump(rx: Receiver, stream: Stream, sink: &Arc<Sink>, attached: &Subscribers) {
    pump_reads(rx, stream, sink, attached).await;
    attached.close();
}

async fn pump_reads(rx: Receiver, stream: Stream, sink: &Arc<Sink>, attached: &Subscribers) {
    let mut fmt = LineFormatter::new(stream, MAX_LINE_SIZE);
    let mut eof = false;
    while !eof {
        if sink.at_limit() {
            sink.wait_for_rotation().await;
        }
        // Wait for output before taking a buffer: a hundred quiet containers then hold no
        // read or format buffers at all.
        if let Err(e) = rx.readable().await {
            tracing::warn!(container = %sink.container_id, stream = stream.as_str(), error = %e, "waiting for container output");
            break;
        }
        let mut buf = Vec::with_capacity(READ_BUF);
        // Take whatever is in the pipe, so one write covers it.
        while buf.len() < READ_BUF {
            match rx.try_read_buf(&mut buf) {
                Ok(0) => {
                    eof = true;
                    break;
                }
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => {
                    tracing::warn!(container = %sink.container_id, stream = stream.as_str(), error = %e, "reading container output");
                    eof = true;
                    break;
                }
            }
        }
        if buf.is_empty() {
            continue;
        }
        // Shared with attached clients without a copy; the formatter reads the same bytes.
        let chunk = Bytes::from(buf);
        attached.send(&chunk, &sink.container_id, stream);
        if sink.discards() {
            continue;
        }
        let mut out = Vec::with_capacity(chunk.len() + chunk.len() / 8 + 64);
        fmt.push(SystemTime::now(), &chunk, &mut out);
        drop(chunk);
        sink.write(out).await;
    }
    if !sink.discards() {
        let mut out = Vec::new();
        fmt.finish(SystemTime::now(), &mut out);
        if !out.is_empty() {
            sink.write(out).await;
        }
    }
}

impl LogHandle {
    /// Closes and reopens the log file (after the kubelet renamed it for rotation); fails
    /// with [`IoError::LogClosed`] (FailedPrecondition) once the pumps have finished.
    pub async fn reopen(&self) -> Result<(), IoError> {
        if !self.running() {
            return Err(IoError::LogClosed {
                container_id: self.inner.sink.container_id.clone(),
            });
        }
        let sink = self.inner.sink.clone();
        if sink.discards() {
            return Ok(());
        }
        tokio::task::spawn_blocking(move || {
            let file = open_log(&sink.path)?;
            let len = file.metadata().map_or(0, |m| m.len());
            // Taken under the writers' lock, so every entry lands wholly in one file or the other.
            let old = {
                let mut slot = sink.file.lock().unwrap_or_else(|p| p.into_inner());
                sink.written.store(len, Ordering::Relaxed);
                slot.replace(file)
            };
            drop(old);
            sink.gave_up.store(false, Ordering::Relaxed);
            sink.reopens.send_modify(|n| *n += 1);
            Ok(())
        })
        .await?
    }

    /// Resolves once both streams reached EOF and everything was written and flushed.
    pub async fn wait(&self) {
        let mut done = self.inner.done.clone();
        // An error means the pump task is gone, which also means it has stopped writing.
        let _ = done.wait_for(|d| *d).await;
    }

    /// Subscribes to the output read from now on (`stdout`/`stderr`: which streams the
    /// client wants). Each stream ends at the process's EOF, or early when the client falls
    /// [`ATTACH_BUFFER`] chunks behind.
    pub fn attach(&self, stdout: bool, stderr: bool) -> Attached {
        let [out, err] = &self.inner.attached;
        let running = self.running();
        let sub = |want: bool, subs: &Option<Arc<Subscribers>>| {
            subs.as_ref()
                .filter(|_| want && running)
                .map(|subs| subs.add())
        };
        Attached {
            stdout: sub(stdout, out),
            stderr: sub(stderr, err),
        }
    }

    /// Whether the pumps are still running.
    pub fn running(&self) -> bool {
        !*self.inner.done.borrow() && self.inner.done.has_changed().is_ok()
    }

    /// Same as [`OpenedIo::task_created`], for when the pumps were started before the task
    /// existed: drops the placeholder write ends so EOF can arrive.
    pub fn task_created(&self) {
        self.inner
            .placeholders
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::io::Read;
    use std::path::Path;
    use std::time::{Duration, Instant};

    use super::super::io::{self, Fifos};
    use super::*;

    fn at(secs: u64, nanos: u32) -> SystemTime {
        UNIX_EPOCH + Duration::new(secs, nanos)
    }

    #[test]
    fn timestamp_dates_follow_the_gregorian_calendar() {
        // Walking day by day across 1000 years follows the Gregorian month lengths.
        let leap = |y: i64| (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
        let month_len = |y: i64, m: u32| match m {
            2 if leap(y) => 29,
            2 => 28,
            4 | 6 | 9 | 11 => 30,
            _ => 31,
        };
        let date = |day: i64| {
            let t = if day >= 0 {
                UNIX_EPOCH + Duration::from_secs(day as u64 * 86_400)
            } else {
                UNIX_EPOCH - Duration::from_secs(day.unsigned_abs() * 86_400)
            };
            let ts = timestamp(t);
            assert!(ts.ends_with("T00:00:00.000000000Z"), "{ts}");
            let y: i64 = ts[0..4].parse().unwrap();
            let m: u32 = ts[5..7].parse().unwrap();
            let d: u32 = ts[8..10].parse().unwrap();
            (y, m, d)
        };
        assert_eq!(date(0), (1970, 1, 1));
        assert_eq!(date(-1), (1969, 12, 31));
        assert_eq!(date(11_016), (2000, 2, 29));
        assert_eq!(date(47_541), (2100, 3, 1));
        let mut prev = date(-200_000);
        for d in -199_999..200_000 {
            let (y, m, day) = prev;
            let expected = if day < month_len(y, m) {
                (y, m, day + 1)
            } else if m < 12 {
                (y, m + 1, 1)
            } else {
                (y + 1, 1, 1)
            };
            let cur = date(d);
            assert_eq!(cur, expected, "day {d}");
            prev = cur;
        }
    }

    #[test]
    fn timestamps() {
        assert_eq!(timestamp(at(0, 0)), "1970-01-01T00:00:00.000000000Z");
        assert_eq!(
            timestamp(at(1_475_713_029, 669_794_202)),
            "2016-10-06T00:17:09.669794202Z"
        );
        assert_eq!(
            timestamp(at(951_868_799, 999_999_999)),
            "2000-02-29T23:59:59.999999999Z"
        );
        assert_eq!(
            timestamp(at(1_709_164_800, 1)),
            "2024-02-29T00:00:00.000000001Z"
        );
        assert_eq!(
            timestamp(at(4_102_444_800, 0)),
            "2100-01-01T00:00:00.000000000Z"
        );
        assert_eq!(
            timestamp(UNIX_EPOCH - Duration::new(1, 500_000_000)),
            "1969-12-31T23:59:58.500000000Z"
        );
        assert_eq!(timestamp(SystemTime::now()).len(), 30);
    }

    const TS: &str = "2016-10-06T00:17:09.669794202Z";

    fn t() -> SystemTime {
        at(1_475_713_029, 669_794_202)
    }

    /// The entries without their timestamp (split on '\n' only: a '\r' is text here).
    fn lines(out: &[u8]) -> Vec<String> {
        let text = String::from_utf8(out.to_vec()).unwrap();
        let body = text.strip_suffix('\n').unwrap_or(&text);
        if body.is_empty() {
            return Vec::new();
        }
        body.split('\n')
            .map(|l| l.strip_prefix(TS).expect("timestamp").to_string())
            .collect()
    }

    #[test]
    fn formats_full_partial_and_empty_lines() {
        let out = format_lines(
            Stream::Stdout,
            t(),
            b"a\n\nb c\r\nd\re\ntail",
            MAX_LINE_SIZE,
        );
        assert_eq!(
            lines(&out),
            [
                " stdout F a",
                " stdout F ",
                " stdout F b c",
                " stdout F d\re",
                " stdout P tail"
            ]
        );
        let out = format_lines(Stream::Stderr, t(), b"x\r", 4);
        assert_eq!(lines(&out), [" stderr P x\r"]);
        assert!(format_lines(Stream::Stdout, t(), b"", 4).is_empty());
    }

    #[test]
    fn splits_long_lines_like_containerd() {
        let f = |data: &[u8]| lines(&format_lines(Stream::Stdout, t(), data, 4));
        assert_eq!(f(b"abcd\n"), [" stdout F abcd"]);
        assert_eq!(f(b"abcde\n"), [" stdout P abcd", " stdout F e"]);
        assert_eq!(f(b"abcdefgh\n"), [" stdout P abcd", " stdout F efgh"]);
        // "\r\n" right after a full-size chunk is a terminator, not text.
        assert_eq!(f(b"abcd\r\n"), [" stdout F abcd"]);
        assert_eq!(f(b"abcd\rx\n"), [" stdout P abcd", " stdout F \rx"]);
        assert_eq!(
            f(b"abcdefghi"),
            [" stdout P abcd", " stdout P efgh", " stdout P i"]
        );
        assert_eq!(f(b"abcd\r"), [" stdout P abcd", " stdout P \r"]);
        // No limit.
        let out = format_lines(Stream::Stdout, t(), &[b'z'; 100_000], 0);
        assert_eq!(lines(&out).len(), 1);
    }

    #[test]
    fn chunking_does_not_change_the_entries() {
        let data = b"one\r\ntwo\nabcdefghij\nk\r\r\n\nlast-no-newline\rabcdefgh\r\nx".to_vec();
        let whole = format_lines(Stream::Stdout, t(), &data, 4);
        for step in 1..=data.len() {
            let mut f = LineFormatter::new(Stream::Stdout, 4);
            let mut out = Vec::new();
            for c in data.chunks(step) {
                f.push(t(), c, &mut out);
            }
            f.finish(t(), &mut out);
            assert_eq!(lines(&out), lines(&whole), "chunks of {step}");
        }
        assert_eq!(
            lines(&whole),
            [
                " stdout F one",
                " stdout F two",
                " stdout P abcd",
                " stdout P efgh",
                " stdout F ij",
                " stdout F k\r",
                " stdout F ",
                " stdout P last",
                " stdout P -no-",
                " stdout P newl",
                " stdout P ine\r",
                " stdout P abcd",
                " stdout F efgh",
                " stdout P x",
            ]
        );
    }

    /// The shim's write ends of both output FIFOs, opened the way the runc shim opens them
    /// (blocking write-only) while creating the process, so before `task_created`.
    fn shim_ends(fifos: &Fifos) -> (File, File) {
        let open = |p: &Path| OpenOptions::new().write(true).open(p).unwrap();
        (open(&fifos.stdout), open(fifos.stderr.as_ref().unwrap()))
    }

    /// Plays the shim: one thread per stream writes its data in 4 KiB writes, as the runc
    /// shim copies, and closes.
    fn shim_write(
        ends: (File, File),
        stdout: Vec<u8>,
        stderr: Vec<u8>,
    ) -> tokio::task::JoinHandle<()> {
        tokio::task::spawn_blocking(move || {
            let threads: Vec<_> = [(ends.0, stdout), (ends.1, stderr)]
                .into_iter()
                .map(|(mut w, data)| {
                    std::thread::spawn(move || {
                        for c in data.chunks(4096) {
                            w.write_all(c).unwrap();
                        }
                    })
                })
                .collect();
            for t in threads {
                t.join().unwrap();
            }
        })
    }

    /// FIFOs opened, the shim's ends opened, the task "created", the pumps started.
    async fn started(dir: &Path, log: PathBuf) -> (Fifos, (File, File), LogHandle) {
        let fifos = Fifos::new(&dir.join("io"), "c", false, false);
        let mut opened = io::open(&fifos).await.unwrap();
        let ends = shim_ends(&fifos);
        opened.task_created();
        let handle = start(opened, log, "c".into(), 0).unwrap();
        (fifos, ends, handle)
    }

    async fn wait(h: &LogHandle) {
        tokio::time::timeout(Duration::from_secs(60), h.wait())
            .await
            .expect("pumps end");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn attached_clients_see_the_output_the_log_gets() {
        let tmp = tempfile::tempdir().unwrap();
        let log = tmp.path().join("0.log");
        let (fifos, ends, h) = started(tmp.path(), log.clone()).await;
        let mut a = h.attach(true, true);
        let only_out = h.attach(true, false);
        assert!(only_out.stderr.is_none());
        drop(only_out);
        shim_write(ends, b"hello\n".repeat(1000), b"oops\n".to_vec())
            .await
            .unwrap();
        let mut out = Vec::new();
        while let Some(c) = a.stdout.as_mut().unwrap().recv().await {
            out.extend_from_slice(&c);
        }
        let mut err = Vec::new();
        while let Some(c) = a.stderr.as_mut().unwrap().recv().await {
            err.extend_from_slice(&c);
        }
        assert_eq!(out, b"hello\n".repeat(1000));
        assert_eq!(err, b"oops\n");
        wait(&h).await;
        let text = std::fs::read_to_string(&log).unwrap();
        assert_eq!(text.lines().count(), 1001);
        // After EOF nothing more is attached.
        let late = h.attach(true, true);
        assert!(late.stdout.is_none() && late.stderr.is_none());
        io::remove(&fifos).await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_slow_attached_client_is_dropped_and_the_log_keeps_everything() {
        let tmp = tempfile::tempdir().unwrap();
        let log = tmp.path().join("0.log");
        let (fifos, ends, h) = started(tmp.path(), log.clone()).await;
        // Never read: falls behind after ATTACH_BUFFER chunks.
        let slow = h.attach(true, true);
        let line = [b"x".repeat(99), b"\n".to_vec()].concat();
        // 20 MB: far more reads than the client's buffer holds.
        let data = line.repeat(200_000);
        shim_write(ends, data, Vec::new()).await.unwrap();
        wait(&h).await;
        let text = std::fs::read_to_string(&log).unwrap();
        assert_eq!(text.lines().count(), 200_000, "the log lost nothing");
        let mut rx = slow.stdout.unwrap();
        let (mut chunks, mut bytes) = (0, 0);
        while let Some(c) = rx.recv().await {
            chunks += 1;
            bytes += c.len();
        }
        assert!(chunks <= ATTACH_BUFFER, "{chunks}");
        assert!(bytes < 20_000_000, "the slow client was cut off: {bytes}");
        io::remove(&fifos).await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn both_streams_into_one_file() {
        let tmp = tempfile::tempdir().unwrap();
        let log = tmp.path().join("0.log");
        let (fifos, ends, h) = started(tmp.path(), log.clone()).await;
        assert!(h.running());
        shim_write(ends, b"out1\nout2\npart".to_vec(), b"err1\n".to_vec())
            .await
            .unwrap();
        wait(&h).await;
        assert!(!h.running());
        let text = std::fs::read_to_string(&log).unwrap();
        let mut got: Vec<&str> = text.lines().map(|l| &l[31..]).collect();
        got.sort();
        assert_eq!(
            got,
            [
                "stderr F err1",
                "stdout F out1",
                "stdout F out2",
                "stdout P part"
            ]
        );
        for l in text.lines() {
            assert_eq!(&l[30..31], " ");
            assert!(l[..30].ends_with('Z'));
        }
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&log).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o640);
        match h.reopen().await {
            Err(e @ IoError::LogClosed { .. }) => {
                assert_eq!(e.code(), tonic::Code::FailedPrecondition)
            }
            r => panic!("expected LogClosed, got {r:?}"),
        }
        io::remove(&fifos).await.unwrap();
    }

    #[tokio::test]
    async fn an_unopenable_log_is_an_error_naming_the_path() {
        let tmp = tempfile::tempdir().unwrap();
        let fifos = Fifos::new(&tmp.path().join("io"), "c", false, false);
        let opened = io::open(&fifos).await.unwrap();
        // A missing parent is made; a parent that is a file cannot be.
        std::fs::write(tmp.path().join("file"), b"").unwrap();
        let log = tmp.path().join("file").join("0.log");
        let err = start(opened, log.clone(), "c".into(), 0).unwrap_err();
        assert!(matches!(&err, IoError::OpenLog { path, .. } if *path == log));
        assert!(err.to_string().contains(&*log.to_string_lossy()));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn empty_path_discards_but_drains() {
        let tmp = tempfile::tempdir().unwrap();
        let (fifos, ends, h) = started(tmp.path(), PathBuf::new()).await;
        // Still running: the shim's ends are open. Nothing to reopen, and no error.
        h.reopen().await.unwrap();
        // More than a pipe holds: the writers finish only if we drain.
        shim_write(ends, vec![b'x'; 1 << 20], vec![b'y'; 1 << 20])
            .await
            .unwrap();
        wait(&h).await;
        assert!(!tmp.path().join("0.log").exists());
        io::remove(&fifos).await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn reopen_after_rename_moves_later_lines_to_the_new_file() {
        let tmp = tempfile::tempdir().unwrap();
        let log = tmp.path().join("0.log");
        let (fifos, (mut out, err), h) = started(tmp.path(), log.clone()).await;
        drop(err);
        out.write_all(b"before\n").unwrap();

        let deadline = Instant::now() + Duration::from_secs(10);
        while std::fs::read_to_string(&log).unwrap_or_default().is_empty() {
            assert!(Instant::now() < deadline, "first line never written");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let rotated = tmp.path().join("0.log.1");
        std::fs::rename(&log, &rotated).unwrap();
        h.reopen().await.unwrap();
        out.write_all(b"after\n").unwrap();
        drop(out);
        wait(&h).await;
        let old = std::fs::read_to_string(&rotated).unwrap();
        let new = std::fs::read_to_string(&log).unwrap();
        assert!(
            old.ends_with(" stdout F before\n") && old.lines().count() == 1,
            "{old:?}"
        );
        assert!(
            new.ends_with(" stdout F after\n") && new.lines().count() == 1,
            "{new:?}"
        );
        io::remove(&fifos).await.unwrap();
    }

    /// A log at its limit is not written further until it is rotated: the writer waits on
    /// the pipe, and after each rotation the next file gets at most the limit (plus the one
    /// read that crossed it). Nothing is lost.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_log_at_its_limit_waits_for_rotation_and_loses_nothing() {
        const LIMIT: u64 = 64 * 1024;
        let tmp = tempfile::tempdir().unwrap();
        let log = tmp.path().join("0.log");
        let fifos = Fifos::new(&tmp.path().join("io"), "c", false, false);
        let mut opened = io::open(&fifos).await.unwrap();
        let (out, err) = shim_ends(&fifos);
        opened.task_created();
        let h = start(opened, log.clone(), "c".into(), LIMIT).unwrap();
        drop(err);
        // 2 MiB of numbered lines: far more than the limit, the pipe and one read.
        let data: Vec<u8> = (0..40_000)
            .flat_map(|i| {
                format!("line {i:06} xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\n").into_bytes()
            })
            .collect();
        let total_lines = 40_000;
        let writer = tokio::task::spawn_blocking(move || {
            let mut out = out;
            for c in data.chunks(4096) {
                out.write_all(c).unwrap();
            }
        });
        let mut rotated = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        while !writer.is_finished() || h.running() {
            assert!(Instant::now() < deadline, "the writer never finished");
            let len = std::fs::metadata(&log).map_or(0, |m| m.len());
            // The limit holds, give or take the read that crossed it.
            assert!(
                len <= LIMIT + (READ_BUF as u64) * 2,
                "the log grew to {len}"
            );
            if len >= LIMIT {
                let to = tmp.path().join(format!("0.log.{}", rotated.len()));
                std::fs::rename(&log, &to).unwrap();
                rotated.push(to);
                if h.reopen().await.is_err() {
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
            if writer.is_finished() && !h.running() {
                break;
            }
        }
        writer.await.unwrap();
        wait(&h).await;
        assert!(rotated.len() >= 10, "rotated {} times", rotated.len());
        let mut text = String::new();
        for f in rotated.iter().chain(std::iter::once(&log)) {
            text.push_str(&std::fs::read_to_string(f).unwrap_or_default());
        }
        let got: Vec<&str> = text.lines().map(|l| &l[40..]).collect();
        assert_eq!(got.len(), total_lines, "every line, once");
        for (i, l) in got.iter().enumerate() {
            assert!(l.starts_with(&format!("line {i:06} ")), "{i}: {l}");
        }
        io::remove(&fifos).await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn pumps_started_before_the_task_end_after_task_created() {
        let tmp = tempfile::tempdir().unwrap();
        let fifos = Fifos::new(&tmp.path().join("io"), "c", false, false);
        let opened = io::open(&fifos).await.unwrap();
        let h = start(opened, tmp.path().join("0.log"), "c".into(), 0).unwrap();
        // Nothing ever opened the FIFOs: only our placeholders keep the pumps alive.
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(h.running());
        h.task_created();
        wait(&h).await;
        io::remove(&fifos).await.unwrap();
    }

    /// A container writing 50 MB as fast as it can: every byte arrives, in the right lines.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn fifty_megabytes_lose_nothing() {
        const TOTAL: usize = 50 * 1000 * 1000;
        let tmp = tempfile::tempdir().unwrap();
        let log = tmp.path().join("0.log");
        let (fifos, ends, h) = started(tmp.path(), log.clone()).await;

        // Lines of varying length, some beyond the split size, terminated by '\n'; the
        // stream ends in an unterminated line.
        let mut data = Vec::with_capacity(TOTAL);
        let mut n = 0usize;
        let mut newlines = 0usize;
        let mut expected_entries = 0usize;
        while data.len() < TOTAL {
            n += 1;
            let len = if n.is_multiple_of(1000) {
                40_000
            } else {
                20 + n % 180
            };
            let len = len.min(TOTAL - data.len());
            data.extend((0..len).map(|i| b'a' + ((n + i) % 26) as u8));
            if data.len() < TOTAL {
                data.push(b'\n');
                newlines += 1;
            }
            // A line of len bytes makes ceil(len / MAX) entries (an empty one makes one).
            expected_entries += len.div_ceil(MAX_LINE_SIZE).max(1);
        }
        let payload = data.len() - newlines;

        let started_at = Instant::now();
        shim_write(ends, data.clone(), Vec::new()).await.unwrap();
        wait(&h).await;
        let elapsed = started_at.elapsed();

        let mut text = Vec::new();
        File::open(&log).unwrap().read_to_end(&mut text).unwrap();
        let mut entries = 0;
        let mut got_payload = 0;
        let mut full = 0;
        // The stream rebuilt from the log: each entry's text, a newline after each F.
        let mut rebuilt = Vec::with_capacity(data.len());
        for line in text.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            entries += 1;
            assert_eq!(&line[30..38], b" stdout ");
            let tag = line[38];
            assert!(tag == b'F' || tag == b'P');
            full += usize::from(tag == b'F');
            got_payload += line.len() - 40;
            rebuilt.extend_from_slice(&line[40..]);
            if tag == b'F' {
                rebuilt.push(b'\n');
            }
        }
        assert_eq!(got_payload, payload);
        assert!(
            rebuilt == data,
            "the log does not hold exactly what was written"
        );
        assert_eq!(entries, expected_entries);
        assert_eq!(full, newlines);
        println!(
            "50 MB through a FIFO into the CRI log: {:.2?}, {:.0} MB/s, {} entries",
            elapsed,
            TOTAL as f64 / 1e6 / elapsed.as_secs_f64(),
            entries
        );
        io::remove(&fifos).await.unwrap();
    }
}
