//! Garbage collection of what the runtime keeps after it is needed: dead containers and
//! sandboxes ([`containers`], every minute) and unused images when the image filesystem
//! fills up ([`images`], every five minutes), as the Go kubelet's container and image GC.
//!
//! [`GcPolicy`] is the configuration (Go's flags and KubeletConfiguration fields, plus two
//! hidden period flags for tests); [`spawn`] runs both collectors in one task beside the
//! sync loop, which tells it when every pod source has spoken (until then no pod counts as
//! deleted).

pub mod containers;
pub mod images;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;
use tokio::time::MissedTickBehavior;

use crate::cri::Cri;
use crate::pleg::Pleg;
use containers::{ContainerGcPolicy, PodStates};
use ferrolet_proto::go_duration::parse_duration_flag;
use images::{ImageCalls, ImageGcManager, ImageGcPolicy};

/// Go's `ContainerGCPeriod`.
pub const CONTAINER_GC_PERIOD: Duration = Duration::from_secs(60);
/// Go's `ImageGCPeriod`.
pub const IMAGE_GC_PERIOD: Duration = Duration::from_secs(5 * 60);
/// How often images in use are read from the PLEG's cache (no runtime calls), so last-used
/// times follow the containers the kubelet sees between GC passes.
const OBSERVE_PERIOD: Duration = Duration::from_secs(10);

/// The garbage collection settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GcPolicy {
    /// Dead instances kept per container, negative = no limit
    /// (`--maximum-dead-containers-per-container`, 1).
    pub max_per_pod_container: i32,
    /// Dead containers kept in all, negative = no limit (`--maximum-dead-containers`, -1).
    pub max_containers: i32,
    /// Age a dead container must reach before it may go (`--minimum-container-ttl-duration`,
    /// 0).
    pub minimum_container_ttl: Duration,
    /// Image filesystem usage percent at which image GC starts (`imageGCHighThresholdPercent`,
    /// 85; 100 turns image GC off).
    pub image_gc_high_threshold_percent: i32,
    /// Usage percent image GC frees down to (`imageGCLowThresholdPercent`, 80).
    pub image_gc_low_threshold_percent: i32,
    /// Age an unused image must reach before it may go (`imageMinimumGCAge`, 2m).
    pub image_minimum_gc_age: Duration,
    /// Period of container GC (hidden `--container-gc-period`, 1m; for tests).
    pub container_gc_period: Duration,
    /// Period of image GC (hidden `--image-gc-period`, 5m; for tests).
    pub image_gc_period: Duration,
}

impl Default for GcPolicy {
    /// The Go kubelet's defaults.
    fn default() -> Self {
        Self {
            max_per_pod_container: 1,
            max_containers: -1,
            minimum_container_ttl: Duration::ZERO,
            image_gc_high_threshold_percent: 85,
            image_gc_low_threshold_percent: 80,
            image_minimum_gc_age: Duration::from_secs(120),
            container_gc_period: CONTAINER_GC_PERIOD,
            image_gc_period: IMAGE_GC_PERIOD,
        }
    }
}

/// The GC flags, spelled as the Go kubelet's (deprecated there, but still read); flattened
/// into the kubelet's flags.
#[derive(clap::Args, Clone, Debug, Default, PartialEq)]
pub struct GcFlags {
    /// Dead instances kept per container; negative = no limit [default: 1].
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub maximum_dead_containers_per_container: Option<i32>,
    /// Dead containers kept in all; negative = no limit [default: -1].
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub maximum_dead_containers: Option<i32>,
    /// Minimum age of a dead container before it is garbage collected [default: 0s].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration_flag)]
    pub minimum_container_ttl_duration: Option<Duration>,
    /// Image filesystem usage percent that starts image GC (imageGCHighThresholdPercent)
    /// [default: 85].
    #[arg(long, value_name = "PERCENT", allow_negative_numbers = true)]
    pub image_gc_high_threshold: Option<i32>,
    /// Usage percent image GC frees down to (imageGCLowThresholdPercent) [default: 80].
    #[arg(long, value_name = "PERCENT", allow_negative_numbers = true)]
    pub image_gc_low_threshold: Option<i32>,
    /// Minimum age of an unused image before it is garbage collected (imageMinimumGCAge)
    /// [default: 2m0s].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration_flag)]
    pub minimum_image_ttl_duration: Option<Duration>,
    /// Container GC period (for tests).
    #[arg(long, hide = true, value_name = "DURATION", value_parser = parse_duration_flag)]
    pub container_gc_period: Option<Duration>,
    /// Image GC period (for tests).
    #[arg(long, hide = true, value_name = "DURATION", value_parser = parse_duration_flag)]
    pub image_gc_period: Option<Duration>,
}

