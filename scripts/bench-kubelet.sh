#!/usr/bin/env bash
# `make bench-kubelet`: the static-pod start-latency benchmark of ferrolet (issue #6), run twice
# in one go: ferrolet on ferrolet-cri (over the environment's containerd) and ferrolet on
# containerd's own CRI plugin (scripts/containerd-cri.sh). For N = 1, 30, 100 pods: p50/p99 per
# pod from manifest written to Running in /pods, to the container started (the runtime's CRI
# status) and to its task running (containerd's own /tasks/start event, the same clock for
# both runtimes), total until all Running, and ferrolet's RSS and idle CPU with 100 pods; then
# both tables side by side with the goals.
#
# Needs the environment (`scripts/env.sh up`) and release builds of ferrolet, ferrolet-cri and
# the integration binaries (the Makefile target does both). Everything it starts (ferrolet-cri,
# each ferrolet, the reference containerd unless it already ran) it stops, also on error or
# Ctrl-C, after removing every pod it made (netns and veths go with the sandboxes).
#
# On ferrolet-cri, the same pods are also started directly through CRI by ferrolet-cri-bench
# (with the runtime's default seccomp profile on the sandbox and a PID namespace per container,
# as every kubelet asks for a pod without shareProcessNamespace: ferrolet-cri then runs it
# without a pause process, for ferrolet's pods and the direct ones alike)
# (issue #20): half of the single starts sequentially before ferrolet's run and half after (so
# drift falls on both), then each larger N at once; `ferrolet-kubelet-bench direct` puts them
# beside ferrolet's figures: N=1 manifest → task running against the sum of the three CRI
# calls' p50s, and each N's all-Running against the direct all-started.
#
# Then, on ferrolet-cri only, the probe overhead (issue #7): pods with three probes each at a
# 1 s period (tcp/http, and separately exec), ferrolet's CPU over the idle window.
#
#   BENCH_PODS=1,1,1,1,1,1,1,1,1,1,30,100   pod counts, one round each (the single-pod rounds
#                         are pooled for the N=1 figures)      BENCH_IDLE_S=30  idle CPU window
#   BENCH_DIRECT=1        the direct-CRI runs on ferrolet-cri (0: none)
#   BENCH_PROBES="network exec"   probe modes ("" for none)
#   BENCH_PROBE_PODS=100  BENCH_EXEC_PROBE_PODS=10   pods of the probe runs
#   BENCH_RUNTIMES="ferrolet-cri containerd-cri"   which runtimes, in order
#   BENCH_KUBELET_CONFIG=YAML   extra KubeletConfiguration lines for every ferrolet (e.g.
#                         "cgroupsPerQOS: false\nenforceNodeAllocatable: []" to time pod starts
#                         without the container manager's cgroups)
#   BIN=target/release    where the binaries are
#   BENCH_KUBELET_BASELINE=PATH   another ferrolet binary (an older build): on ferrolet-cri it
#                         runs right after this one, and the two are compared (ratio = this
#                         build / the baseline)
#   BENCH_KUBELET_BASELINE_CONFIG=YAML   the baseline run's extra KubeletConfiguration lines
#                         instead of BENCH_KUBELET_CONFIG; alone, it makes this build its own
#                         baseline (e.g. "cgroupsPerQOS: false\nenforceNodeAllocatable: []" to
#                         time the container manager; BENCH_PODS=1,1,1,1,1 for single starts)
set -euo pipefail

ROOT_DIR=$(cd "$(dirname "$0")/.." && pwd)
BIN=${BIN:-$ROOT_DIR/target/release}
KUBELET=$BIN/ferrolet
CRI=$BIN/ferrolet-cri
BENCH=$BIN/ferrolet-kubelet-bench
CRI_BENCH=$BIN/ferrolet-cri-bench
PODS=${BENCH_PODS:-1,1,1,1,1,1,1,1,1,1,30,100}
DIRECT=${BENCH_DIRECT:-1}
IDLE_S=${BENCH_IDLE_S:-30}
RUNTIMES=${BENCH_RUNTIMES:-ferrolet-cri containerd-cri}
PROBES=${BENCH_PROBES-network exec}
BASELINE=${BENCH_KUBELET_BASELINE:-}
KUBELET_EXTRA=${BENCH_KUBELET_CONFIG:-}
if [ -n "${BENCH_KUBELET_BASELINE_CONFIG+set}" ] && [ -z "$BASELINE" ]; then
  BASELINE=$BIN/ferrolet
