#!/usr/bin/env bash
# Condenser's overhead benchmark: the same requests, at the same fixed rate,
# sent directly to a fast local upstream and through Condenser (SQLite and
# Postgres), measured in one run. See bench/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION="${DURATION:-20s}"
WORKERS="${WORKERS:-4}"
SMALL_RATE="${SMALL_RATE:-200}"      # requests per second, all workers
HISTORY_RATE="${HISTORY_RATE:-20}"
PGURL="${BENCH_POSTGRES:-postgres://postgres@127.0.0.1:5432}"
# Optional: another condenser binary (e.g. built from an older commit) run
# beside this one in the same run, as rows "baseline-sqlite/-postgres".
BASELINE_BIN="${BASELINE_BIN:-}"
# Optional: TRACES=1 adds this build with OTLP trace export on, every
# request sampled (ratio 1.0), to a local sink (bench/otlp_sink.py), as rows
# "traced-sqlite/-postgres"; the plain rows are the same build with traces off.
TRACES="${TRACES:-}"
# Which storage each pair runs on.
BACKENDS="${BACKENDS:-sqlite postgres}"

if ! command -v hey >/dev/null; then
  echo "bench: installing hey (load generator)"
  apt-get install -y -qq hey >/dev/null
fi
cargo build --release --quiet -p condenser -p fake-upstream

. bench/lib.sh

python3 bench/make_bodies.py "$work"

fake_port="$(free_port)"
target/release/fake-upstream --listen "127.0.0.1:$fake_port" --no-record \
  --window bench-model=10000000 >"$work/fake.log" 2>&1 &
pids+=($!)
wait_port "$fake_port"

# Each instance runs in an empty directory on its built-in defaults, so a
# baseline build never reads this checkout's config/default.toml.
start_condenser() { # name binary database_url [VAR=value…]; port in $work/NAME.port, pid in $work/NAME.pid
  local port binary; port="$(free_port)"; binary="$(realpath "$2")"
  mkdir -p "$work/$1.cwd"
  (cd "$work/$1.cwd" && exec env CONDENSER_LISTEN="127.0.0.1:$port" DATABASE_URL="$3" \
    CONDENSER_OPENAI_BASE_URL="http://127.0.0.1:$fake_port/v1" "${@:4}" \
    "$binary" serve >"$work/$1.log" 2>&1) &
  pids+=($!)
  echo $! >"$work/$1.pid"
  echo "$port" >"$work/$1.port"
  wait_port "$port"
}
start_pair() { # prefix binary [VAR=value…]: one instance on SQLite, one on a fresh Postgres database
  local prefix="$1" binary="$2"; shift 2
  local database="condenser_bench_$$_${prefix//-/_}"
  for backend in $BACKENDS; do
    if [ "$backend" = sqlite ]; then
      start_condenser "${prefix}sqlite" "$binary" "sqlite://$work/${prefix}condenser.db" "$@"
    else
      psql -q "$PGURL/postgres" -c "create database $database" >/dev/null
      databases+=("$database")
      start_condenser "${prefix}postgres" "$binary" "$PGURL/$database" "$@"
    fi
    targets+=("$prefix$backend")
  done
}
targets=()
start_pair "" target/release/condenser
if [ -n "$BASELINE_BIN" ]; then
  start_pair baseline- "$BASELINE_BIN"
fi
if [ -n "$TRACES" ]; then
  sink_port="$(free_port)"
  python3 bench/otlp_sink.py "$sink_port" "$work/sink.counts" &
  pids+=($!)
  wait_port "$sink_port"
  start_pair traced- target/release/condenser \
    OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:$sink_port" \
    OTEL_TRACES_SAMPLER=traceidratio OTEL_TRACES_SAMPLER_ARG=1.0
fi

cpu_ticks() { [ -z "$1" ] && echo 0 && return; awk '{print $14 + $15}' "/proc/$1/stat"; }

run() { # body rate target port pid
  local body="$1" rate="$2" target="$3" port="$4" pid="$5"
  local url="http://127.0.0.1:$port/v1/chat/completions"
  local args=(-m POST -T application/json -H "Authorization: Bearer sk-bench" -D "$work/$body.json")
  hey -n 40 -c "$WORKERS" "${args[@]}" "$url" >/dev/null          # warm-up
  local before; before="$(cpu_ticks "$pid")"
  hey -z "$DURATION" -c "$WORKERS" -q "$((rate / WORKERS))" -o csv "${args[@]}" "$url" \
    >"$work/$body-$target.csv"
  local after; after="$(cpu_ticks "$pid")"
  echo "$body $target $rate $((after - before)) $work/$body-$target.csv" >>"$work/runs.txt"
}

for body in small history; do
  rate="$SMALL_RATE"; [ "$body" = history ] && rate="$HISTORY_RATE"
  echo "bench: $body at $rate req/s for $DURATION: direct ${targets[*]}" >&2
  run "$body" "$rate" direct "$fake_port" ""
  for target in "${targets[@]}"; do
    run "$body" "$rate" "$target" "$(cat "$work/$target.port")" "$(cat "$work/$target.pid")"
  done
done

python3 bench/report.py "$work/runs.txt" "$(getconf CLK_TCK)"

if [ -n "$TRACES" ]; then
  sleep 6 # one export interval: the last spans leave
  for target in "${targets[@]}"; do
    case "$target" in traced-*) ;; *) continue ;; esac
    port="$(cat "$work/$target.port")"
    curl -s "http://127.0.0.1:$port/metrics" | grep '^condenser_trace_spans' | sed "s/^/$target: /"
  done
  echo "sink: $(cat "$work/sink.counts" 2>/dev/null || echo "0 0") (exports, bytes)"
fi
