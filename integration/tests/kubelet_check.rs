//! `ferrolet check` (issue #36), the node's preflight, run as an operator runs it: the
//! kubelet's flags, then `check`. Against a real ferrolet-cri on the environment's containerd:
//! a good node passes the runtime, CNI and port checks; a node whose runtime socket is gone,
//! whose CNI directory is empty or whose kubelet port is taken gets the failing line and exit
//! status 1. (Swap cannot be turned on here; the unit tests of `check::host` cover it, and
//! the notes show it on a real swap file.)
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test reports failure by panicking

use std::path::Path;
use std::process::Command;

use ferrolet_integration::pods::CriNode;
use ferrolet_integration::scratch::Scratch;
use ferrolet_integration::{cgroups, workspace_binary};

/// Runs `ferrolet --config <config> --container-runtime-endpoint <endpoint> --root-dir …
/// check --cni-conf-dir <cni>`; its exit code and stdout.
fn check(scratch: &Path, config: &str, endpoint: &str, cni: &Path) -> (i32, String) {
    let file = scratch.join("config.yaml");
    std::fs::write(&file, config).unwrap();
    let out = Command::new(workspace_binary("ferrolet"))
        .arg("--config")
        .arg(&file)
        .arg("--container-runtime-endpoint")
        .arg(endpoint)
        .arg("--root-dir")
        .arg(scratch.join("root"))
        .arg("check")
        .arg("--cni-conf-dir")
        .arg(cni)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    println!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap_or(-1), stdout)
}

fn line<'a>(out: &'a str, prefix: &str) -> &'a str {
    out.lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no line starting {prefix:?} in:\n{out}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_passes_a_good_node_and_names_what_is_broken() {
    let cri = CriNode::start("kubelet-check").await;
    let scratch = Scratch::new("kubelet-check");
    let cni = scratch.path().join("net.d");
    std::fs::create_dir_all(&cni).unwrap();
    std::fs::write(
        cni.join("10-pods.conflist"),
        r#"{"cniVersion": "1.0.0", "name": "pods", "plugins": [{"type": "bridge", "bridge": "chk0", "ipam": {"type": "host-local", "subnet": "10.99.0.0/24"}}]}"#,
    )
    .unwrap();
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = free.local_addr().unwrap().port();
    drop(free);
    let driver = if cgroups::systemd_driver() {
        "systemd"
    } else {
        "cgroupfs"
    };
    let config = format!(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
         cgroupDriver: {driver}\naddress: 127.0.0.1\nport: {port}\nhealthzPort: 0\n"
    );
    let endpoint = cri.cri.endpoint();

    // A good node: the runtime answers, the CNI config loads, the port is free. The host's
    // own sysctls decide the rest, and the exit status follows the fail lines.
    let (code, out) = check(scratch.path(), &config, &endpoint, &cni);
    assert!(line(&out, "[pass] Config:").contains("config.yaml"));
    assert!(line(&out, "[pass] CRI:").contains(&format!("answers on {endpoint}")));
    line(&out, "[pass] CRI-Status: RuntimeReady=true");
    line(
        &out,
        "[pass] UserNamespaces: the runtime supports user namespaces (hostUsers: false) for \
         handlers \"\"",
    );
    line(
        &out,
        &format!("[pass] CgroupDriver: the runtime and ferrolet both use {driver}"),
    );
    line(&out, &format!("[pass] Port-{port}:"));
    assert!(line(&out, "[pass] CNI:").contains("network \"pods\""));
    line(&out, "[pass] Kubeconfig: standalone mode");
    let failed = out.lines().filter(|l| l.starts_with("[fail]")).count();
    assert_eq!(code, i32::from(failed > 0), "{out}");
    let summary = line(&out, "ferrolet check:");
    assert!(summary.ends_with(&format!("{failed} failed")), "{summary}");

    // The user namespace gate off (Go 1.33 has it on): said, not failed.
    let gate_off = format!("{config}featureGates: {{UserNamespacesSupport: false}}\n");
    let (_, out) = check(scratch.path(), &gate_off, &endpoint, &cni);
    line(
        &out,
        "[warn] UserNamespaces: the feature gate UserNamespacesSupport is off: pods with \
         hostUsers: false are refused",
    );

    // The runtime's socket gone.
    let gone = scratch.path().join("gone.sock");
    let (code, out) = check(
        scratch.path(),
        &config,
        &format!("unix://{}", gone.display()),
        &cni,
    );
    assert_eq!(code, 1);
    assert!(line(&out, "[fail] CRI:").contains("container runtime is not running"));

    // An empty CNI directory.
    let empty = scratch.path().join("empty.d");
    std::fs::create_dir_all(&empty).unwrap();
    let (code, out) = check(scratch.path(), &config, &endpoint, &empty);
    assert_eq!(code, 1);
    assert_eq!(
        line(&out, "[fail] CNI:"),
        format!("[fail] CNI: no network config found in {}", empty.display())
    );

    // The kubelet's port taken (a kubelet already running).
    let taken = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
    let (code, out) = check(scratch.path(), &config, &endpoint, &cni);
    assert_eq!(code, 1);
    assert!(
        line(&out, &format!("[fail] Port-{port}:")).contains(&format!("Port {port} is in use"))
    );
    drop(taken);
    cri.teardown().await;
}
