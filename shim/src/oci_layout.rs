//! OCI image layouts (`oci-layout`, `index.json`, `blobs/<alg>/<hex>`): reading them and
//! importing their images into containerd, for air-gapped nodes and for tests.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ferrolet_proto::containerd::Containerd;
use ferrolet_proto::containerd::services::v1::CreateRequest as CreateLeaseRequest;
use ferrolet_proto::containerd::services::v1::{
    CreateImageRequest, DeleteRequest as DeleteLeaseRequest, Image, UpdateImageRequest,
};
use ferrolet_proto::containerd::types::Descriptor as CdDescriptor;
use serde::Deserialize;
use tokio::io::AsyncReadExt;
use tonic::Code;

use crate::container::log::civil_from_days;
use crate::content::{self, ContentError, Opened, Writer};

/// Annotation that names a manifest's tag inside a layout's index.
pub const REF_NAME: &str = "org.opencontainers.image.ref.name";
/// containerd label that keeps a lease alive only until this time, so a crashed import
/// cannot pin content forever.
const LEASE_EXPIRE: &str = "containerd.io/gc.expire";

/// Errors reading or importing a layout.
#[derive(Debug, thiserror::Error)]
pub enum LayoutError {
    /// A file of the layout could not be read.
    #[error("reading {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A JSON document of the layout is malformed.
    #[error("parsing {path}: {source}")]
    Json {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    /// A digest is not `sha256:<64 hex>`.
    #[error("{digest:?} in {path} is not a sha256 digest")]
    BadDigest { path: PathBuf, digest: String },
    /// The content store refused a blob.
    #[error(transparent)]
    Content(#[from] ContentError),
    /// containerd refused an image or lease call.
    #[error("containerd: {op} {name}: {status}")]
    Rpc {
        op: &'static str,
        name: String,
        #[source]
        status: tonic::Status,
    },
}

/// An OCI content descriptor.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    /// Media type of the referenced blob.
    pub media_type: String,
    /// `sha256:<hex>`.
    pub digest: String,
    /// Size in bytes.
    pub size: i64,
    /// Free-form annotations (the tag lives here in an index).
    #[serde(default)]
    pub annotations: HashMap<String, String>,
}

impl Descriptor {
    fn to_containerd(&self) -> CdDescriptor {
        CdDescriptor {
            media_type: self.media_type.clone(),
            digest: self.digest.clone(),
            size: self.size,
            annotations: HashMap::new(),
        }
    }
}

#[derive(Deserialize)]
struct Index {
    manifests: Vec<Descriptor>,
}

#[derive(Deserialize)]
struct Manifest {
    config: Descriptor,
    layers: Vec<Descriptor>,
}

/// An image found in a layout: the tag it carries and its manifest.
#[derive(Clone, Debug)]
pub struct LayoutImage {
    /// The `org.opencontainers.image.ref.name` annotation, when present.
    pub tag: Option<String>,
    /// Descriptor of the image manifest.
    pub manifest: Descriptor,
}

/// A readable OCI image layout directory.
#[derive(Clone, Debug)]
pub struct Layout {
    dir: PathBuf,
}

impl Layout {
    /// Opens the layout at `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    /// Path of the blob with `digest`.
    pub fn blob_path(&self, digest: &str) -> Result<PathBuf, LayoutError> {
        let hex = digest
            .strip_prefix("sha256:")
            .filter(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
            .ok_or_else(|| LayoutError::BadDigest {
                path: self.dir.join("index.json"),
                digest: digest.to_string(),
            })?;
        Ok(self.dir.join("blobs/sha256").join(hex))
    }

    async fn read(&self, path: &Path) -> Result<Vec<u8>, LayoutError> {
        tokio::fs::read(path)
            .await
            .map_err(|source| LayoutError::Io {
                path: path.to_path_buf(),
                source,
            })
    }

    async fn read_json<T: for<'de> Deserialize<'de>>(&self, path: &Path) -> Result<T, LayoutError> {
        let bytes = self.read(path).await?;
        serde_json::from_slice(&bytes).map_err(|source| LayoutError::Json {
            path: path.to_path_buf(),
            source,
        })
    }

    /// The images listed in `index.json`.
    pub async fn images(&self) -> Result<Vec<LayoutImage>, LayoutError> {
        let index: Index = self.read_json(&self.dir.join("index.json")).await?;
        Ok(index
            .manifests
            .into_iter()
            .map(|m| LayoutImage {
                tag: m.annotations.get(REF_NAME).cloned(),
                manifest: m,
            })
            .collect())
    }

    /// Streams a blob from disk into the content store.
    async fn copy_blob(
        &self,
        cd: &Containerd,
        desc: &Descriptor,
        labels: HashMap<String, String>,
    ) -> Result<(), LayoutError> {
        let path = self.blob_path(&desc.digest)?;
        let reference = format!("ferrolet-import-{}", desc.digest);
        let mut writer = match Writer::open(cd, &reference, &desc.digest, desc.size).await? {
            Opened::Exists => return Ok(()),
            Opened::Writing(w) => w,
        };
        let io = |source| LayoutError::Io {
            path: path.clone(),
            source,
        };
        let mut file = tokio::fs::File::open(&path).await.map_err(io)?;
        let mut buf = vec![0u8; content::CHUNK];
        loop {
            let n = file.read(&mut buf).await.map_err(io)?;
            if n == 0 {
                break;
            }
            writer.write(&buf[..n]).await?;
        }
        writer.commit(labels).await?;
        Ok(())
    }

    /// Imports one image into containerd under `name`: its content (see
    /// [`Layout::import_content`]) and an image record, under a temporary lease.
    pub async fn import(
        &self,
        cd: &Containerd,
        image: &LayoutImage,
        name: &str,
    ) -> Result<(), LayoutError> {
        let lease = Lease::create(cd, "import").await?;
        let leased = cd.with_lease(&lease.id).map_err(|e| LayoutError::Rpc {
            op: "lease",
            name: lease.id.clone(),
            status: tonic::Status::internal(e.to_string()),
        })?;
        let result = match self.import_content(&leased, image).await {
            Ok(target) => put_image_labelled(cd, name, target, HashMap::new()).await,
            Err(e) => Err(e),
        };
        let released = lease.delete(cd).await;
        result.and(released)
    }

    /// Writes every blob of `image` into the content store, manifest last and labelled so
    /// that containerd's GC keeps its config and layers while the manifest is referenced.
    /// Call it with a leased client. Returns the manifest's descriptor.
    pub async fn import_content(
        &self,
        cd: &Containerd,
        image: &LayoutImage,
    ) -> Result<CdDescriptor, LayoutError> {
        let manifest_path = self.blob_path(&image.manifest.digest)?;
        let manifest: Manifest = self.read_json(&manifest_path).await?;
        let mut gc_refs = HashMap::new();
        gc_refs.insert(
            "containerd.io/gc.ref.content.config".to_string(),
            manifest.config.digest.clone(),
        );
        self.copy_blob(cd, &manifest.config, HashMap::new()).await?;
        for (i, layer) in manifest.layers.iter().enumerate() {
            gc_refs.insert(
                format!("containerd.io/gc.ref.content.l.{i}"),
                layer.digest.clone(),
            );
            self.copy_blob(cd, layer, HashMap::new()).await?;
        }
        let manifest_bytes = self.read(&manifest_path).await?;
        content::write_bytes(cd, &image.manifest.digest, &manifest_bytes, gc_refs).await?;
        Ok(image.manifest.to_containerd())
    }
}

/// Creates the image record with `labels`, or points an existing one at the new target.
pub async fn put_image_labelled(
    cd: &Containerd,
    name: &str,
    target: CdDescriptor,
    labels: HashMap<String, String>,
) -> Result<(), LayoutError> {
    let record = Image {
        name: name.to_string(),
        target: Some(target),
        labels,
        ..Default::default()
    };
    let rpc = |op, status| LayoutError::Rpc {
        op,
        name: name.to_string(),
        status,
    };
    match cd
        .images()
        .create(CreateImageRequest {
            image: Some(record.clone()),
            source_date_epoch: None,
        })
        .await
    {
        Ok(_) => Ok(()),
        Err(s) if s.code() == Code::AlreadyExists => cd
            .images()
            .update(UpdateImageRequest {
                image: Some(record),
                update_mask: None,
                source_date_epoch: None,
            })
            .await
            .map(|_| ())
            .map_err(|s| rpc("update image", s)),
        Err(s) => Err(rpc("create image", s)),
    }
}

/// A containerd lease that expires by itself if we never get to delete it.
pub struct Lease {
    /// The lease id, for the `containerd-lease` header.
    pub id: String,
}

impl Lease {
    /// Creates a lease `ferrolet-<purpose>-<unique>` that expires after an hour.
    pub async fn create(cd: &Containerd, purpose: &str) -> Result<Self, LayoutError> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO);
        let id = format!(
            "ferrolet-{purpose}-{}-{}",
            now.as_nanos(),
            std::process::id()
        );
        let expire = format_rfc3339(now + Duration::from_secs(3600));
        let labels = HashMap::from([(LEASE_EXPIRE.to_string(), expire)]);
        cd.leases()
            .create(CreateLeaseRequest {
                id: id.clone(),
                labels,
            })
            .await
            .map_err(|status| LayoutError::Rpc {
                op: "create lease",
                name: id.clone(),
                status,
            })?;
        Ok(Self { id })
    }

