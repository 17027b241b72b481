"""``loopx supervisor run`` in a child process: its command line, its log, and its last error.

Three callers start one: ``supervisor start`` (detached, :mod:`loopx.supervisor.control`),
``batch run`` (:mod:`loopx.supervisor.batch`) and the API's ``supervisor run``
(``loopx.api._fleetrun``). Each owns how it waits for the child; what the
child is started as, and how its failure is told, is defined here once.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from loopx import environ
from loopx.root import Layout

ERROR_PREFIX = "loopx: error: "  # how the CLI prints a LoopxError (loopx/cli/_app.py)


def supervisor_argv(layout: Layout, options: Sequence[str]) -> list[str]:
    """``python -P -m loopx --root R --registry F supervisor run OPTIONS``.

    ``-P``: never import from the cwd (a ``loopx/`` folder there would shadow ours).
    """
    return [
        sys.executable, "-P", "-m", "loopx", "--root", str(layout.root),
        "--registry", str(layout.registry), "supervisor", "run", *options,
    ]  # fmt: skip


def log_env(env: Mapping[str, str], path: Path) -> dict[str, str]:
    """``env`` naming ``path`` as the child's log file, which the child rotates (loopx.log.rotation)."""
    return {**env, environ.LOG_FILE: str(path)}


def log_end(path: Path) -> int:
    """The log's size now, where the next child's lines begin (logs are shared by runs); 0 if none."""
    try:
        return path.stat().st_size
    except OSError:
        return 0


def last_error(path: Path, since: int = 0) -> str:
    """What the child said last from ``since`` on: its last ``loopx: error:`` line, else its last line."""
    try:
        with path.open("rb") as f:
            f.seek(since)
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    errors = [line for line in lines if line.startswith(ERROR_PREFIX)]
    last = errors[-1] if errors else (lines[-1] if lines else "(nothing logged)")
    return last.removeprefix(ERROR_PREFIX)
