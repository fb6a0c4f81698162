#!/usr/bin/env bash
# Checks the deployable stack without an AWS account:
#   - installs aws-sam-cli (with cfn-lint), cargo-lambda and ziglang into ./.venv-infra if missing,
#     and the aarch64 Rust target;
#   - `sam validate --lint` and `cfn-lint` on infra/template.yaml;
#   - `cargo lambda build --release --arm64` of every function, printing each
#     stripped bootstrap's size (the goal is at most 10 MB each).
# Pass --no-build to skip the release build. The build goes to
# $CARGO_TARGET_DIR when set (CI gives it a directory of its own).
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

if [ "${1:-}" = "--no-build" ]; then exit 0; fi

rustup target list --installed | grep -q '^aarch64-unknown-linux-gnu$' || rustup target add aarch64-unknown-linux-gnu
functions=(intake dispatch poll deliver recovery sweep events webhook console)
echo "[infra] cargo lambda build --release --arm64 (${functions[*]})"
cargo lambda build --release --arm64 $(printf -- '-p %s ' "${functions[@]}")
limit=$((10 * 1024 * 1024))
status=0
for f in "${functions[@]}"; do
  bin="${CARGO_TARGET_DIR:-target}/lambda/$f/bootstrap"
  size=$(stat -c %s "$bin")
  awk -v f="$f" -v s="$size" 'BEGIN { printf "[infra] %-9s %6.1f MB\n", f, s / 1048576 }'
  if [ "$size" -gt "$limit" ]; then
    echo "[infra] $f is over 10 MB"
    status=1
  fi
done
exit $status
