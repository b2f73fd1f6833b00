//! AFL++ target `probe_http`: see fuzz/README.md for what it reaches and how to run it.

fn main() {
    afl::fuzz!(|data: &[u8]| ferrolet_fuzz::probe_http(data));
}
