#!/usr/bin/env bash
# The node environment Ferrolet runs and is tested on: Debian packages, a private containerd,
# two local registries on loopback holding the project's test images, and a default CNI config.
#
#   scripts/env.sh up      install what is missing and start what is not running (idempotent)
#   scripts/env.sh down    stop all of it: processes by pid, shims, mounts, the bridge
#   scripts/env.sh status  show what is running
set -euo pipefail

ROOT_DIR=$(cd "$(dirname "$0")/.." && pwd)
LIB=/var/lib/ferrolet
RUN=/run/ferrolet
ENV_DIR=$LIB/env
PID_DIR=$RUN/env
CTRD_ROOT=$LIB/containerd
CTRD_STATE=$RUN/containerd
CTRD_SOCK=$RUN/containerd/containerd.sock
IMAGES=$LIB/images
CNI_CONF_DIR=/etc/ferrolet/cni/net.d
# containerd runs a runtime type's shim (containerd-shim-<name>-<version>) from its PATH; this dir
# comes first there and holds a link to Ferrolet's, which `up` points at FERROLET_SHIM (default:
# the debug build beside ferrolet-cri). Repointing the link needs no containerd restart.
SHIM_DIR=$LIB/shims
FERROLET_SHIM_NAME=containerd-shim-ferrolet-v1
REG_OPEN=127.0.0.1:5000
REG_AUTH=127.0.0.1:5001
AUTH_FILE=$ENV_DIR/registry-auth
PACKAGES=(containerd runc crun containernetworking-plugins docker-registry busybox-static iproute2
  iptables protobuf-compiler skopeo apache2-utils python3-venv curl ca-certificates openssl)

log() { printf '[env] %s\n' "$*"; }
die() { printf '[env] error: %s\n' "$*" >&2; exit 1; }

need_root() { [ "$(id -u)" = 0 ] || die "run as root (containerd, netns and bridges need it)"; }

install_packages() {
  local missing=()
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    log "installing ${missing[*]}"
    apt-get update -qq
    # Debian's packages may try to start their own services: we run private instances instead.
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
}

alive() { [ -f "$PID_DIR/$1.pid" ] && kill -0 "$(cat "$PID_DIR/$1.pid")" 2>/dev/null; }

# start NAME LOG CMD...: runs CMD in its own session so a Ctrl-C in make does not reach it.
start() {
  local name=$1 logfile=$2; shift 2
  setsid "$@" </dev/null >>"$logfile" 2>&1 &
  echo $! >"$PID_DIR/$name.pid"
}

wait_for() {
  local what=$1; shift
  for _ in $(seq 1 150); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
  die "$what did not come up; see $ENV_DIR/logs"
}

link_shim() {
  local built=${FERROLET_SHIM:-${CARGO_TARGET_DIR:-$ROOT_DIR/target}/debug/$FERROLET_SHIM_NAME}
  mkdir -p "$SHIM_DIR"
  ln -sfn "$built" "$SHIM_DIR/$FERROLET_SHIM_NAME"
  if [ -x "$built" ]; then
    log "containerd finds $FERROLET_SHIM_NAME in $SHIM_DIR (-> $built)"
  else
    log "$SHIM_DIR/$FERROLET_SHIM_NAME -> $built, not built yet (cargo build --workspace --bins)"
  fi
}

start_containerd() {
  link_shim
  if alive containerd; then log "containerd already running (pid $(cat "$PID_DIR/containerd.pid"))"; return; fi
  mkdir -p "$CTRD_ROOT" "$CTRD_STATE" "$LIB/containerd-opt"
  sed -e "s|@ROOT@|$CTRD_ROOT|" -e "s|@STATE@|$CTRD_STATE|" -e "s|@SOCKET@|$CTRD_SOCK|g" \
    -e "s|@OPT@|$LIB/containerd-opt|" "$ROOT_DIR/scripts/containerd.toml.in" >"$ENV_DIR/containerd.toml"
  start containerd "$ENV_DIR/logs/containerd.log" env PATH="$SHIM_DIR:$PATH" \
    containerd --config "$ENV_DIR/containerd.toml"
  wait_for containerd ctr --address "$CTRD_SOCK" version
  log "containerd $(ctr --address "$CTRD_SOCK" version | awk '/Version/{print $2; exit}') on $CTRD_SOCK"
}

registry_config() { # NAME ADDR [auth]
  local name=$1 addr=$2 auth=${3:-}
  mkdir -p "$LIB/registry/$name"
  {
    echo "version: 0.1"
    echo "log: {level: info, fields: {service: registry-$name}}"
    echo "storage:"
    echo "  filesystem: {rootdirectory: $LIB/registry/$name}"
    echo "  delete: {enabled: true}"
    echo "http:"
    echo "  addr: $addr"
    echo "  headers: {X-Content-Type-Options: [nosniff]}"
    if [ -n "$auth" ]; then
      echo "auth:"
      echo "  htpasswd: {realm: ferrolet-registry, path: $ENV_DIR/htpasswd}"
    fi
  } >"$ENV_DIR/registry-$name.yml"
}

