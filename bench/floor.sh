#!/usr/bin/env bash
# The floor of Condenser's stack and its layers one by one (see "The floor"
# in bench/README.md): the same upstream (nginx answering a fixed chat
# completion), the same steady load from bench/loadgen (the 1.5 KB chat
# body over 16 connections), and the CPU each proxy spends a request, from
# /proc, for:
#
#   nginx                   nginx as a plain reverse proxy
#   floor                   bench/floor: hyper's server to hyper-util's client
#   +auto ... +reqwest      bench/floor with Condenser's layers put back in
#                           turn (FLOOR_LAYERS: auto, axum, tower, log, reqwest)
#   condenser-relayed       this build on SQLite, the body on /v1/embeddings
#                           (forwarded unread: its HTTP path, none of its work)
#   condenser-chat          this build on SQLite, the chat route
#
#   bench/floor.sh [BINARY]
#
# Each round measures every target in turn (the order turning between
# rounds) for DURATION seconds after WARMUP; the table gives each target's
# median over ROUNDS. Settings: RATE (8000 req/s: enough requests a tick
# for /proc's clock-tick CPU to resolve a few microseconds, below every
# target's maximum), DURATION (8), WARMUP (2), ROUNDS (3).
set -euo pipefail
cd "$(dirname "$0")/.."

BIN="${1:-target/release/condenser}"
RATE="${RATE:-8000}"
DURATION="${DURATION:-8}"
WARMUP="${WARMUP:-2}"
ROUNDS="${ROUNDS:-3}"

[ -x /usr/sbin/nginx ] || { echo "floor: needs nginx (apt-get install nginx-light)" >&2; exit 1; }
cargo build --release --quiet -p loadgen -p floor
[ "$BIN" != target/release/condenser ] || cargo build --release --quiet -p condenser
loadgen=target/release/loadgen

. bench/lib.sh
python3 bench/make_bodies.py "$work" >/dev/null
start_upstream

start_nginx_proxy "$(free_port)"
start_floor() { # name layers
  local port; port="$(free_port)"
  FLOOR_LAYERS="$2" target/release/floor "127.0.0.1:$port" "http://127.0.0.1:$upstream_port" 2 \
    >"$work/$1.log" 2>&1 &
  pids+=($!)
  echo $! >"$work/$1.pid"
  echo "$port" >"$work/$1.port"
  wait_port "$port" "$work/$1.log"
}
start_floor floor ""
start_floor +auto auto
start_floor +axum auto,axum
start_floor +tower auto,tower
start_floor +log auto,tower,log
start_floor +reqwest auto,tower,log,reqwest
start_condenser condenser "$BIN" "sqlite://$work/condenser.db"

targets=(nginx floor +auto +axum +tower +log +reqwest condenser-relayed condenser-chat)
process_of() { case "$1" in condenser-*) echo condenser ;; *) echo "$1" ;; esac; }
path_of() { case "$1" in condenser-relayed) echo /v1/embeddings ;; *) echo /v1/chat/completions ;; esac; }
ticks() { # target: user+system ticks of its process and children
  local pid sum=0 t; pid="$(cat "$work/$(process_of "$1").pid")"
  for p in "$pid" $(pgrep -P "$pid" || true); do
    t="$(awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null || echo 0)"; sum=$((sum + t))
  done
  echo "$sum"
}
load() { # target seconds
  "$loadgen" --url "http://127.0.0.1:$(cat "$work/$(process_of "$1").port")$(path_of "$1")" \
    --rate "$RATE" --duration "$2" --connections 16 --body "$work/identical.json"
}

hz="$(getconf CLK_TCK)"
echo "floor: $RATE req/s, ${DURATION} s a row, $ROUNDS rounds; work dir $work" >&2
for round in $(seq 1 "$ROUNDS"); do
  order=("${targets[@]}")
  [ $((round % 2)) = 0 ] && mapfile -t order < <(printf '%s\n' "${targets[@]}" | tac)
  for target in "${order[@]}"; do
    load "$target" "$WARMUP" >/dev/null
    before="$(ticks "$target")"
    result="$(load "$target" "$DURATION")"
    after="$(ticks "$target")"
    echo "$result" | python3 -c '
import json, sys
r = json.load(sys.stdin)
target, ticks, hz = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
ok = r["ok"]
print(json.dumps({"target": target, "ok": ok, "errors": r["errors"],
                  "p50_us": (r["latency_us"] or {}).get("p50"),
                  "cpu_ms": ticks * 1000 / hz / ok if ok else None}))' \
      "$target" "$((after - before))" "$hz" | tee -a "$work/rows.jsonl" >&2
  done
done

python3 - "$work/rows.jsonl" "${targets[@]}" <<'PY'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
print("| target | CPU ms a request (median) | each round | p50 (median) | errors |")
print("|---|---|---|---|---|")
for target in sys.argv[2:]:
    mine = [r for r in rows if r["target"] == target and r["cpu_ms"] is not None]
    if not mine:
        print(f"| {target} | no answers | | | |")
        continue
    cpu = statistics.median(r["cpu_ms"] for r in mine)
    spread = " / ".join(f"{r['cpu_ms']:.4f}" for r in mine)
    p50 = statistics.median(r["p50_us"] for r in mine)
    errors = sum(r["errors"] for r in mine)
    print(f"| {target} | {cpu:.4f} | {spread} | {p50:.0f} µs | {errors} |")
PY
