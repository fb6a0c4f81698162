#!/usr/bin/env bash
# Installs Debian's headless Chromium and ChromeDriver (packages chromium and
# chromium-driver) if either is missing: the console's browser test and its
# benchmark drive them through WebDriver.
set -euo pipefail
if command -v chromedriver >/dev/null && command -v chromium >/dev/null; then
  exit 0
fi
echo "[browser] installing chromium and chromium-driver (Debian packages)"
sudo=""
[ "$(id -u)" = 0 ] || sudo="sudo"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium chromium-driver >/dev/null
