"""The warm ``loopx status --json``: the last printed document, replayed while it holds.

The document is stored as a memo (:mod:`loopx.memo`) in this host's cache
directory with the fingerprints of what it was computed from: the status
database, the registry, the change-hint log (any write a status must show
leaves a hint), ``supervisor.json``, the heartbeats and the
processes of this host they name; and it is valid until its first fresh
heartbeat goes stale. Its key holds the program's version, the registry
file and the root's filesystem health (``degraded``). Standard library
only, so a warm status starts without pydantic or structlog.
"""

from __future__ import annotations

import os

from loopx._version import VERSION
from loopx.memo import host_cache_dir, replay
from loopx.storage.resources import root_health

# Not `from typing import ...`: a warm `loopx status --json` starts without importing it.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import BinaryIO, Final

    from loopx.root import Layout

MEMO_NAME: Final = "status.memo"
STORE_NAME: Final = "status.db"  # loopx.status.database's database, beside the memo


def memo_path(layout: Layout) -> str:
    """``<host cache dir>/status.memo``."""
    return os.path.join(host_cache_dir(layout.root), MEMO_NAME)


def store_path(layout: Layout) -> str:
    """``<host cache dir>/status.db``: the status database (:mod:`loopx.status.database`)."""
    return os.path.join(host_cache_dir(layout.root), STORE_NAME)


def memo_key(layout: Layout) -> str:
    """What the document depends on besides its files: version, registry, the root's health."""
    return f"{VERSION}\0{layout.registry}\0{root_health(layout.root)}"


def print_document(layout: Layout, *, ttl_s: float, out: int | BinaryIO) -> bool:
    """Write the stored document to ``out`` if it holds (and the cache is younger than ``ttl_s``)."""
    return replay(memo_path(layout), out, max_age=ttl_s, key=memo_key(layout)) is not None


__all__ = ["MEMO_NAME", "STORE_NAME", "memo_key", "memo_path", "print_document", "store_path"]
