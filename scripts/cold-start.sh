#!/usr/bin/env bash
# Measures each Lambda artifact's cold start on this host with the Lambda
# Runtime Interface Emulator that the SAM CLI ships (what `sam local` runs in
# its containers), without Docker:
#   - builds the six function binaries (release, for the host);
#   - starts local AWS and provisions it;
#   - for each function of infra/template.yaml, starts its binary under the
#     emulator with the environment the template gives it (resolved by
#     `genace-local env`), sends one invocation and then ten more of a
#     representative event (an API Gateway v2 read, an SQS batch, a
#     scheduler tick), and reads the emulator's INIT REPORT and RTDONE lines;
#   - prints a table: init time, first invocation, warm median.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="${INFRA_VENV:-$ROOT/.venv-infra}"
MOTO_PORT="${MOTO_PORT:-$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}"
export MOTO_PORT
WARM="${WARM_INVOCATIONS:-10}"

if ! ls "$VENV"/lib/python3*/site-packages/samcli/local/rapid/aws-lambda-rie-x86_64 >/dev/null 2>&1; then
  scripts/check-infra.sh --no-build >/dev/null
fi
RIE="$(ls "$VENV"/lib/python3*/site-packages/samcli/local/rapid/aws-lambda-rie-x86_64 | head -1)"

cargo build --quiet --release -p intake -p dispatch -p poll -p deliver -p recovery -p sweep -p events -p webhook
cargo build --quiet -p genace-local --bin genace-local
LOCAL="$ROOT/target/debug/genace-local"

logs="$ROOT/.local/cold-start"
mkdir -p "$logs"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  scripts/local-aws.sh stop >/dev/null
}
trap cleanup EXIT
scripts/local-aws.sh server >/dev/null
eval "$(scripts/local-aws.sh env)"
"$LOCAL" provision >/dev/null 2>&1

missing="op_0123456789abcdef0123456789abcdef"
apigw() {
  cat <<JSON
{"version":"2.0","routeKey":"GET /v1/operations/{operation_id}","rawPath":"/v1/operations/$missing","rawQueryString":"",
 "headers":{"content-type":"application/json"},"isBase64Encoded":false,
 "requestContext":{"accountId":"123456789012","apiId":"local","domainName":"localhost","domainPrefix":"localhost",
  "authorizer":{"jwt":{"claims":{"sub":"cold-start","tenant_id":"tenant-a"},"scopes":null}},
  "http":{"method":"GET","path":"/v1/operations/$missing","protocol":"HTTP/1.1","sourceIp":"127.0.0.1","userAgent":"cold-start"},
  "requestId":"cold-start","routeKey":"GET /v1/operations/{operation_id}","stage":"\$default",
  "time":"01/Dec/2026:00:00:00 +0000","timeEpoch":1796000000000}}
JSON
}
sqs() {
  cat <<JSON
{"Records":[{"messageId":"m1","receiptHandle":"r1","body":"{\"operation_id\":\"$missing\"}","attributes":{},
 "messageAttributes":{},"md5OfBody":"","eventSource":"aws:sqs","eventSourceARN":"arn:aws:sqs:us-east-1:123456789012:q","awsRegion":"us-east-1"}]}
JSON
}
schedule() { echo '{"source":"aws.scheduler","detail-type":"Scheduled Event","detail":{}}'; }
# A pipe batch with one ledger change, which announces nothing.
pipe_batch() { echo '[{"eventName":"MODIFY","dynamodb":{"Keys":{"pk":{"S":"TENANT#t"}},"NewImage":{"pk":{"S":"TENANT#t"}},"OldImage":{"pk":{"S":"TENANT#t"}}}}]'; }

printf '| function | init on this host (ms) | first invocation (ms) | warm median (ms) |\n|---|---|---|---|\n'
port=9700
for fn in IntakeFunction DispatchFunction PollFunction DeliverFunction RecoveryFunction SweepFunction EventsFunction WebhookFunction; do
  bin="$(python3 - "$fn" <<'PY'
import sys, re
text = open("infra/template.yaml").read()
m = re.search(r"^  " + sys.argv[1] + r":\n(?:    .*\n|\n)*?.*Binary: (\w+)", text, re.M)
print(m.group(1))
PY
)"
  case "$fn" in
    IntakeFunction) event="$(apigw)" ;;
    SweepFunction) event="$(schedule)" ;;
    EventsFunction) event="$(pipe_batch)" ;;
    *) event="$(sqs)" ;;
  esac
  mapfile -t fenv < <("$LOCAL" env "$fn" GenaceBaseUrl=http://127.0.0.1:9 GenaceApiKeySecretArn= JwtIssuer=genace-local)
  log="$logs/$fn.log"
  env -i PATH=/usr/bin:/bin "${fenv[@]}" AWS_ENDPOINT_URL="$AWS_ENDPOINT_URL" AWS_REGION=us-east-1 \
    AWS_ACCESS_KEY_ID=local AWS_SECRET_ACCESS_KEY=local AWS_CONFIG_FILE=/dev/null AWS_SHARED_CREDENTIALS_FILE=/dev/null \
    GENACE_API_KEY=local RUST_LOG=warn METRICS_DISABLED=true \
    "$RIE" --runtime-interface-emulator-address "127.0.0.1:$port" --runtime-api-address "127.0.0.1:$((port + 1))" \
    "target/release/$bin" >"$log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 50); do
    curl -s -o /dev/null "http://127.0.0.1:$port/" && break
    sleep 0.1
  done
  for _ in $(seq 0 "$WARM"); do
    curl -s -o /dev/null -XPOST "http://127.0.0.1:$port/2015-03-31/functions/function/invocations" -d "$event"
  done
  init="$(grep -o 'INIT REPORT(durationMs: [0-9.]*' "$log" | head -1 | grep -o '[0-9.]*$' || true)"
  mapfile -t runs < <(grep -o 'INVOKE RTDONE(status: [a-z]*, produced bytes: [0-9]*, duration: [0-9.]*' "$log" | grep -o '[0-9.]*$')
  first="${runs[0]:-?}"
  warm="$(printf '%s\n' "${runs[@]:1}" | sort -n | awk '{a[NR]=$1} END {if (NR) print a[int((NR+1)/2)]; else print "?"}')"
  printf '| %s (`%s`) | %.1f | %.1f | %.1f |\n' "$fn" "$bin" "${init:-0}" "$first" "$warm"
  port=$((port + 2))
done
echo
echo "(emulator logs: $logs; each invocation's duration is the emulator's RTDONE, the handler's own time)"
