#!/usr/bin/env bash
# `make bench-cri`: the pod lifecycle benchmark (ferrolet-cri-bench) against ferrolet-cri and
# against containerd's own CRI plugin, in one run, on the same CNI config, images, runc and pause
# image, for N = 30 and N = 100 pods; prints each run's table and the comparison.
#
# The two runtimes take turns: the N pods are split into BENCH_ALTERNATE turns per runtime
# (N/turns pods each, the remainder spread over the first turns, at least one pod a turn),
# containerd's CRI first in odd turns and ferrolet-cri first in even ones, and
# `ferrolet-cri-bench merge` pools each runtime's turns ($OUT/<runtime>-N-turn<k>.json) into one
# report ($OUT/<runtime>-N.json: samples pooled, p50/p99 recomputed) that `compare` reads. Run one
# after the other, the machine drifted between the two runs by more than the runtimes differ
# (a StartContainer ratio of 0.89 in one run, 1.09 in the next); in turns both meet the drift.
# Runs of 100 pods or more are not split (one turn per runtime, containerd's CRI first): they
# are there for memory, and the RSS goal (ferrolet-cri <= 30 MiB with 100 pods) needs all N pods
# running at once, which a turn of N/turns pods is not. Not splitting is simpler than an extra
# full-N run per runtime for memory alone, and costs no pods; read latency ratios from N = 30.
#
# The runs of 100 pods are also issue #39's benchmark of the shims: their pods have
# BENCH_FULL_CONTAINERS containers each (2), and with all of them running each side's shims
# (the runtime v2 shim processes its containerd started: `-address <its socket>` on their
# command line, serving one of the run's pods) and the pause processes under them are sampled:
# RSS in all and per pod, and their CPU over a BENCH_IDLE_S window; `compare` prints the
# shims' goals (StartContainer and RunPodSandbox p50 ratios, shim RSS per pod, idle CPU) and
# the whole stack's RSS (runtime + containerd + shims + pause).
#
# Needs the environment (`scripts/env.sh up`) and release builds of ferrolet-cri and
# ferrolet-cri-bench (the Makefile target does both). It starts the reference containerd
# (scripts/containerd-cri.sh) unless it already runs, and a containerd and ferrolet-cri of its
# own (scripts/lib/bench-containerd.sh: BIN first on that containerd's PATH, so the shim
# installed beside ferrolet-cri is the one it runs); it stops what it started, also on error or
# Ctrl-C.
#
#   BENCH_PODS="30 100"  pod counts      BENCH_WARMUP=2  untimed pods first, per runtime
#   BENCH_ALTERNATE=5    turns per runtime for each N below 100 (each runs its share of the pods)
#   BENCH_AUTHORITY_PODS=100  pods for the :authority rewrite's cost: ferrolet-cri with it
#                        against ferrolet-cri without it (accept_any_authority = false),
#                        twice each, alternating; 0 skips it
#   BENCH_ARGS=...       extra flags for ferrolet-cri-bench (e.g. --cni-check)
#   BENCH_FULL_PODS=100  runs of this many pods or more are the memory runs described above
#   BENCH_CONTAINERS=1   containers per pod below 100 pods   BENCH_FULL_CONTAINERS=2  at 100+
#   BENCH_IDLE_S=30      idle window of the 100-pod runs (shims' and runtimes' CPU); 0: none
#   BENCH_RUNTIME_TYPE=  ferrolet-cri's `runtime_type` (io.containerd.ferrolet.v1: the Rust
#                        shim; io.containerd.runc.v2: the Go shim); empty: its default
#   BIN=target/release   where the binaries are
set -euo pipefail

