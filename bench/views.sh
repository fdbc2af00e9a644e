#!/usr/bin/env bash
# The operator views over one very long conversation (see "Operator views"
# in bench/README.md): bench/views_data.py writes a conversation of 100,000
# messages, 10,000 compactions, a few thousand heads and request rows into
# an SQLite file and a Postgres database migrated by the build under test,
# and this times `condenser conversations list`, `conversations show ID`
# and GET of the operator page's list and of that conversation's page.
#
#   bench/views.sh [BINARY]
#
# BINARY defaults to this checkout's release build. BASELINE_BIN, when set,
# is timed first on data its own migrations made (MEASURE_BASELINE=0 skips
# its timings); then BINARY migrates that same data (the upgrade, timed)
# and is timed on it. Each figure is the
# best and the worst of RUNS (3) runs; a command still running after
# TIMEOUT seconds (120) is stopped and shown as "> TIMEOUT s".
set -euo pipefail
cd "$(dirname "$0")/.."

BIN="${1:-}"
BASELINE_BIN="${BASELINE_BIN:-}"
RUNS="${RUNS:-3}"
TIMEOUT="${TIMEOUT:-120}"
BACKENDS="${BACKENDS:-sqlite postgres}"
PGURL="${BENCH_POSTGRES:-postgres://postgres@127.0.0.1:5432}"
TOKEN="bench-admin-token-0123456789abcdef"

if [ -z "$BIN" ]; then
  cargo build --release --quiet -p condenser
  BIN="$PWD/target/release/condenser"
fi

. bench/lib.sh

# seconds a command took, or "> TIMEOUT"; its output goes to $work/out
timed() {
  local start rc=0
  start=$(date +%s%N)
  timeout "$TIMEOUT" "$@" >"$work/out" 2>"$work/err" || rc=$?
  if [ "$rc" = 124 ]; then
    # The stopped client's query would go on in Postgres, loading the rest
    # of the run.
    if [ -n "${database:-}" ]; then
      psql -q "$PGURL/postgres" -c "select pg_cancel_backend(pid) from pg_stat_activity \
        where datname = '$database' and state = 'active' and pid <> pg_backend_pid()" \
        >/dev/null 2>&1 || true
    fi
    echo "> $TIMEOUT"
    return
  fi
  if [ "$rc" != 0 ]; then
    echo "bench: failed ($rc): $*" >&2
    tail -n 5 "$work/err" >&2
    exit 1
  fi
  python3 -c "print(($(date +%s%N) - $start) / 1e9)"
}

# best and worst of RUNS runs of a command, in seconds
runs() {
  local times=() t
  for _ in $(seq 1 "$RUNS"); do
    t="$(timed "$@")"
    times+=("$t")
    case "$t" in ">"*) break ;; esac
  done
  printf '%s\n' "${times[@]}" | python3 -c '
import sys
ts = [l.strip() for l in sys.stdin if l.strip()]
if any(t.startswith(">") for t in ts):
    print(next(t for t in ts if t.startswith(">")) + " s")
else:
    ts = sorted(float(t) for t in ts)
    print(f"{ts[0]:.3f}-{ts[-1]:.3f} s" if len(ts) > 1 else f"{ts[0]:.3f} s")'
}

# GET with the admin token; fails unless it answers 200
get=(curl -sf -o /dev/null -H "authorization: Bearer $TOKEN")

measure() { # name binary url tenant conversation
  local name="$1" binary="$2" url="$3" tenant="$4" conversation="$5" port
  export DATABASE_URL="$url"
  echo "$name: conversations list: $(runs "$binary" conversations list)"
  lines="$(wc -l <"$work/out")"
  echo "$name:   ($lines lines; the long one: $(grep bench-session "$work/out" | tr -s ' ' || true))"
  echo "$name: conversations show: $(runs "$binary" conversations show "${conversation:0:12}")"
  echo "$name:   ($(wc -l <"$work/out") lines)"
  port="$(free_port)"
  mkdir -p "$work/$name"
  (cd "$work/$name" && CONDENSER_LISTEN="127.0.0.1:$port" DATABASE_URL="$url" \
    CONDENSER_ADMIN_TOKEN="$TOKEN" exec "$binary" serve) >"$work/$name.log" 2>&1 &
  local pid=$!
  pids+=("$pid")
  wait_port "$port" "$work/$name.log"
  echo "$name: GET /admin/: $(runs "${get[@]}" "http://127.0.0.1:$port/admin/")"
  echo "$name: GET the conversation's page: $(runs "${get[@]}" "http://127.0.0.1:$port/admin/conversations/$tenant/$conversation")"
  curl -s -H "authorization: Bearer $TOKEN" -o "$work/page.html" -w "%{size_download}" \
    --max-time "$TIMEOUT" "http://127.0.0.1:$port/admin/conversations/$tenant/$conversation" \
    >"$work/size" || true
  echo "$name:   (page of $(cat "$work/size") bytes)"
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

for backend in $BACKENDS; do
  case "$backend" in
    sqlite) url="sqlite://$work/views.db" ;;
    postgres)
      database="condenser_bench_views_$$"
      psql -q "$PGURL/postgres" -c "create database $database"
      databases+=("$database")
      url="$PGURL/$database"
      ;;
    *) echo "bench: unknown backend $backend" >&2; exit 2 ;;
  esac
  first="${BASELINE_BIN:-$BIN}"
  DATABASE_URL="$url" "$first" migrate >/dev/null
  started=$(date +%s)
  if [ "$backend" = sqlite ]; then
    read -r tenant conversation < <(python3 bench/views_data.py sqlite "$work/views.db")
  else
    read -r tenant conversation < <(python3 bench/views_data.py postgres "$url")
  fi
  echo "$backend: generated in $(($(date +%s) - started)) s: tenant $tenant conversation $conversation"
  if [ -n "$BASELINE_BIN" ]; then
    if [ "${MEASURE_BASELINE:-1}" != 0 ]; then
      measure "baseline-$backend" "$BASELINE_BIN" "$url" "$tenant" "$conversation"
    fi
    echo "$backend: migrating to this build: $(DATABASE_URL="$url" timed "$BIN" migrate) s"
  fi
  measure "$backend" "$BIN" "$url" "$tenant" "$conversation"
done
