//! The manifest directory source: inotify on the directory reacts at once, a re-list every
//! `fileCheckFrequency` catches anything missed, and the full set of valid pods goes out as a
//! Reconcile whenever it changes (and once at start, even empty, so the source counts as seen).
//! Hidden files are skipped and subdirectories not entered, as the Go kubelet does; a missing
//! directory is waited for.

use std::collections::HashSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use inotify::{EventMask, EventStream, Inotify, WatchMask};
use tokio::sync::mpsc::Sender;
use tokio::task::JoinHandle;

use super::{FILE_SOURCE, Problem, Problems, decode, dedupe, without_seen};
use crate::types::{Pod, PodOp, PodUpdate};

/// Longest wait for a manifest created and still open for writing to be closed, from the
/// event that created it; it is then read as it is, and re-read when its close arrives.
const SETTLE: Duration = Duration::from_millis(100);
/// How often a missing path (or a lost watch) is looked for, between re-lists.
const WATCH_RETRY: Duration = Duration::from_secs(1);

/// Watches a directory (or a single file) of manifests and sends its pods.
pub struct FileSource {
    path: PathBuf,
    node_name: String,
    period: Duration,
    tx: Sender<PodUpdate>,
    problems: Problems,
}

/// Starts a [`FileSource`] on `dir`; it sends `PodUpdate { op: Reconcile, source: "file" }`
/// after every change and ends when the receiver is gone.
pub fn spawn_file_source(
    dir: PathBuf,
    node_name: String,
    period: Duration,
    tx: Sender<PodUpdate>,
) -> JoinHandle<()> {
    FileSource::new(dir, node_name, period, tx).spawn()
}

impl FileSource {
    /// A source for `path` (a directory or one file) re-listed every `period`.
    pub fn new(path: PathBuf, node_name: String, period: Duration, tx: Sender<PodUpdate>) -> Self {
        Self {
            path,
            node_name,
            period: period.max(Duration::from_millis(10)),
            tx,
            problems: Problems::default(),
        }
    }

    /// The manifests skipped at the latest listing, and why.
    #[cfg(test)]
    pub fn problems(&self) -> Problems {
        self.problems.clone()
    }

    /// Runs the source on the current tokio runtime.
    pub fn spawn(self) -> JoinHandle<()> {
        tokio::spawn(self.run())
    }

    async fn run(self) {
        tracing::info!(path = %self.path.display(), "watching the manifest path");
        let mut watch: Option<EventStream<Vec<u8>>> = None;
        let mut last_sent: Option<Vec<Pod>> = None;
        let mut relist = tokio::time::interval(self.period);
        relist.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut retry = tokio::time::interval(WATCH_RETRY);
        retry.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut watch_warned = false;
        loop {
            // Watch first, then list: whatever changes after the watch is added raises an
            // event, whatever changed before is in the listing.
            let mut relist_now = false;
            if watch.is_none() && tokio::fs::try_exists(&self.path).await.unwrap_or(false) {
                match self.watch() {
                    Ok(stream) => {
                        watch = Some(stream);
                        watch_warned = false;
                        relist_now = true;
                    }
                    Err(e) if !watch_warned => {
                        watch_warned = true;
                        tracing::warn!(path = %self.path.display(), error = %e, "cannot watch the manifest path; re-listing only");
                    }
                    Err(_) => {}
                }
            }
            if !relist_now {
                let has_watch = watch.is_some();
                tokio::select! {
                    event = next_event(&mut watch) => {
                        let mut writing = HashSet::new();
                        match Noted::of(event) {
                            Noted::WatchGone => watch = None,
                            // Hidden files are never read: nothing to re-list for.
                            Noted::Hidden => continue,
                            noted => noted.track(&mut writing),
                        }
                        self.settle(&mut watch, writing).await;
                    }
                    _ = relist.tick() => {}
                    // Only wakes the loop to look for the path (or retry the watch).
                    _ = retry.tick(), if !has_watch => continue,
                }
            }
            // The safety-net period counts from the latest listing, whatever caused it.
            relist.reset();
            let (path, node) = (self.path.clone(), self.node_name.clone());
            let Ok((pods, problems)) =
                tokio::task::spawn_blocking(move || list(&path, &node)).await
            else {
                tracing::error!(path = %self.path.display(), "listing manifests panicked");
                continue;
            };
            self.problems.replace(FILE_SOURCE, problems);
            let stripped = without_seen(&pods);
            if last_sent.as_ref() == Some(&stripped) {
                continue;
            }
            tracing::debug!(pods = pods.len(), "manifest set changed");
            let update = PodUpdate::new(PodOp::Reconcile, pods, FILE_SOURCE);
            if self.tx.send(update).await.is_err() {
                return;
            }
            last_sent = Some(stripped);
        }
    }

