#!/usr/bin/env bash
# Flame graphs of Condenser's request path (see "Flame graphs" in
# bench/README.md): one Condenser process on Postgres, a fast upstream
# (the fake-upstream binary), a steady load from bench/loadgen, and
# `perf record` with DWARF call graphs on the Condenser process only.
#
#   bench/flamegraph.sh [BINARY] [OUT_PREFIX]
#
# Writes OUT_PREFIX-identical.svg (1.5 KB body at IDENTICAL_RATE req/s),
# OUT_PREFIX-growing.svg (200 growing conversations at GROWING_RATE),
# OUT_PREFIX-history.svg (the 804 KB history body at HISTORY_RATE) and
# OUT_PREFIX-passthrough.svg (the growing bodies on /v1/embeddings, relayed
# unread: the HTTP stack alone). GRAPHS picks some of them.
set -euo pipefail
cd "$(dirname "$0")/.."

BIN="${1:-target/release/condenser}"
OUT="${2:-bench/flamegraphs/after}"
SECONDS_PER_GRAPH="${SECONDS_PER_GRAPH:-8}"
IDENTICAL_RATE="${IDENTICAL_RATE:-1000}"
GROWING_RATE="${GROWING_RATE:-1000}"
HISTORY_RATE="${HISTORY_RATE:-20}"
PGURL="${BENCH_POSTGRES:-postgres://postgres@127.0.0.1:5432}"
PG_PARAMS="${PG_PARAMS:-}"  # query of Condenser's DATABASE_URL, e.g. sslmode=disable
TITLE="${TITLE:-$BIN}"
GRAPHS="${GRAPHS:-identical growing history passthrough}"
for name in $GRAPHS; do
  case "$name" in identical | growing | history | passthrough) ;;
    *) echo "flamegraph: unknown graph '$name' in GRAPHS (identical growing history passthrough)" >&2; exit 2 ;;
  esac
done

command -v perf >/dev/null || { echo "flamegraph: needs perf (linux-perf)" >&2; exit 1; }
if ! command -v inferno-flamegraph >/dev/null; then
  echo "flamegraph: installing inferno (perf output to SVG)" >&2
  cargo install --quiet inferno
fi
cargo build --release --quiet -p condenser -p fake-upstream -p loadgen

. bench/lib.sh
database="condenser_flame_$$"
databases+=("$database")
mkdir -p "$(dirname "$OUT")"
python3 bench/make_bodies.py "$work" >/dev/null

upstream="$(free_port)"
target/release/fake-upstream --listen "127.0.0.1:$upstream" --no-record \
  --window bench-model=10000000 >"$work/fake.log" 2>&1 &
pids+=($!)
wait_port "$upstream"
psql -q "$PGURL/postgres" -c "create database $database" >/dev/null
port="$(free_port)"
# In an empty directory, on the build's own defaults (a baseline build must
# not read this checkout's config/default.toml).
mkdir "$work/cwd"
binary="$(realpath "$BIN")"
(cd "$work/cwd" && CONDENSER_LISTEN="127.0.0.1:$port" DATABASE_URL="$PGURL/$database${PG_PARAMS:+?$PG_PARAMS}" \
  CONDENSER_OPENAI_BASE_URL="http://127.0.0.1:$upstream/v1" \
  exec "$binary" serve) >"$work/condenser.log" 2>&1 &
condenser=$!
pids+=($condenser)
wait_port "$port"
graph() { # name rate path loadgen-args...
  local name="$1" rate="$2" url="http://127.0.0.1:$port$3"; shift 3
  case " $GRAPHS " in *" $name "*) ;; *) return 0 ;; esac
  # Warm-up: the conversations are stored before the profile starts.
  target/release/loadgen --url "$url" --rate "$rate" --duration 2 "$@" >/dev/null
  psql -q "$PGURL/$database" -c analyze >/dev/null
  perf record -q -F 499 --call-graph dwarf,32768 -p "$condenser" -o "$work/$name.data" \
    -- sleep "$SECONDS_PER_GRAPH" >/dev/null 2>&1 &
  local recorder=$!
  target/release/loadgen --url "$url" --rate "$rate" --duration "$SECONDS_PER_GRAPH" "$@" \
    | python3 -c 'import json,sys; d=json.load(sys.stdin); print("flamegraph: %s req/s, p50 %s us" % (d["achieved_rate"], d["latency_us"]["p50"]), file=sys.stderr)'
  wait "$recorder"
  perf script -i "$work/$name.data" 2>/dev/null | inferno-collapse-perf >"$work/$name.folded"
  inferno-flamegraph --title "condenser $name ($rate req/s, $TITLE)" \
    --minwidth 0.2 <"$work/$name.folded" >"$OUT-$name.svg"
  [ -n "${KEEP_FOLDED:-}" ] && cp "$work/$name.folded" "$OUT-$name.folded"
  echo "flamegraph: wrote $OUT-$name.svg" >&2
}

chat=/v1/chat/completions
graph identical "$IDENTICAL_RATE" "$chat" --workload fixed --body "$work/identical.json"
graph growing "$GROWING_RATE" "$chat" --workload growing --seed "$$"
graph history "$HISTORY_RATE" "$chat" --workload fixed --body "$work/history.json"
graph passthrough "$GROWING_RATE" /v1/embeddings --workload growing --seed "$$"
