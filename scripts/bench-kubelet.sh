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
# With the largest N running, each run also samples the node's runtime overhead (issue #39):
# kubelet + CRI runtime + containerd + the shims that containerd started (`-address <its socket>`
# on their command lines) + the pause processes under them, and the shims' idle CPU. ferrolet-cri
# runs on a containerd of the benchmark's own (scripts/lib/bench-containerd.sh: BIN first on its
# PATH, so the shim installed beside ferrolet-cri is the one it runs). The last run is the Go
# kubelet (BENCH_GO_KUBELET, a v1.28+ binary; default `kubelet` on PATH) on containerd's own CRI
# with the same pods (BENCH_GO_KUBELET_PODS), and `ferrolet-kubelet-bench node` puts ferrolet +
# ferrolet-cri's overhead beside it, goal <= 0.2x. Without a Go kubelet that run is not made, and
# the comparison says so: the reference is absent, the goal not measured.
#
#   BENCH_PODS=1,1,1,1,1,1,1,1,1,1,30,100   pod counts, one round each (the single-pod rounds
#                         are pooled for the N=1 figures)      BENCH_IDLE_S=30  idle CPU window
#   BENCH_DIRECT=1        the direct-CRI runs on ferrolet-cri (0: none)
#   BENCH_PROBES="network exec"   probe modes ("" for none)
#   BENCH_PROBE_PODS=100  BENCH_EXEC_PROBE_PODS=10   pods of the probe runs
#   BENCH_RUNTIMES="ferrolet-cri containerd-cri go-kubelet"   which runs, in order (go-kubelet:
#                         the Go kubelet on containerd's CRI; the others: ferrolet on that runtime)
#   BENCH_GO_KUBELET=PATH   the Go kubelet (default: `kubelet` on PATH)
#   BENCH_GO_KUBELET_PODS=100   its rounds
#   BENCH_CONTAINERS=1    containers per pod (issue #39 weighs pods of 2; issue #6's goals are
#                         for 1), in every run but the probe runs
#   BENCH_RUNTIME_TYPE=   ferrolet-cri's `runtime_type` (io.containerd.ferrolet.v1: the Rust
#                         shim; io.containerd.runc.v2: the Go shim); empty: its default
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
RUNTIMES=${BENCH_RUNTIMES:-ferrolet-cri containerd-cri go-kubelet}
GO_KUBELET=${BENCH_GO_KUBELET-$(command -v kubelet || true)}
GO_PODS=${BENCH_GO_KUBELET_PODS:-100}
# The Go kubelet's cgroup root (it must exist before it starts), removed after its run.
GO_CGROUP_ROOT=/ferrolet-bench-gokubelet
PROBES=${BENCH_PROBES-network exec}
BASELINE=${BENCH_KUBELET_BASELINE:-}
KUBELET_EXTRA=${BENCH_KUBELET_CONFIG:-}
if [ -n "${BENCH_KUBELET_BASELINE_CONFIG+set}" ] && [ -z "$BASELINE" ]; then
  BASELINE=$BIN/ferrolet
fi
PROBE_PODS=${BENCH_PROBE_PODS:-100}
EXEC_PROBE_PODS=${BENCH_EXEC_PROBE_PODS:-10}
PID_DIR=/run/ferrolet/env
REF_SOCK=/run/ferrolet/containerd-cri/containerd.sock
# Our own places, apart from a node's (make node) and bench-cri's.
STATE=/run/ferrolet/bench-kubelet
LIB=/var/lib/ferrolet/bench-kubelet
CRI_SOCK=$STATE/cri.sock
CRI_NAMESPACE=ferrolet-bench-kubelet
CNI_CONF_DIR=/etc/ferrolet/cni/net.d
# The benchmark's pods' namespace (ferrolet-kubelet-bench's POD_NAMESPACE).
POD_NAMESPACE=ferrolet-bench
PORT=${BENCH_PORT:-10355}
# The secure API (port) runs as in production, on its own loopback port.
SECURE_PORT=${BENCH_SECURE_PORT:-10356}
OUT=$ROOT_DIR/target/bench-kubelet/$(date +%Y%m%d-%H%M%S)

