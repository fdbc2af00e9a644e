#!/usr/bin/env bash
# WebSocket benchmark: a 20-step tool loop on the Responses API over
# Condenser's WebSocket mode against the same loop over HTTP, through
# Condenser and directly to the upstream, in one run. The fake upstream
# serves the mode too; one Condenser speaks it upstream, the other
# (upstreams.openai.websocket = false) sends whole histories over HTTP.
# Prints each path's median and total step latency and the bytes the
# client sent. See bench/README.md ("The WebSocket mode").
set -euo pipefail
cd "$(dirname "$0")/.."

STEPS="${STEPS:-20}"
ANSWER_DELAY_MS="${ANSWER_DELAY_MS:-20}" # every call's time to first byte
# A build to measure (a debug build's figures are not the release's).
BIN="${BIN:-}"
PYTHON="${PYTHON:-python3}"
"$PYTHON" -c 'import websockets' 2>/dev/null || {
  echo "bench: $PYTHON needs the websockets package (pip install websockets)" >&2
  exit 1
}
if [ -z "$BIN" ]; then
  cargo build --release --quiet -p condenser -p fake-upstream
  BIN="$PWD/target/release/condenser"
fi
FAKE="${FAKE:-$(dirname "$BIN")/fake-upstream}"

. bench/lib.sh

fake_port="$(free_port)"
"$FAKE" --listen "127.0.0.1:$fake_port" --first-byte-delay-ms "$ANSWER_DELAY_MS" --no-record \
  --responses-websocket >"$work/fake.log" 2>&1 &
pids+=($!)
wait_port "$fake_port" "$work/fake.log"

condenser() { # name upstream-socket(true|false) -> port
  local port
  port="$(free_port)"
  mkdir "$work/$1"
  printf '[upstreams.openai]\nbase_url = "http://127.0.0.1:%s/v1"\nwebsocket = %s\n' "$fake_port" "$2" \
    >"$work/$1/condenser.toml"
  (cd "$work/$1" && CONDENSER_LISTEN="127.0.0.1:$port" DATABASE_URL="sqlite://$work/$1.db" \
    exec "$BIN" serve --config condenser.toml) >"$work/$1.log" 2>&1 &
  pids+=($!)
  wait_port "$port" "$work/$1.log"
  echo "$port"
}
port="$(condenser upstream-socket true)"
http_port="$(condenser upstream-http false)"

loop() { # name mode url
  echo "bench: $1" >&2
  "$PYTHON" bench/websocket_loop.py "$2" "$3" "$STEPS" >"$work/$1.steps"
}
rows=("direct, HTTP" "direct, socket" "Condenser, HTTP" "Condenser, socket, HTTP upstream"
  "Condenser, socket, socket upstream")
loop "${rows[0]}" http "http://127.0.0.1:$fake_port"
loop "${rows[1]}" socket "http://127.0.0.1:$fake_port"
loop "${rows[2]}" http "http://127.0.0.1:$port"
loop "${rows[3]}" socket "http://127.0.0.1:$http_port"
loop "${rows[4]}" socket "http://127.0.0.1:$port"

echo "| $STEPS-step tool loop | median step | total | bytes sent |"
echo "|---|---|---|---|"
for name in "${rows[@]}"; do
  python3 - "$work/$name.steps" "$name" <<'PY'
import json, statistics, sys
steps = [json.loads(line) for line in open(sys.argv[1])]
seconds = [s["seconds"] for s in steps]
sent = sum(s["bytes_sent"] for s in steps)
print(f"| {sys.argv[2]} | {statistics.median(seconds) * 1000:.1f} ms | {sum(seconds) * 1000:.0f} ms | {sent:,} |")
PY
done
