#!/usr/bin/env bash
# Checks Dockerfile, compose.yaml, sidecar/pod.yaml and nginx.conf against the
# built binary (see docker/check.py). Needs the virtualenv scripts/test makes.
set -euo pipefail
cd "$(dirname "$0")/.."
python="${CONDENSER_TEST_PYTHON:-target/sdk-venv/bin/python}"
cargo build --quiet --bin condenser
"$python" docker/check.py target/debug/condenser
"$(dirname "$python")/hadolint" Dockerfile
echo "ok   hadolint Dockerfile"
