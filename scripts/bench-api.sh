#!/usr/bin/env bash
# `make bench-api`: ferrolet in API-server mode (issue #16). One ferrolet-cri over the
# environment's containerd, then `ferrolet-api-bench --test-server`: the in-memory test API
# server in the benchmark's process, ferrolet joined to it with a node certificate, and for
# N = 1 (BENCH_API_SINGLE runs) and each burst (BENCH_API_BURSTS) the time from the pod's
# creation through the API to a watch showing it Running; ferrolet's RSS with the last burst
# running; the API requests per minute it makes in steady state (BENCH_API_STEADY_S).
#
# Against a real cluster (your own kube-apiserver), run the benchmark program by hand:
#   ferrolet-api-bench --kubeconfig admin.conf --node NAME --kubelet-pid PID [--audit-log F]
#
# Needs the environment (`scripts/env.sh up`) and release builds (the Makefile target does
# both). Everything it starts it stops, after the benchmark deleted its pods.
set -euo pipefail

ROOT_DIR=$(cd "$(dirname "$0")/.." && pwd)
BIN=${BIN:-$ROOT_DIR/target/release}
KUBELET=${KUBELET:-$BIN/ferrolet}
CRI=$BIN/ferrolet-cri
BENCH=$BIN/ferrolet-api-bench
CRI_BENCH=$BIN/ferrolet-cri-bench
SINGLE=${BENCH_API_SINGLE:-10}
BURSTS=${BENCH_API_BURSTS:-30,100}
STEADY_S=${BENCH_API_STEADY_S:-60}
# BENCH_API_VOLUMES=1: every pod mounts a secret, a configMap and the service-account token;
# adds the configMap update → seen-by-every-pod figure (issue #17).
VOLUME_ARGS=()
[ "${BENCH_API_VOLUMES:-0}" = 1 ] && VOLUME_ARGS=(--volumes)
PID_DIR=/run/ferrolet/env
CTRD_SOCK=/run/ferrolet/containerd/containerd.sock
STATE=/run/ferrolet/bench-api
LIB=/var/lib/ferrolet/bench-api
CRI_SOCK=$STATE/cri.sock
CRI_NAMESPACE=ferrolet-bench-api
CNI_CONF_DIR=/etc/ferrolet/cni/net.d
OUT=$ROOT_DIR/target/bench-api/$(date +%Y%m%d-%H%M%S)

log() { printf '[bench-api] %s\n' "$*" >&2; }
die() { printf '[bench-api] error: %s\n' "$*" >&2; exit 1; }
# shellcheck source=lib/bench-common.sh
. "$ROOT_DIR/scripts/lib/bench-common.sh"

[ "$(id -u)" = 0 ] || die "run as root (containerd, netns and bridges need it)"
for b in "$KUBELET" "$CRI" "$BENCH" "$CRI_BENCH"; do
  [ -x "$b" ] || die "$b is missing: cargo build --release -p ferrolet -p ferrolet-cri -p ferrolet-integration"
done
[ -f "$PID_DIR/containerd.pid" ] && kill -0 "$(cat "$PID_DIR/containerd.pid")" 2>/dev/null ||
  die "the environment's containerd is not running: make env"

cri_pid=
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [ -S "$CRI_SOCK" ]; then
    "$CRI_BENCH" clean --all --endpoint "unix://$CRI_SOCK" >/dev/null 2>&1 || true
  fi
  [ -n "$cri_pid" ] && stop "$cri_pid" ferrolet-cri
  unmount_under "$STATE" "$LIB"
  rm -rf "$STATE" "$LIB"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

rm -rf "$STATE" "$LIB"
mkdir -p "$STATE" "$LIB/kubelet" "$LIB/pod-logs" "$OUT"
start_cri
cat >"$LIB/kubelet-config.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
podLogsDir: $LIB/pod-logs
maxPods: 110
YAML
"$BENCH" --test-server --kubelet "$KUBELET" --node-kubeconfig "$STATE/kubelet.conf" \
  --single-runs "$SINGLE" --bursts "$BURSTS" --steady-secs "$STEADY_S" "${VOLUME_ARGS[@]}" -- \
  --config "$LIB/kubelet-config.yaml" --root-dir "$LIB/kubelet" \
  --container-runtime-endpoint "unix://$CRI_SOCK" --address 127.0.0.1 --read-only-port 0 \
  --port 10366 --healthz-port 0 2>"$OUT/ferrolet.log" | tee "$OUT/results.txt"
log "results in $OUT"
