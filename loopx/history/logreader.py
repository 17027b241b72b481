"""Read what happened: the agents' and supervisor's logs and a goal's turns, across rotation.

``loopx logs`` and ``root.logs`` are built on :func:`read` and :func:`follow`.
Every log under ``logs/`` holds one JSON object per line (loopx.log,
loopx.agents.console, loopx.supervisor.windowlog); a line that is not one (a
log written by an older LoopX, a crash's traceback) is kept as an entry with
event ``text``, never dropped. A goal's turns come from its history
(``goals/<id>/history.jsonl``), each with the run log that holds it whole.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from loopx.errors import UsageError
from loopx.log.rotation import KEEP, rotated
from loopx.model import Record
from loopx.root import Layout

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


class LogEntry(Record):
    """One log line or one turn (`loopx logs --json` prints one per line; ``log-entry``)."""

    schema_version: Literal[1] = 1
    source: str  # the file, relative to the root, without its rotation suffix
    timestamp: str | None = None
    level: str | None = None
    event: str  # the structlog event, `console`, `window_line`, `turn`, or `text`
    goal_id: str | None = None
    turn_key: str | None = None
    agent_id: str | None = None
    fields: dict[str, Any] = Field(default_factory=dict)  # the rest of the line


def parse_duration(text: str) -> timedelta:
    """``30s``, ``10m``, ``2h``, ``1d`` as a duration.

    Raises:
        UsageError: not such a duration.
    """
    match = _DURATION.match(text.strip())
    if match is None:
        raise UsageError(
            f"--since {text!r} is not a duration", hint="write it as 30s, 10m, 2h or 1d"
        )
    return timedelta(seconds=float(match.group(1)) * _UNIT_S[match.group(2)])


def log_paths(layout: Layout, *, agent: int | None = None, supervisor: bool = False) -> list[Path]:
    """The live log files asked for: one agent's, the supervisor's, else every ``logs/*.log``."""
    logs = layout.logs_dir
    if agent is not None:
        return [logs / f"agent-{agent}.log"]
    names = sorted(p.name for p in logs.glob("*.log")) if logs.is_dir() else []
    if supervisor:
        names = [n for n in names if "supervisor" in n]
    return [logs / n for n in names]


def entry_of(line: bytes, source: str) -> LogEntry | None:
    """One log line as an entry (None for a blank line). Pure."""
    text = line.decode(errors="replace").strip()
    if not text:
        return None
    try:
        doc = json.loads(text)
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        return LogEntry(source=source, event="text", fields={"line": text})
    known = {k: doc.pop(k, None) for k in ("timestamp", "level", "event", "goal_id")}
    known |= {k: doc.pop(k, None) for k in ("turn_key", "agent_id")}
    return LogEntry(
        source=source,
        timestamp=_str(known["timestamp"]),
        level=_str(known["level"]),
        event=_str(known["event"]) or "text",
        goal_id=_str(known["goal_id"]),
        turn_key=_str(known["turn_key"]),
        agent_id=_str(known["agent_id"]),
        fields=doc,
    )


def turn_entries(layout: Layout, goal_id: str) -> list[LogEntry]:
    """A goal's turns, one entry per history line, each naming its run log."""
    path = layout.history_file(goal_id)
    source = str(path.relative_to(layout.root))
    out = []
    for raw in _read_lines(path):
        try:
            fields = json.loads(raw)
        except ValueError:
            continue  # a torn last line
        if not isinstance(fields, dict):
            continue
        fields.pop("goal_id", None)
        at = fields.get("ended_at") or fields.get("started_at") or fields.get("at")
        seq = fields.get("seq")
        if seq is not None:
            runs = layout.goal_dir(goal_id) / "runs" / f"{seq}.md"
            fields["run_log"] = str(runs.relative_to(layout.root))
        out.append(
            LogEntry(
                source=source,
                timestamp=_str(at),
                level="error" if fields.get("status") == "failed" else "info",
                event="turn",
                goal_id=goal_id,
                turn_key=_str(fields.pop("turn_key", None)),
                fields=fields,
            )
        )
    return out


@dataclass(frozen=True, slots=True)
class LogQuery:
    """What `loopx logs` reads."""

    goal_id: str | None = None
    agent: int | None = None
    supervisor: bool = False
    since: datetime | None = None

    def wants(self, entry: LogEntry) -> bool:
        """Whether ``entry`` passes the goal and time filters. Pure."""
        if self.goal_id is not None and entry.goal_id != self.goal_id:
            return False
        return self.since is None or (entry.timestamp is not None and _at(entry) >= self.since)


def read(layout: Layout, query: LogQuery) -> list[LogEntry]:
    """Every entry the query asks for, oldest first, across the rotated files of each log."""
    entries: list[LogEntry] = []
    for path in log_paths(layout, agent=query.agent, supervisor=query.supervisor):
        source = str(path.relative_to(layout.root))
        for part in rotated(path, KEEP):
            entries += [e for raw in _read_lines(part) if (e := entry_of(raw, source))]
    if query.goal_id is not None and query.agent is None and not query.supervisor:
        entries += turn_entries(layout, query.goal_id)
    chosen = [e for e in entries if query.wants(e)]
    # A stable sort: lines without a time keep their place after the one before them.
    return sorted(chosen, key=_at) if all(e.timestamp for e in chosen) else chosen


@dataclass(slots=True)
class _Tail:
    path: Path
    inode: int = -1
    offset: int = 0
    pending: bytes = field(default=b"")


def follow(
    layout: Layout,
    query: LogQuery,
    *,
    stop: Callable[[], bool],
    poll_s: float = 0.25,
) -> Iterator[LogEntry]:
    """What :func:`read` returns, then every new entry as it is written, until ``stop()``.

    A rotation is followed: a live file replaced by a new one is read to its
    end (now ``x.log.1``), then the new file from its start.
    """
    seen = read(layout, query)
    yield from seen
    tails: dict[Path, _Tail] = {}
    for path in log_paths(layout, agent=query.agent, supervisor=query.supervisor):
        tails[path] = _start_tail(path)
    turns = len(turn_entries(layout, query.goal_id)) if query.goal_id and _wants_turns(query) else 0
    while not stop():
        for path in log_paths(layout, agent=query.agent, supervisor=query.supervisor):
            tail = tails.setdefault(path, _Tail(path))
            source = str(path.relative_to(layout.root))
            for raw in _advance(tail):
                entry = entry_of(raw, source)
                if entry is not None and query.wants(entry):
                    yield entry
        if _wants_turns(query) and query.goal_id is not None:
            new = turn_entries(layout, query.goal_id)
            yield from (e for e in new[turns:] if query.wants(e))
            turns = len(new)
        time.sleep(poll_s)  # a poll period, not a synchronisation


def _wants_turns(query: LogQuery) -> bool:
    return query.goal_id is not None and query.agent is None and not query.supervisor


def _start_tail(path: Path) -> _Tail:
    try:
        st = path.stat()
    except OSError:
        return _Tail(path)
    return _Tail(path, inode=st.st_ino, offset=st.st_size)


def _advance(tail: _Tail) -> list[bytes]:
    """New whole lines of ``tail.path`` since the last call, across one rotation."""
    out: list[bytes] = []
    try:
        st = tail.path.stat()
    except OSError:
        return out
    if st.st_ino != tail.inode:
        if tail.inode != -1:  # rotated: finish the old file, now x.log.1
            old = tail.path.with_name(tail.path.name + ".1")
            out += _lines_from(tail, old)
        tail.inode, tail.offset, tail.pending = st.st_ino, 0, b""
    elif st.st_size < tail.offset:  # truncated
        tail.offset, tail.pending = 0, b""
    out += _lines_from(tail, tail.path)
    return out


def _lines_from(tail: _Tail, path: Path) -> list[bytes]:
    try:
        with path.open("rb") as f:
            f.seek(tail.offset)
            data = f.read()
    except OSError:
        return []
    tail.offset += len(data)
    *lines, tail.pending = (tail.pending + data).split(b"\n")
    return lines


def _read_lines(path: Path) -> list[bytes]:
    try:
        return path.read_bytes().split(b"\n")
    except OSError:
        return []


def _str(value: object) -> str | None:
    return None if value is None else str(value)


def _at(entry: LogEntry) -> datetime:
    try:
        at = datetime.fromisoformat(entry.timestamp or "")
    except ValueError:
        return datetime.min.replace(tzinfo=UTC)
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


__all__ = ["LogEntry", "LogQuery", "entry_of", "follow", "log_paths", "parse_duration", "read"]
