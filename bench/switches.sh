#!/usr/bin/env bash
# Context switches, wake-ups, system calls and CPU per request (see
# "Context switches per request" in bench/README.md): the same fast
# upstream (the fake-upstream binary), the same steady load from
# bench/loadgen, and `perf stat` on
# the proxy's process only, for nginx as a plain reverse proxy (keep-alive
# to the upstream) and Condenser on SQLite and on Postgres, in one run.
#
#   bench/switches.sh [BINARY]
#
# With BASELINE_BIN set, that build is measured too, in the same run
# (targets baseline-sqlite and baseline-postgres, after the others').
# Prints one line per target and workload: the rate achieved, p50, and
# per request: context switches, sched_wakeup events (wake-ups of the
# proxy's own threads), CPU migrations, system calls, page faults, and the
# proxy's CPU (ms, user and kernel together: /proc's split of the two is
# sampled at each clock tick, too coarse for a request's microseconds).
# Workloads: the 1.5 KB chat body at RATE (1,000 req/s), the same body on
# /v1/embeddings ("relayed": a route Condenser forwards unread, so its HTTP
# stack alone) at RATE, and the ~800 KB history at HISTORY_RATE (20).
# Settings: DURATION (8 s per row), RATE, HISTORY_RATE, TARGETS
# ("nginx condenser-sqlite condenser-postgres"), WORKLOADS ("small relayed history"),
# PER_THREAD (1: also each kind of thread's voluntary and involuntary
# switches a request, from /proc, over the same window).
set -euo pipefail
cd "$(dirname "$0")/.."

BIN="${1:-target/release/condenser}"
DURATION="${DURATION:-8}"
RATE="${RATE:-1000}"
HISTORY_RATE="${HISTORY_RATE:-20}"
BASELINE_BIN="${BASELINE_BIN:-}"
PER_THREAD="${PER_THREAD:-}"
TARGETS="${TARGETS:-nginx condenser-sqlite condenser-postgres${BASELINE_BIN:+ baseline-sqlite baseline-postgres}}"
WORKLOADS="${WORKLOADS:-small relayed history}"
PGURL="${BENCH_POSTGRES:-postgres://postgres@127.0.0.1:5432}"
EVENTS="context-switches,sched:sched_wakeup,cpu-migrations,raw_syscalls:sys_enter,page-faults"

command -v perf >/dev/null || { echo "switches: needs perf (linux-perf)" >&2; exit 1; }
[ -x /usr/sbin/nginx ] || { echo "switches: needs nginx (apt-get install nginx-light)" >&2; exit 1; }
cargo build --release --quiet -p condenser -p fake-upstream -p loadgen

. bench/lib.sh
python3 bench/make_bodies.py "$work" >/dev/null

upstream="$(free_port)"
target/release/fake-upstream --listen "127.0.0.1:$upstream" --no-record \
  --window bench-model=10000000 >"$work/fake.log" 2>&1 &
pids+=($!)
wait_port "$upstream"

start_nginx() { # port; sets processes: its master's and workers' pids
  local dir="$work/nginx" port="$1"
  mkdir -p "$dir/tmp"
  cat >"$dir/nginx.conf" <<EOF
worker_processes auto;
pid $dir/nginx.pid;
error_log $dir/error.log warn;
events { worker_connections 8192; }
http {
  access_log off;
  client_body_temp_path $dir/tmp/client;
  proxy_temp_path $dir/tmp/proxy;
  fastcgi_temp_path $dir/tmp/fastcgi;
  uwsgi_temp_path $dir/tmp/uwsgi;
  scgi_temp_path $dir/tmp/scgi;
  client_max_body_size 8m;
  client_body_buffer_size 1m;
  upstream fake { server 127.0.0.1:$upstream; keepalive 64; }
  server {
    listen 127.0.0.1:$port;
    location / {
      proxy_pass http://fake;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }
  }
}
EOF
  /usr/sbin/nginx -p "$dir" -e "$dir/error.log" -c "$dir/nginx.conf" -g 'daemon off;' &
  local master=$!
  pids+=("$master")
  wait_port "$port"
  processes="$master $(pgrep -P "$master" | tr '\n' ' ')"
}

start_condenser() { # port backend [binary]; sets processes: its pid
  local port="$1" url
  case "$2" in
    sqlite) url="sqlite://$work/condenser-$port.db" ;;
    postgres)
      local database="condenser_switches_$$_$port"
      databases+=("$database")
      psql -q "$PGURL/postgres" -c "create database $database" >/dev/null
      url="$PGURL/$database" ;;
  esac
  mkdir -p "$work/cwd-$port"
  local binary
  binary="$(realpath "${3:-$BIN}")"
  (cd "$work/cwd-$port" && CONDENSER_LISTEN="127.0.0.1:$port" DATABASE_URL="$url" \
    CONDENSER_OPENAI_BASE_URL="http://127.0.0.1:$upstream/v1" \
    exec "$binary" serve) >"$work/condenser-$port.log" 2>&1 &
  processes=$!
  pids+=("$processes")
  wait_port "$port" "$work/condenser-$port.log"
}

