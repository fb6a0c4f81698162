#!/usr/bin/env bash
# Runs every cargo-fuzz target of fuzz/ for SECONDS each (default 30):
#   intake     body bytes -> Intent -> fingerprint (stable under reordering and respelling)
#   classify   Genace status, Retry-After and body -> outcome (Accepted only with a usable job id)
#   url_guard  the output URL guard (production policy lets through only https:443 to public addresses)
#   cursors    every paged route through the HTTP handler: no 5xx for any cursor or time range
# Installs cargo-fuzz into ./.tools if missing. Uses the nightly toolchain
# with AddressSanitizer when it is installed; otherwise the stable one
# (RUSTC_BOOTSTRAP, no sanitizer). Seeds are read from fuzz/corpus/<target>;
# what the fuzzer finds goes to .local/fuzz/<target>, and crashes to
# fuzz/artifacts/<target>. The targets run side by side; exits non-zero if
# any of them fails.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
SECONDS_EACH="${1:-30}"
TOOLS="$ROOT/.tools"
export PATH="$TOOLS/bin:$PATH"
export CARGO_TERM_COLOR=never

if ! command -v cargo-fuzz >/dev/null; then
  echo "[fuzz] installing cargo-fuzz into $TOOLS"
  # A debug build: it only drives cargo, and builds in a third of the time.
  cargo install --locked --quiet --debug cargo-fuzz --root "$TOOLS"
fi
if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
  toolchain=(+nightly)
  sanitizer=address
else
  toolchain=()
  sanitizer=none
  export RUSTC_BOOTSTRAP=1
fi

targets=(intake classify url_guard cursors)
echo "[fuzz] building ${targets[*]} (sanitizer: $sanitizer)"
cargo "${toolchain[@]}" fuzz build --sanitizer "$sanitizer" --fuzz-dir fuzz
# The targets run side by side (libFuzzer uses one core each); each still
# runs SECONDS_EACH seconds.
run_target() {
  local t="$1"
  local work=".local/fuzz/$t"
  mkdir -p "$work"
  cargo "${toolchain[@]}" fuzz run --sanitizer "$sanitizer" --fuzz-dir fuzz "$t" "$work" "fuzz/corpus/$t" -- \
    -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 >".local/fuzz/$t.log" 2>&1
}
echo "[fuzz] ${targets[*]} for ${SECONDS_EACH}s each, side by side"
pids=()
for t in "${targets[@]}"; do
  run_target "$t" &
  pids+=($!)
done
failed=0
for i in "${!targets[@]}"; do
  t="${targets[$i]}"
  status=0
  wait "${pids[$i]}" || status=$?
  log=".local/fuzz/$t.log"
  grep -E 'stat::number_of_executed_units|stat::peak_rss_mb|panicked|SUMMARY|Test unit written' "$log" | sed "s/^/[fuzz] $t: /" || true
  if [ "$status" -ne 0 ]; then
    tail -40 "$log"
    echo "[fuzz] $t FAILED (exit $status); the input is in fuzz/artifacts/$t"
    failed=$status
  fi
done
[ "$failed" = 0 ] || exit "$failed"
echo "[fuzz] all targets ran ${SECONDS_EACH}s without a failure"
