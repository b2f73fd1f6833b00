//! Log set-up: `tracing` to stderr, as text or JSON, with each span's duration on close so that
//! every CRI call's span reports how long it took.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::FmtSpan;

use crate::config::LogFormat;

/// Installs the global subscriber; `level` is an `EnvFilter` directive (`info`, `debug`, ...).
pub fn init(level: &str, format: LogFormat) -> Result<(), String> {
    let filter = EnvFilter::try_new(level).map_err(|e| format!("log level {level:?}: {e}"))?;
    let ansi = use_ansi(
        format,
        std::io::stderr().is_terminal(),
        std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty()),
    );
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_span_events(FmtSpan::CLOSE)
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    let result = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().with_current_span(true).try_init(),
    };
    result.map_err(|e| e.to_string())
}

/// Colour only for a person at a terminal: a log file or pipe gets plain text, JSON is for
/// machines, and `NO_COLOR` (no-color.org) is honoured here because `with_ansi` overrides
/// tracing-subscriber's own check of it.
pub fn use_ansi(format: LogFormat, stderr_is_terminal: bool, no_color: bool) -> bool {
    format == LogFormat::Text && stderr_is_terminal && !no_color
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_only_for_text_on_a_terminal_without_no_color() {
        assert!(use_ansi(LogFormat::Text, true, false));
        assert!(!use_ansi(LogFormat::Text, false, false), "a file or pipe");
        assert!(!use_ansi(LogFormat::Text, true, true), "NO_COLOR");
        assert!(!use_ansi(LogFormat::Json, true, false));
        assert!(!use_ansi(LogFormat::Json, false, false));
    }
}
