//! Log set-up: `tracing` to stderr, as text or JSON; each pod sync's span reports its duration.

use std::io::IsTerminal;

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
        .or_else(|_| EnvFilter::try_new(format!(
            "{level},h2=info,hyper=info,hyper_util=info,tower=info,kube_client=info,kube_runtime=info,rustls=info"
        )))
        .map_err(|e| e.to_string())?;
    let ansi = use_ansi(
        json,
        std::io::stderr().is_terminal(),
        std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty()),
    );
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_span_events(FmtSpan::CLOSE)
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    let result = if json {
        builder.json().with_current_span(true).try_init()
    } else {
        builder.try_init()
    };
    result.map_err(|e| e.to_string())
}

/// Colour only for a person at a terminal: a log file or pipe gets plain text, JSON is for
/// machines, and `NO_COLOR` (no-color.org) is honoured here because `with_ansi` overrides
/// tracing-subscriber's own check of it.
pub fn use_ansi(json: bool, stderr_is_terminal: bool, no_color: bool) -> bool {
    !json && stderr_is_terminal && !no_color
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_only_for_text_on_a_terminal_without_no_color() {
        assert!(use_ansi(false, true, false));
        assert!(!use_ansi(false, false, false), "a file or pipe");
        assert!(!use_ansi(false, true, true), "NO_COLOR");
        assert!(!use_ansi(true, true, false));
        assert!(!use_ansi(true, false, false));
    }
}
