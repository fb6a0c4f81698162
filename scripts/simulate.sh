#!/usr/bin/env bash
# Deterministic simulation: runs N seeded schedules of the real stages on the
# in-memory adapters (crashes at every await point, redeliveries, duplicates,
# races, the sweep, operators, every Genace answer) and checks the promises
# after every step. Prints seeds per second; on a violation, the seed and the
# trace of its steps, and exits 1.
#   scripts/simulate.sh 10000                 # seeds 0..10000
#   scripts/simulate.sh 500 --first 20000     # other seeds
#   scripts/simulate.sh --replay 862          # the trace of one seed
#   scripts/simulate.sh 10000 --bug repost    # with a planted bug (names: simulate --bug help)
#   scripts/simulate.sh 2000 --spend-limit 10.5 # tenant-a may hold 10.5 credits at once
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# Built with the `sim` profile (optimized, quick to build): a seed runs
# about four times faster than in a debug build. SIMULATE_PROFILE=dev for debug.
cargo run --quiet --profile "${SIMULATE_PROFILE:-sim}" -p genace-dst --bin simulate -- "$@"
