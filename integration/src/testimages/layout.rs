//! OCI image layout writing: blobs by content address, then `index.json` last.

use std::collections::HashMap;
use std::fs::{self, Permissions};
use std::io::{self, BufWriter, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use flate2::{Compression, GzBuilder};
use oci_spec::image::{
    Descriptor, ImageIndexBuilder, ImageManifestBuilder, MediaType, Os, PlatformBuilder,
    Sha256Digest,
};
use serde::Serialize;
use sha2::{Digest, Sha256};
use tempfile::NamedTempFile;

use super::layer::{Hashing, Layer};
use super::{BuiltImage, Error, RunConfig, TAG, io_err};

const REF_NAME: &str = "org.opencontainers.image.ref.name";
const CREATED: &str = "1970-01-01T00:00:00Z";

/// The image config stays our own type: oci-spec's `Config` keeps labels in a `HashMap`, so
/// its serialisation would order them differently from run to run, and the config digest (the
/// image id the tests compare) must not change between builds of the same image.
#[derive(Serialize)]
struct ImageConfig<'a> {
    created: &'static str,
    architecture: &'static str,
    os: &'static str,
    config: &'a RunConfig,
    rootfs: RootFs,
    history: Vec<History>,
}

#[derive(Serialize)]
struct RootFs {
    #[serde(rename = "type")]
    kind: &'static str,
    diff_ids: Vec<String>,
}

#[derive(Serialize)]
struct History {
    created: &'static str,
    created_by: String,
}

/// OCI's name for the architecture busybox (and so every layer) was built for.
fn oci_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

/// The descriptor of the blob with sha256 `hex`.
fn descriptor(media_type: MediaType, hex: &str, size: u64) -> Result<Descriptor, Error> {
    let digest = Sha256Digest::from_str(hex).map_err(spec("descriptor"))?;
    Ok(Descriptor::new(media_type, size, digest))
}

fn spec(what: &'static str) -> impl FnOnce(oci_spec::OciSpecError) -> Error {
    move |source| Error::Spec { what, source }
}

fn json<T: Serialize>(what: &'static str, value: &T) -> Result<Vec<u8>, Error> {
    serde_json::to_vec(value).map_err(|source| Error::Json { what, source })
}

/// An OCI layout directory being written.
struct Layout {
    dir: PathBuf,
    blobs: PathBuf,
}

impl Layout {
    fn create(dir: PathBuf) -> Result<Self, Error> {
        let blobs = dir.join("blobs").join("sha256");
        fs::create_dir_all(&blobs).map_err(io_err("creating", &blobs))?;
        Ok(Self { dir, blobs })
    }

    /// A temp file next to where it will land, so the final rename is atomic.
    fn temp(&self, dir: &Path) -> Result<NamedTempFile, Error> {
        let tmp = NamedTempFile::new_in(dir).map_err(io_err("creating temp file in", dir))?;
        // Readers may be another user (containerd, skopeo under sudo); 0600 would lock them out.
        tmp.as_file()
            .set_permissions(Permissions::from_mode(0o644))
            .map_err(io_err("chmod", tmp.path()))?;
        Ok(tmp)
    }

    fn persist(tmp: NamedTempFile, path: PathBuf) -> Result<(), Error> {
        tmp.persist(&path).map_err(|e| Error::Io {
            what: "renaming to",
            path,
            source: e.error,
        })?;
        Ok(())
    }

    /// Writes `bytes` as a blob; returns its sha256 hex.
    fn put_bytes(&self, bytes: &[u8]) -> Result<String, Error> {
        let digest = hex::encode(Sha256::digest(bytes));
        let path = self.blobs.join(&digest);
        let mut tmp = self.temp(&self.blobs)?;
        tmp.write_all(bytes).map_err(io_err("writing", &path))?;
        Self::persist(tmp, path)?;
        Ok(digest)
    }

    /// Writes `layer` as a gzipped tar blob; returns (blob digest, blob size, diff id).
    fn put_layer(&self, layer: &Layer<'_>) -> Result<(String, u64, String), Error> {
        let tmp = self.temp(&self.blobs)?;
        let wrote = io_err("writing layer to", tmp.path());
        let file = Hashing::new(BufWriter::with_capacity(1 << 20, tmp.as_file()));
        // No name, mtime 0 and a fixed OS byte: nothing from this run leaks into the header.
        let gz = GzBuilder::new().operating_system(255).mtime(0);
        let gz = gz.write(file, Compression::new(layer.level));
        let result = layer.write_tar(gz).and_then(|(gz, diff_id, _)| {
            let (buffered, digest, size) = gz.finish()?.finish();
            buffered
                .into_inner()
                .map_err(io::IntoInnerError::into_error)?;
            Ok((digest, size, diff_id))
        });
        let (digest, size, diff_id) = result.map_err(wrote)?;
        Self::persist(tmp, self.blobs.join(&digest))?;
        Ok((digest, size, diff_id))
    }

