#!/usr/bin/env bash
# Installs aider (PyPI aider-chat), the one real host CLI that tests/realhosts drives from
# Python rather than npm: the pinned version into its own virtual environment in
# .realhosts/aider/ of the checkout, and the CLI alone (not that environment's python) in
# .realhosts/aider/cli/ for the tests' PATH. uv installs it (about a minute; pip takes about
# four). Idempotent: does nothing when the version is already there. Needs python3 >= 3.10.
set -euo pipefail
cd "$(dirname "$0")/../.."
# The version tests/realhosts and docs/hosts.md were checked against, also the newest on PyPI
# when it was last looked up (`pip index versions aider-chat`); bump it together with PINNED
# in tests/realhosts/conftest.py and re-run `python -m tests.realhosts.capture`.
pin="aider-chat==0.86.2"
prefix=.realhosts/aider
stamp="$prefix/.pins"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$pin" ] && [ -x "$prefix/cli/aider" ]; then
    exit 0
fi
if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 10))'; then
    echo "aider: python3 >= 3.10 not found; install it to run aider's tests in tests/realhosts" >&2
    exit 0
fi
rm -rf "$prefix"
python3 -m venv "$prefix/tools"
"$prefix/tools/bin/python" -m pip install --quiet --disable-pip-version-check uv
python3 -m venv "$prefix"
VIRTUAL_ENV="$PWD/$prefix" "$prefix/tools/bin/uv" pip install --quiet "$pin"
mkdir -p "$prefix/cli"
ln -sf ../bin/aider "$prefix/cli/aider"
echo "$pin" >"$stamp"
