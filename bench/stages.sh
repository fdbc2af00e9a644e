#!/usr/bin/env bash
# Where a request's time goes on its critical path, stage by stage (see
# "Stages in time" in bench/README.md): one Condenser process on SQLite (or
# Postgres with BACKEND=postgres), a fast upstream (the fake-upstream
# binary), a steady load from bench/loadgen, and uprobes on the entries of
# the functions that start each stage, recorded by `perf` with the socket
# calls that take the body in and send it on.
#
#   bench/stages.sh [BINARY]
#
# WORKLOAD (identical: the 1.5 KB body; history: the ~800 KB re-sent
# history), RATE (200; history 20), DURATION (4 s recorded, after WARMUP,
# 2 s, of warm-up), CONNECTIONS (16). Prints, for each event that at
# least 80 % of the requests reach, its median time since the request's
# last byte was read, and the step from the event before it. SAMPLE_HZ
# (unset: none) also samples the process's CPU (`cpu-clock`, that many
# times a second) and prints, for the body's read (from its lease to its
# last read), for the step after it (to the upstream write) and for the
# answer (from the upstream's answer read to the client's write), what the
# samples of that phase ran, each function's share: a sample costs the
# thread about as much as a probe hit, so the phases run a little longer.
#
# Needs root (uprobes are registered in tracefs) and perf (linux-perf).
# Each probe hit costs the thread a trap, a few microseconds: the steps
# are a little long, the same for every build; compare rows of one run.
set -euo pipefail
cd "$(dirname "$0")/.."

BIN="${1:-target/release/condenser}"
WORKLOAD="${WORKLOAD:-identical}"
case "$WORKLOAD" in
  identical) RATE="${RATE:-200}" ;;
  history) RATE="${RATE:-20}" ;;
  *) echo "stages: unknown WORKLOAD '$WORKLOAD' (identical history)" >&2; exit 2 ;;
esac
DURATION="${DURATION:-4}"
WARMUP="${WARMUP:-2}"
SAMPLE_HZ="${SAMPLE_HZ:-}"
CONNECTIONS="${CONNECTIONS:-16}"
BACKEND="${BACKEND:-sqlite}"
PGURL="${BENCH_POSTGRES:-postgres://postgres@127.0.0.1:5432}"
TRACEFS=/sys/kernel/tracing
[ -d "$TRACEFS/events" ] || TRACEFS=/sys/kernel/debug/tracing
GROUP="condenser_stages_$$"

command -v perf >/dev/null || { echo "stages: needs perf (linux-perf)" >&2; exit 1; }
[ -w "$TRACEFS/uprobe_events" ] || { echo "stages: needs root and tracefs ($TRACEFS)" >&2; exit 1; }
if [ "$BIN" = target/release/condenser ]; then
  cargo build --release --quiet -p condenser -p fake-upstream -p loadgen
else
  cargo build --release --quiet -p fake-upstream -p loadgen
fi
binary="$(realpath "$BIN")"

. bench/lib.sh
remove_probes() {
  grep -o "^[pr]:$GROUP/[a-z_]*" "$TRACEFS/uprobe_events" 2>/dev/null | sed 's/^[pr]:/-:/' |
    while read -r probe; do echo "$probe" >>"$TRACEFS/uprobe_events"; done
}
trap 'remove_probes; cleanup' EXIT

# The stages, in the order a request meets them: a probe name and the
# mangled name of the function whose entry starts it. Functions the
# compiler inlined have no symbol and are left out, with a note.
stages=(
  resolve '6routes10RouteTable7resolve17h'
  body_lease '6budget10BodyBudget5lease17h'
  prepare '8pipeline6native7prepare17h'
  identify '9condenser8pipeline8identify17h'
  resent_split '8protocol6resent5split17h'
  conversation '12conversation8identify12conversation17h'
  tenant '8TenantId15from_credential17h'
  upstream_headers '7headers15request_headers17h'
  reqwest_execute '7reqwest10async_impl6client6Client15execute_request17h'
  queue_messages '7persist7Persist10queue_once17h'
  response_headers '7headers16response_headers17h'
  json_usage '6tokens5usage10json_usage17h'
  learn_usage '5Sizes11learn_usage17h'
  finished_response '9keepalive17finished_response17h'
)
# A symbol's address in the file: its address less its segment's.
read -r text_offset text_address < <(readelf -lW "$binary" | awk '$1 == "LOAD" && / R E / { print $2, $3; exit }')
text_delta=$((text_address - text_offset))
nm "$binary" >"$work/symbols"
events=()
for ((i = 0; i < ${#stages[@]}; i += 2)); do
  name="${stages[i]}" pattern="${stages[i + 1]}"
  address="$(awk -v p="$pattern" '$3 ~ p && $3 !~ /drop_in_place/ { print $1; exit }' "$work/symbols")"
  if [ -z "$address" ]; then
    echo "stages: no symbol for $name (inlined in this build): left out" >&2
    continue
  fi
  printf 'p:%s/%s %s:0x%x\n' "$GROUP" "$name" "$binary" $((16#$address - text_delta)) >>"$TRACEFS/uprobe_events"
  events+=(-e "$GROUP:$name")
done

python3 bench/make_bodies.py "$work" >/dev/null
upstream="$(free_port)"
target/release/fake-upstream --listen "127.0.0.1:$upstream" --no-record \
  --window bench-model=10000000 >"$work/fake.log" 2>&1 &
pids+=($!)
wait_port "$upstream"
case "$BACKEND" in
  sqlite) database_url="sqlite://$work/condenser.db" ;;
  postgres)
    database="condenser_stages_$$"
    psql -q "$PGURL/postgres" -c "create database $database" >/dev/null
    databases+=("$database")
    database_url="$PGURL/$database" ;;
  *) echo "stages: unknown BACKEND '$BACKEND' (sqlite postgres)" >&2; exit 2 ;;
esac
port="$(free_port)"
mkdir "$work/cwd"
(cd "$work/cwd" && CONDENSER_LISTEN="127.0.0.1:$port" DATABASE_URL="$database_url" \
  CONDENSER_OPENAI_BASE_URL="http://127.0.0.1:$upstream/v1" \
  exec "$binary" serve) >"$work/condenser.log" 2>&1 &
condenser=$!
pids+=($condenser)
wait_port "$port" "$work/condenser.log"

url="http://127.0.0.1:$port/v1/chat/completions"
load() { # seconds
  target/release/loadgen --url "$url" --rate "$RATE" --duration "$1" \
    --connections "$CONNECTIONS" --workload fixed --body "$work/$WORKLOAD.json"
}
load "$WARMUP" >/dev/null
load $((DURATION + 2)) >"$work/load.json" &
loader=$!
sleep 1
sampling=()
[ -n "$SAMPLE_HZ" ] && sampling=(-e cpu-clock -F "$SAMPLE_HZ")
perf record -q "${events[@]}" "${sampling[@]}" \
  -e syscalls:sys_exit_recvfrom -e syscalls:sys_enter_writev -e syscalls:sys_exit_writev \
  -p "$condenser" -o "$work/stages.data" -- sleep "$DURATION" >/dev/null 2>&1
wait "$loader"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("stages: %s req/s achieved, p50 %s us" % (d["achieved_rate"], d["latency_us"]["p50"]))' "$work/load.json"
perf script -i "$work/stages.data" -F tid,time,event,ip,sym 2>/dev/null >"$work/stages.txt"
python3 bench/stages_report.py "$work/stages.txt"
