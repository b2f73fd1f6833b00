//! The built-in sandbox image: the static `pause` program built with this crate, packed into a
//! one-layer image and imported at start-up, pinned, so a node runs pods without a registry.

use std::collections::{BTreeSet, HashMap};

use ferrolet_proto::containerd::types::Descriptor as CdDescriptor;
use sha2::{Digest, Sha256};

use super::error::ImageError;
use super::{ImageService, leased};
use crate::config::BUILTIN_PAUSE_IMAGE;
use crate::content;
use crate::lease::Lease;

/// The static pause binary.
pub const PAUSE_BINARY: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/pause"));

const LAYER_TYPE: &str = "application/vnd.oci.image.layer.v1.tar";
const CONFIG_TYPE: &str = "application/vnd.oci.image.config.v1+json";
const MANIFEST_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";

fn digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// The layer: `/pause`, owned by root, fixed mtime, so the image is the same every build of
/// the same binary.
fn layer() -> Result<Vec<u8>, std::io::Error> {
    let mut builder = tar::Builder::new(Vec::new());
    let mut header = tar::Header::new_ustar();
    header.set_path("pause")?;
    header.set_size(PAUSE_BINARY.len() as u64);
    header.set_mode(0o755);
    header.set_uid(0);
    header.set_gid(0);
    header.set_mtime(0);
    header.set_entry_type(tar::EntryType::Regular);
    header.set_cksum();
    builder.append(&header, PAUSE_BINARY)?;
    builder.into_inner()
}

/// The pause image's three blobs.
pub struct Blobs {
    /// The uncompressed layer tar.
    pub layer: Vec<u8>,
    /// The image config.
    pub config: Vec<u8>,
    /// The manifest.
    pub manifest: Vec<u8>,
}

/// Builds the pause image's blobs.
pub fn blobs() -> Result<Blobs, ImageError> {
    let layer = layer().map_err(|e| ImageError::Malformed {
        image: BUILTIN_PAUSE_IMAGE.into(),
        reason: format!("building the layer: {e}"),
    })?;
    let layer_digest = digest(&layer);
    let config = serde_json::json!({
        "architecture": "amd64",
        "os": "linux",
        "config": { "Entrypoint": ["/pause"], "User": "0:0" },
        "rootfs": { "type": "layers", "diff_ids": [layer_digest] },
    })
    .to_string()
    .into_bytes();
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": MANIFEST_TYPE,
        "config": { "mediaType": CONFIG_TYPE, "digest": digest(&config), "size": config.len() },
        "layers": [{ "mediaType": LAYER_TYPE, "digest": layer_digest, "size": layer.len() }],
    })
    .to_string()
    .into_bytes();
    Ok(Blobs {
        layer,
        config,
        manifest,
    })
}

/// Imports the pause image unless it is already there; returns its id.
pub async fn ensure(svc: &ImageService) -> Result<String, ImageError> {
    if let Some(image) = svc.resolve(BUILTIN_PAUSE_IMAGE)
        && image.pinned
    {
        return Ok(image.id);
    }
    let Blobs {
        layer,
        config,
        manifest,
    } = blobs()?;
    let cd = svc.inner().containerd().clone();
    let lease = Lease::create(&cd, "pause").await?;
    let result = async {
        let leased = leased(&cd, &lease.id)?;
        content::write_bytes(&leased, &digest(&layer), &layer, HashMap::new()).await?;
        content::write_bytes(&leased, &digest(&config), &config, HashMap::new()).await?;
        let refs = HashMap::from([
            (
                "containerd.io/gc.ref.content.config".to_string(),
                digest(&config),
            ),
            (
                "containerd.io/gc.ref.content.l.0".to_string(),
                digest(&layer),
            ),
        ]);
        content::write_bytes(&leased, &digest(&manifest), &manifest, refs).await?;
        let target = CdDescriptor {
            media_type: MANIFEST_TYPE.into(),
            digest: digest(&manifest),
            size: manifest.len() as i64,
            annotations: HashMap::new(),
        };
        svc.register(
            &leased,
            target,
            BTreeSet::from([BUILTIN_PAUSE_IMAGE.to_string()]),
            true,
        )
        .await
    }
    .await;
    lease.delete_with(&cd, result.is_err()).await?;
    let image = result?;
    tracing::info!(image = BUILTIN_PAUSE_IMAGE, id = %image.id, "built-in pause image ready");
    Ok(image.id)
}
