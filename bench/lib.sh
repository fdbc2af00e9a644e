# Shared by the bench scripts; source it from the checkout's root
# (`. bench/lib.sh`). It makes the run's work directory and cleans up on
# exit: the processes in `pids`, the Postgres databases in `databases`
# (dropped through "$PGURL/postgres"), and the work directory unless
# KEEP_WORK is set.

work="$(mktemp -d)"
pids=()
databases=()

cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  for database in "${databases[@]}"; do
    psql -q "$PGURL/postgres" -c "drop database if exists $database" >/dev/null 2>&1 || true
  done
  if [ -n "${KEEP_WORK:-}" ]; then echo "bench: kept $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

wait_port() { # port [log to show when nothing listens]
  for _ in $(seq 1 300); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return; sleep 0.1; done
  echo "bench: nothing listens on $1" >&2
  if [ -n "${2:-}" ]; then tail -n 20 "$2" >&2; fi
  exit 1
}

# nginx from Debian's packages (bench/hotpath.sh, bench/floor.sh): an
# instance per role, each in its own directory under the work directory.
nginx_conf() { # dir port server-block
  mkdir -p "$1/tmp"
  cat >"$1/nginx.conf" <<EOF
worker_processes auto;
pid $1/nginx.pid;
error_log $1/error.log warn;
events { worker_connections 8192; }
http {
  access_log off;
  client_body_temp_path $1/tmp/client;
  proxy_temp_path $1/tmp/proxy;
  fastcgi_temp_path $1/tmp/fastcgi;
  uwsgi_temp_path $1/tmp/uwsgi;
  scgi_temp_path $1/tmp/scgi;
  keepalive_requests 10000000;
  keepalive_timeout 300s;
  client_max_body_size 8m;
  client_body_buffer_size 1m;
$3
}
EOF
}
start_nginx() { # name port server-block; master pid in $work/NAME.pid
  local dir="$work/$1"
  nginx_conf "$dir" "$2" "$3"
  /usr/sbin/nginx -p "$dir" -e "$dir/error.log" -c "$dir/nginx.conf" -g 'daemon off;' &
  pids+=($!)
  echo $! >"$work/$1.pid"
  echo "$2" >"$work/$1.port"
  wait_port "$2"
}

# What start_upstream answers; bench/hotpath.sh's growing conversations
# re-send it as the assistant's reply. No single quotes, no '$' (nginx's
# return string).
REPLY="I read the module and made the change: the parser now rejects empty keys, the two call sites handle the new error, and the unit tests cover both cases. All tests pass."

# What every proxy target forwards to: an nginx server block answering
# every request at once with a fixed chat completion (REPLY, with usage).
start_upstream() { # as target `direct`; sets upstream_port
  upstream_port="$(free_port)"
  start_nginx direct "$upstream_port" "  server {
    listen 127.0.0.1:$upstream_port;
    location / {
      default_type application/json;
      return 200 '{\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion\",\"created\":1700000000,\"model\":\"bench-model\",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"$REPLY\"},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":400,\"completion_tokens\":40,\"total_tokens\":440}}';
    }
  }"
}
start_nginx_proxy() { # port: nginx as a plain reverse proxy to start_upstream's
  start_nginx nginx "$1" "  upstream condenser_bench_upstream {
    server 127.0.0.1:$upstream_port;
    keepalive 64;
    keepalive_requests 10000000;
    keepalive_timeout 300s;
  }
  server {
    listen 127.0.0.1:$1;
    location / {
      proxy_pass http://condenser_bench_upstream;
      proxy_http_version 1.1;
      proxy_set_header Connection \"\";
    }
  }"
}

# Each build runs in an empty directory, on its own built-in defaults: a
# baseline build must not read this checkout's config/default.toml.
start_condenser() { # name binary database_url: forwarding to start_upstream's
  local port binary; port="$(free_port)"; binary="$(realpath "$2")"
  mkdir -p "$work/$1.cwd"
  (cd "$work/$1.cwd" && CONDENSER_LISTEN="127.0.0.1:$port" DATABASE_URL="$3" \
    CONDENSER_OPENAI_BASE_URL="http://127.0.0.1:$upstream_port/v1" \
    exec "$binary" serve) >"$work/$1.log" 2>&1 &
  pids+=($!)
  echo $! >"$work/$1.pid"
  echo "$port" >"$work/$1.port"
  wait_port "$port"
}
