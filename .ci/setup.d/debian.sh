#!/usr/bin/env bash
# What the test suites need from Debian, in one apt-get run; idempotent and quick when present:
#   bwrap     bubblewrap: sandboxed goals (`--sandbox bwrap`) and their confinement tests
#   chromium  the browser suite (tests/browser, marker `browser`), driven by Playwright from PyPI
#             with executable_path=/usr/bin/chromium; never `playwright install` (no downloads)
#   faketime  the clock-offset tests (tests/test_clock.py skips without it)
#   jq        the log tests and the operations doc's `jq 'select(.goal_id == ...)'` filters
set -euo pipefail
declare -A wanted=([bwrap]=bubblewrap [chromium]=chromium [faketime]=faketime [jq]=jq)
missing=()
for command in "${!wanted[@]}"; do
    command -v "$command" >/dev/null 2>&1 || missing+=("${wanted[$command]}")
done
[ "${#missing[@]}" -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "debian.sh: cannot install ${missing[*]} (needs root and apt-get); their tests skip" >&2
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
