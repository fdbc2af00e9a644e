#!/usr/bin/env bash
# WebSocket benchmark: a 20-step tool loop on the Responses API over
# Condenser's WebSocket mode against the same loop over HTTP, through
# Condenser and directly to the upstream, in one run. The fake upstream
# serves HTTP only, so there is no direct socket row. Prints each path's
# median and total step latency and the bytes the client sent. See
# bench/README.md ("The WebSocket mode").
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
  >"$work/fake.log" 2>&1 &
pids+=($!)
port="$(free_port)"
mkdir "$work/condenser"
(cd "$work/condenser" && CONDENSER_LISTEN="127.0.0.1:$port" DATABASE_URL="sqlite://$work/condenser.db" \
  CONDENSER_OPENAI_BASE_URL="http://127.0.0.1:$fake_port/v1" exec "$BIN" serve) \
  >"$work/condenser.log" 2>&1 &
pids+=($!)
wait_port "$fake_port" "$work/fake.log"
wait_port "$port" "$work/condenser.log"

loop() { # name mode url
  echo "bench: $1" >&2
  "$PYTHON" bench/websocket_loop.py "$2" "$3" "$STEPS" >"$work/$1.steps"
}
loop "direct, HTTP" http "http://127.0.0.1:$fake_port"
loop "Condenser, HTTP" http "http://127.0.0.1:$port"
loop "Condenser, socket" socket "http://127.0.0.1:$port"

echo "| $STEPS-step tool loop | median step | total | bytes sent |"
echo "|---|---|---|---|"
for name in "direct, HTTP" "Condenser, HTTP" "Condenser, socket"; do
  python3 - "$work/$name.steps" "$name" <<'PY'
import json, statistics, sys
steps = [json.loads(line) for line in open(sys.argv[1])]
seconds = [s["seconds"] for s in steps]
sent = sum(s["bytes_sent"] for s in steps)
print(f"| {sys.argv[2]} | {statistics.median(seconds) * 1000:.1f} ms | {sum(seconds) * 1000:.0f} ms | {sent:,} |")
PY
done
echo "| direct, socket | n/a: the fake upstream serves HTTP only | | |"
