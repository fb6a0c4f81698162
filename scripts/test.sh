#!/usr/bin/env bash
# Runs every test of the workspace against a private local AWS endpoint:
# installs moto if needed, starts it on a free loopback port, runs
# `cargo test --workspace`, and stops it again whatever the outcome.
# Every test provisions its own uniquely named resources on that endpoint.
# Extra arguments go to cargo test.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
MOTO_PORT="${MOTO_PORT:-$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}"
export MOTO_PORT

trap 'scripts/local-aws.sh stop' EXIT
scripts/local-aws.sh server
eval "$(scripts/local-aws.sh env)"
mkdir -p .local
log=".local/test-$MOTO_PORT.log"
set +e
cargo test --workspace "$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
scripts/local-aws.sh stop
trap - EXIT
# One closing line for the whole workspace (cargo prints one per test binary).
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($i ~ /^passed;?$/) p += $(i-1); if ($i ~ /^failed;?$/) f += $(i-1) } }
     END { printf "tests: %d passed, %d failed\n", p, f }' "$log"
exit "$status"
