//! Container log rotation (the Go kubelet's container log manager): a running container's log
//! over `containerLogMaxSize` is renamed with a timestamp suffix and the runtime reopens the
//! original path (ReopenContainerLog); at most `containerLogMaxFiles` files are kept. Logs are
//! looked at every 10 s as in Go, and every [`HOT_PERIOD`] while one is past half its limit:
//! a container writing 100 MB/s would otherwise leave a gigabyte between two passes.

use std::path::{Path, PathBuf};

use ferrolet_proto::cri::ContainerState;

use crate::cri::Cri;
use crate::types::RuntimePod;

/// How often logs are looked at while one is past half its limit.
pub const HOT_PERIOD: std::time::Duration = std::time::Duration::from_millis(200);

/// The limits of `containerLogMaxSize` and `containerLogMaxFiles`.
#[derive(Clone, Copy, Debug)]
pub struct LogLimits {
    /// Bytes a log may reach before it is rotated.
    pub max_size: u64,
    /// Files kept per container, the live one included (at least 2).
    pub max_files: usize,
}

/// Rotates every running container's log (of `pods`, the runtime's view) that has outgrown
/// the limit. Returns whether some log is past half the limit (or was just rotated): at the
/// rate it was written it may outgrow the limit long before the next regular pass, so the
/// caller should look again soon.
pub async fn rotate_logs(cri: &Cri, pods: &[RuntimePod], limits: LogLimits) -> bool {
    let max_files = limits.max_files.max(2);
    let mut hot = false;
    for pod in pods {
        for c in pod
            .containers
            .iter()
            .filter(|c| c.state == ContainerState::ContainerRunning && !c.log_path.is_empty())
        {
            let path = PathBuf::from(&c.log_path);
            let Ok(meta) = tokio::fs::metadata(&path).await else {
                continue;
            };
            hot |= meta.len() >= limits.max_size / 2;
            if meta.len() < limits.max_size {
                continue;
            }
            if let Err(e) = rotate(cri, &c.id, &path, max_files).await {
                tracing::warn!(container = %c.id, path = %path.display(), error = %e, "rotating a container log");
            }
        }
    }
    hot
}

async fn rotate(cri: &Cri, id: &str, path: &Path, max_files: usize) -> Result<(), String> {
    // Room first, as Go's rotation does: pruned after the rename, the runtime would fill the
    // reopened log while the excess file still stood, and the container's logs would briefly
    // hold one file more than `max_files`.
    remove_oldest(path, max_files - 2).await;
    let rotated = PathBuf::from(format!("{}.{}", path.display(), stamp()));
    tokio::fs::rename(path, &rotated)
        .await
        .map_err(|e| format!("renaming to {}: {e}", rotated.display()))?;
    if let Err(e) = cri.reopen_container_log(id).await {
        // Put it back so the runtime keeps writing where the kubelet reads.
        let _ = tokio::fs::rename(&rotated, path).await;
        return Err(format!("ReopenContainerLog: {e}"));
    }
    tracing::info!(container = id, rotated = %rotated.display(), "container log rotated");
    Ok(())
}

/// Keeps the newest `keep` rotated files of a log.
async fn remove_oldest(path: &Path, keep: usize) {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return;
    };
    let prefix = format!("{}.", name.to_string_lossy());
    let Ok(mut entries) = tokio::fs::read_dir(dir).await else {
        return;
    };
    let mut rotated = Vec::new();
    while let Ok(Some(e)) = entries.next_entry().await {
        let n = e.file_name().to_string_lossy().into_owned();
        if n.starts_with(&prefix) {
            rotated.push(e.path());
        }
    }
    // The suffix is a sortable timestamp: oldest first.
    rotated.sort();
    let excess = rotated.len().saturating_sub(keep);
    for old in rotated.into_iter().take(excess) {
        let _ = tokio::fs::remove_file(old).await;
    }
}

/// `YYYYMMDD-hhmmss.nnnnnnnnn` UTC, sortable, like the Go kubelet's rotation suffix (with
/// nanoseconds so two rotations in one second do not collide).
fn stamp() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let t = jiff::Timestamp::new(now.as_secs() as i64, now.subsec_nanos() as i32)
        .unwrap_or_default()
        .to_zoned(jiff::tz::TimeZone::UTC);
    t.strftime("%Y%m%d-%H%M%S.%9f").to_string()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn stamps_sort_by_time_and_have_nanoseconds() {
        let a = stamp();
        let b = stamp();
        assert_eq!(a.len(), "20231122-000102.123456789".len(), "{a}");
        assert!(a <= b, "{a} {b}");
    }

    #[tokio::test]
    async fn only_the_newest_rotated_files_stay() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("0.log");
        std::fs::write(&log, b"current").unwrap();
        for s in [
            "20231122-000001.1",
            "20231122-000002.1",
            "20231122-000003.1",
        ] {
            std::fs::write(dir.path().join(format!("0.log.{s}")), b"old").unwrap();
        }
        std::fs::write(dir.path().join("1.log.20231122-000000.1"), b"other").unwrap();
        remove_oldest(&log, 2).await;
        let mut left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(
            left,
            [
                "0.log",
                "0.log.20231122-000002.1",
                "0.log.20231122-000003.1",
                "1.log.20231122-000000.1"
            ]
        );
    }
}