    /// An inotify watch on the path.
    fn watch(&self) -> std::io::Result<EventStream<Vec<u8>>> {
        let inotify = Inotify::init()?;
        // No IN_MODIFY: a file being written is read once it is closed.
        let mask = WatchMask::CLOSE_WRITE
            | WatchMask::CREATE
            | WatchMask::DELETE
            | WatchMask::MOVED_FROM
            | WatchMask::MOVED_TO
            | WatchMask::ATTRIB
            | WatchMask::DELETE_SELF
            | WatchMask::MOVE_SELF;
        inotify.watches().add(&self.path, mask)?;
        inotify.into_event_stream(vec![0u8; 4096])
    }

    /// Reads the events already queued behind the first of a burst (many manifests renamed in
    /// at once are then one re-list) and returns at once, without a timer: a manifest renamed in
    /// or closed is complete, and this is on every static pod's start path. Only while a file
    /// created in the burst is still open for writing (`writing`) does it wait, for its close,
    /// up to [`SETTLE`].
    async fn settle(
        &self,
        watch: &mut Option<EventStream<Vec<u8>>>,
        mut writing: HashSet<OsString>,
    ) {
        let deadline = tokio::time::Instant::now() + SETTLE;
        while watch.is_some() {
            let event = if writing.is_empty() {
                match next_event(watch).now_or_never() {
                    Some(event) => event,
                    None => return,
                }
            } else {
                tokio::select! {
                    event = next_event(watch) => event,
                    () = tokio::time::sleep_until(deadline) => return,
                }
            };
            match Noted::of(event) {
                Noted::WatchGone => *watch = None,
                noted => noted.track(&mut writing),
            }
        }
    }
}

/// What one inotify event means to the source.
#[derive(Debug, PartialEq)]
enum Noted {
    /// The watch is gone (the path deleted or moved, the queue broken).
    WatchGone,
    /// About a hidden file, which is never read.
    Hidden,
    /// A file was created; it may still be being written.
    Created(OsString),
    /// A file is complete or gone: closed after writing, deleted or moved away.
    Done(OsString),
    /// Anything else that changes the listing (a file moved in, its mode changed).
    Changed,
}

impl Noted {
    fn of(event: Option<std::io::Result<inotify::EventOwned>>) -> Self {
        let keeps = match &event {
            Some(Ok(e)) => !e
                .mask
                .intersects(EventMask::IGNORED | EventMask::DELETE_SELF | EventMask::MOVE_SELF),
            Some(Err(e)) => {
                tracing::warn!(error = %e, "reading inotify events");
                false
            }
            None => false,
        };
        match event {
            Some(Ok(e)) if keeps => Self::classify(e.mask, e.name),
            _ => Self::WatchGone,
        }
    }

    fn classify(mask: EventMask, name: Option<OsString>) -> Self {
        let Some(name) = name else {
            // An event on a watched single file itself.
            return Self::Changed;
        };
        if name.as_encoded_bytes().starts_with(b".") {
            return Self::Hidden;
        }
        if mask.contains(EventMask::CREATE) && !mask.contains(EventMask::ISDIR) {
            Self::Created(name)
        } else if mask
            .intersects(EventMask::CLOSE_WRITE | EventMask::DELETE | EventMask::MOVED_FROM)
        {
            Self::Done(name)
        } else {
            Self::Changed
        }
    }

    /// Keeps `writing` (the files created in this burst and not yet closed) up to date.
    fn track(self, writing: &mut HashSet<OsString>) {
        match self {
            Self::Created(name) => {
                writing.insert(name);
            }
            Self::Done(name) => {
                writing.remove(&name);
            }
            Self::WatchGone | Self::Hidden | Self::Changed => {}
        }
    }
}

/// The next inotify event, or never when there is no watch.
async fn next_event(
    watch: &mut Option<EventStream<Vec<u8>>>,
) -> Option<std::io::Result<inotify::EventOwned>> {
    match watch {
        Some(stream) => stream.next().await,
        None => std::future::pending().await,
    }
}

