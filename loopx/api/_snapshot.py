"""``print_status_snapshot``: a warm `loopx status --json` without loading the kernel.

Standard library only (with ``loopx.root`` and ``loopx.status.snapshot``), so the
CLI can try it before it imports pydantic or structlog (issue 14: within 3x of a
bare Python start). When it returns False, ``Root.open(...).status.document()``
assembles the document from the cache and stores the next snapshot.
"""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime
from pathlib import Path

from loopx.root import open_root, resolve_root
from loopx.status.snapshot import print_snapshot

# Not `from typing import ...`: a warm `loopx status --json` imports no typing (issue 14).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import BinaryIO

    from loopx.forked import Forked
    from loopx.status.prefetch import Fingerprints


def print_status_snapshot(
    path: str | os.PathLike[str] | None = None,
    *,
    ttl_s: float,
    out: int | BinaryIO,
    registry: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    home: Path | None = None,
) -> bool:
    """Write the stored `loopx status --json` document to ``out`` if it still holds.

    The root is chosen and checked as ``Root.open`` does. The document holds while
    the status cache is the generation it was assembled from, younger than
    ``ttl_s``, and the fleet's files and processes are as they were
    (:mod:`loopx.status.snapshot`). The clock is read directly: a fresh process
    has no measured clock offset (``loopx.model.utcnow`` would add zero).

    Returns:
        False, having written nothing, when there is no such document.

    Raises:
        RootError: the root is missing, uninitialised, shared or not ours.
    """
    resolved = resolve_root(flag=path, registry=registry, env=env, home=home)
    layout = open_root(resolved, create=False)
    return print_snapshot(layout, now=datetime.now(UTC), ttl_s=ttl_s, out=out)


def prefetch_status_scan(
    path: str | os.PathLike[str] | None = None,
    *,
    ttl_s: float,
    full_scan_after_s: float,
    clear_cache: bool = False,
    registry: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    home: Path | None = None,
) -> Forked[Fingerprints] | None:
    """Start fingerprinting every goal in a child process when `status --json` will scan them all.

    That is with ``clear_cache``, or when every refresh scans
    (``full_scan_after_s`` 0, the CLI's default) and one is due: the cache's
    index is missing or was written ``ttl_s`` ago or more. The child works
    while this process imports the rest (:mod:`loopx.status.prefetch`). Pass
    the result to ``Status.document`` and close it after, whatever happened.

    Raises:
        RootError: the root is missing, uninitialised, shared or not ours.
    """
    resolved = resolve_root(flag=path, registry=registry, env=env, home=home)
    layout = open_root(resolved, create=False)
    if not clear_cache:
        if full_scan_after_s > 0:
            return None
        try:
            age = time.time() - os.stat(layout.status_file).st_mtime
        except FileNotFoundError:
            age = float("inf")
        if age < ttl_s:
            return None
    from loopx.forked import can_fork  # noqa: PLC0415 - a warm status never needs it
    from loopx.status.prefetch import prefetch_fingerprints  # noqa: PLC0415 - nor this

    return prefetch_fingerprints(str(layout.goals_dir)) if can_fork() else None