row() { # target pids workload rate body port path
  local target="$1" processes="$2" workload="$3" rate="$4" body="$5" port="$6"
  local url="http://127.0.0.1:$port$7"
  # Warm-up: threads started, pools filled, conversations stored.
  target/release/loadgen --url "$url" --rate "$rate" --duration 2 --workload fixed --body "$body" >/dev/null
  [ -z "$PER_THREAD" ] || threads "$processes" >"$work/threads-before-$target-$workload"
  local ticks_before ticks_after
  ticks_before="$(cpu_ticks "$processes")"
  perf stat -x, -e "$EVENTS" -p "$(echo "$processes" | xargs | tr ' ' ',')" \
    -o "$work/stat-$target-$workload.csv" -- sleep "$DURATION" &
  local recorder=$!
  target/release/loadgen --url "$url" --rate "$rate" --duration "$DURATION" \
    --workload fixed --body "$body" >"$work/load-$target-$workload.json"
  wait "$recorder"
  ticks_after="$(cpu_ticks "$processes")"
  [ -z "$PER_THREAD" ] || threads "$processes" >"$work/threads-after-$target-$workload"
  python3 - "$target" "$workload" "$work/load-$target-$workload.json" \
    "$work/stat-$target-$workload.csv" "$DURATION" "$ticks_before" "$ticks_after" \
    "$(getconf CLK_TCK)" <<'EOF'
import csv, json, sys
target, workload, load, stat, duration, before, after, clk_tck = sys.argv[1:]
load = json.load(open(load))
requests = load["achieved_rate"] * float(duration)
counts = {}
for row in csv.reader(line for line in open(stat) if line.strip() and not line.startswith("#")):
    if len(row) > 2 and row[0].replace(".", "").isdigit():
        counts[row[2]] = float(row[0])
per = lambda name: counts.get(name, float("nan")) / requests
cpu_ms = (int(after) - int(before)) * 1000 / int(clk_tck) / requests
print(f"{target:20} {workload:8} {load['achieved_rate']:8.0f} req/s  p50 {load['latency_us']['p50']:6} us  "
      f"switches/req {per('context-switches'):6.2f}  wakeups/req {per('sched:sched_wakeup'):6.2f}  "
      f"migrations/req {per('cpu-migrations'):5.3f}  syscalls/req {per('raw_syscalls:sys_enter'):5.2f}  "
      f"faults/req {per('page-faults'):6.3f}  "
      f"CPU ms/req {cpu_ms:6.4f}")
EOF
  [ -z "$PER_THREAD" ] || per_thread "$work/threads-before-$target-$workload" \
    "$work/threads-after-$target-$workload" "$work/load-$target-$workload.json" "$DURATION"
}

cpu_ticks() { # pids: clock ticks of CPU all of them (and their threads) have used so far
  local pid ticks=0
  for pid in $1; do ticks=$((ticks + $(awk '{print $14 + $15}' "/proc/$pid/stat"))); done
  echo "$ticks"
}

threads() { # pids: one line per thread: name, voluntary and involuntary switches so far
  local pid task
  for pid in $1; do
    for task in /proc/"$pid"/task/*; do
      printf '%s %s %s\n' "$(tr ' ' _ <"$task/comm")" \
        "$(awk '/^voluntary_ctxt_switches/ {print $2}' "$task/status")" \
        "$(awk '/^nonvoluntary_ctxt_switches/ {print $2}' "$task/status")"
    done
  done
}

per_thread() { # before after load duration: switches a request by thread name
  python3 - "$@" <<'EOF'
import collections, json, re, sys
before, after, load, duration = sys.argv[1:]
requests = json.load(open(load))["achieved_rate"] * float(duration)
def read(path):
    counts = collections.defaultdict(lambda: [0, 0])
    for line in open(path):
        name, voluntary, involuntary = line.split()
        # condenser-conn-0 and -1 (and nginx's workers): one row per kind of thread
        name = re.sub(r"[-_]?\d+$", "", name)
        counts[name][0] += int(voluntary)
        counts[name][1] += int(involuntary)
    return counts
was, now = read(before), read(after)
for name in sorted(now):
    voluntary = (now[name][0] - was[name][0]) / requests
    involuntary = (now[name][1] - was[name][1]) / requests
    if voluntary + involuntary >= 0.005:
        print(f"    {name:24} voluntary/req {voluntary:6.3f}  involuntary/req {involuntary:6.3f}")
EOF
}

for target in $TARGETS; do
  port="$(free_port)"
  case "$target" in
    nginx) start_nginx "$port" ;;
    condenser-sqlite) start_condenser "$port" sqlite ;;
    condenser-postgres) start_condenser "$port" postgres ;;
    baseline-sqlite) start_condenser "$port" sqlite "$BASELINE_BIN" ;;
    baseline-postgres) start_condenser "$port" postgres "$BASELINE_BIN" ;;
    *) echo "switches: unknown target $target" >&2; exit 2 ;;
  esac
  for workload in $WORKLOADS; do
    case "$workload" in
      small) row "$target" "$processes" small "$RATE" "$work/identical.json" "$port" /v1/chat/completions ;;
      relayed) row "$target" "$processes" relayed "$RATE" "$work/identical.json" "$port" /v1/embeddings ;;
      history) row "$target" "$processes" history "$HISTORY_RATE" "$work/history.json" "$port" /v1/chat/completions ;;
    esac
  done
done
