#!/usr/bin/env bash
# `make bench-stream`: the streaming benchmark (ferrolet-stream-bench) against ferrolet-cri and
# against containerd's own CRI plugin, in one run: exec round trip of `true` (p50/p99, SPDY and
# WebSocket) and port-forward throughput to httpd in the pod (MB/s, one connection and four),
# each runtime's table, then both side by side with the ratios ferrolet-cri / containerd.
# The two runtimes take turns in BENCH_ALTERNATE short rounds (the order flipped every round),
# whose samples are pooled per runtime: an exec is mostly runc's fork and exec, whose time
# drifts with whatever else the machine does, and the turns make both runtimes meet the same
# drift, so their ratio means something. Then the same through ferrolet (its secure port's /exec and /portForward with a client
# certificate, proxying to each runtime's streaming server) on a static pod, one fresh ferrolet
# per runtime.
#
# Needs the environment (`scripts/env.sh up`) and release builds of ferrolet-cri and the
# integration binaries (the Makefile target does both). It starts the reference containerd
# (scripts/containerd-cri.sh) unless it already runs, and a ferrolet-cri of its own on the
# environment's containerd; it stops what it started and removes its pods (containers, netns
# and veths go with the sandboxes), also on error or Ctrl-C.
#
#   BENCH_EXECS=50     timed execs per transport      BENCH_ROUNDS=5  port-forward rounds
#   BENCH_ALTERNATE=5  turns per runtime (each takes its share of the execs and rounds)
#   BENCH_ARGS=...     extra flags for ferrolet-stream-bench (e.g. --transports spdy)
#   BENCH_KUBELET=1    also through ferrolet (0: only the runtimes' own streaming servers)
#   BIN=...            where the binaries are (default: $CARGO_TARGET_DIR or target, release)
set -euo pipefail

ROOT_DIR=$(cd "$(dirname "$0")/.." && pwd)
BIN=${BIN:-${CARGO_TARGET_DIR:-$ROOT_DIR/target}/release}
CRI=$BIN/ferrolet-cri
BENCH=$BIN/ferrolet-stream-bench
CRI_BENCH=$BIN/ferrolet-cri-bench
KUBELET=$BIN/ferrolet
THROUGH_KUBELET=${BENCH_KUBELET:-1}
PORT=${BENCH_PORT:-10375}
SECURE_PORT=${BENCH_SECURE_PORT:-10376}
EXECS=${BENCH_EXECS:-50}
ROUNDS=${BENCH_ROUNDS:-5}
TURNS=${BENCH_ALTERNATE:-5}
[[ "$TURNS" =~ ^[1-9][0-9]*$ ]] || die "BENCH_ALTERNATE must be a whole number >= 1"
# Each turn's share, rounded up (so the totals are at least what was asked).
TURN_EXECS=$(( (EXECS + TURNS - 1) / TURNS ))
TURN_ROUNDS=$(( (ROUNDS + TURNS - 1) / TURNS ))
read -r -a EXTRA <<<"${BENCH_ARGS:-}"
PID_DIR=/run/ferrolet/env
CTRD_SOCK=/run/ferrolet/containerd/containerd.sock
REF_SOCK=/run/ferrolet/containerd-cri/containerd.sock
# Our own places, apart from a node's (make node) and the other benchmarks'.
STATE=/run/ferrolet/bench-stream
LIB=/var/lib/ferrolet/bench-stream
CRI_SOCK=$STATE/cri.sock
CRI_NAMESPACE=ferrolet-bench-stream
CNI_CONF_DIR=/etc/ferrolet/cni/net.d
OUT=$ROOT_DIR/target/bench-stream/$(date +%Y%m%d-%H%M%S)

log() { printf '[bench-stream] %s\n' "$*" >&2; }
die() { printf '[bench-stream] error: %s\n' "$*" >&2; exit 1; }
# shellcheck source=lib/bench-common.sh
. "$ROOT_DIR/scripts/lib/bench-common.sh"

[ "$(id -u)" = 0 ] || die "run as root (containerd, netns and bridges need it)"
for b in "$CRI" "$BENCH" "$CRI_BENCH" $([ "$THROUGH_KUBELET" = 1 ] && echo "$KUBELET"); do
  [ -x "$b" ] || die "$b is missing: cargo build --release -p ferrolet-cri -p ferrolet -p ferrolet-integration"
done
[ -f "$PID_DIR/containerd.pid" ] && kill -0 "$(cat "$PID_DIR/containerd.pid")" 2>/dev/null ||
  die "the environment's containerd is not running: make env"
if [ -s "$STATE/cri.pid" ] && kill -0 "$(cat "$STATE/cri.pid")" 2>/dev/null; then
  die "another bench-stream runs (ferrolet-cri pid $(cat "$STATE/cri.pid")); stop it first"
fi

started_ref=0
cri_pid=

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  stop_kubelet
  if [ -n "$cri_pid" ] && kill -0 "$cri_pid" 2>/dev/null; then
    "$CRI_BENCH" clean --all --endpoint "unix://$CRI_SOCK" >&2 || log "removing ferrolet-cri's pods failed"
    stop "$cri_pid" ferrolet-cri
  fi
  unmount_under "$STATE" "$LIB"
  rm -rf "$STATE" "$LIB"
  if [ "$started_ref" = 1 ]; then
    FERROLET_CRI_BENCH=$CRI_BENCH "$ROOT_DIR/scripts/containerd-cri.sh" down >&2 || true
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