/// Lists the path (blocking): the valid pods of every manifest, and the problems.
fn list(path: &Path, node_name: &str) -> (Vec<Pod>, Vec<Problem>) {
    let shown = path.display().to_string();
    let problem = |origin: &str, reason: String| Problem {
        origin: origin.to_string(),
        reason,
    };
    let mut problems = Vec::new();
    let files = match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => match manifest_files(path) {
            Ok(files) => files,
            Err(e) => return (Vec::new(), vec![problem(&shown, e.to_string())]),
        },
        Ok(m) if m.is_file() => vec![path.to_path_buf()],
        Ok(_) => {
            let reason = "not a directory or a regular file".to_string();
            return (Vec::new(), vec![problem(&shown, reason)]);
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let reason = "does not exist (waiting for it)".to_string();
            return (Vec::new(), vec![problem(&shown, reason)]);
        }
        Err(e) => return (Vec::new(), vec![problem(&shown, e.to_string())]),
    };
    let mut pods = Vec::new();
    for file in files {
        let origin = file.display().to_string();
        match std::fs::metadata(&file) {
            Ok(m) if m.is_dir() => {
                tracing::debug!(path = %origin, "not recursing into a manifest subdirectory");
            }
            Ok(m) if m.is_file() => match std::fs::read(&file) {
                Ok(bytes) => match decode(&bytes, FILE_SOURCE, "file", &origin, node_name) {
                    Ok((found, mut bad)) => {
                        pods.extend(found.into_iter().map(|p| (origin.clone(), p)));
                        problems.append(&mut bad);
                    }
                    Err(unparsable) => problems.push(unparsable),
                },
                Err(e) => problems.push(problem(&origin, e.to_string())),
            },
            Ok(_) => problems.push(problem(&origin, "not a regular file".into())),
            Err(e) => problems.push(problem(&origin, e.to_string())),
        }
    }
    let pods = dedupe(pods, &mut problems);
    (pods, problems)
}

