//! What the benchmark programs (`ferrolet-cri-bench`, `ferrolet-kubelet-bench`,
//! `ferrolet-stream-bench`) share: the signal thread that lets a run clean up, RPCs under a
//! deadline, nearest-rank percentiles, CPU ticks from `/proc/<pid>/stat`, run ids and images;
//! [`processes`]: the runtime stack's processes (shims, pause) and their RSS and CPU.

pub mod processes;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use ferrolet_proto::cri::image_service_client::ImageServiceClient;
use ferrolet_proto::cri::{ImageSpec, ImageStatusRequest, PullImageRequest};
use tonic::transport::Channel;

/// Signals seen by [`install_signal_thread`]'s handler.
static SIGNALS: AtomicUsize = AtomicUsize::new(0);

extern "C" fn on_signal(_: libc::c_int) {
    // Only async-signal-safe work here: an atomic add, and _exit on the second signal.
    if SIGNALS.fetch_add(1, Ordering::SeqCst) >= 1 {
        // SAFETY: _exit is async-signal-safe and ends the process without unwinding.
        unsafe { libc::_exit(130) };
    }
}

/// Handles SIGINT/SIGTERM/SIGHUP: the first sets the returned flag so the run stops and
/// cleans up (`cleanup` says what it removes, printed by a watcher thread), a second exits at
/// once. A handler, not a blocked mask waited on: children inherit a blocked mask across exec
/// (the daemons a run starts would then never see their SIGTERM), while handlers are reset.
pub fn install_signal_thread(cleanup: &'static str) -> Result<Arc<AtomicBool>> {
    use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, sigaction};
    let action = SigAction::new(
        SigHandler::Handler(on_signal),
        SaFlags::SA_RESTART,
        SigSet::empty(),
    );
    for sig in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        // SAFETY: the handler only touches an atomic and calls _exit.
        unsafe { sigaction(sig, &action) }.with_context(|| format!("handling {sig}"))?;
    }
    let cancel = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&cancel);
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            while SIGNALS.load(Ordering::SeqCst) == 0 {
                std::thread::sleep(Duration::from_millis(100));
            }
            eprintln!("signal: stopping; {cleanup} (again to abort)");
            flag.store(true, Ordering::SeqCst);
        })
        .context("starting the signal thread")?;
    Ok(cancel)
}

/// Awaits an RPC under a client-side deadline; `what` names it in errors.
pub async fn deadline<T>(
    limit: Duration,
    what: &str,
    call: impl Future<Output = Result<tonic::Response<T>, tonic::Status>>,
) -> Result<T> {
    match tokio::time::timeout(limit, call).await {
        Ok(Ok(resp)) => Ok(resp.into_inner()),
        Ok(Err(status)) => Err(anyhow!("{what}: {:?}: {}", status.code(), status.message())),
        Err(_) => Err(anyhow!("{what}: no answer within {limit:?}")),
    }
}

/// Nearest-rank percentile of sorted samples (0 when there are none).
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// utime + stime from the text of `/proc/<pid>/stat`, in clock ticks.
pub fn parse_stat_ticks(stat: &str) -> Option<u64> {
    // The command name may hold spaces and parentheses: fields count from the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name, field 3 (state) is index 0: utime is field 14, stime field 15.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// A short random id, so names and uids never collide with an earlier run's.
pub fn run_id() -> Result<String> {
    use std::io::Read;
    let mut bytes = [0u8; 4];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .context("reading /dev/urandom")?;
    Ok(hex::encode(bytes))
}

/// Makes sure the runtime has the image; returns its id (what the kubelet passes on).
pub async fn ensure_image(channel: Channel, image: &str, t: Duration) -> Result<String> {
    let mut images = ImageServiceClient::new(channel);
    let spec = ImageSpec {
        image: image.into(),
        ..Default::default()
    };
    let status = deadline(
        t,
        "ImageStatus",
        images.image_status(ImageStatusRequest {
            image: Some(spec.clone()),
            verbose: false,
        }),
    )
    .await?;
    if let Some(found) = status.image {
        return Ok(found.id);
    }
    eprintln!("pulling {image}");
    deadline(
        t,
        "PullImage",
        images.pull_image(PullImageRequest {
            image: Some(spec.clone()),
            auth: None,
            sandbox_config: None,
        }),
    )
    .await?;
    let status = deadline(
        t,
        "ImageStatus",
        images.image_status(ImageStatusRequest {
            image: Some(spec),
            verbose: false,
        }),
    )
    .await?;
    status
        .image
        .map(|i| i.id)
        .ok_or_else(|| anyhow!("{image} was pulled but ImageStatus does not find it"))
}
