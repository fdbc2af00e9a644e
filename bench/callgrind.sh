#!/usr/bin/env bash
# Instructions per request, from callgrind: repeatable on a shared, busy
# machine where wall-clock timings are not (see "Instructions per request"
# in bench/README.md).
#
#   bench/callgrind.sh [BINARY] [WORKLOAD] [REQUESTS]
#
# Starts an nginx upstream answering a fixed chat completion (as
# bench/hotpath.sh does) and BINARY (default target/release/condenser)
# under `valgrind --tool=callgrind` on a fresh SQLite file (or Postgres
# with BACKEND=postgres), sends WARMUP requests of WORKLOAD (identical: the
# 1.5 KB body; history: the ~800 KB 200-message history), zeroes the
# counters, sends REQUESTS more (CONNECTIONS keep-alive connections, default
# 16, each sending its next request once answered; CONNECTIONS=1 shows a
# quiet instance, whose body budget leases bodies unweighed), waits for the writer to finish, and dumps. Prints
# instructions per request (Ir over REQUESTS, the writer's commits
# included) and the top functions, inclusive and exclusive, to
# OUT (default bench/results/callgrind-<workload>-<build>.txt).
set -euo pipefail
cd "$(dirname "$0")/.."

BIN="$(realpath "${1:-target/release/condenser}")"
WORKLOAD="${2:-identical}"
REQUESTS="${3:-400}"
WARMUP="${WARMUP:-40}"
BACKEND="${BACKEND:-sqlite}"
PGURL="${BENCH_POSTGRES:-postgres://postgres@127.0.0.1:5432}"
build_name="$(basename "$(dirname "$(dirname "$(dirname "$BIN")")")")"
OUT="${OUT:-bench/results/callgrind-$WORKLOAD-$BACKEND-$build_name.txt}"
mkdir -p "$(dirname "$OUT")"
[ -x /usr/sbin/nginx ] || apt-get install -y -qq nginx >/dev/null

. bench/lib.sh
python3 bench/make_bodies.py "$work" >/dev/null
case "$WORKLOAD" in
  identical) body="$work/identical.json" ;;
  history) body="$work/history.json" ;;
  *) echo "callgrind: WORKLOAD is identical or history" >&2; exit 2 ;;
esac

upstream="$(free_port)"
mkdir -p "$work/nginx/tmp"
cat >"$work/nginx/nginx.conf" <<EOF
worker_processes 1;
pid $work/nginx/nginx.pid;
error_log $work/nginx/error.log warn;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path $work/nginx/tmp/client;
  keepalive_requests 10000000;
  client_max_body_size 8m;
  client_body_buffer_size 1m;
  server {
    listen 127.0.0.1:$upstream;
    location / {
      default_type application/json;
      return 200 '{"id":"chatcmpl-bench","object":"chat.completion","created":1700000000,"model":"bench-model","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":400,"completion_tokens":40,"total_tokens":440}}';
    }
  }
}
EOF
/usr/sbin/nginx -p "$work/nginx" -e "$work/nginx/error.log" -c "$work/nginx/nginx.conf" -g 'daemon off;' &
pids+=($!)
wait_port "$upstream"

case "$BACKEND" in
  sqlite) database_url="sqlite://$work/condenser.db" ;;
  postgres)
    database="condenser_callgrind_$$"
    psql -q "$PGURL/postgres" -c "create database $database" >/dev/null
    databases+=("$database")
    database_url="$PGURL/$database" ;;
esac
port="$(free_port)"
mkdir "$work/cwd"
(cd "$work/cwd" && CONDENSER_LISTEN="127.0.0.1:$port" DATABASE_URL="$database_url" \
  CONDENSER_OPENAI_BASE_URL="http://127.0.0.1:$upstream/v1" \
  exec valgrind --tool=callgrind --callgrind-out-file="$work/callgrind.out.%p" \
    "$BIN" serve) >"$work/condenser.log" 2>&1 &
condenser=$!
pids+=($condenser)
for _ in $(seq 1 600); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.2; done

send() { # requests: over CONNECTIONS keep-alive connections, as fast as answered
  python3 - "$port" "$body" "$1" "${CONNECTIONS:-16}" <<'PY'
import http.client, json, sys, threading
port, body, total = int(sys.argv[1]), open(sys.argv[2], "rb").read(), int(sys.argv[3])
connections = int(sys.argv[4])
lock, counts = threading.Lock(), {"next": 0, "ok": 0, "degraded": 0}
def worker():
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    while True:
        with lock:
            if counts["next"] >= total:
                return
            counts["next"] += 1
        conn.request("POST", "/v1/chat/completions", body=body, headers={
            "content-type": "application/json", "authorization": "Bearer sk-bench"})
        response = conn.getresponse()
        response.read()
        if 200 <= response.status < 300:
            with lock:
                counts["ok"] += 1
                # Served without storing: the figure would leave out the writes.
                counts["degraded"] += response.getheader("x-condenser-degraded") is not None
threads = [threading.Thread(target=worker) for _ in range(connections)]
for t in threads: t.start()
for t in threads: t.join()
print(json.dumps({"ok": counts["ok"], "degraded": counts["degraded"]}))
PY
}
send "$WARMUP" >/dev/null
sleep 3
callgrind_control -z "$condenser" >/dev/null
send "$REQUESTS" >"$work/load.json"
sleep 5 # the writer's group commits of these requests
callgrind_control -d "$condenser" >/dev/null
ok="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["ok"])' "$work/load.json")"
degraded="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["degraded"])' "$work/load.json")"
if [ "$degraded" != 0 ]; then
  echo "callgrind: $degraded answers were served without storing (x-condenser-degraded): not a valid figure" >&2
  grep -m3 WARN "$work/condenser.log" >&2 || true
  exit 1
fi
dump="$(ls -t "$work"/callgrind.out.*.[0-9]* 2>/dev/null | head -1 || true)"
[ -n "$dump" ] || dump="$(ls -t "$work"/callgrind.out.* | head -1)"
cp "$dump" "$OUT.out"
callgrind_annotate --inclusive=yes --threshold=99 "$dump" >"$work/inclusive.txt" 2>/dev/null
callgrind_annotate --threshold=99 "$dump" >"$work/exclusive.txt" 2>/dev/null
total="$(awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1; exit}' "$work/exclusive.txt")"
{
  echo "callgrind: $BIN, $WORKLOAD, $BACKEND, $ok of $REQUESTS answered 2xx"
  echo "instructions per request: $((total / ok))"
  echo
  echo "== exclusive (self) =="
  sed -n '/^Ir/,$p' "$work/exclusive.txt" | sed -n 1,70p
  echo
  echo "== inclusive =="
  sed -n '/^Ir/,$p' "$work/inclusive.txt" | sed -n 1,120p
} >"$OUT"
sed -n 1,2p "$OUT"
echo "callgrind: wrote $OUT (and the raw profile $OUT.out)" >&2
