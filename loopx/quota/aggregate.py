"""The ledger's cache, ``goals/<id>/quota.agg.json``: its record, its file, and its check.

:mod:`loopx.quota.ledger` folds the ledger into it and reads it back; here is
what it holds (:class:`SpendAggregate`), how it is written and read (a
missing or damaged one reads as none: it is only a cache), and whether it
still describes a prefix of the ledger (:func:`covers_prefix`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Final, Literal

from pydantic import Field

from loopx.errors import CorruptFileError
from loopx.log import get_logger
from loopx.model import Record
from loopx.quota.window import SpendColumns, SpendTotals
from loopx.storage.files import atomic_write_bytes, parse_model, read_bytes_at

log = get_logger(__name__)

AGGREGATE_NAME: Final = "quota.agg.json"  # Layout.quota_aggregate_file


class SpendAggregate(Record):
    """``goals/<id>/quota.agg.json``: the recent minute buckets of a ledger prefix.

    A cache: deleting it is always safe; it is rebuilt from the ledger.
    """

    schema_version: Literal[1] = 1
    goal_id: str
    ledger_inode: int
    ledger_offset: Annotated[int, Field(ge=0)]  # bytes folded; always just after a newline
    last_turn_key: str | None = None  # turn_key of the line ending at ledger_offset
    kept_minute: int | None = None  # buckets of earlier minutes were dropped
    lifetime: SpendTotals = Field(default_factory=SpendTotals)
    buckets: SpendColumns = Field(default_factory=SpendColumns)


def write_aggregate(path: Path, agg: SpendAggregate) -> None:
    """Write the aggregate cache at ``path``, compact and not fsynced."""
    # Compact JSON: every decision parses this file, so its size is its cost.
    # Not fsynced: it is a cache written after the ledger line is durable, and
    # whatever a power cut leaves of it (old, missing, damaged) is checked
    # against the ledger on the next read and caught up or rebuilt.
    atomic_write_bytes(path, agg.model_dump_json().encode() + b"\n", durable=False)


def load_aggregate(dir_fd: int, goal_dir: str, goal_id: str) -> SpendAggregate | None:
    """The aggregate in an open goal directory, or None when missing or damaged (only a cache)."""
    path = f"{goal_dir}/{AGGREGATE_NAME}"
    try:
        agg = parse_model(path, SpendAggregate, read_bytes_at(dir_fd, AGGREGATE_NAME, path))
    except FileNotFoundError:
        return None
    except CorruptFileError as e:
        log.warning("quota_aggregate_damaged", goal_id=goal_id, problem=e.problem)
        return None
    if agg.goal_id != goal_id:
        log.warning("quota_aggregate_damaged", goal_id=goal_id, problem="another goal's aggregate")
        return None
    return agg


def covers_prefix(fd: int, agg: SpendAggregate, st: os.stat_result | None = None) -> bool:
    """Whether ``agg`` still describes a prefix of the open ledger (``st``: its fstat, if taken)."""
    st = st if st is not None else os.fstat(fd)
    if st.st_ino != agg.ledger_inode or st.st_size < agg.ledger_offset:
        return False
    if agg.ledger_offset == 0:
        return agg.last_turn_key is None
    key = agg.last_turn_key
    return key is not None and _line_ending_at_has_key(fd, agg.ledger_offset, key)


def _line_ending_at_has_key(fd: int, offset: int, key: str) -> bool:
    """Whether the line whose newline is the byte before ``offset`` carries turn_key ``key``."""
    want = 512  # one pread reads the newline and, usually, the whole line before it
    while True:
        start = max(0, offset - 1 - want)
        chunk = os.pread(fd, offset - start, start)
        if not chunk.endswith(b"\n"):
            return False
        chunk = chunk[:-1]
        newline = chunk.rfind(b"\n")
        if newline >= 0 or start == 0:
            line = chunk[newline + 1 :]
            break
        want *= 4
    # Ledger lines are compact JSON, where a quote inside a string is escaped:
    # the key's member, found as written, is the line's own (parsing costs more).
    if b'"turn_key":' + json.dumps(key).encode() in line:
        return True
    try:
        found = json.loads(line).get("turn_key")
    except (ValueError, AttributeError):
        return False
    return bool(found == key)
