# Shared by the benchmark scripts (bench-kubelet.sh, bench-stream.sh, bench-api.sh): stopping
# processes, unmounting what a run left, a private ferrolet-cri over the environment's
# containerd, and a fresh ferrolet started and stopped around each round.
# The caller sets CRI, CRI_SOCK, CTRD_SOCK, CRI_NAMESPACE, CNI_CONF_DIR, STATE, LIB and OUT (and
# KUBELET, CRI_BENCH, PORT, SECURE_PORT for ferrolet), and defines log and die; start_cri sets
# cri_pid (BENCH_RUNTIME_TYPE, when set, is its `runtime_type`), launch_kubelet sets
# kubelet_pid and kubelet_endpoint.

# stop PID NAME: SIGTERM, up to 15 s, then SIGKILL.
stop() {
  local pid=$1 name=$2
  kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
  log "stopped $name (pid $pid)"
}

unmount_under() { # DIR...: every mount below them and on them (the Go kubelet bind-mounts its
  # root dir on itself), deepest first
  local d
  for d in "$@"; do
    awk -v a="$d" '$5 == a || $5 ~ "^"a"/" {print $5}' /proc/self/mountinfo
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
netns_dir = "$STATE/cri-netns"
cni_conf_dir = "$CNI_CONF_DIR"
cni_bin_dirs = ["/usr/lib/cni"]
log_level = "${BENCH_CRI_LOG:-info}"
${BENCH_RUNTIME_TYPE:+runtime_type = \"$BENCH_RUNTIME_TYPE\"}
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


kubelet_pid=
kubelet_endpoint=

# Stops the running ferrolet (its manifests gone first); whatever pods it left (an interrupted
# round) are removed through CRI with ferrolet gone, so nothing recreates them: all of the
# endpoint's, or with KUBELET_CLEAN_ALL=0 the benchmark's only (their sandboxes carry the
# `ferrolet.bench/run` label; the reference containerd may serve someone else's pods too).
# Its dirs are unmounted and removed.
stop_kubelet() {
  [ -z "$kubelet_pid" ] && [ -s "$STATE/kubelet.pid" ] && kubelet_pid=$(cat "$STATE/kubelet.pid")
  rm -f "$STATE/kubelet.pid"
  if [ -n "$kubelet_pid" ]; then
    rm -rf "$LIB/manifests"
    stop "$kubelet_pid" ferrolet
    kubelet_pid=
  fi
  if [ -n "$kubelet_endpoint" ]; then
    local scope=(--all)
    [ "${KUBELET_CLEAN_ALL:-1}" = 0 ] && scope=()
    "$CRI_BENCH" clean "${scope[@]}" --endpoint "$kubelet_endpoint" >/dev/null 2>&1 ||
      log "removing the pods left on $kubelet_endpoint failed"
    kubelet_endpoint=
  fi
  unmount_under "$LIB/kubelet"
  rm -rf "$LIB/kubelet" "$LIB/pod-logs" "$LIB/manifests"
}

# launch_kubelet LABEL ENDPOINT [READY_FILE]: ferrolet with $LIB/kubelet-config.yaml on the
# manifests in $LIB/manifests (the caller writes both), its log in $OUT/ferrolet-LABEL.log; up
# once its read-only API answers (and READY_FILE exists, when given).
launch_kubelet() {
  local label=$1 endpoint=$2 ready=${3:-}
  mkdir -p "$LIB/manifests" "$LIB/kubelet" "$LIB/pod-logs"
  kubelet_endpoint=$endpoint
  setsid bash -c 'echo $$ >"$0"; exec "$@"' "$STATE/kubelet.pid" \
    "$KUBELET" --config "$LIB/kubelet-config.yaml" --pod-manifest-path "$LIB/manifests" \
    --root-dir "$LIB/kubelet" --container-runtime-endpoint "$endpoint" --address 127.0.0.1 \
    --read-only-port "$PORT" --port "$SECURE_PORT" --healthz-port 0 --hostname-override bench-node \
    </dev/null >"$OUT/ferrolet-$label.log" 2>&1 &
  for _ in $(seq 1 300); do
    [ -s "$STATE/kubelet.pid" ] && kubelet_pid=$(cat "$STATE/kubelet.pid")
    if [ -n "$kubelet_pid" ] && curl -sf "http://127.0.0.1:$PORT/pods" >/dev/null 2>&1 &&
      { [ -z "$ready" ] || [ -s "$ready" ]; }; then
      rm -f "$STATE/kubelet.pid"
      log "ferrolet (pid $kubelet_pid) on $endpoint, read-only API on 127.0.0.1:$PORT"
      return 0
    fi
    if [ -n "$kubelet_pid" ] && ! kill -0 "$kubelet_pid" 2>/dev/null; then
      cat "$OUT/ferrolet-$label.log" >&2
      die "ferrolet exited at start-up"
    fi
    sleep 0.1
  done
  die "ferrolet did not come up; see $OUT/ferrolet-$label.log"
}
