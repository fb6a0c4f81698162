#!/usr/bin/env bash
# Runs Genace operations on this machine with no AWS account: builds the
# binaries, starts local AWS (installing moto if needed), provisions the
# resources and serves intake on http://127.0.0.1:$INTAKE_PORT.
# Ctrl-C stops everything it started.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export MOTO_PORT="${MOTO_PORT:-5000}"
export INTAKE_PORT="${INTAKE_PORT:-3000}"
export LOG_FORMAT="${LOG_FORMAT:-text}"

cargo build --quiet -p genace-local
BIN="$ROOT/target/debug/genace-local"

children=()
cleanup() {
  trap - EXIT INT TERM
  for pid in "${children[@]}"; do kill "$pid" 2>/dev/null || true; done
  scripts/local-aws.sh stop
}
trap cleanup EXIT INT TERM

scripts/local-aws.sh server
eval "$(scripts/local-aws.sh env)"
"$BIN" provision >/dev/null

"$BIN" serve &
children+=($!)
for _ in $(seq 1 50); do
  curl -s -o /dev/null "http://127.0.0.1:$INTAKE_PORT/" && break
  sleep 0.1
done

TOKEN="$("$BIN" token "${TENANT:-tenant-dev}")"
cat <<INFO

Genace operations is running locally.
  API:    http://127.0.0.1:$INTAKE_PORT/v1/operations
  Tenant: ${TENANT:-tenant-dev}
  Token:  $TOKEN

Try:
  curl -si http://127.0.0.1:$INTAKE_PORT/v1/operations \\
    -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' \\
    -d '{"operation_key":"demo-1","media_type":"video","specification":{"model":"genace-video-2","prompt":"a lighthouse at dusk","duration":5}}'

Press Ctrl-C to stop.
INFO
wait
