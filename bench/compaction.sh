#!/usr/bin/env bash
# Compaction benchmark: one agent conversation that outgrows the upstream's
# window, driven through this build and through a baseline build in the same
# run, each against its own fake upstream with a summarizer's latency.
# Prints upstream calls per recovered overflow and how long the client waited
# for compacted answers against plain ones. See bench/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."

TURNS="${TURNS:-60}"
WINDOW="${WINDOW:-6000}"                   # the fake model's window, in tokens
SUMMARY_DELAY_MS="${SUMMARY_DELAY_MS:-800}" # a summary call's latency
ANSWER_DELAY_MS="${ANSWER_DELAY_MS:-200}"   # every call's time to first byte
# The build to compare against: a binary, or a revision built here (cached
# under target/bench-baseline). The default is the last build before sizing
# from upstream numbers.
BASELINE_BIN="${BASELINE_BIN:-}"
BASELINE_REV="${BASELINE_REV:-d4b636d}"

cargo build --release --quiet -p condenser -p fake-upstream
if [ -z "$BASELINE_BIN" ]; then
  tree="target/bench-baseline/src-$BASELINE_REV"
  if [ ! -d "$tree" ]; then
    mkdir -p target/bench-baseline
    git archive --prefix="src-$BASELINE_REV/" "$BASELINE_REV" | tar -x -C target/bench-baseline
  fi
  echo "bench: building baseline $BASELINE_REV (cached after the first run)" >&2
  CARGO_TARGET_DIR="$PWD/target/bench-baseline/target" cargo build --release --quiet \
    --manifest-path "$tree/Cargo.toml" -p condenser
  BASELINE_BIN="$PWD/target/bench-baseline/target/release/condenser"
fi

. bench/lib.sh

run() { # name binary: a fresh fake upstream and Condenser (SQLite), one conversation
  local name="$1" binary="$2" fake_port port
  fake_port="$(free_port)"
  target/release/fake-upstream --listen "127.0.0.1:$fake_port" \
    --window "bench-model=$WINDOW" --summary-marker "[condenser:summary]" \
    --summary-delay-ms "$SUMMARY_DELAY_MS" --first-byte-delay-ms "$ANSWER_DELAY_MS" \
    >"$work/$name-fake.log" 2>&1 &
  pids+=($!)
  port="$(free_port)"
  # Each build runs in an empty directory, on its own built-in defaults:
  # the checkout's config/default.toml may name settings an older build
  # does not know.
  mkdir "$work/$name"
  (cd "$work/$name" && CONDENSER_LISTEN="127.0.0.1:$port" DATABASE_URL="sqlite://$work/$name.db" \
    CONDENSER_OPENAI_BASE_URL="http://127.0.0.1:$fake_port/v1" \
    exec "$binary" serve) >"$work/$name.log" 2>&1 &
  pids+=($!)
  wait_port "$fake_port" "$work/$name-fake.log"
  wait_port "$port" "$work/$name.log"
  echo "bench: $name: $TURNS turns" >&2
  python3 bench/agent.py "http://127.0.0.1:$port" "$TURNS" >"$work/$name.turns"
  curl -fs "http://127.0.0.1:$fake_port/_fake/stats" >"$work/$name.stats"
}

run baseline "$BASELINE_BIN"
run current "$PWD/target/release/condenser"
echo "window $WINDOW tokens, $TURNS turns; summary call ${SUMMARY_DELAY_MS} ms + ${ANSWER_DELAY_MS} ms to first byte, every call ${ANSWER_DELAY_MS} ms"
python3 bench/report_compaction.py "$work" baseline current