ROOT_DIR=$(cd "$(dirname "$0")/.." && pwd)
BIN=${BIN:-$ROOT_DIR/target/release}
CRI=$BIN/ferrolet-cri
BENCH=$BIN/ferrolet-cri-bench
PODS=${BENCH_PODS:-30 100}
TURNS=${BENCH_ALTERNATE:-5}
# Runs of this many pods or more are not split into turns: see the header.
FULL_PODS=${BENCH_FULL_PODS:-100}
CONTAINERS=${BENCH_CONTAINERS:-1}
FULL_CONTAINERS=${BENCH_FULL_CONTAINERS:-2}
IDLE_S=${BENCH_IDLE_S:-30}
RUNTIME_TYPE=${BENCH_RUNTIME_TYPE:-}
WARMUP=${BENCH_WARMUP:-2}
AUTHORITY_PODS=${BENCH_AUTHORITY_PODS:-100}
read -r -a EXTRA <<<"${BENCH_ARGS:-}"
PID_DIR=/run/ferrolet/env
REF_SOCK=/run/ferrolet/containerd-cri/containerd.sock
# This ferrolet-cri's own places, apart from a node's ferrolet-cri on the same containerd.
CRI_ROOT=/var/lib/ferrolet/bench-cri
CRI_STATE=/run/ferrolet/bench-cri
CRI_SOCK=$CRI_STATE/cri.sock
CRI_NAMESPACE=ferrolet-bench
CNI_CONF_DIR=/etc/ferrolet/cni/net.d
OUT=$ROOT_DIR/target/bench-cri/$(date +%Y%m%d-%H%M%S)

log() { printf '[bench-cri] %s\n' "$*" >&2; }
die() { printf '[bench-cri] error: %s\n' "$*" >&2; exit 1; }
# shellcheck source=lib/bench-containerd.sh
. "$ROOT_DIR/scripts/lib/bench-containerd.sh"
BENCH_CTRD_NAME=bench-cri

[[ "$TURNS" =~ ^[1-9][0-9]*$ ]] || die "BENCH_ALTERNATE must be a whole number >= 1"
for v in "$CONTAINERS" "$FULL_CONTAINERS"; do
  [[ "$v" =~ ^[1-9][0-9]*$ ]] || die "BENCH_CONTAINERS and BENCH_FULL_CONTAINERS must be whole numbers >= 1"
done
[[ "$IDLE_S" =~ ^[0-9]+$ ]] || die "BENCH_IDLE_S must be a whole number of seconds"
[[ "$FULL_PODS" =~ ^[1-9][0-9]*$ ]] || die "BENCH_FULL_PODS must be a whole number >= 1"
for n in $PODS; do
  [[ "$n" =~ ^[1-9][0-9]*$ ]] || die "BENCH_PODS must be whole numbers >= 1, not $n"
done
[ "$(id -u)" = 0 ] || die "run as root (containerd, netns and bridges need it)"
for b in "$CRI" "$BENCH"; do
  [ -x "$b" ] || die "$b is missing: cargo build --release -p ferrolet -p ferrolet-cri -p ferrolet-integration"
done
if ! { [ -f "$PID_DIR/containerd.pid" ] && kill -0 "$(cat "$PID_DIR/containerd.pid")" 2>/dev/null; }; then
  die "the environment's containerd is not running: make env"
fi

if [ -s "$CRI_STATE/pid" ] && kill -0 "$(cat "$CRI_STATE/pid")" 2>/dev/null; then
  die "another bench-cri's ferrolet-cri runs (pid $(cat "$CRI_STATE/pid")); stop it first"
fi

started_ref=0
cri_pid=
# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [ -n "$cri_pid" ] && kill -0 "$cri_pid" 2>/dev/null; then
    "$BENCH" clean --all --endpoint "unix://$CRI_SOCK" || log "removing ferrolet-cri's pods failed"
    kill -TERM "$cri_pid" 2>/dev/null || true
    for _ in $(seq 1 150); do kill -0 "$cri_pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$cri_pid" 2>/dev/null || true
    log "stopped ferrolet-cri (pid $cri_pid)"
  fi
  awk -v a="$CRI_STATE" -v b="$CRI_ROOT" '$5 ~ "^"a"/" || $5 ~ "^"b"/" {print $5}' /proc/self/mountinfo |
    awk '{print length, $0}' | sort -rn | cut -d' ' -f2- |
    while read -r m; do umount -l "$m" 2>/dev/null || true; done
  rm -rf "$CRI_ROOT" "$CRI_STATE"
  bench_containerd_down
  if [ "$started_ref" = 1 ]; then
    FERROLET_CRI_BENCH=$BENCH "$ROOT_DIR/scripts/containerd-cri.sh" down || true
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The reference: containerd's CRI.
if ! "$ROOT_DIR/scripts/containerd-cri.sh" status | grep -q running; then started_ref=1; fi
FERROLET_CRI=$CRI "$ROOT_DIR/scripts/containerd-cri.sh" up
ref_pid=$(cat "$PID_DIR/containerd-cri.pid")

