//! Runs one input through one target without AFL, in an ordinary (debug) build, so a crash
//! shows its panic message and backtrace: `cargo run -p ferrolet-fuzz --features targets
//! --example reproduce -- TARGET FILE...`.

use std::process::ExitCode;

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let (Some(name), files) = (args.next(), args.collect::<Vec<_>>()) else {
        eprintln!("usage: reproduce TARGET FILE...");
        return ExitCode::FAILURE;
    };
    let Some((_, target)) = ferrolet_fuzz::TARGETS.iter().find(|(n, _)| *n == name) else {
        eprintln!("no target {name:?}");
        return ExitCode::FAILURE;
    };
    for file in files {
        match std::fs::read(&file) {
            Ok(data) => {
                target(&data);
                println!("{file}: ok");
            }
            Err(e) => {
                eprintln!("{file}: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}