impl GcPolicy {
    /// Applies the flags given (a zero duration means the default, as in the file).
    pub fn apply_flags(&mut self, f: &GcFlags) {
        fn set<T: Copy>(slot: &mut T, v: Option<T>) {
            if let Some(v) = v {
                *slot = v;
            }
        }
        set(
            &mut self.max_per_pod_container,
            f.maximum_dead_containers_per_container,
        );
        set(&mut self.max_containers, f.maximum_dead_containers);
        set(
            &mut self.minimum_container_ttl,
            f.minimum_container_ttl_duration,
        );
        set(
            &mut self.image_gc_high_threshold_percent,
            f.image_gc_high_threshold,
        );
        set(
            &mut self.image_gc_low_threshold_percent,
            f.image_gc_low_threshold,
        );
        let nonzero = |d: Option<Duration>| d.filter(|d| !d.is_zero());
        set(
            &mut self.image_minimum_gc_age,
            nonzero(f.minimum_image_ttl_duration),
        );
        set(
            &mut self.container_gc_period,
            nonzero(f.container_gc_period),
        );
        set(&mut self.image_gc_period, nonzero(f.image_gc_period));
    }

    /// The Go kubelet's checks; on failure the field (as the file and flag name it) and
    /// why.
    pub fn validate(&self) -> Result<(), (String, String)> {
        const HIGH: &str = "imageGCHighThresholdPercent (--image-gc-high-threshold)";
        const LOW: &str = "imageGCLowThresholdPercent (--image-gc-low-threshold)";
        let (high, low) = (
            self.image_gc_high_threshold_percent,
            self.image_gc_low_threshold_percent,
        );
        for (field, v) in [(HIGH, high), (LOW, low)] {
            if !(0..=100).contains(&v) {
                return Err((
                    field.into(),
                    format!("{v} must be between 0 and 100, inclusive"),
                ));
            }
        }
        if low >= high {
            return Err((LOW.into(), format!("{low} must be less than {HIGH} {high}")));
        }
        Ok(())
    }

    /// The container GC part.
    pub fn container_policy(&self) -> ContainerGcPolicy {
        ContainerGcPolicy {
            max_per_pod_container: self.max_per_pod_container,
            max_containers: self.max_containers,
            min_age: self.minimum_container_ttl,
        }
    }

    /// The image GC part.
    pub fn image_policy(&self) -> ImageGcPolicy {
        ImageGcPolicy {
            high_threshold_percent: self.image_gc_high_threshold_percent,
            low_threshold_percent: self.image_gc_low_threshold_percent,
            min_age: self.image_minimum_gc_age,
        }
    }

    /// Image GC runs unless the high threshold is 100 (as in Go, with no maximum image age).
    pub fn image_gc_enabled(&self) -> bool {
        self.image_gc_high_threshold_percent < 100
    }
}

/// The running collectors; dropping it stops them.
#[derive(Debug)]
pub struct GcHandle {
    sources_ready: Arc<AtomicBool>,
    task: JoinHandle<()>,
}

