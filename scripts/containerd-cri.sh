#!/usr/bin/env bash
# The reference runtime for `make bench-cri`: a second private containerd with its own CRI plugin
# enabled, on the environment from `scripts/env.sh up` (same CNI config and plugins, same
# registries, same runc), so ferrolet-cri can be measured against containerd's CRI in one run.
#
#   scripts/containerd-cri.sh up      start it (idempotent) and give it ferrolet-cri's pause image
#   scripts/containerd-cri.sh down    remove its pods, stop it and its shims, unmount its mounts
#   scripts/containerd-cri.sh status  show whether it runs
#
# It never touches the machine's containerd service nor the environment's private containerd.
# FERROLET_CRI=path picks the ferrolet-cri binary used to import the pause image (default: the
# release build if present, else the debug build); FERROLET_CRI_BENCH likewise for the bench
# binary `down` uses to remove pods through CRI.
set -euo pipefail

ROOT_DIR=$(cd "$(dirname "$0")/.." && pwd)
LIB=/var/lib/ferrolet
RUN=/run/ferrolet
ENV_DIR=$LIB/env
PID_DIR=$RUN/env
CTRD_ROOT=$LIB/containerd-cri
CTRD_STATE=$RUN/containerd-cri
CTRD_SOCK=$CTRD_STATE/containerd.sock
CTRD_OPT=$LIB/containerd-cri-opt
HOSTS_DIR=$ENV_DIR/containerd-cri-hosts
CONFIG=$ENV_DIR/containerd-cri.toml
LOG=$ENV_DIR/logs/containerd-cri.log
CNI_CONF_DIR=/etc/ferrolet/cni/net.d
CNI_BIN_DIR=/usr/lib/cni
NAMESPACE=k8s.io
REGISTRIES=(127.0.0.1:5000 127.0.0.1:5001)

log() { printf '[containerd-cri] %s\n' "$*"; }
die() { printf '[containerd-cri] error: %s\n' "$*" >&2; exit 1; }

need_root() { [ "$(id -u)" = 0 ] || die "run as root (containerd, netns and bridges need it)"; }

alive() { [ -f "$PID_DIR/containerd-cri.pid" ] && kill -0 "$(cat "$PID_DIR/containerd-cri.pid")" 2>/dev/null; }

# First existing binary among $override, target/release/NAME, target/debug/NAME.
binary() { # NAME OVERRIDE
  local name=$1 override=${2:-}
  if [ -n "$override" ]; then [ -x "$override" ] && echo "$override"; return; fi
  for dir in release debug; do
    [ -x "$ROOT_DIR/target/$dir/$name" ] && { echo "$ROOT_DIR/target/$dir/$name"; return; }
  done
  return 0
}

wait_for() {
  local what=$1; shift
  for _ in $(seq 1 300); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
  die "$what did not come up; see $LOG"
}

ctr_() { ctr --address "$CTRD_SOCK" -n "$NAMESPACE" "$@"; }

write_config() {
  local pause=$1
  mkdir -p "$CTRD_ROOT" "$CTRD_STATE" "$CTRD_OPT" "$ENV_DIR/logs" "$PID_DIR"
  # One hosts.toml per local registry: plain HTTP, as containerd's CRI reads them (config_path).
  for reg in "${REGISTRIES[@]}"; do
    mkdir -p "$HOSTS_DIR/$reg"
    cat >"$HOSTS_DIR/$reg/hosts.toml" <<TOML
server = "http://$reg"

[host."http://$reg"]
  capabilities = ["pull", "resolve"]
TOML
  done
  sed -e "s|@ROOT@|$CTRD_ROOT|" -e "s|@STATE@|$CTRD_STATE|" -e "s|@SOCKET@|$CTRD_SOCK|g" \
    -e "s|@OPT@|$CTRD_OPT|" -e "s|@HOSTS@|$HOSTS_DIR|" -e "s|@SANDBOX_IMAGE@|$pause|" \
    -e "s|@CNI_CONF_DIR@|$CNI_CONF_DIR|" -e "s|@CNI_BIN_DIR@|$CNI_BIN_DIR|" \
    -e "s|@SYSTEMD_CGROUP@|$([ "${FERROLET_CGROUP_DRIVER:-cgroupfs}" = systemd ] && echo true || echo false)|" \
    "$ROOT_DIR/scripts/containerd-cri.toml.in" >"$CONFIG"
}

