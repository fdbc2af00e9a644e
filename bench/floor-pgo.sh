#!/usr/bin/env bash
# bench/floor built as scripts/build-release builds Condenser: with
# profile-guided optimization, its counts taken from the 1.5 KB chat body
# through every layer (FLOOR_LAYERS=auto,axum,tower,log,reqwest) and through
# none. The binary users run is the profile-guided one, so the stack's own
# cost is read off a floor built the same way (bench/README.md, "Maximum
# rates up the ladder"):
#
#   bench/floor-pgo.sh [OUT]      # default target/pgo-floor/floor
#   FLOOR_BIN=target/pgo-floor/floor CONDENSER_BIN=target/pgo/condenser \
#     TARGETS="direct nginx floor floor-stack condenser-sqlite" bench/hotpath.sh
#
# Needs llvm-profdata of rustc's LLVM version, found as scripts/build-release
# finds it.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-target/pgo-floor/floor}"
PGO_DIR="$PWD/target/pgo-floor"
host="$(rustc -vV | sed -n 's/^host: //p')"
llvm_major="$(rustc -vV | sed -n 's/^LLVM version: \([0-9]*\).*/\1/p')"
profdata=""
for candidate in "${LLVM_PROFDATA:-}" \
  "$(rustc --print sysroot)/lib/rustlib/$host/bin/llvm-profdata" \
  "$(command -v "llvm-profdata-$llvm_major" || true)"; do
  if [ -n "$candidate" ] && [ -x "$candidate" ]; then profdata="$candidate"; break; fi
done
[ -n "$profdata" ] || { echo "floor-pgo: needs llvm-profdata of LLVM $llvm_major (see scripts/build-release)" >&2; exit 1; }

build() { # target-dir rustflags
  RUSTFLAGS="$2" cargo build --release --locked --target "$host" -p floor --target-dir "$1"
}
rm -rf "$PGO_DIR/profiles" "$PGO_DIR/merged.profdata"
echo "floor-pgo: the instrumented build" >&2
build "$PGO_DIR/generate" "-Cprofile-generate=$PGO_DIR/profiles"
cargo build --release --locked -p loadgen

. bench/lib.sh
python3 bench/make_bodies.py "$work" >/dev/null
start_upstream
for layers in auto,axum,tower,log,reqwest ""; do
  port="$(free_port)"
  FLOOR_LAYERS="$layers" "$PGO_DIR/generate/$host/release/floor" "127.0.0.1:$port" \
    "http://127.0.0.1:$upstream_port" >"$work/floor.log" 2>&1 &
  floor=$!
  wait_port "$port" "$work/floor.log"
  target/release/loadgen --url "http://127.0.0.1:$port/v1/chat/completions" --rate 2000 \
    --duration 8 --connections 16 --workload fixed --body "$work/identical.json" >"$work/load.json"
  python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); sys.exit(0 if r["ok"] and not r["errors"] else f"floor-pgo: {r}")' "$work/load.json"
  kill -TERM "$floor"
  wait "$floor" || true
done
"$profdata" merge -o "$PGO_DIR/merged.profdata" "$PGO_DIR/profiles"
echo "floor-pgo: the optimized build" >&2
build "$PGO_DIR/use" "-Cprofile-use=$PGO_DIR/merged.profdata"
install -D "$PGO_DIR/use/$host/release/floor" "$OUT"
echo "floor-pgo: $OUT" >&2
