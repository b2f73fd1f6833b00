//! The CRI ImageService on containerd.
//!
//! - the image config (`crate::image_config`): what a runtime reads of an image.
//! - [`store`]: the in-memory image index CRI calls are answered from.
//! - [`records`]: containerd's image records and content reads.
//! - [`unpack`]: layers applied onto snapshots by chain id.
//! - [`events`]: follows containerd's image events, for records others change.
//! - [`pull`]: registry → content store → unpack → records, single-flight per blob.
//! - [`pause`]: the built-in sandbox image.
//! - [`error`]: errors and their gRPC codes.

pub mod error;
pub mod events;
pub mod pause;
pub mod pull;
pub mod records;
pub mod store;
pub mod unpack;

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use ferrolet_proto::containerd::Containerd;
use ferrolet_proto::containerd::services::v1::snapshots::UsageRequest;
use ferrolet_proto::containerd::services::v1::{Info, PluginsRequest, UpdateRequest};
use ferrolet_proto::containerd::types::Descriptor as CdDescriptor;
use ferrolet_proto::cri;
use ferrolet_proto::cri::image_service_server::ImageService as CriImageService;
use ferrolet_proto::prost_types::FieldMask;
use tonic::{Request, Response, Status};

use crate::reference::Reference;
use crate::registry::RegistryClient;
pub use error::ImageError;
use store::{Image, Store};

/// Settings the image service needs from ferrolet-cri's config.
#[derive(Clone, Debug)]
pub struct ImageOptions {
    /// Snapshotter images are unpacked into.
    pub snapshotter: String,
    /// Layers downloaded at once (across all pulls).
    pub max_concurrent_downloads: usize,
    /// Interval between pull progress log lines.
    pub progress_interval: std::time::Duration,
}

/// The ImageService: cheap to clone, every clone shares one state.
#[derive(Clone)]
pub struct ImageService {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    cd: Containerd,
    opts: ImageOptions,
    store: Store,
    registry: RegistryClient,
    pulls: pull::Flights,
}

impl ImageService {
    /// Builds the service and loads every image containerd already has in the namespace.
    pub async fn new(
        cd: Containerd,
        registry: RegistryClient,
        opts: ImageOptions,
    ) -> Result<Self, ImageError> {
        let store = Store::new();
        records::sync(&cd, &store).await?;
        let pulls = pull::Flights::new(opts.max_concurrent_downloads);
        Ok(Self {
            inner: Arc::new(Inner {
                cd,
                opts,
                store,
                registry,
                pulls,
            }),
        })
    }

    /// Every image, as CRI sees them.
    pub fn images(&self) -> Vec<Image> {
        self.inner.store.list()
    }

    /// Finds an image by CRI reference: an id (full, bare hex or unique prefix), a tag or a
    /// digest reference, normalized as Kubernetes does (`busybox` is
    /// `docker.io/library/busybox:latest`).
    pub fn resolve(&self, reference: &str) -> Option<Image> {
        let store = &self.inner.store;
        store.get(reference).or_else(|| {
            Reference::parse(reference)
                .ok()
                .and_then(|r| store.get(&r.to_string()))
        })
    }

    /// Pulls `reference` and returns the image id.
    pub async fn pull(
        &self,
        reference: &str,
        credentials: Option<crate::registry::Credentials>,
    ) -> Result<String, ImageError> {
        pull::pull(self, reference, credentials).await
    }

    /// Follows containerd's image events in the background, so records made by others
    /// (`ferrolet-cri image import`, `ctr`) show up without a restart.
    pub fn follow_events(&self) -> tokio::task::JoinHandle<()> {
        tokio::spawn(events::follow(self.clone()))
    }

    /// Imports the built-in pause image unless containerd has it, and pins it.
    pub async fn ensure_pause_image(&self) -> Result<String, ImageError> {
        pause::ensure(self).await
    }

    /// Imports every image of an OCI layout directory; returns the names created.
    pub async fn import_layout(
        &self,
        layout: &crate::oci_layout::Layout,
        name_override: Option<&str>,
    ) -> Result<Vec<String>, ImageError> {
        let mut created = Vec::new();
        for found in layout.images().await? {
            let name = match (name_override, &found.tag) {
                (Some(n), _) => n.to_string(),
                (None, Some(tag)) if tag.contains('/') || tag.contains(':') => tag.clone(),
                (None, Some(tag)) => format!("ferrolet.local/import:{tag}"),
                (None, None) => format!("ferrolet.local/import@{}", found.manifest.digest()),
            };
            let name = Reference::parse(&name)
                .map_err(|source| ImageError::Reference {
                    reference: name.clone(),
                    source,
                })?
                .to_string();
            let lease = crate::lease::Lease::create(&self.inner.cd, "import").await?;
            let result = async {
                let leased = leased(&self.inner.cd, &lease.id)?;
                let target = layout.import_content(&leased, &found).await?;
                self.register(&leased, target, BTreeSet::from([name.clone()]), false)
                    .await
            }
            .await;
            lease.delete_with(&self.inner.cd, result.is_err()).await?;
            result?;
            created.push(name);
        }
        Ok(created)
    }

