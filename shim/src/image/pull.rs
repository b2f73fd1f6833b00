//! Pulling: registry → content store (under a lease, layers in parallel, each blob downloaded
//! once however many pulls want it) → unpack → image records.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use ferrolet_proto::containerd::Containerd;
use ferrolet_proto::containerd::services::v1::{AbortRequest, AddResourceRequest, Resource};
use ferrolet_proto::containerd::types::Descriptor as CdDescriptor;
use ferrolet_proto::cri;
use futures::future::{BoxFuture, FutureExt, Shared};
use futures::{StreamExt, TryStreamExt};
use tokio::sync::Semaphore;

use super::error::ImageError;
use super::{ImageService, leased};
use crate::content::{self, Opened, Writer};
use crate::lease::Lease;
use crate::reference::Reference;
use crate::registry::DescriptorExt;
use crate::registry::{Credentials, Session};

/// A download in progress, awaited by every pull that needs the same blob.
type Flight = Shared<BoxFuture<'static, Result<(), Arc<ImageError>>>>;

/// Downloads in flight, by digest, and the bound on how many run at once.
pub struct Flights {
    slots: Arc<Semaphore>,
    running: std::sync::Mutex<HashMap<String, Flight>>,
}

impl Flights {
    /// Allows `max` downloads at once.
    pub fn new(max: usize) -> Self {
        Self {
            slots: Arc::new(Semaphore::new(max.max(1))),
            running: std::sync::Mutex::new(HashMap::new()),
        }
    }
}

/// Removes a flight from the map when its waiter is done with it, unless a newer flight has
/// already taken its place.
struct ForgetFlight<'a> {
    flights: &'a Flights,
    digest: &'a str,
    flight: Flight,
}

impl Drop for ForgetFlight<'_> {
    fn drop(&mut self) {
        let mut running = self
            .flights
            .running
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if running
            .get(self.digest)
            .is_some_and(|f| f.ptr_eq(&self.flight))
        {
            running.remove(self.digest);
        }
    }
}

/// CRI's `AuthConfig` as registry credentials.
pub fn credentials(auth: cri::AuthConfig) -> Credentials {
    Credentials {
        username: auth.username,
        password: auth.password,
        auth: auth.auth,
        identity_token: auth.identity_token,
        registry_token: auth.registry_token,
    }
}

/// Byte counters of one pull, for the progress log.
struct Progress {
    image: String,
    layers: Vec<(String, u64, AtomicU64)>,
}

impl Progress {
    fn log(&self, started: Instant) {
        let done: u64 = self
            .layers
            .iter()
            .map(|l| l.2.load(Ordering::Relaxed))
            .sum();
        let total: u64 = self.layers.iter().map(|l| l.1).sum();
        let per_layer: Vec<String> = self
            .layers
            .iter()
            .map(|(d, t, n)| format!("{}:{}/{}", short(d), n.load(Ordering::Relaxed), t))
            .collect();
        tracing::info!(
            image = %self.image,
            done,
            total,
            elapsed_ms = started.elapsed().as_millis() as u64,
            layers = %per_layer.join(" "),
            "pull progress"
        );
    }
}

fn short(digest: &str) -> &str {
    let hex = digest.strip_prefix("sha256:").unwrap_or(digest);
    &hex[..hex.len().min(12)]
}

/// Pulls `reference` and returns the image id.
pub async fn pull(
    svc: &ImageService,
    reference: &str,
    credentials: Option<Credentials>,
) -> Result<String, ImageError> {
    let parsed = Reference::parse(reference).map_err(|source| ImageError::Reference {
        reference: reference.to_string(),
        source,
    })?;
    let started = Instant::now();
    let session = Arc::new(svc.inner().registry.session(&parsed, credentials));
    let resolved = session.resolve().await?;
    let cd = svc.inner().containerd().clone();
    let lease = Lease::create(&cd, "pull").await?;
    let result = async {
        let leased = leased(&cd, &lease.id)?;
        fetch_content(svc, &leased, &lease.id, &session, &resolved, &parsed).await?;
        let top = match &resolved.index {
            Some((index, _)) => index.clone(),
            None => resolved.manifest.clone(),
        };
        let mut names = BTreeSet::new();
        if parsed.tag.is_some() {
            names.insert(parsed.to_string());
        }
        names.insert(format!("{}@{}", parsed.name(), top.digest_str()));
        let target = CdDescriptor {
            media_type: top.media_type_str().to_string(),
            digest: top.digest_str().to_string(),
            size: top.size_i64(),
            annotations: HashMap::new(),
        };
        svc.register(&leased, target, names, false).await
    }
    .await;
    let released = lease.delete_with(&cd, result.is_err()).await;
    let image = result?;
    released?;
    tracing::info!(
        image = %parsed,
        id = %image.id,
        size = image.size,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "pulled"
    );
    Ok(image.id)
}

