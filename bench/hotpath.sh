#!/usr/bin/env bash
# Condenser's hot-path benchmark: one run, one load generator (bench/loadgen,
# open loop), the same upstream (nginx answering a fixed chat completion),
# and every target side by side: the upstream itself, nginx as a plain
# reverse proxy, Condenser on SQLite and on Postgres (and a baseline build);
# on request (TARGETS=... floor), hyper's server to hyper-util's client with
# nothing between (bench/floor: the least a proxy on this stack spends), and
# floor-stack, the same with every layer of the stack Condenser is built on.
# Workloads: identical small bodies, growing agent conversations, a large
# re-sent history, and the growing conversations' bodies on a route Condenser
# forwards without reading them (its floor: the HTTP hop alone). See
# "Hot-path benchmark" in bench/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION="${DURATION:-10}"            # seconds per fixed-rate row
RATES="${RATES:-200 1000 2000}"       # req/s for identical and growing
HISTORY_RATE="${HISTORY_RATE:-20}"
WORKLOADS="${WORKLOADS:-identical growing history passthrough}"
CONNECTIONS="${CONNECTIONS:-64}"      # keep-alive connections of the load generator
WARMUP="${WARMUP:-1}"                 # seconds, before every row, not measured
MAX_SEARCH="${MAX_SEARCH:-1}"         # 0: skip the maximum-rate search
MAX_DURATION="${MAX_DURATION:-5}"     # seconds per step of the search
MAX_STEPS="${MAX_STEPS:-2}"           # bisection steps: the maximum is found within 2^(1/2^MAX_STEPS)
MAX_RATE_CAP="${MAX_RATE_CAP:-20000}"
MAX_CONFIRM="${MAX_CONFIRM:-0}"       # 1: a search step not sustained runs once more before it counts
REPEATS="${REPEATS:-1}"               # runs of every fixed-rate row, the targets' order turning (see below)
MAX_REPEATS="${MAX_REPEATS:-1}"       # searches per target, in turn; the maximum is the best of them
P99_BOUND_MS="${P99_BOUND_MS:-50}"    # sustained: p99 at most this ...
MIN_ACHIEVED="${MIN_ACHIEVED:-0.95}"  # ... achieved at least this share of offered, errors <= 0.1 %
PGURL="${BENCH_POSTGRES:-postgres://postgres@127.0.0.1:5432}"
PG_PARAMS="${PG_PARAMS:-}"            # query of Condenser's DATABASE_URL, e.g. sslmode=disable
BASELINE_BIN="${BASELINE_BIN:-}"
# BASELINE_BACKENDS ("sqlite postgres"): the baseline's targets;
# BASELINE_FIRST=1: the baseline's rows right after direct's (see below).
GROWING_ARGS="${GROWING_ARGS:-}"      # more loadgen flags for growing, e.g. --system-per-conversation
TARGETS="${TARGETS:-direct nginx condenser-sqlite condenser-postgres}"
OUT="${OUT:-bench/results/hotpath-$(date -u +%Y%m%dT%H%M%SZ).json}"
# A workload with no body to send would leave its rows waiting on a
# load generator that never starts: refused before anything runs.
for workload in $WORKLOADS; do
  case "$workload" in identical | growing | history | passthrough) ;;
    *) echo "hotpath: unknown workload '$workload' in WORKLOADS (identical growing history passthrough)" >&2; exit 2 ;;
  esac
done

if [ ! -x /usr/sbin/nginx ]; then
  echo "hotpath: installing nginx" >&2
  apt-get install -y -qq nginx >/dev/null
fi
cargo build --release --quiet -p condenser -p loadgen -p floor
loadgen=target/release/loadgen
# CONDENSER_BIN: the build measured as condenser-*, e.g. a PGO build.
condenser="$(realpath "${CONDENSER_BIN:-target/release/condenser}")"
# FLOOR_BIN: the build measured as floor and floor-stack (bench/floor-pgo.sh's).
floor_bin="$(realpath "${FLOOR_BIN:-target/release/floor}")"

. bench/lib.sh
mkdir -p "$(dirname "$OUT")"

python3 bench/make_bodies.py "$work" >/dev/null

# --- the upstream (nginx answering a fixed completion; bench/lib.sh) ---
start_upstream

database_for() { echo "condenser_hotpath_$$_${1//-/_}"; }