impl GcHandle {
    /// Every pod source has listed its pods: pods not desired now count as deleted.
    pub fn set_sources_ready(&self) {
        self.sources_ready.store(true, Ordering::Relaxed);
    }
}

impl Drop for GcHandle {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What garbage collection works with: the runtime, the settings, and two narrow views of
/// the kubelet.
pub struct GcContext {
    /// The runtime.
    pub cri: Cri,
    /// The settings.
    pub policy: GcPolicy,
    /// The CRI timeout for image calls.
    pub runtime_request_timeout: Duration,
    /// Where pods' log directories are (`/var/log/pods`).
    pub pod_logs_dir: std::path::PathBuf,
    /// Whether a pod UID is still known to the kubelet (a pod being killed still is).
    pub is_known: Arc<dyn Fn(&str) -> bool + Send + Sync>,
    /// The runtime's pods as last listed, for the images in use.
    pub runtime: Arc<Pleg>,
    /// The image references of the image volumes of the pods the kubelet knows: in use too.
    pub volume_images: Arc<dyn Fn() -> Vec<String> + Send + Sync>,
}

/// Starts container and image GC, each on its period (the first pass at once).
pub fn spawn(ctx: GcContext) -> GcHandle {
    let sources_ready = Arc::new(AtomicBool::new(false));
    let task = tokio::spawn(run(ctx, sources_ready.clone()));
    GcHandle {
        sources_ready,
        task,
    }
}

/// The kubelet's pods as the container GC sees them.
struct KubeletPods<'a> {
    is_known: &'a (dyn Fn(&str) -> bool + Send + Sync),
    sources_ready: &'a AtomicBool,
}

impl PodStates for KubeletPods<'_> {
    fn sources_ready(&self) -> bool {
        self.sources_ready.load(Ordering::Relaxed)
    }

    fn is_deleted(&self, uid: &str) -> bool {
        // A pod being killed stays known until its kill is done.
        !(self.is_known)(uid)
    }
}