async fn fetch_content(
    svc: &ImageService,
    leased: &Containerd,
    lease: &str,
    session: &Arc<Session>,
    resolved: &crate::registry::Resolved,
    reference: &Reference,
) -> Result<(), ImageError> {
    let inner = svc.inner();
    let started = Instant::now();
    let progress = Arc::new(Progress {
        image: reference.to_string(),
        layers: resolved
            .layers
            .iter()
            .map(|l| (l.digest_str().to_string(), l.size(), AtomicU64::new(0)))
            .collect(),
    });
    let ticker = {
        let progress = progress.clone();
        let every = inner.opts.progress_interval;
        tokio::spawn(async move {
            let started = Instant::now();
            let mut tick = tokio::time::interval(every);
            tick.tick().await;
            loop {
                tick.tick().await;
                progress.log(started);
            }
        })
    };
    let blobs = std::iter::once((resolved.config.clone(), None)).chain(
        resolved
            .layers
            .iter()
            .cloned()
            .enumerate()
            .map(|(i, l)| (l, Some(i))),
    );
    let result = futures::stream::iter(blobs.map(|(desc, layer)| {
        let progress = progress.clone();
        async move {
            let counter = layer.map(|i| (progress, i));
            ensure_blob(svc, leased, lease, session, desc, counter).await
        }
    }))
    .buffer_unordered(inner.opts.max_concurrent_downloads.max(1) + 1)
    .try_collect::<Vec<()>>()
    .await;
    ticker.abort();
    result?;
    progress.log(started);

    // Documents last: once written, their GC labels keep everything below them.
    let mut refs = HashMap::from([(
        "containerd.io/gc.ref.content.config".to_string(),
        resolved.config.digest_str().to_string(),
    )]);
    for (i, layer) in resolved.layers.iter().enumerate() {
        refs.insert(
            format!("containerd.io/gc.ref.content.l.{i}"),
            layer.digest_str().to_string(),
        );
    }
    content::write_bytes(
        leased,
        resolved.manifest.digest_str(),
        &resolved.manifest_bytes,
        refs,
    )
    .await?;
    if let Some((index, bytes)) = &resolved.index {
        let refs = HashMap::from([(
            "containerd.io/gc.ref.content.m.0".to_string(),
            resolved.manifest.digest_str().to_string(),
        )]);
        content::write_bytes(leased, index.digest_str(), bytes, refs).await?;
    }
    Ok(())
}

/// Makes sure `desc` is in the content store and held by our lease, downloading it unless
/// another pull already is (then waiting for that one).
async fn ensure_blob(
    svc: &ImageService,
    leased: &Containerd,
    lease: &str,
    session: &Arc<Session>,
    desc: crate::registry::Descriptor,
    progress: Option<(Arc<Progress>, usize)>,
) -> Result<(), ImageError> {
    let inner = svc.inner();
    if !content::exists(leased, desc.digest_str()).await? {
        let flight = {
            let mut running = inner
                .pulls
                .running
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            running
                .entry(desc.digest_str().to_string())
                .or_insert_with(|| {
                    download(
                        inner.pulls.slots.clone(),
                        session.clone(),
                        leased.clone(),
                        desc.clone(),
                        progress.clone(),
                    )
                    .map(|r| r.map_err(Arc::new))
                    .boxed()
                    .shared()
                })
                .clone()
        };
        // However this wait ends (done, failed, or cancelled with its pull), the entry goes:
        // a stale flight would hold a finished pull's session and lease.
        let _forget = ForgetFlight {
            flights: &inner.pulls,
            digest: desc.digest_str(),
            flight: flight.clone(),
        };
        let outcome = flight.await;
        if let Err(e) = outcome {
            return Err(ImageError::Shared(e));
        }
    } else if let Some((p, i)) = &progress {
        p.layers[*i].2.store(desc.size(), Ordering::Relaxed);
    }
    // The blob may have been written under another pull's lease: hold it under ours too,
    // so GC cannot take it before our manifest references it.
    leased
        .leases()
        .add_resource(AddResourceRequest {
            id: lease.to_string(),
            resource: Some(Resource {
                id: desc.digest_str().to_string(),
                r#type: "content".into(),
            }),
        })
        .await
        .map_err(ImageError::containerd("lease content", desc.digest_str()))?;
    Ok(())
}

async fn download(
    slots: Arc<Semaphore>,
    session: Arc<Session>,
    leased: Containerd,
    desc: crate::registry::Descriptor,
    progress: Option<(Arc<Progress>, usize)>,
) -> Result<(), ImageError> {
    let _slot = slots
        .acquire_owned()
        .await
        .map_err(|_| ImageError::InvalidArgument("download queue closed".into()))?;
    let ingest = format!("ferrolet-pull-{}", desc.digest_str());
    let mut writer =
        match Writer::open(&leased, &ingest, desc.digest_str(), desc.size_i64()).await? {
            Opened::Exists => return Ok(()),
            Opened::Writing(w) => w,
        };
    let result = async {
        let mut body = session.fetch_blob(&desc).await?;
        while let Some(chunk) = body.next().await {
            let chunk = chunk?;
            writer.write(&chunk).await?;
            if let Some((p, i)) = &progress {
                p.layers[*i]
                    .2
                    .fetch_add(chunk.len() as u64, Ordering::Relaxed);
            }
        }
        writer.commit(HashMap::new()).await?;
        Ok::<(), ImageError>(())
    }
    .await;
    if result.is_err() {
        // Drop the partial ingest now; the lease's end would also let GC take it.
        let _ = leased.content().abort(AbortRequest { r#ref: ingest }).await;
    }
    result
}
