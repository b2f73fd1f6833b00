//! containerd-shim-ferrolet-v1: see the library's docs.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
use ferrolet_task_shim::args::{Action, Args};
use prost::Message;

fn main() {
    if let Err(e) = run() {
        ferrolet_task_shim::log::error(&format!("{e:#}"), &[]);
        // containerd shows a failed start's stderr.
        eprintln!("{e:#}");
        std::process::exit(1);
    }
}

fn run() -> Result<()> {
    if std::env::args().nth(1).as_deref() == Some("-v") {
        println!("containerd-shim-ferrolet-v1 {}", env!("CARGO_PKG_VERSION"));
        return Ok(());
    }
    let args = Args::parse(std::env::args().skip(1))?;
    let bundle = match &args.bundle {
        Some(b) => b.clone(),
        None => std::env::current_dir().context("reading the working directory")?,
    };
    match args.action {
        Some(Action::Start) => {
            let address = ferrolet_task_shim::start::start(&args, &bundle)?;
            print!("{address}");
            std::io::stdout().flush()?;
        }
        Some(Action::Delete) => {
            let resp = ferrolet_task_shim::cleanup::delete(&bundle, &args.id, &args.namespace)
                .map_err(anyhow::Error::msg)?;
            std::io::stdout().write_all(&resp.encode_to_vec())?;
        }
        None => {
            ferrolet_task_shim::log::init(args.debug);
            let ttrpc = std::env::var_os("TTRPC_ADDRESS")
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from(format!("{}.ttrpc", args.address)));
            ferrolet_task_shim::server::serve(args.namespace, ttrpc).context("serving")?;
        }
    }
    Ok(())
}
