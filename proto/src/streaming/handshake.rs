//! The upgrade handshake: which transport (SPDY/3.1 or WebSocket) and which subprotocol a client's
//! request gets, and Go's answers when none fits (httpstream.Handshake, the SPDY response
//! upgrader, x/net/websocket's server handshake and wsstream's protocol choice).

use http::{HeaderMap, HeaderValue, Request, Response, StatusCode};

/// Which endpoint the handshake is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    /// exec and attach (`*.channel.k8s.io`).
    RemoteCommand,
    /// port-forward (`portforward.k8s.io`, or channel pairs over WebSocket).
    PortForward,
}

/// SPDY remotecommand subprotocols the server accepts, most preferred first (Go's
/// `SupportedStreamingProtocols`, with v5 as Go 1.30+).
pub const SPDY_REMOTE_COMMAND_PROTOCOLS: [&str; 5] = [
    "v5.channel.k8s.io",
    "v4.channel.k8s.io",
    "v3.channel.k8s.io",
    "v2.channel.k8s.io",
    "channel.k8s.io",
];
/// SPDY port-forward subprotocols.
pub const SPDY_PORT_FORWARD_PROTOCOLS: [&str; 1] = ["portforward.k8s.io"];
/// WebSocket remotecommand subprotocols (`""`: none offered, binary with v1 status texts).
pub const WS_REMOTE_COMMAND_PROTOCOLS: [&str; 6] = [
    "",
    "channel.k8s.io",
    "base64.channel.k8s.io",
    "v4.channel.k8s.io",
    "v4.base64.channel.k8s.io",
    "v5.channel.k8s.io",
];
/// WebSocket port-forward subprotocols.
pub const WS_PORT_FORWARD_PROTOCOLS: [&str; 3] =
    ["", "v4.channel.k8s.io", "v4.base64.channel.k8s.io"];

/// The header carrying the offered / chosen SPDY subprotocol.
pub const HEADER_PROTOCOL_VERSION: &str = "X-Stream-Protocol-Version";
/// The header listing what the server accepts, on a 403.
pub const HEADER_ACCEPTED_PROTOCOL_VERSIONS: &str = "X-Accepted-Stream-Protocol-Versions";

/// The remotecommand protocol generation a subprotocol name stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Version {
    V1,
    V2,
    V3,
    V4,
    V5,
}

impl Version {
    pub(crate) fn of(protocol: &str) -> Version {
        match protocol.trim_start_matches("base64.") {
            p if p.starts_with("v5.") => Version::V5,
            p if p.starts_with("v4.") => Version::V4,
            p if p.starts_with("v3.") => Version::V3,
            p if p.starts_with("v2.") => Version::V2,
            _ => Version::V1,
        }
    }
}

/// The transport a negotiation picked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Transport {
    Spdy,
    /// `accept`: the Sec-WebSocket-Accept value; `base64`: text messages with base64 payloads.
    WebSocket {
        accept: String,
        base64: bool,
    },
}

/// A successful negotiation: what to answer (101) and how to speak afterwards.
#[derive(Debug, Clone)]
pub struct Negotiated {
    pub(crate) endpoint: Endpoint,
    pub(crate) transport: Transport,
    pub(crate) protocol: String,
}

/// Go's answer to a request it cannot upgrade: status code, message and headers.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct HandshakeError {
    status: StatusCode,
    message: String,
    /// x/net/websocket writes raw text without Go's `http.Error` headers.
    plain: bool,
    headers: Vec<(&'static str, String)>,
}

impl HandshakeError {
    fn http_error(status: StatusCode, message: String) -> HandshakeError {
        HandshakeError {
            status,
            message,
            plain: false,
            headers: Vec::new(),
        }
    }

    fn websocket(status: StatusCode, message: &str) -> HandshakeError {
        HandshakeError {
            status,
            message: message.to_string(),
            plain: true,
            headers: Vec::new(),
        }
    }