# start_cri ACCEPT_ANY_AUTHORITY LOG: ferrolet-cri in its own session (a Ctrl-C reaches the
# benchmark, which then still needs it to clean up); `exec` keeps the pid the pid file records.
# Its pods' network namespaces are pinned in its own dir: a run once lost one from the shared
# /var/run/netns to someone else.
start_cri() {
  mkdir -p "$CRI_ROOT" "$CRI_STATE"
  cat >"$CRI_STATE/ferrolet-cri.toml" <<TOML
listen = "unix://$CRI_SOCK"
containerd = "$CTRD_SOCK"
namespace = "$CRI_NAMESPACE"
root = "$CRI_ROOT"
state = "$CRI_STATE/state"
netns_dir = "$CRI_STATE/netns"
cni_conf_dir = "$CNI_CONF_DIR"
cni_bin_dirs = ["/usr/lib/cni"]
log_level = "info"
accept_any_authority = $1
${RUNTIME_TYPE:+runtime_type = \"$RUNTIME_TYPE\"}
TOML
  rm -f "$CRI_STATE/pid"
  cri_pid=
  # shellcheck disable=SC2016 # $$ and "$@" are the inner shell's
  setsid bash -c 'echo $$ >"$0"; exec "$@"' "$CRI_STATE/pid" \
    "$CRI" --config "$CRI_STATE/ferrolet-cri.toml" </dev/null >>"$2" 2>&1 &
  for _ in $(seq 1 600); do
    [ -s "$CRI_STATE/pid" ] && cri_pid=$(cat "$CRI_STATE/pid")
    [ -S "$CRI_SOCK" ] && break
    if [ -n "$cri_pid" ] && ! kill -0 "$cri_pid" 2>/dev/null; then
      cat "$2" >&2
      die "ferrolet-cri exited at start-up"
    fi
    sleep 0.1
  done
  [ -S "$CRI_SOCK" ] || die "ferrolet-cri did not listen on $CRI_SOCK; see $2"
}

# stop_cri: SIGTERM, then what it leaves is its own to recover at the next start.
stop_cri() {
  kill -TERM "$cri_pid" 2>/dev/null || true
  for _ in $(seq 1 150); do kill -0 "$cri_pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$cri_pid" 2>/dev/null || true
  cri_pid=
}

rm -rf "$CRI_ROOT" "$CRI_STATE"
mkdir -p "$OUT"
bench_containerd_up "$OUT/containerd.log"
CTRD_SOCK=$BENCH_CTRD_SOCK
ctrd_pid=$bench_ctrd_pid
if [ -n "$RUNTIME_TYPE" ]; then bench_check_shim "$RUNTIME_TYPE"; fi
start_cri true "$OUT/ferrolet-cri.log"
log "ferrolet-cri (pid $cri_pid) on $CRI_SOCK, containerd $CTRD_SOCK namespace $CRI_NAMESPACE, runtime type ${RUNTIME_TYPE:-its default}"
log "containerd CRI (pid $ref_pid) on $REF_SOCK; results in $OUT"

status=0
# bench LABEL ENDPOINT N OUTFILE ERRFILE|- FLAGS...: one run (stderr into ERRFILE, or left as it
# is for -: reopening /dev/stderr would truncate a log file it points to); a Ctrl-C (exit 130)
# ends the script.
bench() {
  local label=$1 endpoint=$2 n=$3 out=$4 err=$5; shift 5
  local rc=0 cmd=("$BENCH" --endpoint "$endpoint" -n "$n" --label "$label" "${EXTRA[@]}" "$@")
  if [ "$err" = - ]; then "${cmd[@]}" >"$out" || rc=$?; else "${cmd[@]}" >"$out" 2>"$err" || rc=$?; fi
  [ "$rc" = 130 ] && exit 130
  if [ "$rc" != 0 ]; then
    log "$label, $n pods: failed (exit $rc)$([ -f "$err" ] && echo "; see $err")"
    [ -f "$out" ] && rm -f "$out"
    status=1
  fi
}

if [ "$WARMUP" -gt 0 ]; then
  log "warm-up: $WARMUP pods on each runtime (pulls the image where missing; not reported)"
  bench containerd-cri "unix://$REF_SOCK" "$WARMUP" /dev/null "$OUT/warmup-containerd-cri.log" --settle-ms 0
  bench ferrolet-cri "unix://$CRI_SOCK" "$WARMUP" /dev/null "$OUT/warmup-ferrolet-cri.log" --settle-ms 0
fi

# turn LABEL N TURN PODS FLAGS...: turn TURN of LABEL's runtime in the run of N pods, PODS of
# them, its report in $OUT/LABEL-N-turnTURN.json; the shims sampled are its containerd's.
turn() {
  local label=$1 pods=$4 out=$OUT/$1-$2-turn$3.json
  shift 4
  case $label in
    containerd-cri) bench "$label" "unix://$REF_SOCK" "$pods" "$out" - --json --pid "$ref_pid" \
      --containerd-address "$REF_SOCK" "$@" ;;
    ferrolet-cri) bench "$label" "unix://$CRI_SOCK" "$pods" "$out" - --json --pid "$cri_pid" \
      --backend-pid "$ctrd_pid" --containerd-address "$CTRD_SOCK" "$@" ;;
  esac
}

