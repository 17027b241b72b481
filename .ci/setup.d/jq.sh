#!/usr/bin/env bash
# jq, for the log tests (tests/test_logs.py parses every log line with it when present) and
# the operations doc's `jq 'select(.goal_id == ...)'`. Idempotent.
set -euo pipefail
if command -v jq >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "jq.sh: cannot install jq here (needs root and apt-get); the log tests use json.loads" >&2
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq jq >/dev/null
