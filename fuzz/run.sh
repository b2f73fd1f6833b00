#!/usr/bin/env bash
# Runs one fuzz target under AFL++ for a while: fuzz/run.sh TARGET [SECONDS] (`make fuzz`).
# Builds the target with cargo-afl (optimised, instrumented) in target/fuzz, starts from
# fuzz/corpus/TARGET (or resumes the previous run's queue), stops after SECONDS (default 600),
# then prints the figures of fuzzer_stats. Findings: target/fuzz/out/TARGET/default/{crashes,hangs}.
set -euo pipefail

target=${1:?usage: fuzz/run.sh TARGET [SECONDS]}
seconds=${2:-600}
root=$(cd "$(dirname "$0")/.." && pwd)
export CARGO_TARGET_DIR=${FUZZ_CARGO_TARGET_DIR:-$root/target/fuzz}
out=${FUZZ_OUT:-$CARGO_TARGET_DIR/out}/$target

if ! command -v cargo-afl >/dev/null; then
    echo "cargo-afl is missing: cargo install cargo-afl --locked (it builds AFL++ as it installs)" >&2
    exit 1
fi
if [ ! -f "$root/fuzz/fuzz_targets/$target.rs" ]; then
    echo "no such target: $target (see fuzz/fuzz_targets/)" >&2
    exit 1
fi

# Without the release profile's fat LTO and single code unit: they make a fuzz build several
# times slower, and buy a fuzzer nothing.
CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 \
    cargo afl build --release --manifest-path "$root/Cargo.toml" -p ferrolet-fuzz \
    --features afl,targets --bin "$target"

input=$root/fuzz/corpus/$target
if [ -d "$out/default/queue" ]; then
    input=- # resume where the last run stopped
fi
mkdir -p "$out"
# 1 s per input is a hang; 2 GB of address space is plenty for any one input, so an
# allocation that asks for more (an unbounded one) aborts and counts as a crash.
AFL_SKIP_CPUFREQ=1 AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1 AFL_NO_UI=1 \
    cargo afl fuzz -i "$input" -o "$out" -V "$seconds" -t 1000 -m 2048 \
    "$CARGO_TARGET_DIR/release/$target" >"$out/afl.log" 2>&1 || {
    tail -n 30 "$out/afl.log" >&2
    exit 1
}

stats=$out/default/fuzzer_stats
for key in run_time execs_done execs_per_sec corpus_count saved_crashes saved_hangs stability; do
    grep -E "^$key\s*:" "$stats" || true
done
echo "crashes: $(find "$out/default/crashes" -type f ! -name README.txt | wc -l)," \
    "hangs: $(find "$out/default/hangs" -type f | wc -l) (in $out/default)"
