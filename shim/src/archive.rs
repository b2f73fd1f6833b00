//! Image archives for air-gapped nodes: an OCI archive (a tarred OCI layout) is used as it is;
//! a Docker archive (`docker save`: `manifest.json`, a config and layer tars) is turned into an
//! OCI layout, so both import through the same path.

use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use std::collections::HashMap;

use oci_spec::image::{Descriptor, ImageIndexBuilder, ImageManifestBuilder, MediaType};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::oci_layout::REF_NAME;
use crate::registry::manifest::{OCI_CONFIG, OCI_LAYER_GZIP, OCI_LAYER_TAR, descriptor};

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
    /// A document of the new layout could not be built.
    #[error("building the OCI layout: {0}")]
    Build(String),
    /// `manifest.json` names a file that is not a plain file inside the archive.
    #[error("{archive}: manifest.json names {member:?}, which {reason}")]
    Member {
        archive: PathBuf,
        member: String,
        reason: &'static str,
    },
}

fn build_error(e: impl std::fmt::Display) -> ArchiveError {
    ArchiveError::Build(e.to_string())
}

/// Compact JSON with the keys in sorted order, as the layouts we wrote before oci-spec's
/// types were used, so the same archive keeps giving the same manifest digest.
fn sorted_json(doc: &impl Serialize) -> Result<String, ArchiveError> {
    Ok(serde_json::to_value(doc).map_err(build_error)?.to_string())
}

fn io_at(path: &Path) -> impl FnOnce(io::Error) -> ArchiveError + '_ {
    move |source| ArchiveError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// One image of `docker save`'s `manifest.json`: a Docker archive format that oci-spec does
/// not model (it is not a registry or layout document), so it stays ours.
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
    let member = |name: &str| archive_member(archive, &raw, name);
    for entry in entries {
        let config = add_blob(&member(&entry.config)?, &blobs)?;
        let mut layers = Vec::new();
        for layer in &entry.layers {
            let path = member(layer)?;
            // Sniff before add_blob moves the file into the layout.
            let gzip = starts_with_gzip_magic(&path)?;
            let (digest, size) = add_blob(&path, &blobs)?;
            let media_type = if gzip { OCI_LAYER_GZIP } else { OCI_LAYER_TAR };
            layers.push(descriptor(media_type, &digest, size).map_err(ArchiveError::Build)?);
        }
        let manifest = ImageManifestBuilder::default()
            .schema_version(2u32)
            .media_type(MediaType::ImageManifest)
            .config(descriptor(OCI_CONFIG, &config.0, config.1).map_err(ArchiveError::Build)?)
            .layers(layers)
            .build()
            .map_err(build_error)?;
        let manifest = sorted_json(&manifest)?;
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
        let size = u64::try_from(manifest.len()).map_err(build_error)?;
        for tag in tags {
            let mut desc: Descriptor = descriptor(MediaType::ImageManifest.as_ref(), &digest, size)
                .map_err(ArchiveError::Build)?;
            if let Some(tag) = tag {
                desc.set_annotations(Some(HashMap::from([(REF_NAME.to_string(), tag)])));
            }
            index.push(desc);
        }
    }
    let index_json = ImageIndexBuilder::default()
        .schema_version(2u32)
        .media_type(MediaType::ImageIndex)
        .manifests(index)
        .build()
        .map_err(build_error)?;
    let path = layout.join("index.json");
    std::fs::write(&path, sorted_json(&index_json)?).map_err(io_at(&path))?;
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

