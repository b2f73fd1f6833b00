//! Log set-up: `tracing` to stderr, as text or JSON, with each span's duration on close so that
//! every CRI call's span reports how long it took.

use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::FmtSpan;

use crate::config::LogFormat;

/// Installs the global subscriber; `level` is an `EnvFilter` directive (`info`, `debug`, ...).
pub fn init(level: &str, format: LogFormat) -> Result<(), String> {
    let filter = EnvFilter::try_new(level).map_err(|e| format!("log level {level:?}: {e}"))?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_span_events(FmtSpan::CLOSE)
        .with_writer(std::io::stderr);
    let result = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().with_current_span(true).try_init(),
    };
    result.map_err(|e| e.to_string())
}