targets=()
for target in $TARGETS; do
  case "$target" in
    direct) ;;
    nginx)
      port="$(free_port)"
      start_nginx_proxy "$port" ;;
    floor | floor-stack)
      # hyper's server to hyper-util's client, nothing between (bench/floor;
      # FLOOR_LAYERS puts layers back), or with every layer of the product
      # card's stack Condenser runs (floor-stack): what the stack alone costs.
      layers="${FLOOR_LAYERS:-}"
      [ "$target" = floor-stack ] && layers=auto,axum,tower,log,reqwest
      port="$(free_port)"
      FLOOR_LAYERS="$layers" "$floor_bin" "127.0.0.1:$port" "http://127.0.0.1:$upstream_port" \
        >"$work/$target.log" 2>&1 &
      pids+=($!)
      echo $! >"$work/$target.pid"
      echo "$port" >"$work/$target.port"
      wait_port "$port" ;;
    condenser-sqlite) start_condenser "$target" "$condenser" "sqlite://$work/condenser.db" ;;
    condenser-postgres)
      database="$(database_for "$target")"
      psql -q "$PGURL/postgres" -c "create database $database" >/dev/null
      databases+=("$database")
      start_condenser "$target" "$condenser" "$PGURL/$database${PG_PARAMS:+?$PG_PARAMS}" ;;
    *) echo "hotpath: unknown target $target" >&2; exit 1 ;;
  esac
  targets+=("$target")
done
if [ -n "$BASELINE_BIN" ]; then
  baselines=()
  for backend in ${BASELINE_BACKENDS:-sqlite postgres}; do
    case "$backend" in
      sqlite) start_condenser baseline-sqlite "$BASELINE_BIN" "sqlite://$work/baseline.db" ;;
      postgres)
        database="$(database_for baseline-postgres)"
        psql -q "$PGURL/postgres" -c "create database $database" >/dev/null
        databases+=("$database")
        start_condenser baseline-postgres "$BASELINE_BIN" "$PGURL/$database${PG_PARAMS:+?$PG_PARAMS}" ;;
      *) echo "hotpath: unknown backend $backend in BASELINE_BACKENDS" >&2; exit 1 ;;
    esac
    baselines+=("baseline-$backend")
  done
  if [ -n "${BASELINE_FIRST:-}" ] && [ "${targets[0]:-}" = direct ]; then
    # The baseline's rows before this build's (after direct): bench/compare.sh
    # alternates the order between rounds, so neither build always goes
    # first into a machine another row just warmed or loaded.
    rest=("${targets[@]:1}")
    targets=(direct "${baselines[@]}" "${rest[@]}")
  else
    targets+=("${baselines[@]}")
  fi
fi

# CPU ticks (user+system) of a target's processes: Condenser's one process;
# nginx's master and workers; for Postgres, also the client backends serving
# the target's database (reported apart, as db_ticks; not autovacuum, which
# runs when it likes and would land on whichever row it overlaps).
proc_ticks() { local sum=0 t; for pid in "$@"; do t="$(awk '{print $14 + $15}' "/proc/$pid/stat" 2>/dev/null || echo 0)"; sum=$((sum + t)); done; echo "$sum"; }
proxy_ticks() { # target
  local pid; pid="$(cat "$work/$1.pid")"
  proc_ticks "$pid" $(pgrep -P "$pid" || true)
}
db_ticks() { # target: "pid:ticks ..." of the database's backends
  case "$1" in *postgres) ;; *) return 0 ;; esac
  local pid
  for pid in $(psql -Atq "$PGURL/postgres" -c "select pid from pg_stat_activity where datname = '$(database_for "$1")' and backend_type = 'client backend'"); do
    echo "$pid:$(proc_ticks "$pid")"
  done | tr '\n' ' '
}

