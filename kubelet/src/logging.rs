//! Log set-up: `tracing` to stderr, as text or JSON; each pod sync's span reports its duration.

use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::FmtSpan;

/// Installs the global subscriber. `verbosity` follows the Go kubelet's `-v`: up to 3 is info,
/// 4–5 debug, 6 and above trace. `RUST_LOG` overrides it.
pub fn init(verbosity: u8, json: bool) -> Result<(), String> {
    let level = match verbosity {
        0..=3 => "info",
        4..=5 => "debug",
        _ => "trace",
    };
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(format!("{level},h2=info,hyper=info,tower=info")))
        .map_err(|e| e.to_string())?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_span_events(FmtSpan::CLOSE)
        .with_writer(std::io::stderr);
    let result = if json {
        builder.json().with_current_span(true).try_init()
    } else {
        builder.try_init()
    };
    result.map_err(|e| e.to_string())
}