rm -rf "$STATE" "$LIB"
mkdir -p "$STATE" "$LIB" "$OUT"

if ! "$ROOT_DIR/scripts/containerd-cri.sh" status | grep -q running; then started_ref=1; fi
FERROLET_CRI=$CRI "$ROOT_DIR/scripts/containerd-cri.sh" up >&2
start_cri

status=0
# bench LABEL ENDPOINT TURN: one turn of the benchmark, its JSON report in $OUT/LABEL.TURN.json.
bench() {
  local label=$1 endpoint=$2 turn=$3 rc=0
  "$BENCH" --endpoint "$endpoint" --label "$label" --execs "$TURN_EXECS" --rounds "$TURN_ROUNDS" \
    "${EXTRA[@]}" --json >"$OUT/$label.$turn.json" || rc=$?
  [ "$rc" = 130 ] && exit 130
  if [ "$rc" != 0 ]; then
    log "$label, turn $turn: failed (exit $rc)"
    rm -f "$OUT/$label.$turn.json"
    status=1
  fi
}

# merge LABEL: the turns' reports pooled into $OUT/LABEL.json (when every turn has one).
merge() {
  local label=$1 turns=()
  for t in $(seq 1 "$TURNS"); do
    [ -s "$OUT/$label.$t.json" ] || return 0
    turns+=("$OUT/$label.$t.json")
  done
  "$BENCH" merge "${turns[@]}" >"$OUT/$label.json" || { rm -f "$OUT/$label.json"; status=1; }
}

# turns RUN: RUN containerd-cri ENDPOINT TURN and RUN ferrolet-cri ENDPOINT TURN, taking turns,
# the reference first in odd turns and last in even ones.
turns() {
  local run=$1 t
  for t in $(seq 1 "$TURNS"); do
    if [ $((t % 2)) = 1 ]; then
      "$run" containerd-cri "unix://$REF_SOCK" "$t"
      "$run" ferrolet-cri "unix://$CRI_SOCK" "$t"
    else
      "$run" ferrolet-cri "unix://$CRI_SOCK" "$t"
      "$run" containerd-cri "unix://$REF_SOCK" "$t"
    fi
  done
}

turns bench
merge containerd-cri
merge ferrolet-cri

# start_kubelet LABEL ENDPOINT: a fresh ferrolet whose only pod is the benchmark's static pod;
# its secure port trusts the client CA `ferrolet-stream-bench pki` wrote.
start_kubelet() {
  mkdir -p "$LIB/manifests"
  cat >"$LIB/kubelet-config.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
podLogsDir: $LIB/pod-logs
fileCheckFrequency: 20s
authentication:
  x509:
    clientCAFile: $STATE/pki/ca.crt
YAML
  cat >"$LIB/manifests/stream-bench.yaml" <<'YAML'
apiVersion: v1
kind: Pod
metadata:
  name: stream-bench
  namespace: ferrolet-bench
spec:
  containers:
  - name: box
    image: 127.0.0.1:5000/ferrolet/busybox:1
    command: [sh, -c, "trap 'exit 0' TERM; sleep 1000000 & wait"]
  - name: web
    image: 127.0.0.1:5000/ferrolet/big:1
    command: [/bin/busybox, httpd, -f, -p, "8080", -h, /]
YAML
  launch_kubelet "$1" "$2" "$LIB/kubelet/pki/kubelet.crt"
}

# bench_kubelet LABEL ENDPOINT TURN: one turn of the benchmark through a fresh ferrolet on
# ENDPOINT, its report in $OUT/kubelet-LABEL.TURN.json.
bench_kubelet() {
  local label=$1 endpoint=$2 turn=$3 rc=0
  start_kubelet "$label.$turn" "$endpoint"
  "$BENCH" --kubelet "127.0.0.1:$SECURE_PORT" --kubelet-ca "$LIB/kubelet/pki/kubelet.crt" \
    --pki "$STATE/pki" --pod ferrolet-bench/stream-bench-bench-node --endpoint "$endpoint" \
    --label "ferrolet/$label" --execs "$TURN_EXECS" --rounds "$TURN_ROUNDS" "${EXTRA[@]}" --json \
    >"$OUT/kubelet-$label.$turn.json" || rc=$?
  [ "$rc" = 130 ] && exit 130
  if [ "$rc" != 0 ]; then
    log "through ferrolet on $label, turn $turn: failed (exit $rc); see $OUT/ferrolet-$label.$turn.log"
    rm -f "$OUT/kubelet-$label.$turn.json"
    status=1
  fi
  stop_kubelet
}

if [ "$THROUGH_KUBELET" = 1 ]; then
  "$BENCH" pki "$STATE/pki"
  turns bench_kubelet
  merge kubelet-containerd-cri
  merge kubelet-ferrolet-cri
fi

# compare NAME A B: the side-by-side table of two reports, when both exist.
compare() {
  if [ -s "$OUT/$2.json" ] && [ -s "$OUT/$3.json" ]; then
    log "$1"
    "$BENCH" compare "$OUT/$2.json" "$OUT/$3.json" | tee "$OUT/compare-$2.txt"
  fi
}
compare "direct: ferrolet-cri / containerd's CRI" ferrolet-cri containerd-cri
compare "through ferrolet: on ferrolet-cri / on containerd's CRI" kubelet-ferrolet-cri kubelet-containerd-cri
log "results (JSON reports, comparison, ferrolet-cri's log) in $OUT"
exit "$status"
