"""What the fake host CLIs share: their session store and their invocation log.

Standard library only: a fake starts as fast as the real program's wrapper would.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path


def session_home(name: str, folder: str) -> Path:
    """``$FAKE_<NAME>_HOME/<folder>`` (default a per-user dir in $TMPDIR), created."""
    default = Path(tempfile.gettempdir()) / f"fake-{name}-{os.getuid()}"
    home = Path(os.environ.get(f"FAKE_{name.upper()}_HOME") or default) / folder
    home.mkdir(parents=True, exist_ok=True)
    return home


def log_invocation(name: str, stdin: str) -> None:
    """With ``$FAKE_<NAME>_LOG`` set, append this run's argv, stdin and cwd to it as a JSON line."""
    if log := os.environ.get(f"FAKE_{name.upper()}_LOG"):
        with Path(log).open("a") as f:
            f.write(json.dumps({"argv": sys.argv, "stdin": stdin, "cwd": str(Path.cwd())}) + "\n")


def answer_version_or_help(
    args: list[str], version: str, usage: str, options: Iterable[str], commands: Iterable[str] = ()
) -> bool:
    """Answer ``--version`` or ``--help`` as the real CLIs do; whether ``args`` asked.

    The help lists ``options`` (and ``commands``), where the canary looks for
    the flags its adapter passes.
    """
    if args[-1:] in (["--version"], ["-V"]) and len(args) == 1:
        sys.stdout.write(version + "\n")
        return True
    if args[-1:] != ["--help"]:
        return False
    lines = [f"Usage: {usage}", "", "Commands:", *(f"  {c}" for c in commands), "", "Options:"]
    sys.stdout.write("\n".join([*lines, *(f"  {o}" for o in options)]) + "\n")
    return True
