//! Image archives for air-gapped nodes: an OCI archive (a tarred OCI layout) is used as it is;
//! a Docker archive (`docker save`: `manifest.json`, a config and layer tars) is turned into an
//! OCI layout, so both import through the same path.

use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use sha2::{Digest, Sha256};

use crate::oci_layout::REF_NAME;
use crate::registry::manifest::{
    OCI_CONFIG, OCI_INDEX, OCI_LAYER_GZIP, OCI_LAYER_TAR, OCI_MANIFEST,
};

/// Why an archive cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// It is neither an OCI nor a Docker archive.
    #[error("{0} is neither an OCI archive (index.json) nor a Docker archive (manifest.json)")]
    Unknown(PathBuf),
    /// `manifest.json` is malformed.
    #[error("{path}: {source}")]
    Json {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
}

fn io_at(path: &Path) -> impl FnOnce(io::Error) -> ArchiveError + '_ {
    move |source| ArchiveError::Io {
        path: path.to_path_buf(),
        source,
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct DockerEntry {
    config: String,
    #[serde(default)]
    repo_tags: Vec<String>,
    layers: Vec<String>,
}

/// Unpacks `archive` under `dir` and returns the directory of an OCI layout holding its images.
/// Blocking: call it from `spawn_blocking`.
pub fn to_layout(archive: &Path, dir: &Path) -> Result<PathBuf, ArchiveError> {
    let raw = dir.join("archive");
    let file = File::open(archive).map_err(io_at(archive))?;
    tar::Archive::new(file)
        .unpack(&raw)
        .map_err(io_at(archive))?;
    if raw.join("index.json").is_file() {
        return Ok(raw);
    }
    let manifest_path = raw.join("manifest.json");
    if !manifest_path.is_file() {
        return Err(ArchiveError::Unknown(archive.to_path_buf()));
    }
    let text = std::fs::read(&manifest_path).map_err(io_at(&manifest_path))?;
    let entries: Vec<DockerEntry> =
        serde_json::from_slice(&text).map_err(|source| ArchiveError::Json {
            path: manifest_path.clone(),
            source,
        })?;
    let layout = dir.join("layout");
    let blobs = layout.join("blobs/sha256");
    std::fs::create_dir_all(&blobs).map_err(io_at(&blobs))?;
    let mut index = Vec::new();
    for entry in entries {
        let config = add_blob(&raw.join(&entry.config), &blobs)?;
        let mut layers = Vec::new();
        for layer in &entry.layers {
            let path = raw.join(layer);
            // Sniff before add_blob moves the file into the layout.
            let gzip = starts_with_gzip_magic(&path)?;
            let (digest, size) = add_blob(&path, &blobs)?;
            let media_type = if gzip { OCI_LAYER_GZIP } else { OCI_LAYER_TAR };
            layers
                .push(serde_json::json!({"mediaType": media_type, "digest": digest, "size": size}));
        }
        let manifest = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {"mediaType": OCI_CONFIG, "digest": config.0, "size": config.1},
            "layers": layers,
        })
        .to_string();
        let digest = format!(
            "sha256:{}",
            hex::encode(Sha256::digest(manifest.as_bytes()))
        );
        let path = blobs.join(&digest[7..]);
        std::fs::write(&path, &manifest).map_err(io_at(&path))?;
        let tags = if entry.repo_tags.is_empty() {
            vec![None]
        } else {
            entry.repo_tags.into_iter().map(Some).collect()
        };
        for tag in tags {
            let mut desc = serde_json::json!({
                "mediaType": OCI_MANIFEST, "digest": digest, "size": manifest.len(),
            });
            if let Some(tag) = tag {
                desc["annotations"] = serde_json::json!({ REF_NAME: tag });
            }
            index.push(desc);
        }
    }
    let index_json =
        serde_json::json!({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": index});
    let path = layout.join("index.json");
    std::fs::write(&path, index_json.to_string()).map_err(io_at(&path))?;
    let path = layout.join("oci-layout");
    std::fs::write(&path, r#"{"imageLayoutVersion":"1.0.0"}"#).map_err(io_at(&path))?;
    Ok(layout)
}

fn starts_with_gzip_magic(path: &Path) -> Result<bool, ArchiveError> {
    let mut magic = [0u8; 2];
    let mut f = File::open(path).map_err(io_at(path))?;
    let n = f.read(&mut magic).map_err(io_at(path))?;
    Ok(n == 2 && magic == [0x1f, 0x8b])
}

/// Hashes `src` and moves it into `blobs` under its digest; returns (digest, size).
fn add_blob(src: &Path, blobs: &Path) -> Result<(String, u64), ArchiveError> {
    let mut file = File::open(src).map_err(io_at(src))?;
    let mut hasher = Sha256::new();
    let size = io::copy(&mut file, &mut hasher).map_err(io_at(src))?;
    let hex = hex::encode(hasher.finalize());
    let dest = blobs.join(&hex);
    if !dest.exists() {
        std::fs::rename(src, &dest).map_err(io_at(&dest))?;
    }
    Ok((format!("sha256:{hex}"), size))
}
