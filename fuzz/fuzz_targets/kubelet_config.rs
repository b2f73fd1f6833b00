//! AFL++ target `kubelet_config`: see fuzz/README.md for what it reaches and how to run it.

fn main() {
    afl::fuzz!(|data: &[u8]| ferrolet_fuzz::kubelet_config(data));
}
