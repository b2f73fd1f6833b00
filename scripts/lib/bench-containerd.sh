# The containerd under a benchmark's ferrolet-cri (sourced by bench-cri.sh and bench-kubelet.sh):
# a private instance, configured as the environment's (scripts/containerd.toml.in, CRI plugin
# off), with a root, state and socket of its own, so that its RSS, its CPU and its shims (found
# by `-address <its socket>` on their command lines) are the benchmark's alone (the
# environment's containerd also serves `make node` and anyone else); and with $BIN, where the
# binaries under test are, first on its PATH: containerd finds a runtime type's shim
# (io.containerd.ferrolet.v1 → containerd-shim-ferrolet-v1) on its PATH, and the shim built for
# the benchmark is installed beside ferrolet-cri there (`make bench-shim`).
#
# The caller sets BIN and BENCH_CTRD_NAME (its own name: bench-cri, bench-kubelet) and defines
# log and die. bench_containerd_up sets BENCH_CTRD_SOCK and bench_ctrd_pid;
# bench_containerd_down stops it, kills what shims it left and unmounts its state, keeping its
# root (the pulled image) for the next run.

bench_containerd_paths() {
  BENCH_CTRD_ROOT=/var/lib/ferrolet/$BENCH_CTRD_NAME-containerd
  BENCH_CTRD_STATE=/run/ferrolet/$BENCH_CTRD_NAME-containerd
  BENCH_CTRD_SOCK=$BENCH_CTRD_STATE/containerd.sock
  BENCH_CTRD_PIDFILE=/run/ferrolet/$BENCH_CTRD_NAME-containerd.pid
  BENCH_CTRD_CONFIG=/run/ferrolet/$BENCH_CTRD_NAME-containerd.toml
}

bench_ctrd_pid=
# Set once this run owns the instance: bench_containerd_down leaves another run's alone.
bench_ctrd_started=

# bench_containerd_up LOGFILE
bench_containerd_up() {
  local logfile=$1
  bench_containerd_paths
  if [ -s "$BENCH_CTRD_PIDFILE" ] && kill -0 "$(cat "$BENCH_CTRD_PIDFILE")" 2>/dev/null; then
    die "another $BENCH_CTRD_NAME's containerd runs (pid $(cat "$BENCH_CTRD_PIDFILE")); stop it first"
  fi
  bench_ctrd_started=1
  mkdir -p "$BENCH_CTRD_ROOT" "$BENCH_CTRD_STATE" "$BENCH_CTRD_ROOT-opt"
  sed -e "s|@ROOT@|$BENCH_CTRD_ROOT|" -e "s|@STATE@|$BENCH_CTRD_STATE|" \
    -e "s|@SOCKET@|$BENCH_CTRD_SOCK|g" -e "s|@OPT@|$BENCH_CTRD_ROOT-opt|" \
    "$ROOT_DIR/scripts/containerd.toml.in" >"$BENCH_CTRD_CONFIG"
  rm -f "$BENCH_CTRD_PIDFILE"
  # Its own session (a Ctrl-C reaches the benchmark only); `exec` keeps the recorded pid.
  # shellcheck disable=SC2016 # $$ and "$@" are the inner shell's
  PATH="$BIN:$PATH" setsid bash -c 'echo $$ >"$0"; exec "$@"' "$BENCH_CTRD_PIDFILE" \
    containerd --config "$BENCH_CTRD_CONFIG" </dev/null >>"$logfile" 2>&1 &
  for _ in $(seq 1 300); do
    [ -s "$BENCH_CTRD_PIDFILE" ] && bench_ctrd_pid=$(cat "$BENCH_CTRD_PIDFILE")
    ctr --address "$BENCH_CTRD_SOCK" version >/dev/null 2>&1 && break
    if [ -n "$bench_ctrd_pid" ] && ! kill -0 "$bench_ctrd_pid" 2>/dev/null; then
      cat "$logfile" >&2
      die "the benchmark's containerd exited at start-up"
    fi
    sleep 0.1
  done
  ctr --address "$BENCH_CTRD_SOCK" version >/dev/null 2>&1 ||
    die "the benchmark's containerd did not come up on $BENCH_CTRD_SOCK; see $logfile"
  # It may answer before the loop has read the pid file.
  bench_ctrd_pid=$(cat "$BENCH_CTRD_PIDFILE")
  # What containerd will exec for a runtime type is decided by its PATH: check it holds $BIN first.
  local path
  path=$(tr '\0' '\n' <"/proc/$bench_ctrd_pid/environ" | sed -n 's/^PATH=//p')
  [ "${path%%:*}" = "$BIN" ] || die "the benchmark's containerd has PATH=$path, not $BIN first"
  log "containerd $(ctr --address "$BENCH_CTRD_SOCK" version | awk '/Version/{print $2; exit}') (pid $bench_ctrd_pid) on $BENCH_CTRD_SOCK, $BIN first on its PATH"
}

# bench_shim_binary RUNTIME_TYPE: the shim program containerd runs for a runtime type
# (io.containerd.runc.v2 → containerd-shim-runc-v2), as containerd names it.
bench_shim_binary() {
  local type=$1 name version
  name=${type#io.containerd.}
  version=${name##*.}
  name=${name%.*}
  echo "containerd-shim-$name-$version"
}

# bench_check_shim RUNTIME_TYPE: dies unless the benchmark's containerd finds that shim; logs
# which file it is.
bench_check_shim() {
  local type=$1 shim found
  shim=$(bench_shim_binary "$type")
  found=$(PATH="$BIN:$PATH" command -v "$shim" || true)
  [ -n "$found" ] || die "runtime type $type needs $shim, on neither $BIN nor PATH (make bench-shim builds ours)"
  log "runtime type $type: containerd runs $found"
}

bench_containerd_down() {
  [ -n "$bench_ctrd_started" ] || return 0
  bench_ctrd_started=
  bench_containerd_paths
  [ -z "$bench_ctrd_pid" ] && [ -s "$BENCH_CTRD_PIDFILE" ] && bench_ctrd_pid=$(cat "$BENCH_CTRD_PIDFILE")
  if [ -n "$bench_ctrd_pid" ] && kill -0 "$bench_ctrd_pid" 2>/dev/null; then
    kill -TERM "$bench_ctrd_pid" 2>/dev/null || true
    for _ in $(seq 1 150); do kill -0 "$bench_ctrd_pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$bench_ctrd_pid" 2>/dev/null || true
    log "stopped the benchmark's containerd (pid $bench_ctrd_pid)"
  fi
  bench_ctrd_pid=
  rm -f "$BENCH_CTRD_PIDFILE" "$BENCH_CTRD_CONFIG"
  # Shims outlive containerd by design; this one's carry its socket in their arguments (the
  # pods were removed before: any left belong to an interrupted run).
  local shim
  for shim in $(pgrep -f -- "-address $BENCH_CTRD_SOCK( |$)" || true); do
    kill -9 "$shim" 2>/dev/null || true
  done
  awk -v a="$BENCH_CTRD_STATE" -v b="$BENCH_CTRD_ROOT" '$5 ~ "^"a"/" || $5 ~ "^"b"/" {print $5}' \
    /proc/self/mountinfo | awk '{print length, $0}' | sort -rn | cut -d' ' -f2- |
    while read -r m; do umount -l "$m" 2>/dev/null || true; done
  rm -rf "$BENCH_CTRD_STATE"
}
