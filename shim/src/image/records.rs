//! containerd's side of images: the named records that point at manifests, and the content
//! they reference. CRI names an image three ways, as containerd's CRI plugin does: by tag
//! (`repo:tag`), by digest (`repo@sha256:...`) and by id (the config digest).

use std::collections::{BTreeSet, HashMap};

use ferrolet_proto::containerd::Containerd;
use ferrolet_proto::containerd::services::v1::{
    DeleteImageRequest, ListImagesRequest, ReadContentRequest,
};
use ferrolet_proto::containerd::types::Descriptor as CdDescriptor;
use tonic::Code;

use super::error::ImageError;
use super::store::{Image, Store};
use crate::image_config::{self, ImageConfig};
use crate::oci_layout;
use crate::registry::DescriptorExt;
use crate::registry::manifest::{
    Kind, current_platform, kind_of, parse_index, parse_manifest, platform_string, select_platform,
};

/// Label containerd's CRI plugin puts on the image records it manages.
pub const MANAGED_LABEL: &str = "io.cri-containerd.image";
/// Label marking an image that must never be removed (the sandbox image).
pub const PINNED_LABEL: &str = "io.cri-containerd.pinned";

/// Reads a whole blob from the content store.
pub async fn read_blob(cd: &Containerd, digest: &str) -> Result<Vec<u8>, ImageError> {
    let mut stream = cd
        .content()
        .read(ReadContentRequest {
            digest: digest.to_string(),
            offset: 0,
            size: 0,
        })
        .await
        .map_err(ImageError::containerd("read content", digest))?
        .into_inner();
    let mut data = Vec::new();
    while let Some(chunk) = stream
        .message()
        .await
        .map_err(ImageError::containerd("read content", digest))?
    {
        data.extend_from_slice(&chunk.data);
    }
    Ok(data)
}

fn parse<T: for<'de> serde::Deserialize<'de>>(
    image: &str,
    what: &str,
    bytes: &[u8],
) -> Result<T, ImageError> {
    serde_json::from_slice(bytes).map_err(|e| ImageError::Malformed {
        image: image.to_string(),
        reason: format!("{what}: {e}"),
    })
}

/// Builds the CRI view of the image whose records point at `target`.
pub async fn describe(
    cd: &Containerd,
    target: CdDescriptor,
    references: BTreeSet<String>,
    pinned: bool,
) -> Result<Image, ImageError> {
    let label = references
        .iter()
        .next()
        .cloned()
        .unwrap_or_else(|| target.digest.clone());
    let mut size = target.size.max(0) as u64;
    let mut manifest_desc = target.clone();
    if kind_of(&target.media_type) == Some(Kind::Index) {
        let entries = parse_index(&read_blob(cd, &target.digest).await?).map_err(|reason| {
            ImageError::Malformed {
                image: label.clone(),
                reason,
            }
        })?;
        let platform = current_platform();
        let chosen = select_platform(&entries, &platform).ok_or_else(|| ImageError::Malformed {
            image: label.clone(),
            reason: format!("index has no {} manifest", platform_string(&platform)),
        })?;
        manifest_desc = CdDescriptor {
            media_type: chosen.media_type_str().to_string(),
            digest: chosen.digest_str().to_string(),
            size: chosen.size_i64(),
            annotations: HashMap::new(),
        };
        size = size.saturating_add(chosen.size());
    }
    let manifest =
        parse_manifest(&read_blob(cd, &manifest_desc.digest).await?).map_err(|reason| {
            ImageError::Malformed {
                image: label.clone(),
                reason,
            }
        })?;
    let config_bytes = read_blob(cd, manifest.config().digest_str()).await?;
    let config: ImageConfig =
        image_config::parse(&config_bytes).map_err(|e| ImageError::Malformed {
            image: label.clone(),
            reason: format!("config: {e}"),
        })?;
    let config_json = parse(&label, "config", &config_bytes)?;
    // Sizes come from documents others wrote: saturate rather than overflow.
    size = manifest
        .layers()
        .iter()
        .fold(size.saturating_add(manifest.config().size()), |sum, l| {
            sum.saturating_add(l.size())
        });
    let chain_id = image_config::chain_ids(config.rootfs().diff_ids())
        .last()
        .cloned()
        .unwrap_or_default();
    Ok(Image {
        id: manifest.config().digest_str().to_string(),
        references,
        target,
        manifest_digest: manifest_desc.digest,
        layers: manifest.layers().clone(),
        chain_id,
        size,
        config,
        config_json,
        pinned,
    })
}

/// Brings `store` up to date with containerd's records (at start-up, and whenever the event
/// stream had to be re-established). Only images the store does not already index under the
/// same target and names are read from the content store, so a second pass costs one List.
/// Records that cannot be read (content missing, say) are skipped with a warning rather than
/// keeping the runtime from starting.
pub async fn sync(cd: &Containerd, store: &Store) -> Result<(), ImageError> {
    let records = cd
        .images()
        .list(ListImagesRequest::default())
        .await
        .map_err(ImageError::containerd("list images", ""))?
        .into_inner()
        .images;
    let mut groups: HashMap<String, (CdDescriptor, BTreeSet<String>, bool)> = HashMap::new();
    for record in records {
        let Some(target) = record.target else {
            continue;
        };
        let pinned = record
            .labels
            .get(PINNED_LABEL)
            .is_some_and(|v| v == "pinned");
        let entry = groups
            .entry(target.digest.clone())
            .or_insert_with(|| (target, BTreeSet::new(), false));
        entry.2 |= pinned;
        // The id-named record is how containerd's CRI keeps an image by id; it is not a name.
        if !is_id_name(&record.name) {
            entry.1.insert(record.name);
        }
    }
    for (digest, (target, refs, pinned)) in groups {
        if store.covers(&digest, &refs) {
            continue;
        }
        match describe(cd, target, refs, pinned).await {
            Ok(image) => store.insert(image),
            Err(e) => tracing::warn!(target = %digest, error = %e, "skipping unreadable image"),
        }
    }
    Ok(())
}

/// Whether a record name is an image id (`sha256:<64 hex>`) rather than a reference.
pub fn is_id_name(name: &str) -> bool {
    name.strip_prefix("sha256:")
        .is_some_and(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Creates or repoints the records `names` (and the id record) at `image.target`.
pub async fn put_names(cd: &Containerd, image: &Image) -> Result<(), ImageError> {
    let mut labels = HashMap::from([(MANAGED_LABEL.to_string(), "managed".to_string())]);
    if image.pinned {
        labels.insert(PINNED_LABEL.to_string(), "pinned".to_string());
    }
    for name in image.references.iter().chain(std::iter::once(&image.id)) {
        oci_layout::put_image_labelled(cd, name, image.target.clone(), labels.clone()).await?;
    }
    Ok(())
}

/// Deletes every record of `image`; the last deletion runs containerd's GC synchronously so
/// the content and snapshots go with it.
pub async fn delete_all(cd: &Containerd, image: &Image) -> Result<(), ImageError> {
    let names: Vec<&String> = image
        .references
        .iter()
        .chain(std::iter::once(&image.id))
        .collect();
    for (i, name) in names.iter().enumerate() {
        let sync = i + 1 == names.len();
        match cd
            .images()
            .delete(DeleteImageRequest {
                name: name.to_string(),
                sync,
                target: None,
            })
            .await
        {
            Ok(_) => {}
            Err(s) if s.code() == Code::NotFound => {}
            Err(s) => return Err(ImageError::containerd("delete image", name.as_str())(s)),
        }
    }
    Ok(())
}