    /// The HTTP status to answer with.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The HTTP error answer, as Go writes it.
    pub fn response(&self) -> Response<String> {
        let mut response = Response::new(String::new());
        *response.status_mut() = self.status;
        let headers = response.headers_mut();
        for (name, value) in &self.headers {
            if let Ok(value) = HeaderValue::from_str(value) {
                headers.append(*name, value);
            }
        }
        if self.plain {
            *response.body_mut() = self.message.clone();
        } else {
            // Go's http.Error.
            headers.insert(
                http::header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; charset=utf-8"),
            );
            headers.insert(
                "X-Content-Type-Options",
                HeaderValue::from_static("nosniff"),
            );
            *response.body_mut() = format!("{}\n", self.message);
        }
        response
    }
}

impl Negotiated {
    /// The 101 Switching Protocols answer (headers only) to send before upgrading.
    pub fn response(&self) -> Response<()> {
        let mut response = Response::new(());
        *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
        let headers = response.headers_mut();
        match &self.transport {
            Transport::Spdy => {
                headers.insert(
                    http::header::CONNECTION,
                    HeaderValue::from_static("Upgrade"),
                );
                headers.insert(http::header::UPGRADE, HeaderValue::from_static("SPDY/3.1"));
                if let Ok(value) = HeaderValue::from_str(&self.protocol) {
                    headers.insert(HEADER_PROTOCOL_VERSION, value);
                }
            }
            Transport::WebSocket { accept, .. } => {
                headers.insert(http::header::UPGRADE, HeaderValue::from_static("websocket"));
                headers.insert(
                    http::header::CONNECTION,
                    HeaderValue::from_static("Upgrade"),
                );
                if let Ok(value) = HeaderValue::from_str(accept) {
                    headers.insert(http::header::SEC_WEBSOCKET_ACCEPT, value);
                }
                if !self.protocol.is_empty()
                    && let Ok(value) = HeaderValue::from_str(&self.protocol)
                {
                    headers.insert(http::header::SEC_WEBSOCKET_PROTOCOL, value);
                }
            }
        }
        response
    }

    /// The negotiated subprotocol (e.g. "v4.channel.k8s.io"; "" for a WebSocket client that
    /// offered none).
    pub fn protocol(&self) -> &str {
        &self.protocol
    }

    /// Whether the connection speaks WebSocket (else SPDY/3.1).
    pub fn is_websocket(&self) -> bool {
        matches!(self.transport, Transport::WebSocket { .. })
    }

    /// The endpoint this negotiation was for.
    pub fn endpoint(&self) -> Endpoint {
        self.endpoint
    }

    pub(crate) fn version(&self) -> Version {
        Version::of(&self.protocol)
    }
}

