#!/usr/bin/env bash
# How close Condenser's token estimates come to what a real upstream counts:
# 20-turn SDK conversations (both protocols, streamed and not) through a
# release build against llama.cpp's server (SmolLM2-135M, tests/realllm),
# then the condenser_token_estimate_ratio histogram from /metrics: for each
# answered request after the first, the estimate it was sized by over the
# prompt tokens the upstream reported. Needs target/sdk-venv (scripts/test
# makes it).
set -euo pipefail
cd "$(dirname "$0")/.."

WINDOW="${WINDOW:-2048}"
TURNS="${TURNS:-20}"
python="$PWD/target/sdk-venv/bin/python"
[ -x "$python" ] || { echo "bench: run scripts/test once to create target/sdk-venv" >&2; exit 1; }

cargo build --release --quiet -p condenser
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 1 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return; sleep 0.1; done; echo "bench: nothing listens on $1" >&2; exit 1; }

work="$(mktemp -d)"
llm_port="$(free_port)"
pid=""
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; tests/realllm/serve.sh stop "$llm_port"; rm -rf "$work"; }
trap cleanup EXIT
llm="$(tests/realllm/serve.sh start "$llm_port" "$WINDOW")"

port="$(free_port)"
CONDENSER_LISTEN="127.0.0.1:$port" DATABASE_URL="sqlite://$work/condenser.db" \
  CONDENSER_OPENAI_BASE_URL="$llm/v1" CONDENSER_ANTHROPIC_BASE_URL="$llm" \
  target/release/condenser serve >"$work/condenser.log" 2>&1 &
pid=$!
wait_port "$port"
for protocol in openai anthropic; do
  for stream in 0 1; do
    echo "bench: $protocol stream=$stream, $TURNS turns, window $WINDOW" >&2
    CONDENSER_URL="http://127.0.0.1:$port" PROTOCOL="$protocol" STREAM="$stream" TURNS="$TURNS" \
      "$python" tests/sdk/realllm_chat.py >/dev/null
  done
done
curl -fs "http://127.0.0.1:$port/metrics" | python3 -c '
import re, sys
buckets, count = [], 0
for line in sys.stdin:
    m = re.match(r"condenser_token_estimate_ratio_bucket\{le=\"([^\"]+)\"\} (\d+)", line)
    if m:
        buckets.append((m.group(1), int(m.group(2))))
    m = re.match(r"condenser_token_estimate_ratio_count (\d+)", line)
    if m:
        count = int(m.group(1))
print(f"{count} requests; estimate / upstream count, cumulative:")
for le, n in buckets:
    print(f"  <= {le:>5}: {n:4d} ({100 * n / max(count, 1):5.1f} %)")
'
