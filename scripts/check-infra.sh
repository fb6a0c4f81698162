#!/usr/bin/env bash
# Checks the deployable stack without an AWS account:
#   - installs aws-sam-cli (with cfn-lint), cargo-lambda and ziglang into ./.venv-infra if missing,
#     and the aarch64 Rust target;
#   - `sam validate --lint` and `cfn-lint` on infra/template.yaml;
#   - `cargo lambda build --arm64` of every function: each one compiles and
#     links for Lambda's arm64 (the dev profile: a link is what the check
#     needs, and it takes a fraction of the release build's time).
# --release builds the artifacts as deployed instead (`--release`: thin LTO,
# one codegen unit, stripped) and fails when a bootstrap is over 10 MB; it is
# the artifact benchmark (`scripts/bench.sh artifacts`), not a CI step.
# --no-build skips the build. The build goes to $CARGO_TARGET_DIR when set
# (CI gives it a directory of its own).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# Its own venv: the SAM CLI pins packages that moto (in ./.venv) also uses.
VENV="${INFRA_VENV:-$ROOT/.venv-infra}"
export SAM_CLI_TELEMETRY=0

[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
missing=()
[ -x "$VENV/bin/sam" ] || missing+=(aws-sam-cli)
[ -x "$VENV/bin/cfn-lint" ] || missing+=(cfn-lint)
[ -x "$VENV/bin/cargo-lambda" ] || missing+=(cargo-lambda)
"$VENV/bin/python" -c 'import ziglang' 2>/dev/null || missing+=(ziglang)
if [ ${#missing[@]} -gt 0 ]; then
  echo "[infra] installing ${missing[*]} into $VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "${missing[@]}"
fi
export PATH="$VENV/bin:$PATH"

echo "[infra] sam validate --lint"
sam validate --lint --region us-east-1 --template-file infra/template.yaml
echo "[infra] cfn-lint"
cfn-lint infra/template.yaml

mode="${1:-}"
if [ "$mode" = "--no-build" ]; then exit 0; fi

rustup target list --installed | grep -q '^aarch64-unknown-linux-gnu$' || rustup target add aarch64-unknown-linux-gnu
functions=(intake dispatch poll deliver recovery sweep events webhook console)
if [ "$mode" = "--release" ]; then
  echo "[infra] cargo lambda build --release --arm64 (${functions[*]})"
  cargo lambda build --release --arm64 $(printf -- '-p %s ' "${functions[@]}")
else
  echo "[infra] cargo lambda build --arm64 (${functions[*]}): every function links for arm64"
  cargo lambda build --arm64 $(printf -- '-p %s ' "${functions[@]}")
fi
limit=$((10 * 1024 * 1024))
status=0
[ "$mode" = "--release" ] || echo "[infra] sizes of the dev build, not of the deployed artifacts (scripts/bench.sh artifacts):"
for f in "${functions[@]}"; do
  bin="${CARGO_TARGET_DIR:-target}/lambda/$f/bootstrap"
  if [ ! -x "$bin" ]; then
    echo "[infra] $f: no bootstrap at $bin"
    status=1
    continue
  fi
  size=$(stat -c %s "$bin")
  awk -v f="$f" -v s="$size" 'BEGIN { printf "[infra] %-9s %6.1f MB\n", f, s / 1048576 }'
  if [ "$mode" = "--release" ] && [ "$size" -gt "$limit" ]; then
    echo "[infra] $f is over 10 MB"
    status=1
  fi
done
exit $status
