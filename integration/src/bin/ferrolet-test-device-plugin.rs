//! `ferrolet-test-device-plugin`: the tests' stand-in device plugin
//! ([`ferrolet_integration::device_plugin::TestDevicePlugin`]) as a program, to run beside a
//! kubelet by hand: it serves `v1beta1.DevicePlugin` in the kubelet's device plugin directory,
//! registers (again whenever the kubelet's socket is re-created), and answers `Allocate` with
//! the devices' ids in an env var and, with `--cdi-kind`, their CDI names (`KIND=<id>`), so
//! a CDI spec file naming those devices decides what the container gets. Used to check that
//! a plugin's CDI devices reach the container the same way under the Go kubelet and ferrolet.

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use ferrolet_integration::device_plugin::TestDevicePlugin;
use ferrolet_proto::deviceplugin::{CdiDevice, ContainerAllocateResponse};

#[derive(Parser, Debug)]
#[command(about = "A stand-in device plugin (v1beta1) for trying kubelets by hand")]
struct Args {
    /// The kubelet's device plugin directory.
    #[arg(long, default_value = "/var/lib/kubelet/device-plugins")]
    dir: PathBuf,
    /// The extended resource it serves.
    #[arg(long, default_value = "ferrolet.test/device")]
    resource: String,
    /// How many devices (ids `dev-0` …).
    #[arg(long, default_value_t = 4)]
    devices: usize,
    /// The env var Allocate sets to the container's device ids, comma-separated.
    #[arg(long, default_value = "FERROLET_TEST_DEVICES")]
    env: String,
    /// Answer each device with the CDI device `KIND=<id>` (e.g. `ferrolet.test/device`).
    #[arg(long, value_name = "KIND")]
    cdi_kind: Option<String>,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let ids: Vec<String> = (0..args.devices).map(|i| format!("dev-{i}")).collect();
    let id_refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    let (env, cdi_kind) = (args.env.clone(), args.cdi_kind.clone());
    let plugin = TestDevicePlugin::builder(&args.resource)
        .socket_name(&format!("ferrolet-test-{}.sock", std::process::id()))
        .devices(&id_refs)
        .allocate(move |ids: &[String]| ContainerAllocateResponse {
            envs: [(env.clone(), ids.join(","))].into(),
            cdi_devices: cdi_kind
                .iter()
                .flat_map(|kind| {
                    ids.iter().map(move |id| CdiDevice {
                        name: format!("{kind}={id}"),
                    })
                })
                .collect(),
            ..Default::default()
        })
        .start(&args.dir)
        .with_context(|| format!("serving in {}", args.dir.display()))?;
    eprintln!(
        "serving {} ({} devices) on {}",
        args.resource,
        args.devices,
        plugin.socket().display()
    );
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    plugin.stop().await;
    Ok(())
}