# Waits (at most 20 s) until the target's processes (and its database
# backends) use no CPU for 0.3 s: work a warm-up or an overloaded row left
# behind (Condenser records conversations after it answers) stays out of the
# next measured row.
busy_ticks() { # target
  local total; total="$(proxy_ticks "$1")"
  for item in $(db_ticks "$1"); do total=$((total + ${item#*:})); done
  echo "$total"
}
settle() { # target
  local before after
  for _ in $(seq 1 66); do
    before="$(busy_ticks "$1")"; sleep 0.3; after="$(busy_ticks "$1")"
    [ $((after - before)) -le 1 ] && return 0
  done
  echo "hotpath: $1 still busy after 20 s" >&2
}

# Before every Postgres row, what autovacuum does in production: fresh
# statistics and dead rows reclaimed. The test server runs with autovacuum
# off, and without them the planner can take the stored-prefix lookup
# through messages_tenant_parent and read all of a tenant's messages, and a
# maximum-rate step far past the limit leaves tens of thousands of dead
# rows (pruned requests, superseded versions of rolled-up rows) for every
# later row's index scans to step over: the search's result then depended on how
# many overloaded steps came before it.
#
# And a checkpoint: the rows share one Postgres server, and an earlier row's
# writes (such a step writes hundreds of MB of WAL) would otherwise be
# flushed by a checkpoint during whichever row runs next, charging its p99
# with another target's work.
analyze() { # target
  case "$1" in *postgres) ;; *) return 0 ;; esac
  psql -q "$PGURL/$(database_for "$1")" -c "vacuum analyze" -c checkpoint >/dev/null
}

body_args() { # workload
  case "$1" in
    identical) echo "--workload fixed --body $work/identical.json" ;;
    history) echo "--workload fixed --body $work/history.json" ;;
    growing | passthrough) echo "--workload growing --reply" ;;
  esac
}
# The passthrough workload posts the growing bodies to a route Condenser
# relays unread: what its HTTP stack costs before any work of its own.
path_of() { # workload
  case "$1" in
    passthrough) echo /v1/embeddings ;;
    *) echo /v1/chat/completions ;;
  esac
}
load() { # workload target rate seconds out [loadgen args...]
  local workload="$1" port; port="$(cat "$work/$2.port")"
  local args; read -ra args <<<"$(body_args "$workload")"
  # shellcheck disable=SC2206 # GROWING_ARGS: loadgen flags, word-split on purpose
  case "$workload" in growing | passthrough) args+=("$REPLY" ${GROWING_ARGS:-}) ;; esac
  "$loadgen" --url "http://127.0.0.1:$port$(path_of "$workload")" --rate "$3" --duration "$4" \
    --connections "$CONNECTIONS" "${args[@]}" "${@:6}" >"$5" 2>>"$work/loadgen.err"
}
scheduled() { python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["scheduled"])' "$1"; }
row() { # workload target rate phase seconds [repeat]; appends one line to $work/rows.jsonl
  local workload="$1" target="$2" rate="$3" phase="$4" seconds="$5" repeat="${6:-1}" extra=()
  if [ "$workload" = growing ] || [ "$workload" = passthrough ]; then
    # Warm-up: one request per conversation (the first sight of each
    # conversation's staggered history); the measured run continues them.
    local seed="$RANDOM$RANDOM"
    load "$workload" "$target" 200 1 "$work/warmup.json" --seed "$seed" --drain 30
    extra=(--seed "$seed" --skip "$(scheduled "$work/warmup.json")")
  else
    local warm_rate="$rate"; [ "$warm_rate" -gt 500 ] && warm_rate=500
    load "$workload" "$target" "$warm_rate" "$WARMUP" "$work/warmup.json" --drain 30
  fi
  analyze "$target"
  settle "$target"
  local before db_before; before="$(proxy_ticks "$target")"; db_before="$(db_ticks "$target")"
  local out="$work/run-$workload-$target-$rate-$phase.json"
  load "$workload" "$target" "$rate" "$seconds" "$out" "${extra[@]}"
  local after db_after; after="$(proxy_ticks "$target")"; db_after="$(db_ticks "$target")"
  python3 bench/hotpath_report.py row "$workload" "$target" "$rate" "$phase" "$repeat" \
    "$((after - before))" "$db_before" "$db_after" "$out" >>"$work/rows.jsonl"
  python3 bench/hotpath_report.py line "$work/rows.jsonl" >&2
  settle "$target"
}
sustained() { python3 bench/hotpath_report.py sustained "$work/rows.jsonl" "$1" "$2" "$3" "$P99_BOUND_MS" "$MIN_ACHIEVED"; }
# One step of the search. With MAX_CONFIRM=1 a step that achieved its rate
# but not the p99 bound (or had errors) runs once more, and counts as
# sustained if the second run was: on two cores one stall (a timer, the
# shared Postgres server flushing) can take a 4 s step's p99, and the
# bisection never goes back above a failed rate. A step that fell short of
# its rate is past the limit, not stalled. Both builds get the same chance.
step() { # workload target rate; exit status: sustained or not
  local status=0
  row "$1" "$2" "$3" max "$MAX_DURATION"
  sustained "$1" "$2" "$3" || status=$?
  [ "$status" = 0 ] && return 0
  { [ "$MAX_CONFIRM" = 1 ] && [ "$status" = 1 ]; } || return 1
  row "$1" "$2" "$3" max "$MAX_DURATION"
  sustained "$1" "$2" "$3"
}