/// Picks the protocol from the client's upgrade request (SPDY: `Upgrade: SPDY/3.1` +
/// `X-Stream-Protocol-Version`; WebSocket: `Sec-WebSocket-Protocol`), as Go does.
pub fn negotiate<B>(req: &Request<B>, endpoint: Endpoint) -> Result<Negotiated, HandshakeError> {
    if is_websocket_request(req.headers()) {
        negotiate_websocket(req, endpoint)
    } else {
        negotiate_spdy(req.headers(), endpoint)
    }
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> &'a str {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

/// wsstream.IsWebSocketRequest: `Upgrade: websocket` and an `upgrade` token in `Connection`.
fn is_websocket_request(headers: &HeaderMap) -> bool {
    header(headers, "upgrade").eq_ignore_ascii_case("websocket")
        && header(headers, "connection")
            .to_ascii_lowercase()
            .split(',')
            .any(|token| token.trim() == "upgrade")
}

fn negotiate_spdy(headers: &HeaderMap, endpoint: Endpoint) -> Result<Negotiated, HandshakeError> {
    let server: &[&str] = match endpoint {
        Endpoint::RemoteCommand => &SPDY_REMOTE_COMMAND_PROTOCOLS,
        Endpoint::PortForward => &SPDY_PORT_FORWARD_PROTOCOLS,
    };
    let client: Vec<&str> = headers
        .get_all(HEADER_PROTOCOL_VERSION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|p| p.trim_matches(' '))
        .filter(|p| !p.is_empty())
        .collect();
    if client.is_empty() {
        return Err(HandshakeError::http_error(
            StatusCode::BAD_REQUEST,
            format!("unable to upgrade: {HEADER_PROTOCOL_VERSION} is required"),
        ));
    }
    let Some(chosen) = client.iter().find(|p| server.contains(p)) else {
        let mut err = HandshakeError::http_error(
            StatusCode::FORBIDDEN,
            format!(
                "unable to upgrade: unable to negotiate protocol: client supports [{}], server accepts [{}]",
                client.join(" "),
                server.join(" ")
            ),
        );
        err.headers = server
            .iter()
            .map(|p| (HEADER_ACCEPTED_PROTOCOL_VERSIONS, p.to_string()))
            .collect();
        return Err(err);
    };
    let connection = header(headers, "connection").to_ascii_lowercase();
    let upgrade = header(headers, "upgrade").to_ascii_lowercase();
    if !connection.contains("upgrade") || !upgrade.contains("spdy/3.1") {
        return Err(HandshakeError::http_error(
            StatusCode::BAD_REQUEST,
            format!(
                "unable to upgrade: missing upgrade headers in request: {}",
                go_header_dump(headers)
            ),
        ));
    }
    Ok(Negotiated {
        endpoint,
        transport: Transport::Spdy,
        protocol: chosen.to_string(),
    })
}

/// Go's `%#v` of an `http.Header` (keys canonical and sorted), as the upgrader's 400 shows it.
fn go_header_dump(headers: &HeaderMap) -> String {
    let mut keys: Vec<String> = headers.keys().map(|k| canonical_key(k.as_str())).collect();
    keys.sort();
    keys.dedup();
    let entries: Vec<String> = keys
        .iter()
        .map(|key| {
            let values: Vec<String> = headers
                .get_all(key.as_str())
                .iter()
                .map(|v| format!("{:?}", String::from_utf8_lossy(v.as_bytes())))
                .collect();
            format!("{key:?}:[]string{{{}}}", values.join(", "))
        })
        .collect();
    format!("http.Header{{{}}}", entries.join(", "))
}

fn canonical_key(key: &str) -> String {
    key.split('-')
        .map(|part| {
            let mut chars = part.chars();
            match chars.next() {
                Some(first) => {
                    first.to_ascii_uppercase().to_string() + &chars.as_str().to_ascii_lowercase()
                }
                None => String::new(),
            }
        })
        .collect::<Vec<_>>()
        .join("-")
}

fn negotiate_websocket<B>(
    req: &Request<B>,
    endpoint: Endpoint,
) -> Result<Negotiated, HandshakeError> {
    let headers = req.headers();
    if req.method() != http::Method::GET {
        return Err(HandshakeError::websocket(
            StatusCode::METHOD_NOT_ALLOWED,
            "bad method",
        ));
    }
    let key = header(headers, "sec-websocket-key");
    if key.is_empty() {
        return Err(HandshakeError::websocket(
            StatusCode::BAD_REQUEST,
            "mismatch challenge/response",
        ));
    }
    if header(headers, "sec-websocket-version") != "13" {
        let mut err =
            HandshakeError::websocket(StatusCode::BAD_REQUEST, "missing or bad WebSocket Version");
        err.headers
            .push(("Sec-WebSocket-Version", "13".to_string()));
        return Err(err);
    }
    // x/net/websocket reads only the first Sec-WebSocket-Protocol header.
    let offered: Vec<&str> = match header(headers, "sec-websocket-protocol").trim() {
        "" => vec![""],
        list => list.split(',').map(str::trim).collect(),
    };
    let allowed: &[&str] = match endpoint {
        Endpoint::RemoteCommand => &WS_REMOTE_COMMAND_PROTOCOLS,
        Endpoint::PortForward => &WS_PORT_FORWARD_PROTOCOLS,
    };
    let Some(chosen) = offered.iter().find(|p| allowed.contains(p)) else {
        return Err(HandshakeError::websocket(StatusCode::FORBIDDEN, ""));
    };
    let accept = tokio_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes());
    Ok(Negotiated {
        endpoint,
        transport: Transport::WebSocket {
            accept,
            base64: chosen.contains("base64."),
        },
        protocol: chosen.to_string(),
    })
}
