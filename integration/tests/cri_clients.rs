//! ferrolet-cri served to gRPC clients that are not ours: Python `grpcio` (C-core, which sends
//! the socket path percent-encoded as `:authority`, as grpc-java and the Go kubelet ≤ 1.28 send
//! it raw), and a raw HTTP/2 client that puts on the wire what those libraries put there.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test reports failure by panicking

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use ferrolet_cri::runtime::RUNTIME_NAME;
use ferrolet_integration::cri::ScratchNode;
use ferrolet_integration::registry::OPEN_REGISTRY;
use ferrolet_proto::cri::{
    ImageSpec, ImageStatusRequest, ListPodSandboxRequest, ListPodSandboxResponse, PullImageRequest,
    PullImageResponse, VersionRequest, VersionResponse,
};
use ferrolet_proto::raw_h2::{BlockShape, RawH2Client, grpc_request_fields};
use prost::Message;

/// The venv `make env` installs grpcio into (scripts/env.sh).
const GRPCIO_PYTHON: &str = "/var/lib/ferrolet/env/python/bin/python3";
const VERSION: &str = "/runtime.v1.RuntimeService/Version";
const LIST_PODS: &str = "/runtime.v1.RuntimeService/ListPodSandbox";
const PULL: &str = "/runtime.v1.ImageService/PullImage";

/// ferrolet-cri with h2's debug lines, which name a refused `:authority`.
async fn node(name: &str, extra_config: &str) -> ScratchNode {
    ScratchNode::start_logging(name, "info,h2=debug", extra_config).await
}

fn image_spec(image: &str) -> Option<ImageSpec> {
    Some(ImageSpec {
        image: image.into(),
        ..Default::default()
    })
}

/// One call's outcome as grpcio reported it.
#[derive(Debug, serde::Deserialize)]
struct GrpcioResult {
    code: String,
    #[serde(default)]
    response: String,
    #[serde(default)]
    details: String,
}

