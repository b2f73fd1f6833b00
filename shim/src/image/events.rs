//! Keeps the image index in step with containerd when someone else changes image records
//! (`ferrolet-cri image import`, `ctr images ...`), by following containerd's event stream,
//! as containerd's CRI plugin does.

use std::collections::BTreeSet;
use std::time::Duration;

use ferrolet_proto::containerd::services::v1::{
    GetImageRequest, ImageCreate, ImageDelete, ImageUpdate, SubscribeRequest,
};
use ferrolet_proto::containerd::types::Envelope;
use ferrolet_proto::prost::Message;

use super::ImageService;
use super::records::{self, PINNED_LABEL};

/// Follows image events until the process ends, resubscribing (and re-reading every record,
/// since events may have been missed) whenever the stream breaks.
pub async fn follow(svc: ImageService) {
    let cd = svc.inner().containerd().clone();
    let filter = format!("namespace=={},topic~=\"^/images/\"", cd.namespace());
    loop {
        match cd
            .events()
            .subscribe(SubscribeRequest {
                filters: vec![filter.clone()],
            })
            .await
        {
            Ok(stream) => {
                let mut stream = stream.into_inner();
                resync(&svc).await;
                while let Ok(Some(envelope)) = stream.message().await {
                    apply(&svc, envelope).await;
                }
                tracing::warn!("containerd event stream ended; resubscribing");
            }
            Err(e) => tracing::warn!(error = %e, "subscribing to containerd image events"),
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

async fn resync(svc: &ImageService) {
    if let Err(e) = records::sync(svc.inner().containerd(), &svc.inner().store).await {
        tracing::warn!(error = %e, "re-reading image records");
    }
}

async fn apply(svc: &ImageService, envelope: Envelope) {
    let Some(event) = envelope.event else {
        return;
    };
    let name = match envelope.topic.as_str() {
        "/images/create" => ImageCreate::decode(event.value.as_slice()).map(|e| e.name),
        "/images/update" => ImageUpdate::decode(event.value.as_slice()).map(|e| e.name),
        "/images/delete" => {
            if let Ok(e) = ImageDelete::decode(event.value.as_slice()) {
                svc.inner().store.remove_name(&e.name);
            }
            return;
        }
        _ => return,
    };
    let Ok(name) = name else {
        return;
    };
    if records::is_id_name(&name) {
        return;
    }
    let cd = svc.inner().containerd();
    let Ok(record) = cd
        .images()
        .get(GetImageRequest { name: name.clone() })
        .await
        .map(|r| r.into_inner().image)
    else {
        return;
    };
    let Some(target) = record.as_ref().and_then(|r| r.target.clone()) else {
        return;
    };
    let names = BTreeSet::from([name.clone()]);
    // Our own pulls and imports already indexed what they wrote.
    if svc.inner().store.covers(&target.digest, &names) {
        return;
    }
    let pinned = record.is_some_and(|r| r.labels.get(PINNED_LABEL).is_some_and(|v| v == "pinned"));
    match records::describe(cd, target, names, pinned).await {
        Ok(image) => svc.inner().store.insert(image),
        Err(e) => tracing::warn!(image = %name, error = %e, "indexing an image created elsewhere"),
    }
}
