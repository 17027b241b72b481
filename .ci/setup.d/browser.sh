#!/usr/bin/env bash
# The browser suite (tests/browser, marker `browser`): Debian's Chromium, driven by Playwright
# from PyPI with executable_path=/usr/bin/chromium. Never `playwright install`: no downloads.
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends chromium >/dev/null
chromium --version
