"""The warm answers: `loopx status --json` and `loopx quota should-run` without loading the kernel.

Standard library only (with ``loopx.root``, ``loopx.memo`` and the two warm
modules), so the CLI tries them before it imports argparse, pydantic or
structlog. A function here prints a stored memo while it holds and
otherwise misses, having written nothing: ``Root.open(...)`` then computes the
answer and stores the next memo.

The CLI remembers, under its exact command line, which of the two it called and
with what (:func:`remember_answer`, kept by :func:`loopx.memo.remember`); the
next run of the same line makes the same call (:func:`replay_answer`) before
argparse is even imported. The command line is never parsed here: argparse
parsed it the first time, and the same words give the same call.
"""

from __future__ import annotations

import os
from pathlib import Path

from loopx._version import VERSION
from loopx.memo import recall, remember
from loopx.root import Layout, open_root, resolve_root

# Not `from typing import ...`: a warm `loopx status --json` starts without importing it.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import BinaryIO


def _layout(
    path: str | os.PathLike[str] | None,
    registry: str | os.PathLike[str] | None,
    env: Mapping[str, str] | None,
    home: Path | None,
) -> Layout:
    """The root chosen and checked as ``Root.open`` does (RootError otherwise)."""
    resolved = resolve_root(flag=path, registry=registry, env=env, home=home)
    return open_root(resolved, create=False)


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

    The document holds while the status database, the registry, the change
    hints and the fleet's files and processes are as they were and the cache is
    younger than ``ttl_s`` (:mod:`loopx.status.warm`).

    Returns:
        False, having written nothing, when there is no such document.

    Raises:
        RootError: the root is missing, uninitialised, shared or not ours.
    """
    from loopx.status.warm import print_document  # noqa: PLC0415 - a warm quota answer needs none

    return print_document(_layout(path, registry, env, home), ttl_s=ttl_s, out=out)


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

    The output holds while the files the decision read are the same and the
    clock has not reached the instant they would decide otherwise
    (:mod:`loopx.quota.warmanswer`). The clock is read directly: a fresh process has
    no measured clock offset.

    Returns:
        The exit code of the stored decision (0 allowed, 3 not), or None, having
        written nothing, when there is no such output.

    Raises:
        RootError: the root is missing, uninitialised, shared or not ours.
    """
    from loopx.quota.warmanswer import print_decision  # noqa: PLC0415 - a warm status needs none

    layout = _layout(path, registry, env, home)
    return print_decision(layout, goal_id, as_json=as_json, out=out)


def command_key(argv: Sequence[str]) -> str:
    """What a command line's call is remembered under: its words, and this version."""
    return "\0".join((VERSION, *argv))  # another version may parse them otherwise


def remember_answer(argv: Sequence[str], call: str, **arguments: str | float | None) -> bool:
    """Remember that the command line ``argv`` tries a memo with ``call`` (``status`` or ``quota``).

    ``arguments`` are the keyword arguments of :func:`print_status_snapshot`
    or :func:`print_quota_snapshot` (all but ``out``), as argparse gave them.
    Best effort; returns whether it is kept.
    """
    return remember(command_key(argv), {"call": call, "arguments": arguments})


def replay_answer(argv: Sequence[str], *, out: int | BinaryIO) -> int | None:
    """Make the call remembered for ``argv``: the stored answer's exit code, or None (a miss).

    Any doubt is a miss, and so is any error (the full CLI then reports it).
    """
    kept = recall(command_key(argv))
    call, arguments = (None, None) if kept is None else (kept.get("call"), kept.get("arguments"))
    if not (isinstance(call, str) and isinstance(arguments, dict)):
        return None
    try:
        return warm_call(call, arguments, out=out)
    except Exception:  # noqa: BLE001 - a miss: the full CLI decides and reports errors
        return None


def warm_call(call: str, arguments: Mapping[str, object], *, out: int | BinaryIO) -> int | None:
    """:func:`print_status_snapshot` (``status``) or :func:`print_quota_snapshot` (``quota``).

    Returns:
        The stored answer's exit code, or None, having written nothing.

    Raises:
        RootError: as the function called; TypeError: ``arguments`` are not its.
    """
    # The arguments are argparse's, kept as JSON: a wrong one is a TypeError (a miss).
    if call == "status":
        return 0 if print_status_snapshot(**arguments, out=out) else None  # type: ignore[arg-type]
    if call == "quota":
        return print_quota_snapshot(**arguments, out=out)  # type: ignore[arg-type]
    return None


__all__ = [
    "print_quota_snapshot",
    "print_status_snapshot",
    "remember_answer",
    "replay_answer",
    "warm_call",
]