    /// Finishes an image whose content is in the store: unpacks it, labels its config so GC
    /// keeps the snapshots, writes its records and indexes it. Call with a leased client.
    pub(crate) async fn register(
        &self,
        leased: &Containerd,
        target: CdDescriptor,
        references: BTreeSet<String>,
        pinned: bool,
    ) -> Result<Image, ImageError> {
        let inner = &self.inner;
        let image = records::describe(leased, target, references, pinned).await?;
        let label = image
            .references
            .iter()
            .next()
            .cloned()
            .unwrap_or_else(|| image.id.clone());
        let diff_ids = image.config.rootfs().diff_ids();
        let chain_ids = crate::image_config::chain_ids(diff_ids);
        unpack::unpack(
            leased,
            &inner.opts.snapshotter,
            &label,
            &image.layers,
            diff_ids,
            &chain_ids,
        )
        .await?;
        let gc_label = format!("containerd.io/gc.ref.snapshot.{}", inner.opts.snapshotter);
        leased
            .content()
            .update(UpdateRequest {
                info: Some(Info {
                    digest: image.id.clone(),
                    labels: HashMap::from([(gc_label.clone(), image.chain_id.clone())]),
                    ..Default::default()
                }),
                update_mask: Some(FieldMask {
                    paths: vec![format!("labels.{gc_label}")],
                }),
            })
            .await
            .map_err(ImageError::containerd("label config", image.id.as_str()))?;
        records::put_names(&inner.cd, &image).await?;
        inner.store.insert(image.clone());
        Ok(self.resolve(&image.id).unwrap_or(image))
    }

    /// Removes an image and every name it has. An unknown image is not an error (CRI).
    pub async fn remove(&self, reference: &str) -> Result<(), ImageError> {
        let Some(image) = self.resolve(reference) else {
            return Ok(());
        };
        if image.pinned {
            return Err(ImageError::Pinned {
                image: reference.to_string(),
            });
        }
        records::delete_all(&self.inner.cd, &image).await?;
        self.inner.store.remove(&image.id);
        Ok(())
    }

    /// Bytes and inodes the snapshotter uses, and where it keeps them.
    pub async fn fs_usage(&self) -> Result<cri::FilesystemUsage, ImageError> {
        let cd = &self.inner.cd;
        let snapshotter = &self.inner.opts.snapshotter;
        let root = snapshotter_root(cd, snapshotter).await?;
        let mut stream = cd
            .snapshots()
            .list(
                ferrolet_proto::containerd::services::v1::snapshots::ListSnapshotsRequest {
                    snapshotter: snapshotter.clone(),
                    filters: Vec::new(),
                },
            )
            .await
            .map_err(ImageError::containerd(
                "list snapshots",
                snapshotter.as_str(),
            ))?
            .into_inner();
        let mut keys = Vec::new();
        while let Some(page) = stream.message().await.map_err(ImageError::containerd(
            "list snapshots",
            snapshotter.as_str(),
        ))? {
            keys.extend(page.info.into_iter().map(|i| i.name));
        }
        let (mut bytes, mut inodes) = (0u64, 0u64);
        for key in keys {
            // A snapshot removed between list and usage is simply no longer counted.
            if let Ok(u) = cd
                .snapshots()
                .usage(UsageRequest {
                    snapshotter: snapshotter.clone(),
                    key,
                })
                .await
            {
                let u = u.into_inner();
                bytes += u.size.max(0) as u64;
                inodes += u.inodes.max(0) as u64;
            }
        }
        Ok(cri::FilesystemUsage {
            timestamp: now_nanos(),
            fs_id: Some(cri::FilesystemIdentifier { mountpoint: root }),
            used_bytes: Some(cri::UInt64Value { value: bytes }),
            inodes_used: Some(cri::UInt64Value { value: inodes }),
        })
    }

    pub(crate) fn inner(&self) -> &Arc<Inner> {
        &self.inner
    }
}

impl Inner {
    pub(crate) fn containerd(&self) -> &Containerd {
        &self.cd
    }
}

/// A client holding `lease` on every call.
pub(crate) fn leased(cd: &Containerd, lease: &str) -> Result<Containerd, ImageError> {
    cd.with_lease(lease)
        .map_err(|e| ImageError::InvalidArgument(e.to_string()))
}

fn now_nanos() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or_default()
}

