"""A command host and a done-check for the done-check tests: real processes, real files.

The host answers ``completed`` every turn; it fixes the work (writes ``fixed``)
only once its envelope shows a failing done-check, so a first ``completed`` is
false and the second true. It keeps every envelope it read in ``envelopes.jsonl``.
The check fails ("3 failed") until ``fixed`` exists, and logs each run in
``checks.log``.
"""

from __future__ import annotations

import sys
from pathlib import Path

HOST = r"""
import json, os, sys
envelope = json.load(sys.stdin)
wd = os.getcwd()
with open(os.path.join(wd, "envelopes.jsonl"), "a") as f:
    f.write(json.dumps(envelope) + "\n")
last = envelope["state"].get("last_check")
if last is not None and not last["passed"]:
    open(os.path.join(wd, "fixed"), "w").write("yes\n")
result = {"kind": "completed", "summary": "all done", "evidence": ["looked fine"]}
with open(os.environ["LOOPX_RESULT_FILE"], "w") as f:
    json.dump(result, f)
"""

CHECK = r"""
import os, sys
with open("checks.log", "a") as f:
    f.write(os.environ.get("LOOPX_TURN_KEY", "?") + "\n")
if os.path.exists("fixed"):
    print("3 passed")
    sys.exit(0)
print("FAILED test_a\nFAILED test_b\nFAILED test_c\n3 failed")
sys.exit(1)
"""


def write_scripts(workdir: Path) -> tuple[str, str]:
    """Write the host and the check into ``workdir``; return their command lines."""
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "host.py").write_text(HOST)
    (workdir / "check.py").write_text(CHECK)
    return f"{sys.executable} host.py", f"{sys.executable} check.py"


def check_runs(workdir: Path) -> list[str]:
    """The turn key of every run of the check."""
    path = workdir / "checks.log"
    return path.read_text().splitlines() if path.exists() else []