# merge LABEL N TURNS: LABEL's turns pooled into $OUT/LABEL-N.json (when every turn has a report).
merge() {
  local label=$1 n=$2 turns=$3 reports=() t
  for t in $(seq 1 "$turns"); do
    [ -s "$OUT/$label-$n-turn$t.json" ] || return 0
    reports+=("$OUT/$label-$n-turn$t.json")
  done
  "$BENCH" merge "${reports[@]}" >"$OUT/$label-$n.json" || { rm -f "$OUT/$label-$n.json"; status=1; }
}

for n in $PODS; do
  turns=$TURNS
  flags=(--containers "$CONTAINERS")
  if [ "$n" -ge "$FULL_PODS" ]; then
    turns=1
    flags=(--containers "$FULL_CONTAINERS" --idle-s "$IDLE_S")
  fi
  [ "$turns" -gt "$n" ] && turns=$n
  if [ "$turns" = 1 ]; then
    log "$n pods (${flags[*]}): one run per runtime, containerd's CRI first"
  else
    log "$n pods (${flags[*]}): $turns turns per runtime, the order flipped every turn"
  fi
  for t in $(seq 1 "$turns"); do
    # N/turns pods a turn, one more in the first N%turns turns.
    pods=$(( n / turns + (t <= n % turns ? 1 : 0) ))
    if [ $((t % 2)) = 1 ]; then
      turn containerd-cri "$n" "$t" "$pods" "${flags[@]}"
      turn ferrolet-cri "$n" "$t" "$pods" "${flags[@]}"
    else
      turn ferrolet-cri "$n" "$t" "$pods" "${flags[@]}"
      turn containerd-cri "$n" "$t" "$pods" "${flags[@]}"
    fi
  done
  merge containerd-cri "$n" "$turns"
  merge ferrolet-cri "$n" "$turns"
  ref=$OUT/containerd-cri-$n.json
  ours=$OUT/ferrolet-cri-$n.json
  if [ -s "$ref" ] && [ -s "$ours" ]; then
    limit=()
    # The RSS goal is for 100 pods.
    [ "$n" -ge 100 ] && limit=(--max-rss-mib 30)
    "$BENCH" compare "$ours" "$ref" "${limit[@]}" | tee "$OUT/compare-$n.txt"
  fi
done

# What the :authority rewrite costs: the same ferrolet-cri with it and without it, alternating
# (on, off, on, off) so drift over the run falls on both, compared round by round.
if [ "$AUTHORITY_PODS" -gt 0 ]; then
  n=$AUTHORITY_PODS
  for round in 1 2; do
    for mode in on off; do
      accept=true; [ "$mode" = off ] && accept=false
      stop_cri
      start_cri "$accept" "$OUT/ferrolet-cri-authority-$mode.log"
      log "authority rewrite $mode, round $round: ferrolet-cri (pid $cri_pid)"
      bench "ferrolet-cri rewrite $mode" "unix://$CRI_SOCK" "$n" \
        "$OUT/authority-$mode-$round-$n.json" - --json --pid "$cri_pid"
    done
    on=$OUT/authority-on-$round-$n.json off=$OUT/authority-off-$round-$n.json
    if [ -s "$on" ] && [ -s "$off" ]; then
      "$BENCH" compare "$on" "$off" | tee "$OUT/compare-authority-$round-$n.txt"
    fi
  done
fi

log "results (JSON reports, comparisons, ferrolet-cri's log) in $OUT"
exit "$status"
