//! The streaming endpoints' queries against what Go's NewOptions and NewV4Options accept.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use hyper::header::HeaderValue;

use super::*;
use crate::server::logs::parse_query;

fn opts(q: &str) -> Result<StreamOptions, OptionsError> {
    stream_options(&parse_query(q))
}

#[test]
fn streams_are_on_only_with_1() {
    assert_eq!(
        opts("input=1&output=1&error=1").unwrap(),
        StreamOptions {
            stdin: true,
            stdout: true,
            stderr: true,
            tty: false
        }
    );
    // `true` is not `1` for remotecommand (the API server sends `1`).
    assert_eq!(
        opts("output=true&error=1").unwrap(),
        StreamOptions {
            stderr: true,
            ..Default::default()
        }
    );
    assert_eq!(
        opts("output=true").unwrap_err().to_string(),
        "you must specify at least 1 of stdin, stdout, stderr"
    );
    assert_eq!(opts("").unwrap_err(), OptionsError::NoStreams);
    // PodExecOptions' own names are the API server's, not the kubelet's.
    assert_eq!(
        opts("stdin=1&stdout=1&stderr=1"),
        Err(OptionsError::NoStreams)
    );
    // The first value counts, as FormValue.
    assert_eq!(opts("input=0&input=1"), Err(OptionsError::NoStreams));
}

#[test]
fn a_tty_drops_stderr() {
    let o = opts("tty=1&error=1&output=1").unwrap();
    assert!(o.tty && o.stdout && !o.stderr);
    // stderr alone with a tty leaves nothing.
    assert_eq!(opts("tty=1&error=1"), Err(OptionsError::NoStreams));
}

#[test]
fn commands() {
    let q = parse_query("command=sh&command=-c&command=echo%20hi+there&output=1");
    assert_eq!(exec_command(&q), ["sh", "-c", "echo hi there"]);
    assert!(exec_command(&parse_query("output=1")).is_empty());
    assert_eq!(run_command(&parse_query("cmd=ls+-l")), ["ls", "-l"]);
    assert_eq!(run_command(&parse_query("cmd=a%20%20b")), ["a", "", "b"]);
    assert_eq!(run_command(&parse_query("")), [""]);
}

#[test]
fn port_forward_ports_as_new_v4_options() {
    let ports = |q: &str| port_forward_ports(&parse_query(q), true);
    assert_eq!(ports("port=80&port=443,8080").unwrap(), [80, 443, 8080]);
    assert_eq!(ports("port=080").unwrap(), [80]);
    assert_eq!(
        ports("").unwrap_err().to_string(),
        r#"query parameter "port" is required"#
    );
    assert_eq!(
        ports("port=").unwrap_err().to_string(),
        r#"query parameter "port" cannot be empty"#
    );
    assert_eq!(
        ports("port=80,x").unwrap_err().to_string(),
        r#"unable to parse "80,x" as a port: strconv.ParseUint: parsing "x": invalid syntax"#
    );
    assert_eq!(
        ports("port=70000").unwrap_err().to_string(),
        r#"unable to parse "70000" as a port: strconv.ParseUint: parsing "70000": value out of range"#
    );
    assert_eq!(
        ports("port=80,").unwrap_err().to_string(),
        r#"unable to parse "80," as a port: strconv.ParseUint: parsing "": invalid syntax"#
    );
    assert_eq!(
        ports("port=%2B80").unwrap_err().to_string(),
        r#"unable to parse "+80" as a port: strconv.ParseUint: parsing "+80": invalid syntax"#
    );
    assert_eq!(
        ports("port=0,80").unwrap_err().to_string(),
        r#"port "0,80" must be > 0"#
    );
    // SPDY: the ports come with each stream; the query is not read.
    assert!(
        port_forward_ports(&parse_query("port=x"), false)
            .unwrap()
            .is_empty()
    );
}

fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.append(*k, HeaderValue::from_static(v));
    }
    h
}

#[test]
fn upgrade_and_websocket_requests() {
    let spdy = headers(&[("connection", "Upgrade"), ("upgrade", "SPDY/3.1")]);
    assert!(is_upgrade_request(&spdy));
    assert!(!is_websocket_request(&spdy));
    let ws = headers(&[
        ("connection", "keep-alive, Upgrade"),
        ("upgrade", "WebSocket"),
    ]);
    assert!(is_upgrade_request(&ws) && is_websocket_request(&ws));
    assert!(is_websocket_request(&headers(&[
        ("connection", "upgrade ,close"),
        ("upgrade", "websocket")
    ])));
    // Go's regular expression: the word itself, not a part of a token.
    assert!(!is_websocket_request(&headers(&[
        ("connection", "upgraded"),
        ("upgrade", "websocket")
    ])));
    assert!(!is_websocket_request(&headers(&[
        ("connection", "upgrade "),
        ("upgrade", "websocket")
    ])));
    assert!(!is_websocket_request(&headers(&[("upgrade", "websocket")])));
    assert!(!is_upgrade_request(&headers(&[("connection", "close")])));
    // Any Connection header naming upgrade makes an upgrade request.
    assert!(is_upgrade_request(&headers(&[
        ("connection", "close"),
        ("connection", "x-Upgrade-y")
    ])));
}
