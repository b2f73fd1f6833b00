//! OCI image layouts (`oci-layout`, `index.json`, `blobs/<alg>/<hex>`): reading them and
//! importing their images into containerd, for air-gapped nodes and for tests.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use ferrolet_proto::containerd::Containerd;
use ferrolet_proto::containerd::services::v1::{CreateImageRequest, Image, UpdateImageRequest};
use ferrolet_proto::containerd::types::Descriptor as CdDescriptor;
use oci_spec::image::{Descriptor, ImageIndex, ImageManifest};
use serde::Deserialize;
use tokio::io::AsyncReadExt;
use tonic::Code;

use crate::content::{self, ContentError, Opened, Writer};
use crate::lease::{Lease, LeaseError};
use crate::registry::DescriptorExt;

/// Annotation that names a manifest's tag inside a layout's index.
pub const REF_NAME: &str = "org.opencontainers.image.ref.name";

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
    /// The import's lease could not be made or released.
    #[error(transparent)]
    Lease(#[from] LeaseError),
    /// containerd refused an image call.
    #[error("containerd: {op} {name}: {status}")]
    Rpc {
        op: &'static str,
        name: String,
        #[source]
        status: tonic::Status,
    },
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

    /// Reads an index or manifest. oci-spec's types insist on `schemaVersion`, which we never
    /// needed to read a layout: a document without one is taken as version 2.
    async fn read_json<T: for<'de> Deserialize<'de>>(&self, path: &Path) -> Result<T, LayoutError> {
        let bytes = self.read(path).await?;
        let json = |source| LayoutError::Json {
            path: path.to_path_buf(),
            source,
        };
        let mut doc: serde_json::Value = serde_json::from_slice(&bytes).map_err(json)?;
        if let Some(doc) = doc.as_object_mut() {
            doc.entry("schemaVersion").or_insert(2.into());
        }
        serde_json::from_value(doc).map_err(json)
    }

    /// The images listed in `index.json`.
    pub async fn images(&self) -> Result<Vec<LayoutImage>, LayoutError> {
        let index: ImageIndex = self.read_json(&self.dir.join("index.json")).await?;
        Ok(index
            .manifests()
            .iter()
            .map(|m| LayoutImage {
                tag: m
                    .annotations()
                    .as_ref()
                    .and_then(|a| a.get(REF_NAME))
                    .cloned(),
                manifest: m.clone(),
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
        let digest = desc.digest_str();
        let path = self.blob_path(digest)?;
        let reference = format!("ferrolet-import-{digest}");
        let mut writer = match Writer::open(cd, &reference, digest, desc.size_i64()).await? {
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
        result.and(released.map_err(LayoutError::from))
    }

    /// Writes every blob of `image` into the content store, manifest last and labelled so
    /// that containerd's GC keeps its config and layers while the manifest is referenced.
    /// Call it with a leased client. Returns the manifest's descriptor.
    pub async fn import_content(
        &self,
        cd: &Containerd,
        image: &LayoutImage,
    ) -> Result<CdDescriptor, LayoutError> {
        let manifest_path = self.blob_path(image.manifest.digest_str())?;
        let manifest: ImageManifest = self.read_json(&manifest_path).await?;
        let mut gc_refs = HashMap::new();
        gc_refs.insert(
            "containerd.io/gc.ref.content.config".to_string(),
            manifest.config().digest_str().to_string(),
        );
        self.copy_blob(cd, manifest.config(), HashMap::new())
            .await?;
        for (i, layer) in manifest.layers().iter().enumerate() {
            gc_refs.insert(
                format!("containerd.io/gc.ref.content.l.{i}"),
                layer.digest_str().to_string(),
            );
            self.copy_blob(cd, layer, HashMap::new()).await?;
        }
        let manifest_bytes = self.read(&manifest_path).await?;
        content::write_bytes(cd, image.manifest.digest_str(), &manifest_bytes, gc_refs).await?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn images_are_read_from_the_index_with_their_tags() {
        let dir = tempfile::tempdir().unwrap();
        let d = |c: char| format!("sha256:{}", c.to_string().repeat(64));
        let index = serde_json::json!({
            "manifests": [
                {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": d('a'),
                 "size": 7, "annotations": {REF_NAME: "v1"}},
                {"mediaType": "application/vnd.docker.distribution.manifest.v2+json",
                 "digest": d('b'), "size": 8},
            ]
        });
        std::fs::write(dir.path().join("index.json"), index.to_string()).unwrap();
        let images = Layout::new(dir.path()).images().await.unwrap();
        assert_eq!(images.len(), 2);
        assert_eq!(images[0].tag.as_deref(), Some("v1"));
        assert_eq!(images[0].manifest.digest_str(), d('a'));
        assert_eq!(images[0].manifest.size(), 7);
        assert_eq!(images[1].tag, None);
        let cd = images[1].manifest.to_containerd();
        assert_eq!(
            cd.media_type,
            "application/vnd.docker.distribution.manifest.v2+json"
        );
        assert_eq!((cd.digest.as_str(), cd.size), (d('b').as_str(), 8));

        std::fs::write(dir.path().join("index.json"), "{\"manifests\": 1}").unwrap();
        let e = Layout::new(dir.path()).images().await.unwrap_err();
        assert!(e.to_string().starts_with("parsing "), "{e}");
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