async fn run(ctx: GcContext, sources_ready: Arc<AtomicBool>) {
    let policy = ctx.policy.clone();
    let calls = ImageCalls::new(ctx.cri.clone(), ctx.runtime_request_timeout);
    let mut images = ImageGcManager::new(policy.image_policy());
    let image_gc = policy.image_gc_enabled();
    if !image_gc {
        tracing::info!("imageGCHighThresholdPercent is 100: image garbage collection is off");
    }
    let ticker = |period: Duration, first: Duration| {
        let period = period.max(Duration::from_millis(100));
        let mut t = tokio::time::interval_at(tokio::time::Instant::now() + first, period);
        t.set_missed_tick_behavior(MissedTickBehavior::Delay);
        t
    };
    let mut container_tick = ticker(policy.container_gc_period, Duration::ZERO);
    // The first image pass comes a period after start-up (in Go it normally fails then, its
    // filesystem stats not warmed up yet); the images already there are recorded at once, as
    // present "since long ago".
    let mut image_tick = ticker(policy.image_gc_period, policy.image_gc_period);
    let mut observe_tick = ticker(OBSERVE_PERIOD, OBSERVE_PERIOD);
    if image_gc {
        let volume_images = (ctx.volume_images)();
        let first = images::detect(&mut images, &calls, &volume_images, Instant::now()).await;
        if let Err(e) = first {
            tracing::debug!(error = %e, "image GC: the first detection failed; the first pass does it");
        }
    }
    let pods = KubeletPods {
        is_known: ctx.is_known.as_ref(),
        sources_ready: &sources_ready,
    };
    let mut image_gc_failed = false;
    loop {
        tokio::select! {
            _ = container_tick.tick() => {
                let result = containers::collect(
                    &ctx.cri,
                    &policy.container_policy(),
                    &pods,
                    &ctx.pod_logs_dir,
                )
                .await;
                match result {
                    Ok(r) if r != Default::default() => tracing::info!(
                        containers = r.containers,
                        sandboxes = r.sandboxes,
                        log_dirs = r.log_dirs,
                        "container garbage collection removed dead containers"
                    ),
                    Ok(_) => tracing::debug!("container garbage collection found nothing to remove"),
                    Err(e) => tracing::warn!(error = %e, "Container garbage collection failed"),
                }
            }
            _ = image_tick.tick(), if image_gc => {
                let volume_images = (ctx.volume_images)();
                match images::garbage_collect(&mut images, &calls, &volume_images).await {
                    Ok(r) => {
                        if !r.removed.is_empty() {
                            tracing::info!(removed = ?r.removed, freed = r.freed, "image garbage collection removed images");
                        }
                        if image_gc_failed {
                            tracing::info!("Image garbage collection succeeded");
                        } else {
                            tracing::debug!(usage = r.usage_percent, "Image garbage collection succeeded");
                        }
                        image_gc_failed = false;
                    }
                    Err(e) => {
                        if image_gc_failed {
                            tracing::warn!(error = %e, "Image garbage collection failed multiple times in a row");
                        } else {
                            tracing::warn!(error = %e, "Image garbage collection failed once");
                        }
                        image_gc_failed = true;
                    }
                }
            }
            _ = observe_tick.tick(), if image_gc => {
                let seen = ctx.runtime.all();
                let refs = seen
                    .iter()
                    .flat_map(|p| &p.containers)
                    .flat_map(|c| [c.image.as_str(), c.image_ref.as_str()]);
                let volume_images = (ctx.volume_images)();
                let refs = refs.chain(volume_images.iter().map(String::as_str));
                images.mark_used(refs, Instant::now());
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(clap::Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        gc: GcFlags,
    }

    fn flags(args: &[&str]) -> GcFlags {
        let mut all = vec!["test"];
        all.extend_from_slice(args);
        Cli::try_parse_from(all).unwrap().gc
    }

    #[test]
    fn defaults_are_go_s() {
        let p = GcPolicy::default();
        assert_eq!(p.max_per_pod_container, 1);
        assert_eq!(p.max_containers, -1);
        assert_eq!(p.minimum_container_ttl, Duration::ZERO);
        assert_eq!(p.image_gc_high_threshold_percent, 85);
        assert_eq!(p.image_gc_low_threshold_percent, 80);
        assert_eq!(p.image_minimum_gc_age, Duration::from_secs(120));
        assert_eq!(p.container_gc_period, Duration::from_secs(60));
        assert_eq!(p.image_gc_period, Duration::from_secs(300));
        assert!(p.validate().is_ok());
        assert!(p.image_gc_enabled());
    }

    #[test]
    fn flags_override() {
        let f = flags(&[
            "--maximum-dead-containers-per-container",
            "-1",
            "--maximum-dead-containers=10",
            "--minimum-container-ttl-duration=1m30s",
            "--image-gc-high-threshold=1",
            "--image-gc-low-threshold",
            "0",
            "--minimum-image-ttl-duration=1s",
            "--container-gc-period=2s",
            "--image-gc-period=0s",
        ]);
        let mut p = GcPolicy::default();
        p.apply_flags(&f);
        assert_eq!(p.max_per_pod_container, -1);
        assert_eq!(p.max_containers, 10);
        assert_eq!(p.minimum_container_ttl, Duration::from_secs(90));
        assert_eq!(
            (
                p.image_gc_high_threshold_percent,
                p.image_gc_low_threshold_percent
            ),
            (1, 0)
        );
        assert_eq!(p.image_minimum_gc_age, Duration::from_secs(1));
        assert_eq!(p.container_gc_period, Duration::from_secs(2));
        assert_eq!(p.image_gc_period, IMAGE_GC_PERIOD, "zero is the default");
        assert!(p.validate().is_ok());
        let mut untouched = GcPolicy::default();
        untouched.apply_flags(&flags(&[]));
        assert_eq!(untouched, GcPolicy::default());
    }

    #[test]
    fn thresholds_are_checked_as_go_does() {
        let with = |high, low| GcPolicy {
            image_gc_high_threshold_percent: high,
            image_gc_low_threshold_percent: low,
            ..Default::default()
        };
        assert!(with(100, 0).validate().is_ok());
        assert!(!with(100, 0).image_gc_enabled());
        let (field, reason) = with(101, 80).validate().unwrap_err();
        assert_eq!(
            field,
            "imageGCHighThresholdPercent (--image-gc-high-threshold)"
        );
        assert_eq!(reason, "101 must be between 0 and 100, inclusive");
        let (field, _) = with(85, -1).validate().unwrap_err();
        assert_eq!(
            field,
            "imageGCLowThresholdPercent (--image-gc-low-threshold)"
        );
        let (field, reason) = with(50, 50).validate().unwrap_err();
        assert_eq!(
            field,
            "imageGCLowThresholdPercent (--image-gc-low-threshold)"
        );
        assert_eq!(
            reason,
            "50 must be less than imageGCHighThresholdPercent (--image-gc-high-threshold) 50"
        );
    }

    fn load(
        yaml: &str,
        args: &[&str],
    ) -> Result<crate::config::Config, crate::config::ConfigError> {
        use std::io::Write;
        let mut f = tempfile::NamedTempFile::new().unwrap();
        write!(
            f,
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n{yaml}"
        )
        .unwrap();
        let path = f.path().to_str().unwrap().to_string();
        let mut all = vec![
            "ferrolet",
            "--hostname-override=n",
            "--config",
            path.as_str(),
        ];
        all.extend_from_slice(args);
        let flags = crate::config::Flags::try_parse_from(all).unwrap();
        crate::config::Config::load(&flags).map(|(c, _)| c)
    }

    fn invalid_field(r: Result<crate::config::Config, crate::config::ConfigError>) -> String {
        match r {
            Err(crate::config::ConfigError::Invalid { field, .. }) => field,
            other => panic!("expected Invalid, got {other:?}"),
        }
    }

    #[test]
    fn the_configuration_file_and_flags_set_the_policy() {
        let c = load(
            "imageGCHighThresholdPercent: 90\nimageGCLowThresholdPercent: 70\nimageMinimumGCAge: 30s\n",
            &["--image-gc-high-threshold=95", "--maximum-dead-containers=5"],
        )
        .unwrap();
        assert_eq!(c.gc.image_gc_high_threshold_percent, 95, "the flag wins");
        assert_eq!(c.gc.image_gc_low_threshold_percent, 70);
        assert_eq!(c.gc.image_minimum_gc_age, Duration::from_secs(30));
        assert_eq!(c.gc.max_containers, 5);
        // Zero durations are the default, as Go's defaulting does.
        let c = load("imageMinimumGCAge: 0s\n", &[]).unwrap();
        assert_eq!(c.gc.image_minimum_gc_age, Duration::from_secs(120));
        assert_eq!(
            invalid_field(load("imageGCHighThresholdPercent: 101\n", &[])),
            "imageGCHighThresholdPercent (--image-gc-high-threshold)"
        );
        assert_eq!(
            invalid_field(load("imageGCLowThresholdPercent: 85\n", &[])),
            "imageGCLowThresholdPercent (--image-gc-low-threshold)"
        );
        assert_eq!(
            invalid_field(load("imageGCHighThresholdPercent: high\n", &[])),
            "imageGCHighThresholdPercent"
        );
        assert_eq!(
            invalid_field(load("imageMinimumGCAge: soon\n", &[])),
            "imageMinimumGCAge"
        );
    }

    #[test]
    fn the_hidden_flags_stay_out_of_help() {
        use clap::CommandFactory;
        let help = Cli::command().render_long_help().to_string();
        assert!(help.contains("--maximum-dead-containers-per-container"));
        assert!(!help.contains("--container-gc-period"), "{help}");
        assert!(!help.contains("--image-gc-period"), "{help}");
    }
}