/// Makes `calls` (method, encoded request) with Python grpcio over `socket`.
fn grpcio_calls(socket: &Path, calls: &[(&str, Vec<u8>)]) -> Vec<GrpcioResult> {
    assert!(
        Path::new(GRPCIO_PYTHON).exists(),
        "{GRPCIO_PYTHON} is missing: `make env` installs Python grpcio"
    );
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("python/cri_call.py");
    let input: Vec<_> = calls
        .iter()
        .map(|(method, request)| serde_json::json!({"method": method, "request": hex::encode(request)}))
        .collect();
    let mut child = Command::new(GRPCIO_PYTHON)
        .arg(&script)
        .arg(socket)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(serde_json::to_string(&input).unwrap().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "cri_call.py failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn decode<M: Message + Default>(result: &GrpcioResult) -> M {
    assert_eq!(result.code, "OK", "{}", result.details);
    M::decode(hex::decode(&result.response).unwrap().as_slice()).unwrap()
}

#[tokio::test]
async fn grpcio_calls_version_list_pod_sandbox_and_pull_image() {
    let node = node("grpcio", "").await;
    let image = format!("{OPEN_REGISTRY}/ferrolet/busybox:1");
    let pull = PullImageRequest {
        image: image_spec(&image),
        ..Default::default()
    };
    let calls = [
        (
            VERSION,
            VersionRequest {
                version: "v1".into(),
            }
            .encode_to_vec(),
        ),
        (LIST_PODS, ListPodSandboxRequest::default().encode_to_vec()),
        (PULL, pull.encode_to_vec()),
    ];
    let results = grpcio_calls(node.cri.socket(), &calls);
    assert_eq!(results.len(), 3);
    let version: VersionResponse = decode(&results[0]);
    assert_eq!(version.runtime_name, RUNTIME_NAME);
    assert_eq!(version.runtime_api_version, "v1");
    let pods: ListPodSandboxResponse = decode(&results[1]);
    assert!(pods.items.is_empty(), "{pods:?}");
    let pulled: PullImageResponse = decode(&results[2]);
    assert!(pulled.image_ref.starts_with("sha256:"), "{pulled:?}");

    // What grpcio pulled is what our own client sees.
    let status = node
        .cri
        .images()
        .await
        .image_status(ImageStatusRequest {
            image: image_spec(&image),
            verbose: false,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(status.image.map(|i| i.id), Some(pulled.image_ref));
    let log = node.cri.log_text();
    assert!(!log.contains("malformed"), "{log}");
    node.teardown().await;
}

#[tokio::test]
async fn grpcio_is_refused_without_the_authority_rewrite() {
    // Why the rewrite exists, shown with the same client: h2 alone resets grpcio's requests.
    let node = node("grpcio-strict", "accept_any_authority = false\n").await;
    let calls = [(VERSION, VersionRequest::default().encode_to_vec())];
    let results = grpcio_calls(node.cri.socket(), &calls);
    assert_ne!(results[0].code, "OK", "{results:?}");
    eprintln!(
        "grpcio without the rewrite: {} {}",
        results[0].code, results[0].details
    );
    let log = node.cri.log_text();
    let refused = log.lines().find(|l| l.contains("malformed authority"));
    assert!(refused.is_some(), "{log}");
    eprintln!("h2 without the rewrite: {}", refused.unwrap_or_default());
    node.teardown().await;
}

async fn raw_client(node: &ScratchNode) -> RawH2Client<tokio::net::UnixStream> {
    let io = tokio::net::UnixStream::connect(node.cri.socket())
        .await
        .unwrap();
    RawH2Client::handshake(io).await.unwrap()
}

/// One Version call with the given header fields, laid out as `shape` says.
async fn raw_version(
    client: &mut RawH2Client<tokio::net::UnixStream>,
    fields: &[(&[u8], &[u8])],
    shape: &BlockShape,
) -> VersionResponse {
    let block = client.encode(fields).unwrap();
    let request = VersionRequest::default().encode_to_vec();
    let stream = client.send_grpc(&block, shape, &request).await.unwrap();
    let response = client.response(stream).await.unwrap();
    assert_eq!(response.grpc_status(), Some(0), "{response:?}");
    VersionResponse::decode(response.grpc_message().unwrap()).unwrap()
}

#[tokio::test]
async fn raw_http2_any_authority_split_blocks_and_a_thousand_calls_on_one_connection() {
    let node = node("raw-h2", "").await;
    let mut client = raw_client(&node).await;

    // The authorities other gRPC libraries send, and none at all.
    let socket = node.cri.socket();
    let socket = socket.to_str().unwrap().as_bytes();
    for authority in [
        Some(socket),
        Some(b"/run/x.sock".as_slice()),
        Some(b""),
        Some(b"%2Frun%2Fx.sock"),
        Some(b"localhost"),
        None,
    ] {
        let fields = grpc_request_fields(VERSION.as_bytes(), authority);
        let v = raw_version(&mut client, &fields, &BlockShape::default()).await;
        assert_eq!(v.runtime_name, RUNTIME_NAME, "{authority:?}");
    }

    // A header block split over CONTINUATION frames, padded and prioritised HEADERS.
    let fields = grpc_request_fields(VERSION.as_bytes(), Some(b"/run/x.sock"));
    for shape in [
        BlockShape {
            pieces: 5,
            ..Default::default()
        },
        BlockShape {
            padding: 200,
            priority: Some([0, 0, 0, 0, 31]),
            pieces: 3,
        },
    ] {
        let v = raw_version(&mut client, &fields, &shape).await;
        assert_eq!(v.runtime_name, RUNTIME_NAME, "{shape:?}");
    }

    // 1,000 calls on the one connection: the client's encoder indexes every new header, and
    // 60 names with 80-byte values overflow its 4 KiB table, so entries are evicted and
    // references point at entries the rewriter must have kept in step.
    let list = ListPodSandboxRequest::default().encode_to_vec();
    for i in 0..1000usize {
        let name = format!("x-meta-{}", i % 60);
        let value = format!("{i:04}-{}", "v".repeat(75));
        let path = if i % 2 == 0 { VERSION } else { LIST_PODS };
        let mut fields = grpc_request_fields(path.as_bytes(), Some(b"/run/x.sock"));
        fields.push((name.as_bytes(), value.as_bytes()));
        let block = client.encode(&fields).unwrap();
        let shape = BlockShape {
            pieces: 1 + i % 4,
            ..Default::default()
        };
        let body = if i % 2 == 0 {
            VersionRequest::default().encode_to_vec()
        } else {
            list.clone()
        };
        let stream = client.send_grpc(&block, &shape, &body).await.unwrap();
        let response = client.response(stream).await.unwrap();
        assert_eq!(response.grpc_status(), Some(0), "call {i}: {response:?}");
        let message = response.grpc_message().unwrap();
        if i % 2 == 0 {
            let v = VersionResponse::decode(message).unwrap();
            assert_eq!(v.runtime_name, RUNTIME_NAME, "call {i}");
        } else {
            let pods = ListPodSandboxResponse::decode(message).unwrap();
            assert!(pods.items.is_empty(), "call {i}");
        }
    }
    let log = node.cri.log_text();
    assert!(!log.contains("malformed"), "{log}");
    node.teardown().await;
}
