#!/usr/bin/env bash
# Prints the path of the Lambda Runtime Interface Emulator for this host's
# architecture: the one the SAM CLI ships (what `sam local` runs inside its
# containers). Installs aws-sam-cli into ./.venv-infra first if it is missing.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${INFRA_VENV:-$ROOT/.venv-infra}"
case "$(uname -m)" in
  x86_64 | amd64) arch=x86_64 ;;
  aarch64 | arm64) arch=arm64 ;;
  *) echo "rie.sh: no emulator for $(uname -m)" >&2; exit 1 ;;
esac
find_rie() { ls "$VENV"/lib/python3*/site-packages/samcli/local/rapid/aws-lambda-rie-$arch 2>/dev/null | head -1; }
if [ -z "$(find_rie)" ]; then
  [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV" >&2
  echo "[rie] installing aws-sam-cli into $VENV" >&2
  "$VENV/bin/pip" install --quiet --disable-pip-version-check aws-sam-cli >&2
fi
rie="$(find_rie)"
[ -n "$rie" ] || { echo "rie.sh: aws-sam-cli installed no aws-lambda-rie-$arch" >&2; exit 1; }
chmod +x "$rie"
echo "$rie"
