//! The query of the streaming endpoints, read as the Go kubelet reads it: the streams of an
//! exec or attach (remotecommand's `NewOptions`: `input`, `output`, `error` and `tty`, Go's
//! `api.Exec*Param` names, each on only when `1`, as the API server sends them), the `command`
//! of an exec (repeated), the `cmd` of `/run` (split on spaces), and the `port`s of a
//! port-forward (portforward's `NewV4Options`: required over WebSocket, where no stream header
//! carries them).

use hyper::HeaderMap;
use hyper::header::{CONNECTION, UPGRADE};

/// A query, decoded: its pairs in order.
pub type Query = [(String, String)];

/// Which streams an exec or attach asks for (Go's remotecommand `Options`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StreamOptions {
    /// The client sends stdin.
    pub stdin: bool,
    /// The client reads stdout.
    pub stdout: bool,
    /// The client reads stderr (never with a tty).
    pub stderr: bool,
    /// A terminal.
    pub tty: bool,
}

/// A query the endpoint refuses (400, Go's words).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OptionsError {
    /// No stream asked for.
    #[error("you must specify at least 1 of stdin, stdout, stderr")]
    NoStreams,
    /// A WebSocket port-forward without `port`.
    #[error("query parameter \"port\" is required")]
    PortRequired,
    /// `port=`.
    #[error("query parameter \"port\" cannot be empty")]
    EmptyPort,
    /// Not a 16-bit port number (`reason` as Go's strconv).
    #[error("unable to parse {value:?} as a port: strconv.ParseUint: parsing {part:?}: {reason}")]
    BadPort {
        /// The whole `port` value.
        value: String,
        /// The comma-separated piece that failed.
        part: String,
        /// `invalid syntax` or `value out of range`.
        reason: &'static str,
    },
    /// Port 0.
    #[error("port {0:?} must be > 0")]
    ZeroPort(String),
}

/// The first value of `key`, as Go's `FormValue` ("" when absent).
pub fn form_value<'a>(query: &'a Query, key: &str) -> &'a str {
    query
        .iter()
        .find(|(k, _)| k == key)
        .map_or("", |(_, v)| v.as_str())
}

/// Every value of `key`, in order.
pub fn form_values(query: &Query, key: &str) -> Vec<String> {
    query
        .iter()
        .filter(|(k, _)| k == key)
        .map(|(_, v)| v.clone())
        .collect()
}

/// The streams of an exec or attach. A tty has no stderr (Go drops it without an error).
pub fn stream_options(query: &Query) -> Result<StreamOptions, OptionsError> {
    let on = |key| form_value(query, key) == "1";
    let tty = on("tty");
    let options = StreamOptions {
        stdin: on("input"),
        stdout: on("output"),
        stderr: on("error") && !tty,
        tty,
    };
    if !options.stdin && !options.stdout && !options.stderr {
        return Err(OptionsError::NoStreams);
    }
    Ok(options)
}

/// The command of an exec: every `command` value, in order.
pub fn exec_command(query: &Query) -> Vec<String> {
    form_values(query, "command")
}

/// The command of `/run`: `cmd` split on every space (Go's `strings.Split`, so `""` is one
/// empty argument and two spaces make an empty one between).
pub fn run_command(query: &Query) -> Vec<String> {
    form_value(query, "cmd")
        .split(' ')
        .map(str::to_string)
        .collect()
}

/// The ports of a port-forward: from the query over WebSocket (each value a comma-separated
/// list), none otherwise (SPDY clients name the port in each stream's headers).
pub fn port_forward_ports(query: &Query, websocket: bool) -> Result<Vec<i32>, OptionsError> {
    if !websocket {
        return Ok(Vec::new());
    }
    let values = form_values(query, "port");
    if values.is_empty() {
        return Err(OptionsError::PortRequired);
    }
    let mut ports = Vec::new();
    for value in &values {
        if value.is_empty() {
            return Err(OptionsError::EmptyPort);
        }
        for part in value.split(',') {
            let port = parse_u16(part).map_err(|reason| OptionsError::BadPort {
                value: value.clone(),
                part: part.to_string(),
                reason,
            })?;
            if port == 0 {
                return Err(OptionsError::ZeroPort(value.clone()));
            }
            ports.push(i32::from(port));
        }
    }
    Ok(ports)
}

/// Go's `strconv.ParseUint(s, 10, 16)`: ASCII digits only, the error's reason in its words.
fn parse_u16(s: &str) -> Result<u16, &'static str> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err("invalid syntax");
    }
    s.parse().map_err(|_| "value out of range")
}

/// Whether a `Connection` header names `upgrade` (Go's `httpstream.IsUpgradeRequest`).
pub fn is_upgrade_request(headers: &HeaderMap) -> bool {
    headers.get_all(CONNECTION).iter().any(|v| {
        v.to_str()
            .is_ok_and(|v| v.to_ascii_lowercase().contains("upgrade"))
    })
}

/// Whether the request upgrades to WebSocket (Go's `wsstream.IsWebSocketRequest`: `Upgrade:
/// websocket` and `upgrade` as one of the `Connection` tokens of the first header).
pub fn is_websocket_request(headers: &HeaderMap) -> bool {
    let upgrade = headers
        .get(UPGRADE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if !upgrade.eq_ignore_ascii_case("websocket") {
        return false;
    }
    headers
        .get(CONNECTION)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            // Go's `(^|.*,\s*)upgrade($|\s*,)` on the lowercased value: a token, spaces
            // allowed after a comma and, before the next comma, after the word.
            let v = v.to_ascii_lowercase();
            let tokens: Vec<&str> = v.split(',').collect();
            tokens.iter().enumerate().any(|(i, token)| {
                let token = if i == 0 { token } else { token.trim_start() };
                token == "upgrade" || (i + 1 < tokens.len() && token.trim_end() == "upgrade")
            })
        })
}

#[cfg(test)]
mod tests;
