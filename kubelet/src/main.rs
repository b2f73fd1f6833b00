//! `ferrolet`: the kubelet binary. Standalone mode: pods from a manifest directory and/or URL,
//! driven through any CRI endpoint. Everything is in the library ([`ferrolet::app`]).

fn main() -> anyhow::Result<()> {
    Ok(ferrolet::app::main()?)
}
