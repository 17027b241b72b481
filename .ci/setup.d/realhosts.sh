#!/usr/bin/env bash
# Installs the real host CLIs that tests/realhosts drives: the pinned versions into .realhosts/ of
# the checkout, and the newest published versions (where they differ from the pins) into
# .realhosts-newest/. Idempotent: does nothing when the versions are already there. Needs node
# >= 20 and npm.
set -euo pipefail
cd "$(dirname "$0")/../.."
# The versions tests/realhosts and docs/hosts.md were checked against; bump them together
# with PINNED in tests/realhosts/conftest.py and re-run `python -m tests.realhosts.capture`.
pins=(
    "@openai/codex@0.171.0"
    "@anthropic-ai/claude-code@2.1.197"
    "@google/gemini-cli@0.61.0"
    "opencode-ai@1.18.33"
    # The newest Qwen Code that runs on node 20 (0.21 and later need node >= 22).
    "@qwen-code/qwen-code@0.15.10"
    "@mariozechner/pi-coding-agent@0.73.1"
)
# The newest versions on npm when they were last looked up (`npm view PKG version`), for the
# CLIs whose newest differs from its pin; NEWEST in tests/realhosts/conftest.py names them too,
# and each is an adapter's `tested_versions` with a recording in tests/realhosts/captures/sessions/.
newest=(
    "@anthropic-ai/claude-code@2.1.332"
)
if ! command -v npm >/dev/null; then
    echo "realhosts: npm not found; install node >= 20 to run tests/realhosts" >&2
    exit 0
fi

install() {
    local prefix=$1
    shift
    local stamp="$prefix/.pins"
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$*" ]; then
        return 0
    fi
    mkdir -p "$prefix"
    [ -f "$prefix/package.json" ] || echo '{"name": "loopx-realhosts", "private": true}' >"$prefix/package.json"
    npm install --prefix "$prefix" --no-audit --no-fund --loglevel=error --save-exact "$@"
    echo "$*" >"$stamp"
}

install .realhosts "${pins[@]}"
if [ ${#newest[@]} -gt 0 ]; then
    install .realhosts-newest "${newest[@]}"
fi
