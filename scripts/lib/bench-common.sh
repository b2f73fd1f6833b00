# Shared by the benchmark scripts (bench-kubelet.sh, bench-api.sh): stopping processes,
# unmounting what a run left, and a private ferrolet-cri over the environment's containerd.
# The caller sets CRI, CRI_SOCK, CTRD_SOCK, CRI_NAMESPACE, CNI_CONF_DIR, STATE, LIB and OUT, and
# defines log and die; start_cri sets cri_pid.

# stop PID NAME: SIGTERM, up to 15 s, then SIGKILL.
stop() {
  local pid=$1 name=$2
  kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
  log "stopped $name (pid $pid)"
}

unmount_under() { # DIR...: every mount below them, deepest first
  local d
  for d in "$@"; do
    awk -v a="$d" '$5 ~ "^"a"/" {print $5}' /proc/self/mountinfo
  done | awk '{print length, $0}' | sort -rn | cut -d' ' -f2- |
    while read -r m; do umount -l "$m" 2>/dev/null || true; done
}

start_cri() {
  cat >"$STATE/ferrolet-cri.toml" <<TOML
listen = "unix://$CRI_SOCK"
containerd = "$CTRD_SOCK"
namespace = "$CRI_NAMESPACE"
root = "$LIB/cri"
state = "$STATE/cri"
cni_conf_dir = "$CNI_CONF_DIR"
cni_bin_dirs = ["/usr/lib/cni"]
log_level = "info"
[registry.hosts."127.0.0.1:5000"]
plain_http = true
TOML
  # Its own session: a Ctrl-C reaches the benchmark, which still needs the runtime to clean up.
  setsid bash -c 'echo $$ >"$0"; exec "$@"' "$STATE/cri.pid" \
    "$CRI" --config "$STATE/ferrolet-cri.toml" </dev/null >"$OUT/ferrolet-cri.log" 2>&1 &
  for _ in $(seq 1 600); do
    [ -s "$STATE/cri.pid" ] && cri_pid=$(cat "$STATE/cri.pid")
    [ -S "$CRI_SOCK" ] && break
    if [ -n "$cri_pid" ] && ! kill -0 "$cri_pid" 2>/dev/null; then
      cat "$OUT/ferrolet-cri.log" >&2
      die "ferrolet-cri exited at start-up"
    fi
    sleep 0.1
  done
  [ -S "$CRI_SOCK" ] || die "ferrolet-cri did not listen on $CRI_SOCK; see $OUT/ferrolet-cri.log"
  log "ferrolet-cri (pid $cri_pid) on $CRI_SOCK, containerd namespace $CRI_NAMESPACE"
}

