//! AFL++ target `registry_auth`: see fuzz/README.md for what it reaches and how to run it.

fn main() {
    afl::fuzz!(|data: &[u8]| ferrolet_fuzz::registry_auth(data));
}
