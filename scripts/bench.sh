#!/usr/bin/env bash
# Measures Genace operations on the local stack and prints tables:
#   scripts/bench.sh [pipeline] [--intents N] [--output-bytes SIZE] [--traced | --compare-tracing [--rounds 3]]   requests, invocations, latency, $ per million; what tracing adds
#   scripts/bench.sh delivery [--bytes 1GiB]                           one large output: throughput and peak RSS
#   scripts/bench.sh load [--intents 2000] [--rate 50] [--duplicates 30]
#   scripts/bench.sh capacity [--intents 1000] [--limit 10] [--render-seconds 20]
#   scripts/bench.sh events [--intents 100]                            the webhook leg, before and after the pipe's mark
#   scripts/bench.sh console [--cases 10000] [--runs 10]               the console's first page of many open cases (headless Chromium)
#   scripts/bench.sh scale [--tenants 3,100] [--model-shards 1,4,8]    requests per operation against tenants; the account's ceiling
#   scripts/bench.sh latency [--medians 10,60,300] [--spread 0.4]      poll latency in virtual time: lag, GETs, drain, 429s
#   scripts/bench.sh artifacts                                         the release arm64 bootstraps as deployed: sizes, at most 10 MB each
# Installs and starts moto on a free loopback port (stopped again at the end),
# builds genace-bench (release; BENCH_PROFILE=dev for a quick debug build) and
# runs it from the repository root. Prices: docs/prices.json.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
MOTO_PORT="${MOTO_PORT:-$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}"
export MOTO_PORT
PROFILE="${BENCH_PROFILE:-release}"
export RUST_LOG="${RUST_LOG:-error}" METRICS_DISABLED=true LOG_FORMAT=text

# The deployed artifacts: the release arm64 build and its sizes.
[ "${1:-}" = artifacts ] && exec scripts/check-infra.sh --release
[ "${1:-}" = console ] && scripts/browser.sh
cargo build --quiet --profile "$PROFILE" -p genace-bench --bin genace-bench
dir="$PROFILE"
[ "$PROFILE" = dev ] && dir=debug

trap 'scripts/local-aws.sh stop >/dev/null' EXIT
scripts/local-aws.sh server >/dev/null
eval "$(scripts/local-aws.sh env)"
echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(uname -m), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); profile $PROFILE"
echo
"target/$dir/genace-bench" "$@"
