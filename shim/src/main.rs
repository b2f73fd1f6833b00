//! `ferrolet-cri`: serves CRI v1 on a unix socket, on top of containerd.

use std::path::Path;

use anyhow::{Context, Result};
use clap::{CommandFactory, Parser};
use ferrolet_cri::cli::{Cli, CliError, Command, ImageCommand};
use ferrolet_cri::config::Config;
use ferrolet_cri::image::{ImageOptions, ImageService};
use ferrolet_cri::oci_layout::Layout;
use ferrolet_cri::registry::RegistryClient;
use ferrolet_cri::runtime::Runtime;
use ferrolet_cri::{logging, server};
use ferrolet_proto::containerd::Containerd;

fn main() -> Result<()> {
    let cli = Cli::parse();
    let config = match cli.config() {
        Ok(c) => c,
        // A flag in the wrong place is a usage error, reported as clap reports its own.
        Err(e @ CliError::ServerFlagElsewhere(_)) => Cli::command()
            .error(clap::error::ErrorKind::ArgumentConflict, e)
            .exit(),
        Err(e) => return Err(e.into()),
    };
    logging::init(&config.log_level, config.log_format).map_err(anyhow::Error::msg)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async {
        match cli.command {
            None | Some(Command::Serve(_)) => serve(config).await,
            Some(Command::Image {
                command: ImageCommand::Import { path, name },
            }) => import(config, &path, name.as_deref()).await,
        }
    })
}

async fn image_service(config: &Config) -> Result<ImageService> {
    let cd = Containerd::connect(&config.containerd, &config.namespace)
        .await
        .with_context(|| format!("connecting to containerd at {}", config.containerd))?;
    let registry = RegistryClient::new(config.registry.hosts.clone())
        .context("setting up the registry client")?;
    let images = ImageService::new(
        cd,
        registry,
        ImageOptions {
            snapshotter: config.snapshotter.clone(),
            max_concurrent_downloads: config.max_concurrent_downloads,
            progress_interval: std::time::Duration::from_secs(
                config.pull_progress_interval_secs.max(1),
            ),
        },
    )
    .await
    .context("loading images from containerd")?;
    Ok(images)
}

async fn serve(config: Config) -> Result<()> {
    for dir in [&config.root, &config.state] {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let images = image_service(&config).await?;
    let pause = images
        .ensure_pause_image()
        .await
        .context("importing the built-in pause image")?;
    tracing::info!(sandbox_image = %config.sandbox_image, pause_id = %pause, "images ready");
    let _events = images.follow_events();
    let cd = Containerd::connect(&config.containerd, &config.namespace)
        .await
        .with_context(|| format!("connecting to containerd at {}", config.containerd))?;
    let runtime = Runtime::new(cd, images.clone(), &config)
        .await
        .context("recovering pod sandboxes and containers")?;
    server::serve(
        &config.listen,
        config.socket_mode()?,
        runtime,
        images,
        server::termination_signal(),
        config.shutdown_timeout(),
        config.accept_any_authority,
    )
    .await?;
    tracing::info!("stopped");
    Ok(())
}

async fn import(config: Config, path: &Path, name: Option<&str>) -> Result<()> {
    let images = image_service(&config).await?;
    let (layout, _unpacked) = open_layout(path).await?;
    let names = images
        .import_layout(&layout, name)
        .await
        .with_context(|| format!("importing {}", path.display()))?;
    for n in names {
        println!("{n}");
    }
    Ok(())
}

/// A layout directory as is, or an archive (OCI or Docker) unpacked into a temporary
/// directory (kept alive by the returned guard).
async fn open_layout(path: &Path) -> Result<(Layout, Option<tempfile::TempDir>)> {
    if path.is_dir() {
        return Ok((Layout::new(path), None));
    }
    let dir = tempfile::tempdir().context("creating a temporary directory")?;
    let (archive, target) = (path.to_path_buf(), dir.path().to_path_buf());
    let layout =
        tokio::task::spawn_blocking(move || ferrolet_cri::archive::to_layout(&archive, &target))
            .await??;
    Ok((Layout::new(layout), Some(dir)))
}
