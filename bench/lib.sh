# Shared by the bench scripts; source it from the checkout's root
# (`. bench/lib.sh`). It makes the run's work directory and cleans up on
# exit: the processes in `pids`, the Postgres databases in `databases`
# (dropped through "$PGURL/postgres"), and the work directory unless
# KEEP_WORK is set.

work="$(mktemp -d)"
pids=()
databases=()

cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  for database in "${databases[@]}"; do
    psql -q "$PGURL/postgres" -c "drop database if exists $database" >/dev/null 2>&1 || true
  done
  if [ -n "${KEEP_WORK:-}" ]; then echo "bench: kept $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

wait_port() { # port [log to show when nothing listens]
  for _ in $(seq 1 300); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return; sleep 0.1; done
  echo "bench: nothing listens on $1" >&2
  if [ -n "${2:-}" ]; then tail -n 20 "$2" >&2; fi
  exit 1
}
