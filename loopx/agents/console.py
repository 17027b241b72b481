"""What an agent shows a person: a line per claim, the host's live output, a line per outcome.

An agent's stdout is its tmux window (``--visible tmux``) or its
``logs/agent-<n>.log`` (headless), so these lines are what an operator reads
while the fleet works. The host's output is shown as it arrives, bounded per
turn and with the values of secret-named environment variables redacted; the
whole output stays in the turn's run log (``goals/<id>/runs/<seq>.md``).

The lines are a view: a write the stream refuses (the log file's disk is
full) loses the line, never the turn. A refused write raised inside the
host's output loop killed a finished host before its outcome was recorded,
and recovery ran it again.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Final, TextIO

from loopx.log import TolerantStream
from loopx.model import utcnow
from loopx.registry.goalrecords import Goal
from loopx.secrets import redact_text

MAX_LINES_PER_TURN: Final = 200  # a chatty host must not bury the outcome lines
MAX_LINE_CHARS: Final = 400
OBJECTIVE_CHARS: Final = 60


def _clock(at: datetime) -> str:
    return at.strftime("%H:%M:%S")


def _when(at: datetime | None, now: datetime) -> str:
    if at is None or at <= now:
        return "now"
    span = (at - now).total_seconds()
    day = "" if at.date() == now.date() else at.strftime("%Y-%m-%d ")
    return f"{day}{_clock(at)} (in {span:.0f}s)"


# Outcomes after which the goal does not run again by itself: "next eligible now" was false.
_NO_NEXT_TURN = {"completed": "done", "needs_human": "waits for a human (loopx gate resolve)"}


def _next(outcome: str, at: datetime | None, now: datetime) -> str:
    """What comes next for the goal after a turn of ``outcome``. Pure."""
    return _NO_NEXT_TURN.get(outcome) or f"next eligible {_when(at, now)}"


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError, OSError):
        return False


def _json_line(agent_id: str, line: str, now: datetime) -> str:
    """A console line as a log event, with the goal and turn bound in the context."""
    import structlog  # noqa: PLC0415 - the agent has it loaded; the console's tests may not

    context = {
        k: v
        for k, v in structlog.contextvars.get_contextvars().items()
        if k in {"goal_id", "turn_key", "epoch"}
    }
    doc = {
        "agent_id": agent_id,
        **context,
        "line": line.strip(),
        "event": "console",
        "level": "info",
        "timestamp": now.isoformat().replace("+00:00", "Z"),
    }
    return json.dumps(doc, ensure_ascii=False)


class AgentConsole:
    """Readable per-turn lines on one stream; called from the agent's turn (one thread)."""

    def __init__(
        self,
        agent_id: str,
        stream: TextIO,
        secrets: Iterable[str],
        *,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.agent_id = agent_id
        self.stream = TolerantStream(stream)
        # Not a terminal (a log file under the root): one JSON object per line, like the
        # structlog events beside it, so `jq` reads the whole file.
        self.as_json = not _isatty(stream)
        self.secrets = list(secrets)
        self.clock = clock
        self._lock = threading.Lock()
        self._partial: dict[str, bytes] = {}
        self._shown = 0
        self._hidden = 0
        self._where = ""

    def _write(self, line: str) -> None:
        if self.as_json:
            line = _json_line(self.agent_id, line, self.clock())
        with self._lock:
            self.stream.write(line + "\n")
            self.stream.flush()

    def started(self, goal: Goal, *, seq: int, attempt: int = 1) -> None:
        """A claimed turn's host is about to run."""
        self._partial.clear()
        self._shown = self._hidden = 0
        self._where = f"goals/{goal.id}/runs/{seq}.md"
        again = f", attempt {attempt}" if attempt > 1 else ""
        objective = goal.objective.splitlines()[0][:OBJECTIVE_CHARS] if goal.objective else ""
        self._write(
            f"{_clock(self.clock())} {self.agent_id} claimed {goal.id}: turn {seq}"
            f"{again} ({goal.host.kind} host) - {objective}"
        )

    def output(self, stream: str, chunk: bytes) -> None:
        """A chunk of the host's stdout or stderr: shown line by line."""
        data = self._partial.pop(stream, b"") + chunk
        *lines, rest = data.split(b"\n")
        if rest:
            self._partial[stream] = rest
        for raw in lines:
            self._line(stream, raw)

    def _line(self, stream: str, raw: bytes) -> None:
        if self._shown >= MAX_LINES_PER_TURN:
            self._hidden += 1
            return
        self._shown += 1
        text = redact_text(raw.decode("utf-8", errors="replace").rstrip("\r"), self.secrets)
        if len(text) > MAX_LINE_CHARS:
            text = text[:MAX_LINE_CHARS] + " ..."
        self._write(f"  {'!' if stream == 'stderr' else '|'} {text}")

    def finished(
        self,
        *,
        goal_id: str,
        seq: int,
        outcome: str,
        detail: str = "",
        wall_s: float,
        cpu_s: float,
        tokens: int,
        cost_usd: float,
        next_eligible_at: datetime | None,
    ) -> None:
        """The turn's one-line outcome (after the rest of its output); ``detail`` goes last."""
        for stream, rest in list(self._partial.items()):
            self._line(stream, rest)
        self._partial.clear()
        if self._hidden:
            self._write(f"  ... {self._hidden} more lines of host output in {self._where}")
        now = self.clock()
        spend = f"CPU {cpu_s:.2f}s"
        if tokens:
            spend += f", {tokens:,} tokens"
        if cost_usd:
            spend += f", ${cost_usd:.4f}"
        self._write(
            f"{_clock(now)} {self.agent_id} {goal_id} turn {seq}: {outcome} in {wall_s:.1f}s, "
            f"{spend}; {_next(outcome, next_eligible_at, now)}"
            + (f" - {redact_text(detail, self.secrets)}" if detail else "")
        )
