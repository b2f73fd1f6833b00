#!/usr/bin/env bash
# Brings up a Ferrolet node on the environment from `scripts/env.sh up`: ferrolet-cri on
# /run/ferrolet/cri.sock (over the private containerd), then ferrolet in standalone mode on
# examples/static-pods, and prints how to reach and inspect them. Idempotent: what runs is
# kept, and the client certificate for the secure API is made once.
# `make stop` (scripts/node.sh down, then env.sh down) stops both; pods are removed first.
set -euo pipefail
ROOT_DIR=$(cd "$(dirname "$0")/.." && pwd)
BIN=${BIN:-$ROOT_DIR/target/debug}
RUN=/run/ferrolet/node
LIB=/var/lib/ferrolet/node
CRI_SOCK=/run/ferrolet/cri.sock
CRI_NS=k8s.io
CONTAINERD_SOCK=/run/ferrolet/containerd/containerd.sock
CNI_CONF_DIR=/etc/ferrolet/cni/net.d
# The secure API's client CA and one client certificate signed by it.
PKI=$LIB/pki
MANIFESTS=${MANIFESTS:-$ROOT_DIR/examples/static-pods}
READ_ONLY_PORT=10255
# The authenticated API (TLS, client certificates): the Go kubelet's port, on loopback here.
SECURE_PORT=10250

log() { printf '[node] %s\n' "$*" >&2; }
running() { [ -s "$RUN/$1.pid" ] && kill -0 "$(cat "$RUN/$1.pid")" 2>/dev/null; }
# A command to try and what it shows, in two columns.
hint() { printf '  %-79s # %s\n' "$1" "$2"; }

# The same openssl lines as the README's "The secure kubelet API". ferrolet takes the
# certificate's CN as the user and its O values as groups; a certificate without a CN counts
# as no credential (401). The default authorization (AlwaysAllow) lets any such user in.
client_pki() {
  [ -s "$PKI/ca.crt" ] && [ -s "$PKI/client.crt" ] && [ -s "$PKI/client.key" ] && return
  command -v openssl >/dev/null || { log "openssl is missing: scripts/env.sh up installs it"; exit 1; }
  mkdir -p "$PKI"
  # Keys readable by root only: the client key opens the kubelet API. openssl's chatter is
  # shown only when it fails.
  local out
  if ! out=$(
    umask 077 && cd "$PKI" &&
      openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 3650 \
        -subj "/CN=ferrolet-client-ca" -keyout ca.key -out ca.crt 2>&1 &&
      openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
        -subj "/O=system:masters/CN=node-admin" -keyout client.key -out client.csr 2>&1 &&
      printf 'extendedKeyUsage=clientAuth\n' > client.ext &&
      openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -days 3650 \
        -extfile client.ext -out client.crt 2>&1 &&
      rm -f client.csr client.ext
  ); then
    printf '%s\n' "$out" >&2
    rm -f "$PKI/client.crt"
    log "making the client certificate in $PKI failed"
    exit 1
  fi
  log "client CA and certificate in $PKI"
}

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
  client_pki
  cat > "$LIB/ferrolet-cri.toml" <<TOML
listen = "unix://$CRI_SOCK"
containerd = "$CONTAINERD_SOCK"
namespace = "$CRI_NS"
root = "$LIB/cri"
state = "$RUN/cri"
cni_conf_dir = "$CNI_CONF_DIR"
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
      --read-only-port $READ_ONLY_PORT --port $SECURE_PORT --client-ca-file "$PKI/ca.crt" \
      >>"$LIB/ferrolet.log" 2>&1 &
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
    for k in p["spec"]["containers"]:
        print("    log: curl http://127.0.0.1:%s/containerLogs/%s/%s/%s" % (sys.argv[1], m["namespace"], m["name"], k["name"]))
' "$READ_ONLY_PORT" || true
  local ctr="ctr --address $CONTAINERD_SOCK -n $CRI_NS"
  echo "Reach them:"
  hint "curl http://127.0.0.1:8080/" "httpd, through its hostPort"
  hint "curl http://127.0.0.1:$READ_ONLY_PORT/pods" "ferrolet's read-only API: pods and statuses"
  echo "  # the secure API with the client certificate (401 without it):"
  echo "  curl --cacert $LIB/kubelet/pki/kubelet.crt --cert $PKI/client.crt --key $PKI/client.key https://127.0.0.1:$SECURE_PORT/pods"
  echo "Inspect the node with what 'make env' installed:"
  hint "curl http://127.0.0.1:$READ_ONLY_PORT/runningpods/" "what the runtime runs, as ferrolet sees it"
  hint "$ctr containers ls" "... and as containerd sees it"
  hint "$ctr tasks ls" "(images ls: the pulled images)"
  hint "ip netns" "the pods' network namespaces"
  hint "$BIN/ferrolet-cni --conf-dir $CNI_CONF_DIR ls" "the pod network and its plugins"
  hint "tail -f $LIB/ferrolet.log $LIB/ferrolet-cri.log" "the daemons' logs"
  hint "ls /var/log/pods/" "the containers' logs"
  if command -v crictl >/dev/null; then
    hint "crictl --runtime-endpoint unix://$CRI_SOCK pods" "CRI's own client"
  else
    echo "crictl, CRI's own client, is not installed and Debian 12 does not package it: it comes from"
    echo "the cri-tools project (github.com/kubernetes-sigs/cri-tools, its releases); then"
    echo "  crictl --runtime-endpoint unix://$CRI_SOCK pods"
  fi
  echo "Add or edit manifests in $MANIFESTS; 'scripts/node.sh down' stops the node, 'make stop' everything."
}

case "${1:-up}" in
  up) up ;;
  down) down ;;
  *) echo "usage: $0 [up|down]" >&2; exit 2 ;;
esac
