"""``print_quota_snapshot``: a warm `loopx quota should-run` without loading the kernel.

Standard library only (with ``loopx.root`` and ``loopx.quota.warm``), so the
CLI can try it before it imports pydantic, psutil or structlog (issue 14:
within 2x of a bare Python start). When it returns None,
``Root.open(...).quota.should_run(id)`` decides and stores the next snapshot.
"""

from __future__ import annotations

import os
from pathlib import Path

from loopx.quota.warm import print_decision
from loopx.root import open_root, resolve_root

TYPE_CHECKING = False  # not `typing`: this path must start within 2x of bare Python
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import BinaryIO


def print_quota_snapshot(
    goal_id: str,
    path: str | os.PathLike[str] | None = None,
    *,
    as_json: bool,
    out: int | BinaryIO,
    registry: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    home: Path | None = None,
) -> int | None:
    """Write the stored `loopx quota should-run ID [--json]` output to ``out`` if it holds.

    The root is chosen and checked as ``Root.open`` does. The output holds while
    the files the decision read are the same and the clock has not reached the
    instant they would decide otherwise (:mod:`loopx.quota.warm`). The clock is
    read directly: a fresh process has no measured clock offset.

    Returns:
        The exit code of the stored decision (0 allowed, 3 not), or None, having
        written nothing, when there is no such output.

    Raises:
        RootError: the root is missing, uninitialised, shared or not ours.
    """
    resolved = resolve_root(flag=path, registry=registry, env=env, home=home)
    layout = open_root(resolved, create=False)
    return print_decision(layout, goal_id, as_json=as_json, out=out)
