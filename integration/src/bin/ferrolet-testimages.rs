//! Builds the reproducible test images (see `ferrolet_integration::testimages`) into OCI
//! layout directories, one per image, and prints `<name>:<tag> <manifest digest> <dir>` for each.

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use ferrolet_integration::testimages;

/// Command-line arguments.
#[derive(Parser, Debug)]
#[command(about = "Build Ferrolet's test images as OCI layouts from a static busybox")]
struct Args {
    /// Directory that receives one OCI layout per image (`<out>/<name>`).
    #[arg(long, default_value = "/var/lib/ferrolet/images")]
    out: PathBuf,
    /// Static busybox binary the images are made from.
    #[arg(long, default_value = "/bin/busybox")]
    busybox: PathBuf,
    /// Build only these images (repeatable); default is all of them.
    #[arg(long = "only", value_name = "NAME", value_parser = clap::builder::PossibleValuesParser::new(testimages::NAMES))]
    only: Vec<String>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let images = if args.only.is_empty() {
        testimages::build_all(&args.out, &args.busybox)
            .with_context(|| format!("building test images into {}", args.out.display()))?
    } else {
        let mut images = Vec::new();
        for name in &args.only {
            let image = testimages::build(name, &args.out, &args.busybox)
                .with_context(|| format!("building {name} into {}", args.out.display()))?;
            images.push(image);
        }
        images
    };
    for image in &images {
        println!(
            "{} {} {}",
            image.reference(),
            image.manifest_digest,
            image.dir.display()
        );
    }
    Ok(())
}
