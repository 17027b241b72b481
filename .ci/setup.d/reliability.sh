#!/usr/bin/env bash
# Debian's faketime, for the clock-offset tests (tests/test_clock.py skip without it).
# Idempotent: quiet and quick when it is already installed.
set -euo pipefail
if command -v faketime >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "reliability.sh: cannot install faketime here (needs root and apt-get); its tests skip" >&2
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq faketime >/dev/null