start_registries() {
  if [ ! -s "$AUTH_FILE" ]; then
    local pass; pass=$(head -c 18 /dev/urandom | base64 | tr -d '/+=')
    printf 'ferrolet:%s\n' "$pass" >"$AUTH_FILE"
    chmod 600 "$AUTH_FILE"
  fi
  local user pass; IFS=: read -r user pass <"$AUTH_FILE"
  htpasswd -Bbc "$ENV_DIR/htpasswd" "$user" "$pass" 2>/dev/null
  registry_config open "$REG_OPEN"
  registry_config auth "$REG_AUTH" auth
  for name in open auth; do
    if alive "registry-$name"; then log "registry-$name already running"; continue; fi
    start "registry-$name" "$ENV_DIR/logs/registry-$name.log" docker-registry serve "$ENV_DIR/registry-$name.yml"
  done
  wait_for "registry on $REG_OPEN" curl -sf "http://$REG_OPEN/v2/"
  wait_for "registry on $REG_AUTH" sh -c "curl -s -o /dev/null -w '%{http_code}' http://$REG_AUTH/v2/ | grep -q 401"
  log "registries on $REG_OPEN (open) and $REG_AUTH (basic auth, credentials in $AUTH_FILE)"
}

build_images() {
  log "building test images into $IMAGES"
  # The test node has no cargo: it runs what the host built.
  if [ -z "${FERROLET_OFFLINE:-}" ]; then
    (cd "$ROOT_DIR" && cargo build -q -p ferrolet-integration --bin ferrolet-testimages)
  fi
  "$ROOT_DIR/target/debug/ferrolet-testimages" --out "$IMAGES" >"$ENV_DIR/images.txt"
  cat "$ENV_DIR/images.txt"
}

push_images() {
  local user pass; IFS=: read -r user pass <"$AUTH_FILE"
  local accept='application/vnd.oci.image.manifest.v1+json'
  while read -r ref digest _dir; do
    local name=${ref%%:*} tag=${ref#*:}
    for reg in "$REG_OPEN" "$REG_AUTH"; do
      local creds=() curl_auth=()
      if [ "$reg" = "$REG_AUTH" ]; then creds=(--dest-creds "$user:$pass"); curl_auth=(-u "$user:$pass"); fi
      # Skip what the registry already holds at the same digest: pushing is the slow part.
      local have; have=$(curl -s "${curl_auth[@]}" -H "Accept: $accept" -o /dev/null -D - \
        "http://$reg/v2/ferrolet/$name/manifests/$tag" | tr -d '\r' | awk -F': ' 'tolower($1)=="docker-content-digest"{print $2}')
      [ "$have" = "$digest" ] && continue
      skopeo copy -q --preserve-digests --dest-tls-verify=false "${creds[@]}" \
        "oci:$IMAGES/$name:$tag" "docker://$reg/ferrolet/$name:$tag"
    done
  done <"$ENV_DIR/images.txt"
  # What Docker Hub would serve as docker.io/library/busybox:1, for registry-mirror tests.
  skopeo copy -q --preserve-digests --dest-tls-verify=false \
    "oci:$IMAGES/busybox:1" "docker://$REG_OPEN/library/busybox:1"
  log "images pushed to $REG_OPEN/ferrolet/* and $REG_AUTH/ferrolet/*"
}

write_cni_config() {
  mkdir -p "$CNI_CONF_DIR"
  cat >"$CNI_CONF_DIR/10-ferrolet.conflist" <<'JSON'
{
  "cniVersion": "1.0.0",
  "name": "ferrolet",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "ferrolet0",
      "isGateway": true,
      "ipMasq": true,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{ "subnet": "10.88.0.0/16" }]],
        "routes": [{ "dst": "0.0.0.0/0" }]
      }
    },
    { "type": "portmap", "capabilities": { "portMappings": true } }
  ]
}
JSON
  log "CNI config in $CNI_CONF_DIR (bridge ferrolet0, 10.88.0.0/16, portmap)"
}

# A CRI client that is not ours, for the tests: Python grpcio (C-core), which sends the unix
# socket's path, percent-encoded, as :authority. From PyPI, into a venv of its own.
PYTHON_ENV=$ENV_DIR/python
install_python_clients() {
  if "$PYTHON_ENV/bin/python3" -c 'import grpc' 2>/dev/null; then return; fi
  # The test node has no network: its suites leave out the grpcio client's test.
  if [ -n "${FERROLET_OFFLINE:-}" ]; then log "offline: no Python grpcio client"; return; fi
  log "installing Python grpcio into $PYTHON_ENV"
  /usr/bin/python3 -m venv "$PYTHON_ENV"
  "$PYTHON_ENV/bin/pip" install -q --disable-pip-version-check 'grpcio>=1.57'
}

up() {
  need_root
  install_packages
  mkdir -p "$ENV_DIR/logs" "$PID_DIR" "$IMAGES"
  start_containerd
  start_registries
  write_cni_config
  install_python_clients
  build_images
  push_images
  log "ready"
}

stop_pid() { # NAME
  local f="$PID_DIR/$1.pid"
  [ -f "$f" ] || return 0
  local pid; pid=$(cat "$f")
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    log "stopped $1 (pid $pid)"
  fi
  rm -f "$f"
}

down() {
  need_root
  for name in registry-open registry-auth containerd; do stop_pid "$name"; done
  # Shims outlive containerd by design; ours carry our socket path in their arguments.
  pkill -9 -f -- "-address $CTRD_SOCK" 2>/dev/null || true
  # Unmount deepest first: task rootfs mounts, shm, netns bind mounts.
  awk -v a="$RUN" -v b="$LIB" '$5 ~ "^"a || $5 ~ "^"b {print $5}' /proc/self/mountinfo |
    awk '{print length, $0}' | sort -rn | cut -d' ' -f2- |
    while read -r m; do umount -l "$m" 2>/dev/null || true; done
  ip link del ferrolet0 2>/dev/null || true
  log "stopped"
}

status() {
  for name in containerd registry-open registry-auth; do
    if alive "$name"; then echo "$name: running (pid $(cat "$PID_DIR/$name.pid"))"; else echo "$name: stopped"; fi
  done
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  status) status ;;
  *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
