#!/usr/bin/env bash
# Runs every test of the workspace against a private local AWS endpoint:
# installs moto if needed, starts it on a free loopback port, runs the
# workspace's tests, and stops it again whatever the outcome. The tests run
# with cargo-nextest when it is installed (every test in a process of its
# own, the binaries' tests interleaved, so one long test does not hold the
# rest of its binary back; .config/nextest.toml), then the doc tests with
# `cargo test --doc`; without nextest, `cargo test --workspace`.
# Every test provisions its own uniquely named resources on that endpoint.
# Installs Chromium and ChromeDriver for the console's browser test if
# missing. Extra arguments go to cargo nextest run (or cargo test); with
# any, the doc tests are not run.
#
# Then the conformance suite runs against the deployment artifacts: the six
# function binaries under the Lambda Runtime Interface Emulator, configured
# from infra/template.yaml (`conformance run --local --artifacts`, JUnit
# report in target/conformance-artifacts.xml). Set SKIP_ARTIFACTS=1 to skip.
#
# Then Redocly CLI lints docs/openapi.yaml (recommended rules, 0 errors)
# and schemathesis checks the API against it from outside,
# with a tenant's and an operator's token (scripts/api-check.sh; exceptions
# and their reasons in schemathesis.toml). Set SKIP_API_CHECK=1 to skip.
#
# Last, the TypeScript client (clients/typescript) is type-checked against
# docs/openapi.yaml, built and tested with `node --test` against a local
# stack of its own (scripts/client-ts.sh). Set SKIP_CLIENT_TS=1 to skip.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
MOTO_PORT="${MOTO_PORT:-$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}"
export MOTO_PORT

trap 'scripts/local-aws.sh stop' EXIT
scripts/local-aws.sh server
eval "$(scripts/local-aws.sh env)"
# The webhook test verifies every POST with a receiver written with the
# standardwebhooks package (PyPI), in the same venv as moto.
VENV="${VENV:-$ROOT/.venv}"
"$VENV/bin/python" -c 'import standardwebhooks' 2>/dev/null ||
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "standardwebhooks==1.1.0"
export GENACE_PYTHON="$VENV/bin/python"
# The console's browser test (tests/tests/console_browser.rs) drives
# Debian's Chromium through ChromeDriver.
scripts/browser.sh
mkdir -p .local
log=".local/test-$MOTO_PORT.log"
set +e
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --no-fail-fast "$@" 2>&1 | tee "$log"
  status=${PIPESTATUS[0]}
  # The doc tests, unless the arguments chose some tests (cargo refuses
  # --doc beside a target selector).
  if [ $# = 0 ]; then
    cargo test --workspace --doc --no-fail-fast 2>&1 | tee -a "$log"
    doc_status=${PIPESTATUS[0]}
    [ "$doc_status" = 0 ] || status=$doc_status
  fi
else
  echo "[test] cargo-nextest not installed: cargo test"
  cargo test --workspace --no-fail-fast "$@" 2>&1 | tee "$log"
  status=${PIPESTATUS[0]}
fi
set -e
scripts/local-aws.sh stop
trap - EXIT

if [ "${SKIP_ARTIFACTS:-}" != 1 ]; then
  echo "== conformance against the artifacts under the Lambda Runtime Interface Emulator"
  set +e
  cargo run --quiet -p conformance -- run --local --artifacts --junit target/conformance-artifacts.xml 2>&1 | tee -a "$log"
  artifacts_status=${PIPESTATUS[0]}
  set -e
  [ "$artifacts_status" = 0 ] || status=$artifacts_status
fi

if [ "${SKIP_API_CHECK:-}" != 1 ]; then
  echo "== the API against its OpenAPI document: redocly lint, then schemathesis with tenant and operator tokens (scripts/api-check.sh)"
  set +e
  scripts/api-check.sh 2>&1 | tee -a "$log"
  api_status=${PIPESTATUS[0]}
  set -e
  [ "$api_status" = 0 ] || status=$api_status
fi

if [ "${SKIP_CLIENT_TS:-}" != 1 ]; then
  echo "== the TypeScript client against a local stack (scripts/client-ts.sh)"
  set +e
  cargo build --quiet -p genace-local --bins 2>&1 | tee -a "$log"
  scripts/client-ts.sh 2>&1 | tee -a "$log"
  client_status=${PIPESTATUS[0]}
  set -e
  [ "$client_status" = 0 ] || status=$client_status
fi

# One closing line for the whole run (nextest prints one summary, cargo test
# one line per test binary and the doc tests', the conformance suite one of
# its own).
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($i ~ /^passed;?$/) p += $(i-1); if ($i ~ /^failed;?$/) f += $(i-1) } }
     /^ *Summary \[/ { for (i = 1; i <= NF; i++) { if ($i ~ /^passed,?$/) p += $(i-1)
                         if ($i ~ /^failed,?$/) f += ($(i-1) == "exec" ? $(i-2) : $(i-1))
                         if ($i ~ /^out,?$/ && $(i-1) == "timed") f += $(i-2) } }
     /^conformance: [0-9]+ passed, [0-9]+ failed/ { p += $2; f += $4; c += $2 + $4 }
     /^schemathesis: [0-9]+ passed, [0-9]+ failed/ { p += $2; f += $4; a += $2 + $4 }
     /^typescript client: [0-9]+ passed, [0-9]+ failed/ { p += $3; f += $5; t += $3 + $5 }
     END { printf "tests: %d passed, %d failed (%d of them conformance scenarios against the artifacts, %d schemathesis runs against the OpenAPI document, %d TypeScript client tests)\n", p, f, c, a, t }' "$log"
# A failing test's message is printed after whatever it logged, which can be
# long; repeat each panic here, so the end of the output says what failed.
if grep -Eq "^ *thread '.*' panicked at" "$log"; then
  echo "== panics"
  grep -EA4 "^ *thread '.*' panicked at" "$log" | grep -Ev '^ *\{"' | awk '!seen[$0]++' | head -60 || true
fi
exit "$status"