/// The snapshotter's directory, from the plugin's introspection exports.
async fn snapshotter_root(cd: &Containerd, snapshotter: &str) -> Result<String, ImageError> {
    let plugins = cd
        .introspection()
        .plugins(PluginsRequest {
            filters: vec![format!(
                "type==io.containerd.snapshotter.v1,id=={snapshotter}"
            )],
        })
        .await
        .map_err(ImageError::containerd(
            "introspect snapshotter",
            snapshotter,
        ))?
        .into_inner()
        .plugins;
    Ok(plugins
        .into_iter()
        .find_map(|p| p.exports.get("root").cloned())
        .unwrap_or_default())
}

/// The CRI view of an image.
pub fn to_cri(image: &Image) -> cri::Image {
    let (uid, username) = crate::image_config::user(&image.config);
    cri::Image {
        id: image.id.clone(),
        repo_tags: image.repo_tags(),
        repo_digests: image.repo_digests(),
        size: image.size,
        uid: uid.map(|value| cri::Int64Value { value }),
        username,
        spec: Some(cri::ImageSpec {
            image: image.id.clone(),
            ..Default::default()
        }),
        pinned: image.pinned,
    }
}

fn image_ref(spec: Option<&cri::ImageSpec>) -> Result<&str, Status> {
    match spec.map(|s| s.image.as_str()) {
        Some(s) if !s.is_empty() => Ok(s),
        _ => Err(Status::invalid_argument(
            "image reference must not be empty",
        )),
    }
}

#[tonic::async_trait]
impl CriImageService for ImageService {
    #[tracing::instrument(name = "ListImages", skip_all)]
    async fn list_images(
        &self,
        request: Request<cri::ListImagesRequest>,
    ) -> Result<Response<cri::ListImagesResponse>, Status> {
        let filter = request
            .into_inner()
            .filter
            .and_then(|f| f.image)
            .map(|s| s.image)
            .filter(|s| !s.is_empty());
        let images = match filter {
            Some(f) => self.resolve(&f).into_iter().collect(),
            None => self.images(),
        };
        Ok(Response::new(cri::ListImagesResponse {
            images: images.iter().map(to_cri).collect(),
        }))
    }

    #[tracing::instrument(name = "ImageStatus", skip_all, fields(image))]
    async fn image_status(
        &self,
        request: Request<cri::ImageStatusRequest>,
    ) -> Result<Response<cri::ImageStatusResponse>, Status> {
        let req = request.into_inner();
        let reference = image_ref(req.image.as_ref())?;
        tracing::Span::current().record("image", reference);
        let Some(image) = self.resolve(reference) else {
            return Ok(Response::new(cri::ImageStatusResponse::default()));
        };
        let mut info = HashMap::new();
        if req.verbose {
            let verbose = serde_json::json!({
                "imageSpec": image.config_json,
                "chainID": image.chain_id,
                "manifestDigest": image.manifest_digest,
                "target": image.target.digest,
                "pinned": image.pinned,
            });
            info.insert("info".to_string(), verbose.to_string());
        }
        Ok(Response::new(cri::ImageStatusResponse {
            image: Some(to_cri(&image)),
            info,
        }))
    }

    #[tracing::instrument(name = "PullImage", skip_all, fields(image))]
    async fn pull_image(
        &self,
        request: Request<cri::PullImageRequest>,
    ) -> Result<Response<cri::PullImageResponse>, Status> {
        let req = request.into_inner();
        let reference = image_ref(req.image.as_ref())?;
        tracing::Span::current().record("image", reference);
        let credentials = req.auth.map(pull::credentials);
        // To its end whatever the client does (`crate::completion`): a pull cut short would
        // hold its lease, and with it its blobs, until the lease expires.
        let (this, reference) = (self.clone(), reference.to_string());
        let image_ref = crate::completion::run(async move {
            this.pull(&reference, credentials)
                .await
                .map_err(Status::from)
        })
        .await?;
        Ok(Response::new(cri::PullImageResponse { image_ref }))
    }

    #[tracing::instrument(name = "RemoveImage", skip_all, fields(image))]
    async fn remove_image(
        &self,
        request: Request<cri::RemoveImageRequest>,
    ) -> Result<Response<cri::RemoveImageResponse>, Status> {
        let req = request.into_inner();
        let reference = image_ref(req.image.as_ref())?;
        tracing::Span::current().record("image", reference);
        let (this, reference) = (self.clone(), reference.to_string());
        crate::completion::run(async move { this.remove(&reference).await.map_err(Status::from) })
            .await?;
        Ok(Response::new(cri::RemoveImageResponse {}))
    }

    #[tracing::instrument(name = "ImageFsInfo", skip_all)]
    async fn image_fs_info(
        &self,
        _: Request<cri::ImageFsInfoRequest>,
    ) -> Result<Response<cri::ImageFsInfoResponse>, Status> {
        let usage = self.fs_usage().await?;
        Ok(Response::new(cri::ImageFsInfoResponse {
            image_filesystems: vec![usage.clone()],
            container_filesystems: vec![usage],
        }))
    }
}
