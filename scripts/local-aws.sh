#!/usr/bin/env bash
# Local AWS for Genace operations: one moto server on loopback serving
# DynamoDB, S3 and SQS, with the stack's table, queues and bucket.
#
#   scripts/local-aws.sh install     install moto into ./.venv if missing
#   scripts/local-aws.sh start       install, start on 127.0.0.1:$MOTO_PORT, wait until ready, provision
#   scripts/local-aws.sh server      install, start and wait, without provisioning
#   scripts/local-aws.sh provision   create the table, queues and bucket (idempotent)
#   scripts/local-aws.sh stop        stop the server started by `start`
#   scripts/local-aws.sh env         print the environment the stack and tests use
#
# Settings: MOTO_PORT (default 5000), VENV (default ./.venv), STATE_DIR (default ./.local).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-$ROOT/.venv}"
STATE_DIR="${STATE_DIR:-$ROOT/.local}"
MOTO_PORT="${MOTO_PORT:-5000}"
MOTO_VERSION="${MOTO_VERSION:-5.*}"

log() { printf '[local-aws] %s\n' "$*" >&2; }

install_moto() {
  if [ -x "$VENV/bin/moto_server" ]; then return 0; fi
  log "installing moto[server] into $VENV"
  [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "moto[server]==$MOTO_VERSION"
}

local_env() {
  cat <<ENV
export AWS_ENDPOINT_URL=http://127.0.0.1:$MOTO_PORT
export AWS_REGION=us-east-1
export AWS_ACCESS_KEY_ID=local
export AWS_SECRET_ACCESS_KEY=local
export AWS_CONFIG_FILE=/dev/null
export AWS_SHARED_CREDENTIALS_FILE=/dev/null
export AWS_EC2_METADATA_DISABLED=true
ENV
}

wait_ready() {
  local url="http://127.0.0.1:$MOTO_PORT/moto-api/"
  for _ in $(seq 1 100); do
    if curl -fsS -o /dev/null "$url" 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  log "moto did not answer on port $MOTO_PORT; see $STATE_DIR/moto-$MOTO_PORT.log"
  return 1
}

start_moto() {
  install_moto
  mkdir -p "$STATE_DIR"
  local pidfile="$STATE_DIR/moto-$MOTO_PORT.pid"
  if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
    log "moto already running on port $MOTO_PORT (pid $(cat "$pidfile"))"
  else
    # moto, with DynamoDB requests serialized (see scripts/moto_server.py).
    "$VENV/bin/python" "$ROOT/scripts/moto_server.py" 127.0.0.1 "$MOTO_PORT" >"$STATE_DIR/moto-$MOTO_PORT.log" 2>&1 &
    echo $! >"$pidfile"
    log "moto started on 127.0.0.1:$MOTO_PORT (pid $!)"
  fi
  wait_ready
}

stop_moto() {
  local pidfile="$STATE_DIR/moto-$MOTO_PORT.pid"
  if [ -f "$pidfile" ]; then
    kill "$(cat "$pidfile")" 2>/dev/null || true
    rm -f "$pidfile"
    log "moto on port $MOTO_PORT stopped"
  fi
}

provision() {
  eval "$(local_env)"
  (cd "$ROOT" && cargo run --quiet -p genace-local -- provision)
}

case "${1:-}" in
  install) install_moto ;;
  start) start_moto; provision ;;
  server) start_moto ;;
  provision) provision ;;
  stop) stop_moto ;;
  env) local_env ;;
  *) sed -n '2,14p' "$0" >&2; exit 2 ;;
esac