fi
PROBE_PODS=${BENCH_PROBE_PODS:-100}
EXEC_PROBE_PODS=${BENCH_EXEC_PROBE_PODS:-10}
PID_DIR=/run/ferrolet/env
CTRD_SOCK=/run/ferrolet/containerd/containerd.sock
REF_SOCK=/run/ferrolet/containerd-cri/containerd.sock
# Our own places, apart from a node's (make node) and bench-cri's.
STATE=/run/ferrolet/bench-kubelet
LIB=/var/lib/ferrolet/bench-kubelet
CRI_SOCK=$STATE/cri.sock
CRI_NAMESPACE=ferrolet-bench-kubelet
CNI_CONF_DIR=/etc/ferrolet/cni/net.d
PORT=${BENCH_PORT:-10355}
# The secure API (port) runs as in production, on its own loopback port.
SECURE_PORT=${BENCH_SECURE_PORT:-10356}
OUT=$ROOT_DIR/target/bench-kubelet/$(date +%Y%m%d-%H%M%S)

log() { printf '[bench-kubelet] %s\n' "$*" >&2; }
die() { printf '[bench-kubelet] error: %s\n' "$*" >&2; exit 1; }
# shellcheck source=lib/bench-common.sh
. "$ROOT_DIR/scripts/lib/bench-common.sh"

[ "$(id -u)" = 0 ] || die "run as root (containerd, netns and bridges need it)"
for b in "$KUBELET" "$CRI" "$BENCH" "$CRI_BENCH"; do
  [ -x "$b" ] || die "$b is missing: cargo build --release -p ferrolet -p ferrolet-cri -p ferrolet-integration"
done
[ -f "$PID_DIR/containerd.pid" ] && kill -0 "$(cat "$PID_DIR/containerd.pid")" 2>/dev/null ||
  die "the environment's containerd is not running: make env"
if [ -s "$STATE/cri.pid" ] && kill -0 "$(cat "$STATE/cri.pid")" 2>/dev/null; then
  die "another bench-kubelet runs (ferrolet-cri pid $(cat "$STATE/cri.pid")); stop it first"
fi

started_ref=0
cri_pid=

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  stop_kubelet
  if [ -n "$cri_pid" ]; then
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

# start_kubelet LABEL ENDPOINT: a fresh ferrolet on an empty manifest dir.
start_kubelet() {
  mkdir -p "$LIB"
  cat >"$LIB/kubelet-config.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
podLogsDir: $LIB/pod-logs
fileCheckFrequency: 20s
maxPods: 110
$(printf '%b' "$KUBELET_EXTRA")
YAML
  launch_kubelet "$1" "$2"
}

status=0
# judge RC WHAT OUTFILE LOGFILE: a Ctrl-C (exit 130) ends the script; another failure is
# logged, its output removed and the run's status set.
judge() {
  local rc=$1 what=$2 out=$3 logfile=$4
  [ "$rc" = 130 ] && exit 130
  if [ "$rc" != 0 ]; then
    log "$what: failed (exit $rc); see $logfile"
    rm -f "$out"
    status=1
  fi
}

# bench LABEL ENDPOINT CONTAINERD NAMESPACE: one full run of the benchmark through a fresh
# ferrolet; the runtime keeps its containers in NAMESPACE of the containerd at CONTAINERD, whose
# /tasks/start events time the app containers' tasks.
bench() {
  local label=$1 endpoint=$2 containerd=$3 namespace=$4 rc=0
  start_kubelet "$label" "$endpoint"
  "$BENCH" --manifest-dir "$LIB/manifests" --read-only "127.0.0.1:$PORT" --endpoint "$endpoint" \
    --containerd "$containerd" --containerd-namespace "$namespace" \
    --pid "$kubelet_pid" --pods "$PODS" --idle-s "$IDLE_S" --label "$label" --json \
    >"$OUT/$label.json" || rc=$?
  judge "$rc" "$label" "$OUT/$label.json" "$OUT/ferrolet-$label.log"
  stop_kubelet
}