# The pause image ferrolet-cri builds in, put into this containerd's CRI namespace by running
# ferrolet-cri against it once: it imports (unpacked, pinned, with CRI labels) at start-up. Only
# when missing, and only while that namespace holds no containers, so this one-off ferrolet-cri
# never meets (or recovers) pods that containerd's CRI owns.
import_pause() {
  local cri=$1 pause=$2
  if ctr_ images ls -q "name==$pause" | grep -qx "$pause"; then
    log "sandbox image $pause already present"
    return
  fi
  [ -z "$(ctr_ containers ls -q)" ] ||
    die "$pause is missing but namespace $NAMESPACE holds containers: run '$0 down' first"
  local tmp; tmp=$(mktemp -d /tmp/ferrolet-pause-import.XXXXXX)
  # Everything of this one-off ferrolet-cri lives in $tmp: it must not share the node's state.
  local fields=("root = \"$tmp/root\"" "state = \"$tmp/state\"" "netns_dir = \"$tmp/netns\""
    "cni_cache_dir = \"$tmp/cni-cache\"" "cni_conf_dir = \"$CNI_CONF_DIR\"" "log_level = \"warn\"")
  local ok=0 attempt
  for attempt in 1 2 3 4 5 6 7; do
    printf '%s\n' "${fields[@]}" >"$tmp/ferrolet-cri.toml"
    setsid "$cri" --config "$tmp/ferrolet-cri.toml" --containerd "$CTRD_SOCK" --namespace "$NAMESPACE" \
      --listen "unix://$tmp/import.sock" </dev/null >"$tmp/ferrolet-cri.log" 2>&1 &
    local pid=$!
    # Done once it serves; or, should its runtime start-up stall, a few seconds after the image
    # record (written last, after unpacking) appears.
    local grace=-1
    for _ in $(seq 1 300); do
      if [ -S "$tmp/import.sock" ]; then ok=1; break; fi
      kill -0 "$pid" 2>/dev/null || break
      if [ "$grace" -lt 0 ] && ctr_ images ls -q "name==$pause" | grep -qx "$pause"; then grace=15; fi
      if [ "$grace" = 0 ]; then ok=1; break; fi
      [ "$grace" -gt 0 ] && grace=$((grace - 1))
      sleep 0.2
    done
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    [ "$ok" = 1 ] && break
    # A ferrolet-cri older than a field does not use that directory: drop the field, retry.
    local unknown; unknown=$(grep -o 'unknown field `[a-z_]*`' "$tmp/ferrolet-cri.log" | head -1 | cut -d'`' -f2)
    [ -n "$unknown" ] || break
    local kept=() f
    for f in "${fields[@]}"; do [ "${f%% *}" = "$unknown" ] || kept+=("$f"); done
    fields=("${kept[@]}")
  done
  if [ "$ok" != 1 ]; then
    cat "$tmp/ferrolet-cri.log" >&2
    rm -rf "$tmp"
    die "ferrolet-cri did not start against $CTRD_SOCK to import $pause"
  fi
  umount -R "$tmp" 2>/dev/null || true
  rm -rf "$tmp"
  ctr_ images ls -q "name==$pause" | grep -qx "$pause" || die "$pause is still missing after the import"
  log "imported sandbox image $pause"
}

up() {
  need_root
  local cri; cri=$(binary ferrolet-cri "${FERROLET_CRI:-}")
  [ -n "$cri" ] || die "no ferrolet-cri binary: cargo build -p ferrolet-cri (or set FERROLET_CRI)"
  [ -d "$CNI_CONF_DIR" ] || die "no CNI config in $CNI_CONF_DIR: run 'make env' first"
  # The name ferrolet-cri gives its built-in pause image: ferrolet.local/pause:<its version>.
  local pause; pause="ferrolet.local/pause:$("$cri" --version | awk '{print $2}')"
  if alive; then
    log "already running (pid $(cat "$PID_DIR/containerd-cri.pid")) on $CTRD_SOCK"
  else
    write_config "$pause"
    # Its own session, so a Ctrl-C in make does not reach it; `exec` keeps the recorded pid.
    rm -f "$PID_DIR/containerd-cri.pid"
    # The environment's shim dir first on PATH (scripts/env.sh): containerd finds Ferrolet's
    # shim there, as the environment's containerd does.
    setsid bash -c 'echo $$ >"$0"; exec "$@"' "$PID_DIR/containerd-cri.pid" \
      env PATH="$LIB/shims:$PATH" containerd --config "$CONFIG" </dev/null >>"$LOG" 2>&1 &
    wait_for "containerd-cri's pid file" test -s "$PID_DIR/containerd-cri.pid"
    wait_for containerd-cri ctr --address "$CTRD_SOCK" version
    log "containerd $(ctr --address "$CTRD_SOCK" version | awk '/Version/{print $2; exit}') with its CRI plugin on $CTRD_SOCK"
  fi
  import_pause "$cri" "$pause"
}

# Pods first, through CRI (CNI DEL, netns, IPs); then containerd; then what outlives it.
down() {
  need_root
  local f=$PID_DIR/containerd-cri.pid
  if alive; then
    local bench; bench=$(binary ferrolet-cri-bench "${FERROLET_CRI_BENCH:-}")
    if [ -n "$bench" ]; then
      "$bench" clean --all --endpoint "unix://$CTRD_SOCK" || log "removing pods failed; stopping anyway"
    else
      log "no ferrolet-cri-bench binary: pods (if any) are not removed through CRI"
    fi
    local pid; pid=$(cat "$f")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    log "stopped containerd-cri (pid $pid)"
  fi
  rm -f "$f"
  # Shims outlive containerd by design; ours carry exactly this socket in their arguments.
  local shim
  for shim in $(pgrep -f -- "-address $CTRD_SOCK( |$)" || true); do kill -9 "$shim" 2>/dev/null || true; done
  # Unmount deepest first: task rootfs mounts, shm, sandbox files.
  awk -v a="$CTRD_STATE" -v b="$CTRD_ROOT" '$5 ~ "^"a"/" || $5 ~ "^"b"/" {print $5}' /proc/self/mountinfo |
    awk '{print length, $0}' | sort -rn | cut -d' ' -f2- |
    while read -r m; do umount -l "$m" 2>/dev/null || true; done
  log "stopped"
}

status() {
  if alive; then
    echo "containerd-cri: running (pid $(cat "$PID_DIR/containerd-cri.pid"), $CTRD_SOCK)"
  else
    echo "containerd-cri: stopped"
  fi
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  status) status ;;
  *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