/// The file `name` of `manifest.json` in the unpacked archive `raw`. A hostile archive may name
/// `/etc/shadow`, `../../x`, or a member that is a symlink to either: moving such a file into
/// the layout would take it from the host, so only a plain file inside `raw` is accepted.
fn archive_member(archive: &Path, raw: &Path, name: &str) -> Result<PathBuf, ArchiveError> {
    let refuse = |reason| ArchiveError::Member {
        archive: archive.to_path_buf(),
        member: name.to_string(),
        reason,
    };
    let relative = Path::new(name);
    if relative.as_os_str().is_empty()
        || !relative
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)))
    {
        return Err(refuse("is not a relative path without '..'"));
    }
    let path = raw.join(relative);
    match std::fs::symlink_metadata(&path) {
        Ok(m) if m.file_type().is_file() => {}
        Ok(_) => return Err(refuse("is not a plain file (a symlink, a directory, ...)")),
        Err(_) => return Err(refuse("is not in the archive")),
    }
    // A directory on the way may be a symlink out of the archive.
    let inside = match (std::fs::canonicalize(&path), std::fs::canonicalize(raw)) {
        (Ok(p), Ok(r)) => p.starts_with(r),
        _ => false,
    };
    if !inside {
        return Err(refuse("leads out of the archive"));
    }
    Ok(path)
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn tar_with(files: &[(&str, &[u8])]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (name, data) in files {
            let mut h = tar::Header::new_gnu();
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            h.set_cksum();
            b.append_data(&mut h, name, *data).unwrap();
        }
        b.into_inner().unwrap()
    }

    fn sha(data: &[u8]) -> String {
        format!("sha256:{}", hex::encode(Sha256::digest(data)))
    }

    #[test]
    fn a_manifest_naming_files_outside_the_archive_is_refused_and_they_stay() {
        let dir = tempfile::tempdir().unwrap();
        let host = dir.path().join("host-file");
        std::fs::write(&host, "host only").unwrap();
        let mut b = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Symlink);
        h.set_size(0);
        h.set_mode(0o777);
        b.append_link(&mut h, "link.json", &host).unwrap();
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Symlink);
        h.set_size(0);
        h.set_mode(0o777);
        b.append_link(&mut h, "out", dir.path()).unwrap();
        for (name, data) in [("c.json", &b"{}"[..]), ("l.tar", &b""[..])] {
            let mut h = tar::Header::new_gnu();
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            h.set_cksum();
            b.append_data(&mut h, name, data).unwrap();
        }
        let base = b.into_inner().unwrap();
        let host_str = host.display().to_string();
        for (config, layer, why) in [
            (host_str.as_str(), "l.tar", "relative path"),
            ("../../host-file", "l.tar", "relative path"),
            ("link.json", "l.tar", "plain file"),
            ("c.json", "out/host-file", "leads out"),
            ("c.json", "missing.tar", "not in the archive"),
        ] {
            let manifest = serde_json::json!([{"Config": config, "Layers": [layer]}]).to_string();
            let mut b = tar::Builder::new(Vec::new());
            let mut h = tar::Header::new_gnu();
            h.set_size(manifest.len() as u64);
            h.set_mode(0o644);
            h.set_cksum();
            b.append_data(&mut h, "manifest.json", manifest.as_bytes())
                .unwrap();
            let mut bytes = b.into_inner().unwrap();
            // The members after manifest.json: the archives' entries end where the builder's
            // two zero blocks start.
            bytes.truncate(bytes.len() - 1024);
            bytes.extend_from_slice(&base);
            let work = tempfile::tempdir().unwrap();
            let path = work.path().join("a.tar");
            std::fs::write(&path, &bytes).unwrap();
            let err = to_layout(&path, work.path()).unwrap_err().to_string();
            assert!(err.contains(why), "{config} {layer}: {err}");
            assert_eq!(std::fs::read_to_string(&host).unwrap(), "host only");
        }
    }

    #[test]
    fn docker_archives_become_the_same_layout_bytes_as_before() {
        let dir = tempfile::tempdir().unwrap();
        let config = br#"{"architecture":"amd64","os":"linux"}"#;
        let layer = tar_with(&[("hello", b"hi")]);
        let manifest_json = serde_json::json!([
            {"Config": "c.json", "RepoTags": ["x:1", "y:2"], "Layers": ["l/layer.tar"]}
        ])
        .to_string();
        let archive = tar_with(&[
            ("manifest.json", manifest_json.as_bytes()),
            ("c.json", config),
            ("l/layer.tar", &layer),
        ]);
        let path = dir.path().join("a.tar");
        std::fs::write(&path, archive).unwrap();
        let layout = to_layout(&path, dir.path()).unwrap();

        // What the hand-built JSON of earlier versions wrote, byte for byte.
        let want_manifest = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": OCI_CONFIG, "digest": sha(config), "size": config.len()},
            "layers": [{"mediaType": OCI_LAYER_TAR, "digest": sha(&layer), "size": layer.len()}],
        })
        .to_string();
        let manifest_digest = sha(want_manifest.as_bytes());
        let got = std::fs::read(layout.join("blobs/sha256").join(&manifest_digest[7..])).unwrap();
        assert_eq!(String::from_utf8(got).unwrap(), want_manifest);
        let desc = |tag: &str| {
            serde_json::json!({
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": manifest_digest, "size": want_manifest.len(),
                "annotations": {REF_NAME: tag},
            })
        };
        let want_index = serde_json::json!({
            "schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [desc("x:1"), desc("y:2")],
        })
        .to_string();
        let got = std::fs::read_to_string(layout.join("index.json")).unwrap();
        assert_eq!(got, want_index);
    }
}