log() { printf '[bench-kubelet] %s\n' "$*" >&2; }
die() { printf '[bench-kubelet] error: %s\n' "$*" >&2; exit 1; }
# shellcheck source=lib/bench-common.sh
. "$ROOT_DIR/scripts/lib/bench-common.sh"
# shellcheck source=lib/bench-containerd.sh
. "$ROOT_DIR/scripts/lib/bench-containerd.sh"
BENCH_CTRD_NAME=bench-kubelet
# Every pod of ours carries the run label (the manifests' labels are the sandboxes'); the
# reference containerd may hold someone else's.
KUBELET_CLEAN_ALL=0

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
  bench_containerd_down
  go_cgroups rmdir
  if [ "$started_ref" = 1 ]; then
    FERROLET_CRI_BENCH=$CRI_BENCH "$ROOT_DIR/scripts/containerd-cri.sh" down >&2 || true
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

rm -rf "$STATE" "$LIB"
mkdir -p "$STATE" "$LIB" "$OUT"

# go_cgroups mkdir|rmdir: the Go kubelet's cgroup root in every hierarchy (rmdir: what is
# under it too, deepest first; only empty cgroups go).
go_cgroups() {
  local d
  for d in /sys/fs/cgroup /sys/fs/cgroup/*; do
    [ -f "$d/cgroup.procs" ] && [ ! -L "$d" ] || continue
    if [ "$1" = mkdir ]; then
      mkdir -p "$d$GO_CGROUP_ROOT"
    elif [ -d "$d$GO_CGROUP_ROOT" ]; then
      find "$d$GO_CGROUP_ROOT" -depth -type d -exec rmdir {} + 2>/dev/null || true
    fi
  done
}

# start_go_kubelet ENDPOINT: the Go kubelet, standalone on an empty manifest dir, with what
# ferrolet's runs are given (manifest check period, max pods, ports) and what it needs on this
# machine: cgroupfs under its own root, anonymous read-only access, eviction thresholds low
# enough that a full disk of test images is no pressure.
start_go_kubelet() {
  mkdir -p "$LIB"
  go_cgroups mkdir
  cat >"$LIB/kubelet-config.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
fileCheckFrequency: 20s
maxPods: 110
cgroupDriver: cgroupfs
cgroupRoot: $GO_CGROUP_ROOT
failSwapOn: false
authentication: {anonymous: {enabled: true}, webhook: {enabled: false}}
authorization: {mode: AlwaysAllow}
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
YAML
  local ours=$KUBELET
  KUBELET=$GO_KUBELET
  launch_kubelet go-kubelet "$1"
  KUBELET=$ours
}

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

# bench LABEL ENDPOINT CONTAINERD NAMESPACE CONTAINERD_PID [FLAGS...]: one full run of the
# benchmark through a fresh ferrolet (for LABEL go-kubelet: the Go kubelet); the runtime keeps
# its containers in NAMESPACE of the containerd at CONTAINERD, whose /tasks/start events time
# the app containers' tasks and whose shims count in the node overhead.
bench() {
  local label=$1 endpoint=$2 containerd=$3 namespace=$4 containerd_pid=$5 rc=0
  shift 5
  if [ "$label" = go-kubelet ]; then
    start_go_kubelet "$endpoint"
  else
    start_kubelet "$label" "$endpoint"
  fi
  "$BENCH" --manifest-dir "$LIB/manifests" --read-only "127.0.0.1:$PORT" --endpoint "$endpoint" \
    --containerd "$containerd" --containerd-namespace "$namespace" \
    --containerd-pid "$containerd_pid" --pid "$kubelet_pid" --pods "$PODS" --idle-s "$IDLE_S" \
    --containers "${BENCH_CONTAINERS:-1}" --label "$label" --json "$@" >"$OUT/$label.json" || rc=$?
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
      --containers "${BENCH_CONTAINERS:-1}" \
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

# Why the Go kubelet's run was not made, for the node comparison (empty: it was).
go_absent="not in BENCH_RUNTIMES ($RUNTIMES)"
for runtime in $RUNTIMES; do
  case $runtime in
    ferrolet-cri)
      bench_containerd_up "$OUT/containerd.log"
      CTRD_SOCK=$BENCH_CTRD_SOCK
      if [ -n "${BENCH_RUNTIME_TYPE:-}" ]; then bench_check_shim "$BENCH_RUNTIME_TYPE"; fi
      start_cri
      log "ferrolet-cri's runtime type: ${BENCH_RUNTIME_TYPE:-its default}"
      if [ "$DIRECT" = 1 ]; then direct_cri before; fi
      bench ferrolet-cri "unix://$CRI_SOCK" "$CTRD_SOCK" "$CRI_NAMESPACE" "$bench_ctrd_pid" \
        --runtime-pid "$cri_pid"
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
        bench baseline "unix://$CRI_SOCK" "$CTRD_SOCK" "$CRI_NAMESPACE" "$bench_ctrd_pid" \
          --runtime-pid "$cri_pid"
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
      bench_containerd_down
      ;;
    containerd-cri | go-kubelet)
      if [ "$runtime" = go-kubelet ] && [ -z "$GO_KUBELET" ]; then
        go_absent="no Go kubelet: BENCH_GO_KUBELET unset or empty, and no kubelet on PATH"
        log "the Go kubelet's run: not made ($go_absent)"
        continue
      fi
      if [ "$runtime" = go-kubelet ] && [ ! -x "$GO_KUBELET" ]; then
        go_absent="BENCH_GO_KUBELET=$GO_KUBELET is not an executable"
        log "the Go kubelet's run: not made ($go_absent)"
        continue
      fi
      if ! "$ROOT_DIR/scripts/containerd-cri.sh" status | grep -q running; then started_ref=1; fi
      FERROLET_CRI=$CRI "$ROOT_DIR/scripts/containerd-cri.sh" up >&2
      ref_pid=$(cat "$PID_DIR/containerd-cri.pid")
      if [ "$runtime" = go-kubelet ]; then
        go_absent=
        log "the Go kubelet: $GO_KUBELET ($("$GO_KUBELET" --version 2>/dev/null || echo "version unknown"))"
        saved_pods=$PODS
        PODS=$GO_PODS
        # The Go kubelet removes stopped sandboxes only at its minutely GC.
        bench go-kubelet "unix://$REF_SOCK" "$REF_SOCK" k8s.io "$ref_pid" --gone-when-stopped
        PODS=$saved_pods
        rm -rf /var/log/pods/"${POD_NAMESPACE}"_* /var/log/containers/*_"${POD_NAMESPACE}"_*
        go_cgroups rmdir
      else
        bench containerd-cri "unix://$REF_SOCK" "$REF_SOCK" k8s.io "$ref_pid"
      fi
      ;;
    *) die "unknown runtime $runtime (ferrolet-cri, containerd-cri, go-kubelet)" ;;
  esac
done

if [ -s "$OUT/ferrolet-cri.json" ] && [ -s "$OUT/containerd-cri.json" ]; then
  "$BENCH" compare "$OUT/ferrolet-cri.json" "$OUT/containerd-cri.json" | tee "$OUT/compare.txt"
fi
if [ -s "$OUT/ferrolet-cri.json" ]; then
  if [ -z "$go_absent" ] && [ -s "$OUT/go-kubelet.json" ]; then
    "$BENCH" node "$OUT/ferrolet-cri.json" "$OUT/go-kubelet.json" | tee "$OUT/node.txt"
  else
    [ -z "$go_absent" ] && go_absent="its run failed; see $OUT/ferrolet-go-kubelet.log"
    "$BENCH" node "$OUT/ferrolet-cri.json" --absent "$go_absent" | tee "$OUT/node.txt"
  fi
fi
log "results (JSON reports, comparison, logs) in $OUT"
exit "$status"
