//! `ferrolet-cri`: serves CRI v1 on a unix socket, on top of containerd.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use ferrolet_cri::config::{Config, LogFormat};
use ferrolet_cri::image::{ImageOptions, ImageService};
use ferrolet_cri::oci_layout::Layout;
use ferrolet_cri::registry::RegistryClient;
use ferrolet_cri::runtime::Runtime;
use ferrolet_cri::{logging, server};
use ferrolet_proto::containerd::Containerd;

#[derive(Parser, Debug)]
#[command(
    name = "ferrolet-cri",
    version,
    about = "A CRI v1 runtime and image service on containerd"
)]
struct Cli {
    /// TOML config file; flags override what it sets.
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    /// CRI endpoint to serve (unix:///path).
    #[arg(long, global = true)]
    listen: Option<String>,
    /// containerd's socket.
    #[arg(long, global = true)]
    containerd: Option<String>,
    /// containerd namespace.
    #[arg(long, global = true)]
    namespace: Option<String>,
    /// State directory.
    #[arg(long, global = true)]
    root: Option<PathBuf>,
    /// Sandbox (pause) image.
    #[arg(long, global = true)]
    sandbox_image: Option<String>,
    /// Log filter: error, warn, info, debug, trace, or EnvFilter directives.
    #[arg(long, global = true)]
    log_level: Option<String>,
    /// Log format.
    #[arg(long, global = true, value_enum)]
    log_format: Option<LogFormat>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Serve CRI (the default).
    Serve,
    /// Image tools for air-gapped nodes.
    Image {
        #[command(subcommand)]
        command: ImageCommand,
    },
}

#[derive(Subcommand, Debug)]
enum ImageCommand {
    /// Import an OCI image layout directory, an OCI archive or a Docker archive (.tar).
    Import {
        /// Layout directory or archive.
        path: PathBuf,
        /// Name for the image (default: the layout's ref name annotation).
        #[arg(long)]
        name: Option<String>,
    },
}

impl Cli {
    fn config(&self) -> Result<Config> {
        let mut c = match &self.config {
            Some(path) => Config::load(path)?,
            None => Config::default(),
        };
        if let Some(v) = &self.listen {
            c.listen = v.clone();
        }
        if let Some(v) = &self.containerd {
            c.containerd = v.clone();
        }
        if let Some(v) = &self.namespace {
            c.namespace = v.clone();
        }
        if let Some(v) = &self.root {
            c.root = v.clone();
        }
        if let Some(v) = &self.sandbox_image {
            c.sandbox_image = v.clone();
        }
        if let Some(v) = &self.log_level {
            c.log_level = v.clone();
        }
        if let Some(v) = self.log_format {
            c.log_format = v;
        }
        c.validate()?;
        Ok(c)
    }
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    let config = cli.config()?;
    logging::init(&config.log_level, config.log_format).map_err(anyhow::Error::msg)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async {
        match cli.command {
            None | Some(Command::Serve) => serve(config).await,
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
