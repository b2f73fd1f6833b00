//! Unpacking: each layer is applied (containerd's Diff.Apply) onto a snapshot prepared on its
//! parent's, and committed under its chain id, so identical layer stacks are shared across
//! images and containers start from the top one.

use std::collections::HashMap;
use std::time::{SystemTime, UNIX_EPOCH};

use ferrolet_proto::containerd::Containerd;
use ferrolet_proto::containerd::services::v1::ApplyRequest;
use ferrolet_proto::containerd::services::v1::snapshots::{
    CommitSnapshotRequest, PrepareSnapshotRequest, RemoveSnapshotRequest, StatSnapshotRequest,
};
use ferrolet_proto::containerd::types::Descriptor as CdDescriptor;
use tonic::Code;

use super::error::ImageError;
use crate::registry::DescriptorExt;
use crate::registry::manifest::Descriptor;

/// Label containerd's unpacker puts on a snapshot to name the chain it belongs to.
const SNAPSHOT_REF_LABEL: &str = "containerd.io/snapshot.ref";

/// Makes sure the snapshot chain for `layers` exists in `snapshotter`. Call it with a leased
/// client: half-applied snapshots must stay collectable if we fail.
pub async fn unpack(
    cd: &Containerd,
    snapshotter: &str,
    image: &str,
    layers: &[Descriptor],
    diff_ids: &[String],
    chain_ids: &[String],
) -> Result<(), ImageError> {
    if layers.len() != diff_ids.len() || diff_ids.len() != chain_ids.len() {
        return Err(ImageError::Malformed {
            image: image.to_string(),
            reason: format!(
                "{} layers but {} diff ids in the config",
                layers.len(),
                diff_ids.len()
            ),
        });
    }
    // Find the deepest chain already present: everything below it is there too.
    let mut start = 0;
    for i in (0..chain_ids.len()).rev() {
        if exists(cd, snapshotter, &chain_ids[i]).await? {
            start = i + 1;
            break;
        }
    }
    for i in start..layers.len() {
        let parent = if i == 0 {
            ""
        } else {
            chain_ids[i - 1].as_str()
        };
        apply_layer(
            cd,
            snapshotter,
            image,
            &layers[i],
            &diff_ids[i],
            &chain_ids[i],
            parent,
        )
        .await?;
    }
    Ok(())
}

async fn exists(cd: &Containerd, snapshotter: &str, key: &str) -> Result<bool, ImageError> {
    match cd
        .snapshots()
        .stat(StatSnapshotRequest {
            snapshotter: snapshotter.to_string(),
            key: key.to_string(),
        })
        .await
    {
        Ok(_) => Ok(true),
        Err(s) if s.code() == Code::NotFound => Ok(false),
        Err(s) => Err(ImageError::containerd("stat snapshot", key)(s)),
    }
}

async fn apply_layer(
    cd: &Containerd,
    snapshotter: &str,
    image: &str,
    layer: &Descriptor,
    diff_id: &str,
    chain_id: &str,
    parent: &str,
) -> Result<(), ImageError> {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let key = format!("extract-{nanos}-{chain_id}");
    let labels = HashMap::from([(SNAPSHOT_REF_LABEL.to_string(), chain_id.to_string())]);
    let prepared = cd
        .snapshots()
        .prepare(PrepareSnapshotRequest {
            snapshotter: snapshotter.to_string(),
            key: key.clone(),
            parent: parent.to_string(),
            labels: labels.clone(),
        })
        .await;
    let mounts = match prepared {
        Ok(r) => r.into_inner().mounts,
        // The `snapshot.ref` label makes containerd refuse when the chain is already committed:
        // a concurrent pull of an image sharing this layer got there first.
        Err(s) if s.code() == Code::AlreadyExists => return Ok(()),
        Err(s) => return Err(ImageError::containerd("prepare snapshot", chain_id)(s)),
    };
    let result = async {
        let applied = cd
            .diff()
            .apply(ApplyRequest {
                diff: Some(CdDescriptor {
                    media_type: layer.media_type_str().to_string(),
                    digest: layer.digest_str().to_string(),
                    size: layer.size_i64(),
                    annotations: HashMap::new(),
                }),
                mounts,
                payloads: HashMap::new(),
                sync_fs: false,
            })
            .await
            .map_err(ImageError::containerd("apply layer", layer.digest_str()))?
            .into_inner()
            .applied
            .map(|d| d.digest)
            .unwrap_or_default();
        if applied != diff_id {
            return Err(ImageError::DiffIdMismatch {
                image: image.to_string(),
                layer: layer.digest_str().to_string(),
                got: applied,
                want: diff_id.to_string(),
            });
        }
        match cd
            .snapshots()
            .commit(CommitSnapshotRequest {
                snapshotter: snapshotter.to_string(),
                name: chain_id.to_string(),
                key: key.clone(),
                labels,
            })
            .await
        {
            Ok(_) => Ok(()),
            Err(s) => Err(ImageError::containerd("commit snapshot", chain_id)(s)),
        }
    }
    .await;
    // AlreadyExists at commit: a concurrent pull of an image sharing this layer committed the
    // chain first. That is success, but our active snapshot must still go.
    let raced = matches!(&result, Err(ImageError::Containerd { status, .. }) if status.code() == Code::AlreadyExists);
    if result.is_err() {
        // The active snapshot is ours alone; drop it now rather than waiting for GC.
        let _ = cd
            .snapshots()
            .remove(RemoveSnapshotRequest {
                snapshotter: snapshotter.to_string(),
                key,
            })
            .await;
    }
    if raced { Ok(()) } else { result }
}