    /// Writes a top-level file by temp file + rename, so readers see old or new, never half.
    fn put_file(&self, name: &str, bytes: &[u8]) -> Result<(), Error> {
        let path = self.dir.join(name);
        let mut tmp = self.temp(&self.dir)?;
        tmp.write_all(bytes).map_err(io_err("writing", &path))?;
        Self::persist(tmp, path)
    }
}

/// Writes `layers` and `config` as the OCI layout `dir`, tagged [`TAG`].
pub(super) fn write_image(
    dir: PathBuf,
    name: &str,
    layers: &[Layer<'_>],
    run_config: &RunConfig,
) -> Result<BuiltImage, Error> {
    let layout = Layout::create(dir)?;

    let mut layer_descs = Vec::new();
    let mut diff_ids = Vec::new();
    let mut history = Vec::new();
    for layer in layers {
        let (digest, size, diff_id) = layout.put_layer(layer)?;
        layer_descs.push(descriptor(MediaType::ImageLayerGzip, &digest, size)?);
        diff_ids.push(format!("sha256:{diff_id}"));
        let created_by = format!("ferrolet-testimages: {}", layer.created_by);
        history.push(History {
            created: CREATED,
            created_by,
        });
    }

    let config = ImageConfig {
        created: CREATED,
        architecture: oci_arch(),
        os: "linux",
        config: run_config,
        rootfs: RootFs {
            kind: "layers",
            diff_ids: diff_ids.clone(),
        },
        history,
    };
    let config = json("image config", &config)?;
    let config_digest = layout.put_bytes(&config)?;

    let manifest = ImageManifestBuilder::default()
        .schema_version(2u32)
        .media_type(MediaType::ImageManifest)
        .config(descriptor(
            MediaType::ImageConfig,
            &config_digest,
            config.len() as u64,
        )?)
        .layers(layer_descs)
        .build()
        .map_err(spec("manifest"))?;
    let layer_digests: Vec<String> = manifest
        .layers()
        .iter()
        .map(|l| l.digest().to_string())
        .collect();
    let layers_size: u64 = manifest.layers().iter().map(|l| l.size()).sum();
    let manifest = json("manifest", &manifest)?;
    let manifest_digest = layout.put_bytes(&manifest)?;

    let mut entry = descriptor(
        MediaType::ImageManifest,
        &manifest_digest,
        manifest.len() as u64,
    )?;
    let platform = PlatformBuilder::default()
        .architecture(oci_arch())
        .os(Os::Linux)
        .build()
        .map_err(spec("platform"))?;
    entry.set_platform(Some(platform));
    entry.set_annotations(Some(HashMap::from([(
        REF_NAME.to_string(),
        TAG.to_owned(),
    )])));
    let index = ImageIndexBuilder::default()
        .schema_version(2u32)
        .media_type(MediaType::ImageIndex)
        .manifests(vec![entry])
        .build()
        .map_err(spec("index"))?;
    layout.put_file("oci-layout", br#"{"imageLayoutVersion":"1.0.0"}"#)?;
    // Last, so a reader never sees an index naming blobs that are not there yet.
    layout.put_file("index.json", &json("index", &index)?)?;

    Ok(BuiltImage {
        name: name.to_owned(),
        tag: TAG.to_owned(),
        dir: layout.dir,
        manifest_digest: format!("sha256:{manifest_digest}"),
        config_digest: format!("sha256:{config_digest}"),
        layer_digests,
        diff_ids,
        size: manifest.len() as u64 + config.len() as u64 + layers_size,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn manifests_serialise_as_the_hand_written_types_did() {
        let (a, b) = ("a".repeat(64), "b".repeat(64));
        let manifest = ImageManifestBuilder::default()
            .schema_version(2u32)
            .media_type(MediaType::ImageManifest)
            .config(descriptor(MediaType::ImageConfig, &a, 10).unwrap())
            .layers(vec![descriptor(MediaType::ImageLayerGzip, &b, 20).unwrap()])
            .build()
            .unwrap();
        // Field for field what the removed structs wrote, in their order: the manifest digest
        // of a test image must not change with the types that build it.
        let want = format!(
            r#"{{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:{a}","size":10}},"layers":[{{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":"sha256:{b}","size":20}}]}}"#
        );
        assert_eq!(
            String::from_utf8(json("manifest", &manifest).unwrap()).unwrap(),
            want
        );
    }
}
