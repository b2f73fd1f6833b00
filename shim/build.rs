//! Builds the static `pause` program that ferrolet-cri embeds and imports as its sandbox
//! image, with the same rustc that builds the crate.

use std::path::PathBuf;
use std::process::Command;

fn main() -> Result<(), String> {
    println!("cargo:rerun-if-changed=pause/pause.rs");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").ok_or("cargo sets OUT_DIR")?);
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let target = std::env::var("TARGET").map_err(|e| format!("TARGET: {e}"))?;
    let status = Command::new(rustc)
        .args([
            "--edition",
            "2024",
            "--crate-name",
            "pause",
            "--target",
            &target,
        ])
        .args([
            "-C",
            "opt-level=s",
            "-C",
            "panic=abort",
            "-C",
            "strip=symbols",
        ])
        .args(["-C", "target-feature=+crt-static", "-C", "codegen-units=1"])
        .arg("-o")
        .arg(out.join("pause"))
        .arg("pause/pause.rs")
        .env(
            "FERROLET_VERSION",
            std::env::var("CARGO_PKG_VERSION").unwrap_or_default(),
        )
        .status()
        .map_err(|e| format!("running rustc for the pause program: {e}"))?;
    if !status.success() {
        return Err(format!(
            "building the static pause program failed: {status}"
        ));
    }
    Ok(())
}