# Maximum sustained rate: from the fixed-rate rows (RATES ascending), double
# the rate until a step is not sustained (or MAX_RATE_CAP), then MAX_STEPS
# bisection steps between the last sustained rate and the first that was not.
search_max() { # workload target
  local workload="$1" target="$2" low=0 high=0 rate
  # low: the highest sustained fixed rate; high: the lowest one above it
  # that was not (a failure below a success is taken for noise).
  for rate in $RATES; do
    if sustained "$workload" "$target" "$rate"; then low="$rate"; high=0
    elif [ "$high" = 0 ]; then high="$rate"; fi
  done
  if [ "$high" = 0 ]; then
    rate="$low"
    while [ "$high" = 0 ] && [ "$rate" -lt "$MAX_RATE_CAP" ]; do
      rate=$((rate * 2)); [ "$rate" -gt "$MAX_RATE_CAP" ] && rate="$MAX_RATE_CAP"
      if step "$workload" "$target" "$rate"; then low="$rate"; else high="$rate"; fi
    done
  fi
  [ "$high" = 0 ] && return 0
  for _ in $(seq 1 "$MAX_STEPS"); do
    [ "$low" = 0 ] && rate=$((high / 2)) || rate="$(python3 -c "print(round(($low * $high) ** 0.5 / 10) * 10)")"
    { [ "$rate" -le "$low" ] || [ "$rate" -ge "$high" ]; } && break
    if step "$workload" "$target" "$rate"; then low="$rate"; else high="$rate"; fi
  done
}

# The targets in the order of one repeat of a fixed-rate row: direct first
# (every repeat's added latency is taken against direct's row of the same
# repeat, minutes apart at most), then the others, reversed on even
# repeats, so that no target always runs right after the same neighbour
# or always early in a repeat.
in_turn() { # repeat
  local rest=("${targets[@]}") i
  [ "${rest[0]}" = direct ] && { echo direct; rest=("${rest[@]:1}"); }
  if [ $(($1 % 2)) = 0 ]; then
    for ((i = ${#rest[@]} - 1; i >= 0; i--)); do echo "${rest[$i]}"; done
  else
    printf '%s\n' "${rest[@]}"
  fi
}

started="$(date +%s)"
load_start="$(cut -d' ' -f1-3 /proc/loadavg)"
echo "hotpath: targets ${targets[*]}; workloads $WORKLOADS; $DURATION s per row; work dir $work" >&2
for workload in $WORKLOADS; do
  if [ "$workload" = history ]; then rates="$HISTORY_RATE"; else rates="$RATES"; fi
  for rate in $rates; do
    for repeat in $(seq 1 "$REPEATS"); do
      for target in $(in_turn "$repeat"); do
        row "$workload" "$target" "$rate" fixed "$DURATION" "$repeat"
      done
    done
  done
  if [ "$MAX_SEARCH" = 1 ] && [ "$workload" != history ]; then
    # The best of MAX_REPEATS searches: what slows a step on a shared
    # machine (a neighbour, a flush) only ever lowers the rate a target
    # sustains, so its highest sustained step is the truest figure.
    for repeat in $(seq 1 "$MAX_REPEATS"); do
      for target in $(in_turn "$repeat"); do search_max "$workload" "$target"; done
    done
  fi
done

commit="$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src migrations Cargo.toml Cargo.lock || echo '+changes') (src last changed in $(git log -1 --format=%h -- src))"
# The raw rows first: a run is never lost to its report.
cp "$work/rows.jsonl" "${OUT%.json}.rows.jsonl"
python3 bench/hotpath_report.py report "$work/rows.jsonl" "$OUT" "$(getconf CLK_TCK)" \
  "$commit" "$P99_BOUND_MS" "$MIN_ACHIEVED" "$(( $(date +%s) - started ))" \
  "DURATION=$DURATION RATES='$RATES' HISTORY_RATE=$HISTORY_RATE CONNECTIONS=$CONNECTIONS MAX_DURATION=$MAX_DURATION MAX_STEPS=$MAX_STEPS MAX_RATE_CAP=$MAX_RATE_CAP MAX_CONFIRM=$MAX_CONFIRM MAX_REPEATS=$MAX_REPEATS REPEATS=$REPEATS BASELINE_BIN=$BASELINE_BIN GROWING_ARGS=$GROWING_ARGS PG_PARAMS=$PG_PARAMS; load average at start $load_start, at end $(cut -d' ' -f1-3 /proc/loadavg)"
if grep -q . "$work/loadgen.err"; then
  echo "hotpath: load generator messages (first 10):" >&2
  sort "$work/loadgen.err" | uniq -c | sort -rn | head -10 >&2
fi
echo "hotpath: results in $OUT" >&2