# direct_cri WHEN: pods started directly through CRI on ferrolet-cri, with no ferrolet running
# (it would take them for strays): WHEN=before runs half the single starts, WHEN=after the
# other half and then each larger N at once.
direct_cri() {
  local when=$1 singles n k rc
  singles=$(tr ',' '\n' <<<"$PODS" | grep -cx 1 || true)
  if [ "$when" = before ]; then k=$(((singles + 1) / 2)); else k=$((singles / 2)); fi
  local runs=()
  if [ "$k" -gt 0 ]; then runs+=("$k:1:seq-$when"); fi
  if [ "$when" = after ]; then
    for n in $(tr ',' '\n' <<<"$PODS" | sort -nu); do
      if [ "$n" -gt 1 ]; then runs+=("$n:$n:$n"); fi
    done
  fi
  for run in "${runs[@]}"; do
    IFS=: read -r n k name <<<"$run"
    rc=0
    log "direct CRI: $n pods, $k at once"
    "$CRI_BENCH" --endpoint "unix://$CRI_SOCK" -n "$n" --concurrency "$k" --settle-ms 0 --sandbox-seccomp --kubelet-namespaces \
      --label "direct-$name" --json >"$OUT/direct-$name.json" 2>>"$OUT/direct.log" || rc=$?
    judge "$rc" "direct CRI ($n pods)" "$OUT/direct-$name.json" "$OUT/direct.log"
  done
}

# bench_probes MODE ENDPOINT: the probe-overhead run through a fresh ferrolet.
bench_probes() {
  local mode=$1 endpoint=$2 rc=0 pods=$PROBE_PODS
  [ "$mode" = exec ] && pods=$EXEC_PROBE_PODS
  start_kubelet "probes-$mode" "$endpoint"
  "$BENCH" --manifest-dir "$LIB/manifests" --read-only "127.0.0.1:$PORT" --endpoint "$endpoint" \
    --pid "$kubelet_pid" --pods "$pods" --idle-s "$IDLE_S" --probes "$mode" \
    --label "probes-$mode" --json >"$OUT/probes-$mode.json" || rc=$?
  judge "$rc" "probes-$mode" "$OUT/probes-$mode.json" "$OUT/ferrolet-probes-$mode.log"
  stop_kubelet
}

for runtime in $RUNTIMES; do
  case $runtime in
    ferrolet-cri)
      start_cri
      if [ "$DIRECT" = 1 ]; then direct_cri before; fi
      bench ferrolet-cri "unix://$CRI_SOCK" "$CTRD_SOCK" "$CRI_NAMESPACE"
      if [ "$DIRECT" = 1 ]; then
        direct_cri after
        if [ -s "$OUT/ferrolet-cri.json" ] && compgen -G "$OUT/direct-*.json" >/dev/null; then
          "$BENCH" direct "$OUT/ferrolet-cri.json" "$OUT"/direct-*.json | tee "$OUT/direct.txt"
        fi
      fi
      if [ -n "$BASELINE" ]; then
        [ -x "$BASELINE" ] || die "BENCH_KUBELET_BASELINE=$BASELINE is not an executable"
        new_kubelet=$KUBELET
        KUBELET=$BASELINE
        KUBELET_EXTRA=${BENCH_KUBELET_BASELINE_CONFIG-${BENCH_KUBELET_CONFIG:-}}
        bench baseline "unix://$CRI_SOCK" "$CTRD_SOCK" "$CRI_NAMESPACE"
        KUBELET=$new_kubelet
        KUBELET_EXTRA=${BENCH_KUBELET_CONFIG:-}
        if [ -s "$OUT/ferrolet-cri.json" ] && [ -s "$OUT/baseline.json" ]; then
          "$BENCH" compare "$OUT/ferrolet-cri.json" "$OUT/baseline.json" | tee "$OUT/compare-baseline.txt"
        fi
      fi
      for mode in $PROBES; do
        bench_probes "$mode" "unix://$CRI_SOCK"
      done
      # Idle from now on, but no process of one run should share the machine with the next.
      stop "$cri_pid" ferrolet-cri
      cri_pid=
      ;;
    containerd-cri)
      if ! "$ROOT_DIR/scripts/containerd-cri.sh" status | grep -q running; then started_ref=1; fi
      FERROLET_CRI=$CRI "$ROOT_DIR/scripts/containerd-cri.sh" up >&2
      bench containerd-cri "unix://$REF_SOCK" "$REF_SOCK" k8s.io
      ;;
    *) die "unknown runtime $runtime (ferrolet-cri, containerd-cri)" ;;
  esac
done

set -- $RUNTIMES
if [ $# = 2 ] && [ -s "$OUT/$1.json" ] && [ -s "$OUT/$2.json" ]; then
  "$BENCH" compare "$OUT/$1.json" "$OUT/$2.json" | tee "$OUT/compare.txt"
fi
log "results (JSON reports, comparison, logs) in $OUT"
exit "$status"
