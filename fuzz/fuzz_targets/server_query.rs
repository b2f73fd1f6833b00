//! AFL++ target `server_query`: see fuzz/README.md for what it reaches and how to run it.

fn main() {
    afl::fuzz!(|data: &[u8]| ferrolet_fuzz::server_query(data));
}
