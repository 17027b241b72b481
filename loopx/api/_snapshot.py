"""``print_status_snapshot``: a warm `loopx status --json` without loading the kernel.

Standard library only (with ``loopx.root`` and ``loopx.status.warm``), so the
CLI can try it before it imports pydantic or structlog (issue 14: within 3x of a
bare Python start). When it returns False, ``Root.open(...).status.document()``
assembles the document from the cache and stores the next memo.
"""

from __future__ import annotations

import os
from pathlib import Path

from loopx.root import open_root, resolve_root
from loopx.status.warm import print_document

# Not `from typing import ...`: a warm `loopx status --json` imports no typing (issue 14).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import BinaryIO


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
    the status database, the registry, the change hints and the fleet's files and
    processes are as they were and the cache is younger than ``ttl_s``
    (:mod:`loopx.status.warm`).

    Returns:
        False, having written nothing, when there is no such document.

    Raises:
        RootError: the root is missing, uninitialised, shared or not ours.
    """
    resolved = resolve_root(flag=path, registry=registry, env=env, home=home)
    layout = open_root(resolved, create=False)
    return print_document(layout, ttl_s=ttl_s, out=out)
