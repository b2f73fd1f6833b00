//! On-disk result cache, libcni's layout: `<root>/results/<network>-<containerID>-<ifname>`,
//! one JSON document per attachment (`kind: cniCacheV1`). Written atomically (temp file,
//! optional fsync, rename) after ADD; read by CHECK, DEL and GC; removed after DEL.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::{CniError, Result};

/// Default cache root (libcni's).
pub const DEFAULT_CACHE_DIR: &str = "/var/lib/cni";

const KIND: &str = "cniCacheV1";

/// One cached attachment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CachedAttachment {
    pub kind: String,
    #[serde(rename = "containerId")]
    pub container_id: String,
    #[serde(rename = "ifName")]
    pub ifname: String,
    #[serde(rename = "networkName")]
    pub network: String,
    #[serde(rename = "netns", default)]
    pub netns: String,
    #[serde(rename = "cniArgs", default)]
    pub cni_args: Vec<(String, String)>,
    #[serde(rename = "capabilityArgs", default)]
    pub capability_args: Map<String, Value>,
    /// The final ADD result, in the network's cniVersion wire form.
    #[serde(default)]
    pub result: Option<Value>,
}

impl CachedAttachment {
    pub fn new(network: &str, container_id: &str, ifname: &str) -> Self {
        CachedAttachment {
            kind: KIND.into(),
            container_id: container_id.into(),
            ifname: ifname.into(),
            network: network.into(),
            netns: String::new(),
            cni_args: Vec::new(),
            capability_args: Map::new(),
            result: None,
        }
    }
}

/// The cache rooted at a directory.
#[derive(Debug, Clone)]
pub struct ResultCache {
    root: PathBuf,
    fsync: bool,
}

static TMP_SEQ: AtomicU64 = AtomicU64::new(0);

impl ResultCache {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        ResultCache {
            root: root.into(),
            fsync: false,
        }
    }

    /// Also fsync each entry before the rename (durable across power loss, not just atomic).
    /// Off by default, like libcni: an fsync costs ~0.5 ms (p99 >10 ms) per ADD, and after a
    /// power loss the namespaces the entries describe are gone anyway (a torn entry reads as
    /// absent, so DEL still runs without `prevResult`).
    pub fn with_fsync(mut self, fsync: bool) -> Self {
        self.fsync = fsync;
        self
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn results_dir(&self) -> PathBuf {
        self.root.join("results")
    }

    /// The file of one attachment.
    pub fn path(&self, network: &str, container_id: &str, ifname: &str) -> PathBuf {
        self.results_dir()
            .join(format!("{network}-{container_id}-{ifname}"))
    }

    /// Write an entry atomically.
    pub async fn write(&self, entry: &CachedAttachment) -> Result<()> {
        let dir = self.results_dir();
        let path = self.path(&entry.network, &entry.container_id, &entry.ifname);
        let bytes = serde_json::to_vec(entry)
            .map_err(|e| CniError::io("encoding cache entry", std::io::Error::other(e)))?;
        let fsync = self.fsync;
        blocking(move || {
            use std::io::Write;
            std::fs::create_dir_all(&dir)
                .map_err(|e| CniError::io(format!("creating {}", dir.display()), e))?;
            let tmp = dir.join(format!(
                ".tmp-{}-{}",
                std::process::id(),
                TMP_SEQ.fetch_add(1, Ordering::Relaxed)
            ));
            let res = (|| {
                let mut f = std::fs::File::create(&tmp)?;
                f.write_all(&bytes)?;
                if fsync {
                    f.sync_all()?;
                }
                std::fs::rename(&tmp, &path)
            })();
            if let Err(e) = res {
                let _ = std::fs::remove_file(&tmp);
                return Err(CniError::io(format!("writing {}", path.display()), e));
            }
            Ok(())
        })
        .await
    }

    /// Read an entry; `None` when there is none.
    pub async fn read(
        &self,
        network: &str,
        container_id: &str,
        ifname: &str,
    ) -> Result<Option<CachedAttachment>> {
        let path = self.path(network, container_id, ifname);
        match tokio::fs::read(&path).await {
            Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| {
                CniError::io(
                    format!("decoding cache entry {}", path.display()),
                    std::io::Error::other(e),
                )
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(CniError::io(format!("reading {}", path.display()), e)),
        }
    }

    /// Remove an entry (absent is fine).
    pub async fn remove(&self, network: &str, container_id: &str, ifname: &str) -> Result<()> {
        let path = self.path(network, container_id, ifname);
        match tokio::fs::remove_file(&path).await {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(CniError::io(format!("removing {}", path.display()), e)),
        }
    }

    /// Every cached attachment of a network (unreadable entries are skipped).
    pub async fn list(&self, network: &str) -> Result<Vec<CachedAttachment>> {
        let dir = self.results_dir();
        let network = network.to_string();
        blocking(move || {
            let rd = match std::fs::read_dir(&dir) {
                Ok(rd) => rd,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
                Err(e) => return Err(CniError::io(format!("reading {}", dir.display()), e)),
            };
            let prefix = format!("{network}-");
            let mut out = Vec::new();
            for entry in rd.flatten() {
                let name = entry.file_name();
                if !name.to_string_lossy().starts_with(&prefix) {
                    continue;
                }
                let Ok(bytes) = std::fs::read(entry.path()) else {
                    continue;
                };
                if let Ok(a) = serde_json::from_slice::<CachedAttachment>(&bytes)
                    && a.network == network
                {
                    out.push(a);
                }
            }
            out.sort_by(|a, b| (&a.container_id, &a.ifname).cmp(&(&b.container_id, &b.ifname)));
            Ok(out)
        })
        .await
    }
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| CniError::io("cache worker", std::io::Error::other(e)))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn write_read_list_remove() {
        let d = tempfile::tempdir().unwrap();
        let c = ResultCache::new(d.path());
        assert!(c.read("n", "c1", "eth0").await.unwrap().is_none());
        let mut a = CachedAttachment::new("n", "c1", "eth0");
        a.result = Some(serde_json::json!({"cniVersion":"1.0.0"}));
        a.cni_args = vec![("K".into(), "V".into())];
        c.write(&a).await.unwrap();
        c.write(&CachedAttachment::new("n", "c2", "eth0"))
            .await
            .unwrap();
        c.write(&CachedAttachment::new("other", "c3", "eth0"))
            .await
            .unwrap();
        assert_eq!(c.read("n", "c1", "eth0").await.unwrap().unwrap(), a);
        assert!(d.path().join("results/n-c1-eth0").is_file());
        let l = c.list("n").await.unwrap();
        assert_eq!(
            l.iter()
                .map(|a| a.container_id.as_str())
                .collect::<Vec<_>>(),
            ["c1", "c2"]
        );
        c.remove("n", "c1", "eth0").await.unwrap();
        c.remove("n", "c1", "eth0").await.unwrap();
        assert!(c.read("n", "c1", "eth0").await.unwrap().is_none());
        // no temp files left behind
        let names: Vec<_> = std::fs::read_dir(d.path().join("results"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(names.iter().all(|n| !n.starts_with(".tmp")), "{names:?}");
    }
}
