#!/usr/bin/env bash
# Builds and tests the TypeScript client (clients/typescript) against a real
# local stack: `npm ci`, `npm run check:types` (src/schema.d.ts must be what
# openapi-typescript makes of docs/openapi.yaml), `npm run build`, then a
# local AWS endpoint (moto), the Genace stand-in (short render times) and
# the local runner on free loopback ports, as scripts/api-check.sh's
# check_as starts them; development tokens for an application, an
# application with the webhooks scope and an operator; and `node --test`.
# Everything started here stops on exit, whatever the outcome.
#
# The binaries come from ${GENACE_BIN:-target/debug} (genace-local,
# genace-standin); nothing is built here. Prints one
# `typescript client: P passed, F failed` line; exits 1 on any failure.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BIN="${GENACE_BIN:-$ROOT/target/debug}"
CLIENT="$ROOT/clients/typescript"
LOGS="$ROOT/.local"
mkdir -p "$LOGS"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

passed=0
failed=0
summary() { echo "typescript client: $passed passed, $failed failed"; }
# A step before the tests that fails counts as one failure.
step() {
  local name="$1"
  shift
  echo "== $name"
  if ! "$@"; then
    echo "client-ts: $name failed" >&2
    failed=$((failed + 1))
    summary
    exit 1
  fi
}

for bin in genace-local genace-standin; do
  [ -x "$BIN/$bin" ] || step "find $BIN/$bin (set GENACE_BIN)" false
done

step "npm ci" npm ci --prefix "$CLIENT" --no-audit --no-fund --loglevel=error
step "npm run check:types" npm run --prefix "$CLIENT" --silent check:types
step "npm run build" npm run --prefix "$CLIENT" --silent build

# The stack, on ports of its own.
export MOTO_PORT="$(free_port)" INTAKE_PORT="$(free_port)" SIM_PORT="$(free_port)" TRACES_PORT="$(free_port)"
export GENACE_BASE_URL="http://127.0.0.1:$SIM_PORT" GENACE_API_KEY=local-simulator
export DELIVERY_ALLOW_HTTP=true DELIVERY_ALLOW_PRIVATE=true
export METRICS_DISABLED=true RUST_LOG="${RUST_LOG:-warn}" LOG_FORMAT=text
export GENACE_EVENTS_FILE="$LOGS/client-ts-events.jsonl" GENACE_TRACES_FILE="$LOGS/client-ts-traces.jsonl"
# Jobs start at once and render in a second, with small outputs.
export SIM_QUEUED_SECONDS=0 SIM_RUNNING_SECONDS=1 SIM_OUTPUT_BYTES=4096
rm -f "$GENACE_EVENTS_FILE" "$GENACE_TRACES_FILE"

children=()
cleanup() {
  for pid in "${children[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${children[@]}"; do wait "$pid" 2>/dev/null || true; done
  scripts/local-aws.sh stop 2>/dev/null || true
}
trap cleanup EXIT

echo "== local stack (moto :$MOTO_PORT, stand-in :$SIM_PORT, API :$INTAKE_PORT)"
step "start moto" scripts/local-aws.sh server
eval "$(scripts/local-aws.sh env)"
"$BIN/genace-standin" >"$LOGS/client-ts-sim.log" 2>&1 &
children+=($!)
"$BIN/genace-local" run >"$LOGS/client-ts-stack.log" 2>&1 &
children+=($!)
ready() {
  for _ in $(seq 1 300); do
    curl -s -o /dev/null "http://127.0.0.1:$INTAKE_PORT/" && return 0
    sleep 0.1
  done
  tail -20 "$LOGS/client-ts-stack.log" >&2
  return 1
}
step "wait for the API" ready

export GENACE_API_URL="http://127.0.0.1:$INTAKE_PORT"
GENACE_TENANT_TOKEN="$("$BIN/genace-local" token client-ts-app)"
GENACE_WEBHOOK_TOKEN="$("$BIN/genace-local" token --webhooks client-ts-hooks)"
GENACE_OPERATOR_TOKEN="$("$BIN/genace-local" token --operator ops-client-ts)"
export GENACE_TENANT_TOKEN GENACE_WEBHOOK_TOKEN GENACE_OPERATOR_TOKEN

echo "== node --test"
tap="$LOGS/client-ts.tap"
status=0
(cd "$CLIENT" && node --test --test-concurrency=3 --test-timeout=60000 \
  --test-reporter=spec --test-reporter-destination=stdout \
  --test-reporter=tap --test-reporter-destination="$tap" \
  test/*.test.mjs) || status=$?
passed=$(sed -n 's/^# pass \([0-9]*\)$/\1/p' "$tap" | tail -1)
failed=$(sed -n 's/^# fail \([0-9]*\)$/\1/p' "$tap" | tail -1)
passed=${passed:-0}
failed=${failed:-0}
if [ "$status" != 0 ] && [ "$failed" = 0 ]; then failed=1; fi
if [ "$failed" != 0 ]; then
  echo "== the stack's log (last lines; all in $LOGS/client-ts-stack.log)"
  tail -20 "$LOGS/client-ts-stack.log"
fi
summary
[ "$failed" = 0 ]
