//! Entry points for the fuzz targets under `fuzz/` (feature `fuzzing`, off by default; not an
//! API): each takes arbitrary bytes, feeds them to one reader of input the kubelet does not
//! control the way the kubelet does, and discards the result. The targets look for panics,
//! hangs and runaway allocations; a few also check an invariant the parser promises (stated
//! where it is checked). Where a parser has settings, the first byte chooses them.
//!
//! A submodule of `app` because, like the process, it reaches every layer (see
//! ARCHITECTURE.md and `integration/tests/module_layers.rs`).

use std::io;
use std::path::Path;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};

use crate::certificate::{kubeconfig, pem};
use crate::manifest::{self, quantity, validate};
use crate::server::{logs, stats, stream_options};

/// A fixed "now" (2026-01-01T00:00:00Z) for the certificate checks, so a run depends only on
/// its input.
const NOW: i64 = 1_767_225_600;

/// Bytes handed out at most `chunk` at a time, never pending: a peer's answer arriving in
/// pieces.
struct Pieces<'a> {
    rest: &'a [u8],
    chunk: usize,
}

impl AsyncRead for Pieces<'_> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let n = self.rest.len().min(self.chunk).min(buf.remaining());
        let (now, later) = self.rest.split_at(n);
        buf.put_slice(now);
        self.rest = later;
        Poll::Ready(Ok(()))
    }
}

/// What a pod's HTTP endpoint answers a plain-HTTP probe (`prober::http::wire`): the head,
/// a length-delimited, chunked or close-delimited body, a redirect's `Location`, then the
/// verdict. The first byte sets the size of the reads the answer arrives in.
pub fn probe_http(data: &[u8]) {
    let Some((&chunk, answer)) = data.split_first() else {
        return;
    };
    let mut stream = Pieces {
        rest: answer,
        chunk: usize::from(chunk) * 8 + 1,
    };
    let mut read = std::pin::pin!(crate::prober::http::judge_answer(&mut stream));
    // The reader is never pending, so neither is a reader that only waits on it.
    let polled = read
        .as_mut()
        .poll(&mut Context::from_waker(std::task::Waker::noop()));
    assert!(polled.is_ready(), "reading a whole answer stalled");
}

/// A static pod manifest as the file and URL sources take it (`source::decode`): YAML or
/// JSON documents (Pod, PodList, List), each pod given its static-pod identity and the API's
/// defaults, then validated.
pub fn manifest(data: &[u8]) {
    let Ok(pods) = manifest::parse(data) else {
        return;
    };
    for pod in pods {
        let pod = manifest::static_pod(pod, "file", "fuzz-node", b"file:/etc/kubernetes/manifests");
        if let Err(errors) = validate::validate(&pod) {
            let _ = validate::summary(&errors);
        }
    }
}

/// A KubeletConfiguration file (`--config`) over the defaults, then the checks `load`
/// makes.
pub fn kubelet_config(data: &[u8]) {
    // The file is read as UTF-8 text (read_to_string) before it is parsed.
    if let Ok(text) = std::str::from_utf8(data) {
        crate::config::Config::read_file_for_fuzzing(text);
    }
}

/// The query of a kubelet API request: `/containerLogs` (follow, tail, since, limits), the
/// streaming endpoints' options, command and ports (exec, attach, run, portForward over both
/// transports), and `/stats/summary`'s.
pub fn server_query(data: &[u8]) {
    let query = String::from_utf8_lossy(data);
    let _ = logs::log_query(&query);
    let pairs = logs::parse_query(&query);
    let _ = stream_options::stream_options(&pairs);
    let _ = stream_options::exec_command(&pairs);
    let _ = stream_options::run_command(&pairs);
    for websocket in [false, true] {
        let _ = stream_options::port_forward_ports(&pairs, websocket);
    }
    let _ = stats::cpu_and_memory_only(&query);
}

/// Certificates and keys the kubelet reads; the first byte picks: 0 a PEM bundle (a store's
/// pair file, a client certificate: its leaf, the expiry check, the pair as a signing key),
/// 1 one DER certificate (the one reader's fields: rotation's, a client certificate's subject,
/// the serving certificate's validity; its version and public key), 2 a kubeconfig (its embedded client certificate
/// checked as bootstrap checks it, then loaded into a client as kube's loader does; file
/// references and credential plugins removed, so nothing is read or run), 3 a PEM key.
pub fn certificate(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    match mode % 4 {
        0 => {
            let _ = pem::leaf_info(rest);
            let _ = pem::unexpired(rest, NOW);
            let _ = pem::certified_key(rest);
        }
        1 => {
            let _ = pem::info(rest);
            let _ = pem::unsupported_version(rest);
            let _ = pem::public_key_info(rest);
        }
        2 => {
            if let Ok(text) = std::str::from_utf8(rest) {
                kubeconfig_text(text);
            }
        }
        _ => {
            let _ = pem::private_key(rest);
        }
    }
}

fn kubeconfig_text(text: &str) {
    let Ok(mut config) = kube::config::Kubeconfig::from_yaml(text) else {
        return;
    };
    for named in &mut config.auth_infos {
        if let Some(auth) = named.auth_info.as_mut() {
            auth.client_certificate = None;
            auth.client_key = None;
            auth.token_file = None;
            auth.exec = None;
            auth.auth_provider = None;
            let _ = kubeconfig::check_credentials(auth, NOW);
        }
    }
    for named in &mut config.clusters {
        if let Some(cluster) = named.cluster.as_mut() {
            cluster.certificate_authority = None;
        }
    }
    let _ = kubeconfig::current_cluster(&config);
    let _ = kubeconfig::bootstrapped(&config, Path::new("/var/lib/kubelet/pki/current.pem"));
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread().build() else {
        return;
    };
    runtime.block_on(async {
        let options = kube::config::KubeConfigOptions::default();
        if let Ok(loaded) = kube::Config::from_custom_kubeconfig(config, &options).await {
            let _ = kubeconfig::client(loaded, Path::new("/etc/kubernetes/kubelet.conf"));
        }
    });
}

/// A Kubernetes quantity (resources, limits, sizes in manifests and configuration): what
/// parses must print as text that parses to the same value.
pub fn quantity(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(parsed) = quantity::parse_quantity(text) else {
        return;
    };
    let printed = parsed.to_string();
    let again = quantity::parse_quantity(&printed);
    assert!(
        again == Ok(parsed),
        "{text:?} parses as {parsed:?}, printed {printed:?}, which parses as {again:?}"
    );
    let _ = (parsed.value_ceil(), parsed.milli_ceil());
}