/// The directory's entries that are not hidden, sorted by name.
fn manifest_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_name().as_encoded_bytes().starts_with(b".") {
            continue;
        }
        files.push(entry.path());
    }
    files.sort();
    Ok(files)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::source::tests::{eventually, manifest};
    use tokio::sync::mpsc;

    const WAIT: Duration = Duration::from_secs(5);

    fn names(u: &PodUpdate) -> Vec<String> {
        let mut n: Vec<String> = u
            .pods
            .iter()
            .map(|p| p.metadata.name.clone().unwrap_or_default())
            .collect();
        n.sort();
        n
    }

    async fn next(rx: &mut mpsc::Receiver<PodUpdate>) -> PodUpdate {
        let u = tokio::time::timeout(WAIT, rx.recv())
            .await
            .expect("an update in time")
            .unwrap();
        assert_eq!((u.op, u.source.as_str()), (PodOp::Reconcile, "file"));
        u
    }

    fn write(dir: &Path, name: &str, body: &str) {
        // Written beside and renamed in, as careful writers do.
        let tmp = dir.join(format!(".{name}.tmp"));
        std::fs::write(&tmp, body).unwrap();
        std::fs::rename(&tmp, dir.join(name)).unwrap();
    }

    /// A running source on `dir` with a long period, so every update comes from inotify: its
    /// problems, its updates and its task.
    fn watched(dir: &Path) -> (Problems, mpsc::Receiver<PodUpdate>, JoinHandle<()>) {
        let (tx, rx) = mpsc::channel(16);
        let source = FileSource::new(dir.into(), "node".into(), Duration::from_secs(3600), tx);
        let problems = source.problems();
        (problems, rx, source.spawn())
    }

    #[tokio::test]
    async fn write_edit_delete() {
        let dir = tempfile::tempdir().unwrap();
        let (problems, mut rx, task) = watched(dir.path());

        assert!(
            next(&mut rx).await.pods.is_empty(),
            "the first listing goes out even empty"
        );

        write(dir.path(), "web.yaml", &manifest("web", "busybox:1"));
        let u = next(&mut rx).await;
        assert_eq!(names(&u), ["web-node"]);
        let uid = u.pods[0].metadata.uid.clone();

        write(dir.path(), "web.yaml", &manifest("web", "busybox:2"));
        let u = next(&mut rx).await;
        assert_eq!(names(&u), ["web-node"]);
        assert_ne!(u.pods[0].metadata.uid, uid, "an edit is a new pod");

        // Invalid YAML, an invalid spec, a hidden file and a subdirectory are skipped; the
        // valid pod stays.
        write(
            dir.path(),
            "broken.yaml",
            "apiVersion: v1\nkind: Pod\nspec: [",
        );
        write(dir.path(), "invalid.yaml", &manifest("invalid", ""));
        write(dir.path(), ".hidden.yaml", &manifest("hidden", "busybox:1"));
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(
            dir.path().join("sub/pod.yaml"),
            manifest("nested", "busybox:1"),
        )
        .unwrap();
        write(dir.path(), "other.yaml", &manifest("other", "busybox:1"));
        let mut u = next(&mut rx).await;
        while names(&u) != ["other-node", "web-node"] {
            u = next(&mut rx).await;
        }
        eventually("two problems", || problems.current().len() == 2).await;
        let p = problems.current();
        assert!(
            p[0].origin.ends_with("broken.yaml") && p[0].reason.contains("invalid YAML"),
            "{p:?}"
        );
        assert!(
            p[1].origin.ends_with("invalid.yaml")
                && p[1]
                    .reason
                    .contains("spec.containers[0].image: Required value"),
            "{p:?}"
        );

        std::fs::remove_file(dir.path().join("web.yaml")).unwrap();
        let u = next(&mut rx).await;
        assert_eq!(names(&u), ["other-node"]);

        drop(rx);
        std::fs::remove_file(dir.path().join("other.yaml")).unwrap();
        tokio::time::timeout(WAIT, task)
            .await
            .expect("the source ends with its receiver")
            .unwrap();
    }

    #[tokio::test]
    async fn missing_dir_is_waited_for() {
        let parent = tempfile::tempdir().unwrap();
        let dir = parent.path().join("manifests");
        let (tx, mut rx) = mpsc::channel(16);
        let source = FileSource::new(dir.clone(), "node".into(), Duration::from_secs(3600), tx);
        let problems = source.problems();
        let task = source.spawn();
        assert!(next(&mut rx).await.pods.is_empty());
        assert!(problems.current()[0].reason.contains("does not exist"));

        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("a.yaml"), manifest("a", "busybox:1")).unwrap();
        let u = next(&mut rx).await;
        assert_eq!(names(&u), ["a-node"]);
        assert!(problems.current().is_empty());

        // The directory going away takes its pods with it; coming back brings them back.
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(next(&mut rx).await.pods.is_empty());
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("b.yaml"), manifest("b", "busybox:1")).unwrap();
        let mut u = next(&mut rx).await;
        while u.pods.is_empty() {
            u = next(&mut rx).await;
        }
        assert_eq!(names(&u), ["b-node"]);
        task.abort();
    }

    #[tokio::test]
    async fn periodic_relist_without_inotify_changes() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.yaml"), manifest("a", "busybox:1")).unwrap();
        let (tx, mut rx) = mpsc::channel(16);
        let task = spawn_file_source(
            dir.path().into(),
            "node".into(),
            Duration::from_millis(50),
            tx,
        );
        assert_eq!(names(&next(&mut rx).await), ["a-node"]);
        // Re-lists of an unchanged directory send nothing.
        assert!(
            tokio::time::timeout(Duration::from_millis(300), rx.recv())
                .await
                .is_err()
        );
        task.abort();
    }

    #[test]
    fn events_are_sorted_into_what_the_source_waits_for() {
        let name = |s: &str| Some(OsString::from(s));
        assert_eq!(
            Noted::classify(EventMask::CREATE, name("a.yaml")),
            Noted::Created("a.yaml".into())
        );
        assert_eq!(
            Noted::classify(EventMask::CREATE | EventMask::ISDIR, name("sub")),
            Noted::Changed
        );
        for done in [
            EventMask::CLOSE_WRITE,
            EventMask::DELETE,
            EventMask::MOVED_FROM,
        ] {
            assert_eq!(
                Noted::classify(done, name("a.yaml")),
                Noted::Done("a.yaml".into())
            );
        }
        assert_eq!(
            Noted::classify(EventMask::MOVED_TO, name("a.yaml")),
            Noted::Changed
        );
        assert_eq!(
            Noted::classify(EventMask::MOVED_TO, name(".a.yaml.tmp")),
            Noted::Hidden
        );
        assert_eq!(
            Noted::classify(EventMask::CLOSE_WRITE, None),
            Noted::Changed
        );
        assert_eq!(Noted::of(None), Noted::WatchGone);
    }

    #[tokio::test]
    async fn a_manifest_still_being_written_is_read_once_closed() {
        use std::io::Write as _;
        let dir = tempfile::tempdir().unwrap();
        let (problems, mut rx, task) = watched(dir.path());
        assert!(next(&mut rx).await.pods.is_empty());

        // Half a manifest, written straight into place and left open: no re-list reads it
        // while the writer is still at it (well within SETTLE).
        let body = manifest("slow", "busybox:1");
        let (head, tail) = body.split_at(body.len() / 2);
        let mut file = std::fs::File::create(dir.path().join("slow.yaml")).unwrap();
        file.write_all(head.as_bytes()).unwrap();
        file.flush().unwrap();
        tokio::time::sleep(Duration::from_millis(30)).await;
        assert!(
            problems.current().is_empty(),
            "a half-written manifest was read: {:?}",
            problems.current()
        );
        file.write_all(tail.as_bytes()).unwrap();
        drop(file);
        let u = next(&mut rx).await;
        assert_eq!(names(&u), ["slow-node"]);
        assert!(problems.current().is_empty(), "{:?}", problems.current());
        task.abort();
    }

    #[test]
    fn a_single_file_path() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pod.json");
        std::fs::write(
            &file,
            r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"j"},"spec":{"containers":[{"name":"c","image":"busybox:1"}]}}"#,
        )
        .unwrap();
        let (pods, problems) = list(&file, "n");
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(pods[0].metadata.name.as_deref(), Some("j-n"));
    }
}