    /// Deletes the lease, letting containerd collect whatever nothing else references at its
    /// next garbage collection.
    pub async fn delete(self, cd: &Containerd) -> Result<(), LayoutError> {
        self.delete_with(cd, false).await
    }

    /// Deletes the lease; with `collect`, containerd garbage-collects before answering (after a
    /// failure, so that what the lease held is gone when the caller returns).
    pub async fn delete_with(self, cd: &Containerd, collect: bool) -> Result<(), LayoutError> {
        match cd
            .leases()
            .delete(DeleteLeaseRequest {
                id: self.id.clone(),
                sync: collect,
            })
            .await
        {
            Ok(_) => Ok(()),
            Err(s) if s.code() == Code::NotFound => Ok(()),
            Err(status) => Err(LayoutError::Rpc {
                op: "delete lease",
                name: self.id,
                status,
            }),
        }
    }
}

/// Formats a time since the epoch as RFC 3339 UTC (what containerd's `gc.expire` expects).
fn format_rfc3339(since_epoch: Duration) -> String {
    let secs = since_epoch.as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_matches_known_instants() {
        assert_eq!(format_rfc3339(Duration::ZERO), "1970-01-01T00:00:00Z");
        assert_eq!(
            format_rfc3339(Duration::from_secs(951_782_400)),
            "2000-02-29T00:00:00Z"
        );
        assert_eq!(
            format_rfc3339(Duration::from_secs(1_795_317_296)),
            "2026-11-22T03:14:56Z"
        );
    }

    #[test]
    fn blob_paths_reject_bad_digests() {
        let l = Layout::new("/x");
        assert!(l.blob_path("sha256:../../etc/passwd").is_err());
        let hex = "a".repeat(64);
        assert_eq!(
            l.blob_path(&format!("sha256:{hex}")).unwrap(),
            PathBuf::from(format!("/x/blobs/sha256/{hex}"))
        );
    }
}
