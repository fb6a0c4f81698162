#!/usr/bin/env bash
# Checks the API against its OpenAPI document from outside: schemathesis
# (installed into ./.venv if missing) runs every check (`--checks all`)
# against the local stack, once with a tenant's token and once with an
# operator's. The exceptions, each with its reason, are in
# schemathesis.toml; `use_after_free` is excluded here because the CLI's
# check list overrides that file, and the one DELETE-able resource (a
# tenant's webhook) is a singleton setting that reads `configured: false`
# after DELETE.
#
# First, Redocly CLI's recommended rules on the document itself (npm,
# pinned, installed into ./.tools/redocly if missing): 0 errors, and the
# warnings kept are listed with their reasons in .redocly.lint-ignore.yaml.
#
# Each token gets its own local AWS endpoint, Genace simulator and local
# runner on free loopback ports (fault injection on, as conformance runs have
# it, so the documented `fault` member is accepted); the two runs go side by
# side, and everything stops whatever the outcome. Prints one `schemathesis: P passed, F failed` line for the
# test summary; exits 1 on any failure.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="${VENV:-$ROOT/.venv}"
SCHEMATHESIS_VERSION="${SCHEMATHESIS_VERSION:-4.32.*}"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

if [ ! -x "$VENV/bin/schemathesis" ]; then
  [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "schemathesis==$SCHEMATHESIS_VERSION"
fi
mkdir -p .local
REDOCLY_VERSION="${REDOCLY_VERSION:-2.77.0}"
REDOCLY="$ROOT/.tools/redocly/node_modules/.bin/redocly"
if [ ! -x "$REDOCLY" ] || ! "$REDOCLY" --version 2>/dev/null | grep -qx "$REDOCLY_VERSION"; then
  npm install --silent --no-audit --no-fund --prefix "$ROOT/.tools/redocly" "@redocly/cli@$REDOCLY_VERSION" >/dev/null
fi
redocly_status=0
"$REDOCLY" lint docs/openapi.yaml --format=stylish >.local/api-check-redocly.log 2>&1 || redocly_status=$?
echo "== redocly lint docs/openapi.yaml (exit $redocly_status)"
grep -E '(error|warning) ' .local/api-check-redocly.log | cut -c1-300 || true
grep -E 'explicitly ignored|Validation failed|is valid' .local/api-check-redocly.log || true
cargo build --quiet -p genace-local --bins
BIN="$ROOT/target/debug"

# One whole run with WHO's token (tenant or operator) against a stack of its
# own; its exit status is schemathesis's.
check_as() {
  local who="$1"
  export MOTO_PORT="$(free_port)" INTAKE_PORT="$(free_port)" SIM_PORT="$(free_port)" TRACES_PORT="$(free_port)"
  export GENACE_BASE_URL="http://127.0.0.1:$SIM_PORT" GENACE_API_KEY=local-simulator
  export DELIVERY_ALLOW_HTTP=true DELIVERY_ALLOW_PRIVATE=true FAULT_INJECTION=true
  export METRICS_DISABLED=true RUST_LOG="${RUST_LOG:-warn}" LOG_FORMAT=text
  export GENACE_EVENTS_FILE=".local/api-check-$who-events.jsonl"
  # Not local: the EXIT trap runs after this function has returned.
  children=()
  trap 'for pid in "${children[@]}"; do kill "$pid" 2>/dev/null || true; done; wait 2>/dev/null || true; scripts/local-aws.sh stop' EXIT
  scripts/local-aws.sh server
  eval "$(scripts/local-aws.sh env)"
  "$BIN/genace-standin" >".local/api-check-$who-sim.log" 2>&1 &
  children+=($!)
  "$BIN/genace-local" run >".local/api-check-$who-stack.log" 2>&1 &
  children+=($!)
  for _ in $(seq 1 100); do
    curl -s -o /dev/null "http://127.0.0.1:$INTAKE_PORT/" && break
    sleep 0.1
  done
  local token
  if [ "$who" = tenant ]; then
    token="$("$BIN/genace-local" token tenant-api-check)"
  else
    token="$("$BIN/genace-local" token --operator ops-api-check)"
  fi
  "$VENV/bin/schemathesis" run docs/openapi.yaml --url "http://127.0.0.1:$INTAKE_PORT" \
    -H "Authorization: Bearer $token" --checks all --exclude-checks use_after_free \
    --seed 20261202 --no-color >".local/api-check-$who.log" 2>&1
}

pids=()
for who in tenant operator; do
  (check_as "$who") &
  pids+=($!)
done
passed=0
failed=0
i=0
for who in tenant operator; do
  status=0
  wait "${pids[$i]}" || status=$?
  i=$((i + 1))
  echo "== schemathesis with a $who token (exit $status)"
  # The failures, errors and the summary; the whole run is in the log.
  sed -n '/^=* \(FAILURES\|ERRORS\|SUMMARY\) =*$/,$p' ".local/api-check-$who.log" | cut -c1-400
  if [ "$status" = 0 ]; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
  fi
done
echo "schemathesis: $passed passed, $failed failed"
[ "$failed" = 0 ] && [ "$redocly_status" = 0 ]
