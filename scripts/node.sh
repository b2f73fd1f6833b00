#!/usr/bin/env bash
# Brings up a Ferrolet node on the environment from `scripts/env.sh up`: ferrolet-cri on
# /run/ferrolet/cri.sock (over the private containerd), then ferrolet in standalone mode on
# examples/static-pods, and prints how to reach the pods. Idempotent: what runs is kept.
# `make stop` (scripts/node.sh down, then env.sh down) stops both; pods are removed first.
set -euo pipefail
ROOT_DIR=$(cd "$(dirname "$0")/.." && pwd)
BIN=${BIN:-$ROOT_DIR/target/debug}
RUN=/run/ferrolet/node
LIB=/var/lib/ferrolet/node
CRI_SOCK=/run/ferrolet/cri.sock
MANIFESTS=${MANIFESTS:-$ROOT_DIR/examples/static-pods}
READ_ONLY_PORT=10255
# The authenticated API (TLS, client certificates): the Go kubelet's port, on loopback here.
SECURE_PORT=10250

log() { printf '[node] %s\n' "$*" >&2; }
running() { [ -s "$RUN/$1.pid" ] && kill -0 "$(cat "$RUN/$1.pid")" 2>/dev/null; }

down() {
  if running ferrolet; then
    kill "$(cat "$RUN/ferrolet.pid")" && log "stopped ferrolet"
  fi
  if running ferrolet-cri; then
    # The node's pods go with it: nothing of them may outlive `make stop`.
    [ -x "$BIN/ferrolet-cri-bench" ] && "$BIN/ferrolet-cri-bench" clean --endpoint "unix://$CRI_SOCK" --all >/dev/null 2>&1 || true
    kill "$(cat "$RUN/ferrolet-cri.pid")" && log "stopped ferrolet-cri"
  fi
  rm -f "$RUN"/*.pid
}

up() {
  for b in ferrolet-cri ferrolet; do
    [ -x "$BIN/$b" ] || { log "$BIN/$b is missing: cargo build --workspace --bins"; exit 1; }
  done
  mkdir -p "$RUN" "$LIB"
  cat > "$LIB/ferrolet-cri.toml" <<TOML
listen = "unix://$CRI_SOCK"
containerd = "/run/ferrolet/containerd/containerd.sock"
root = "$LIB/cri"
state = "$RUN/cri"
cni_conf_dir = "/etc/ferrolet/cni/net.d"
cni_bin_dirs = ["/usr/lib/cni"]
[registry.hosts."127.0.0.1:5000"]
plain_http = true
TOML
  if ! running ferrolet-cri; then
    "$BIN/ferrolet-cri" --config "$LIB/ferrolet-cri.toml" >>"$LIB/ferrolet-cri.log" 2>&1 &
    echo $! > "$RUN/ferrolet-cri.pid"
    for _ in $(seq 100); do [ -S "$CRI_SOCK" ] && break; sleep 0.1; done
    log "ferrolet-cri on unix://$CRI_SOCK (log $LIB/ferrolet-cri.log)"
  fi
  if ! running ferrolet; then
    "$BIN/ferrolet" --pod-manifest-path "$MANIFESTS" --root-dir "$LIB/kubelet" \
      --container-runtime-endpoint "unix://$CRI_SOCK" --address 127.0.0.1 \
      --read-only-port $READ_ONLY_PORT --port $SECURE_PORT >>"$LIB/ferrolet.log" 2>&1 &
    echo $! > "$RUN/ferrolet.pid"
    log "ferrolet on $MANIFESTS (log $LIB/ferrolet.log)"
  fi
  log "waiting for the pods to run..."
  for _ in $(seq 120); do
    if curl -sf "http://127.0.0.1:$READ_ONLY_PORT/pods" | grep -q '"phase":"Running"'; then break; fi
    sleep 0.5
  done
  curl -sf "http://127.0.0.1:$READ_ONLY_PORT/pods" | python3 -c '
import json, sys
for p in json.load(sys.stdin)["items"]:
    m, s = p["metadata"], p.get("status", {})
    ports = []
    for k in p["spec"]["containers"]:
        for c in k.get("ports", []):
            if c.get("hostPort"):
                ports.append("%s:%s" % (c.get("hostIP", "0.0.0.0"), c["hostPort"]))
    extra = (", host ports " + " ".join(ports)) if ports else ""
    print("  %s/%s: %s, pod IP %s%s" % (m["namespace"], m["name"], s.get("phase"), s.get("podIP", "-"), extra))
' || true
  cat <<MSG
Reach them:
  curl http://127.0.0.1:8080/                      # httpd through its hostPort
  curl http://127.0.0.1:$READ_ONLY_PORT/pods                # the kubelet's read-only API
  curl -k https://127.0.0.1:$SECURE_PORT/healthz            # the secure API: 401 without a client cert
  crictl --runtime-endpoint unix://$CRI_SOCK pods  # what ferrolet-cri runs (with crictl)
Add or edit manifests in $MANIFESTS; 'make stop' stops everything.
MSG
}

case "${1:-up}" in
  up) up ;;
  down) down ;;
  *) echo "usage: $0 [up|down]" >&2; exit 2 ;;
esac
