#!/usr/bin/env bash
# Runs Genace operations on this machine with no AWS account and no Genace
# key: builds the binaries, starts local AWS (installing moto if needed), the
# Genace simulator and the local runner (intake, dispatch, poll, deliver,
# recovery and the sweep), prints the API URL, a token and a curl example,
# then shows one line per phase change. Spans go to a local OTLP receiver
# (.local/traces.jsonl). Ctrl-C stops everything it started.
#
# --artifacts [Param=Value ...]: run the deployment artifacts instead. The six
# function binaries are built for this host and each runs under the Lambda
# Runtime Interface Emulator that the SAM CLI ships (installed if missing),
# with the environment infra/template.yaml gives it; the runner becomes the
# AWS side (API Gateway payload v2 events, SQS event source mappings as the
# template sets them, the sweep's schedule). Extra arguments are template
# parameters. Emulator logs go to .local/artifacts/.
set -euo pipefail

mode=()
if [ "${1:-}" = "--artifacts" ]; then
  mode=("$@")
fi

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export MOTO_PORT="${MOTO_PORT:-5000}"
export INTAKE_PORT="${INTAKE_PORT:-3000}"
export SIM_PORT="${SIM_PORT:-9400}"
export LOG_FORMAT="${LOG_FORMAT:-text}"
export RUST_LOG="${RUST_LOG:-warn}"
export METRICS_DISABLED="${METRICS_DISABLED:-true}"
export GENACE_BASE_URL="${GENACE_BASE_URL:-http://127.0.0.1:$SIM_PORT}"
export GENACE_API_KEY="${GENACE_API_KEY:-local-simulator}"
export GENACE_TIMEOUT_SECONDS="${GENACE_TIMEOUT_SECONDS:-10}"
# The simulator serves outputs over http on loopback.
export DELIVERY_ALLOW_HTTP="${DELIVERY_ALLOW_HTTP:-true}"
export DELIVERY_ALLOW_PRIVATE="${DELIVERY_ALLOW_PRIVATE:-true}"
export DISPATCH_LEASE_SECONDS="${DISPATCH_LEASE_SECONDS:-30}"
export SWEEP_INTERVAL_SECONDS="${SWEEP_INTERVAL_SECONDS:-15}"
# The stack's spans: the runner starts an OTLP/HTTP receiver on this port,
# writing one JSON line per span to GENACE_TRACES_FILE.
export TRACES_PORT="${TRACES_PORT:-4318}"
export GENACE_TRACES_FILE="${GENACE_TRACES_FILE:-$ROOT/.local/traces.jsonl}"

cargo build --quiet -p genace-local --bins
BIN="$ROOT/target/debug"
if [ ${#mode[@]} -gt 0 ]; then
  cargo build --quiet -p intake -p dispatch -p poll -p deliver -p recovery -p sweep -p events -p webhook -p console
  RIE_BIN="$(scripts/rie.sh)"
  export RIE_BIN ARTIFACTS_DIR="$BIN"
  # The template's timing is for AWS; locally a dispatch lease outlives a
  # Genace timeout by less. LOCAL_OVERRIDE_<NAME> sets <NAME> in every function.
  export LOCAL_OVERRIDE_GENACE_TIMEOUT_SECONDS="$GENACE_TIMEOUT_SECONDS"
  export LOCAL_OVERRIDE_DISPATCH_LEASE_SECONDS="$DISPATCH_LEASE_SECONDS"
  export LOCAL_OVERRIDE_DELIVERY_ALLOW_PRIVATE="$DELIVERY_ALLOW_PRIVATE"
  # The functions under the emulator send their spans to the same receiver.
  export LOCAL_OVERRIDE_OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:$TRACES_PORT"
  # Every operation's trace kept locally (the template's default keeps a tenth).
  export LOCAL_OVERRIDE_GENACE_TRACE_SAMPLE_RATE="${GENACE_TRACE_SAMPLE_RATE:-1}"
fi

children=()
cleanup() {
  trap - EXIT INT TERM
  for pid in "${children[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  scripts/local-aws.sh stop
}
trap cleanup EXIT INT TERM

scripts/local-aws.sh server
eval "$(scripts/local-aws.sh env)"

"$BIN/genace-standin" >"$ROOT/.local/genace-standin.log" 2>&1 &
children+=($!)
"$BIN/genace-local" run "${mode[@]}" &
children+=($!)
for _ in $(seq 1 100); do
  curl -s -o /dev/null "http://127.0.0.1:$INTAKE_PORT/" && break
  sleep 0.1
done

TENANT="${TENANT:-tenant-dev}"
TOKEN="$("$BIN/genace-local" token "$TENANT")"
cat <<INFO

Genace operations is running locally (Genace simulator: $GENACE_BASE_URL).
  API:    http://127.0.0.1:$INTAKE_PORT/v1/operations
  Console: http://127.0.0.1:$INTAKE_PORT/console  (operators; the local sign-in mints an operator token)
  Tenant: $TENANT
  Token:  $TOKEN
  Traces: $GENACE_TRACES_FILE  (one JSON line per span, from the receiver on port $TRACES_PORT)

Try:
  curl -si http://127.0.0.1:$INTAKE_PORT/v1/operations \\
    -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' \\
    -d '{"operation_key":"demo-1","media_type":"video","specification":{"model":"genace-video-2","prompt":"a lighthouse at dusk","duration":5}}'

Phase changes follow. Press Ctrl-C to stop.
INFO
wait
