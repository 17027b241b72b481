"""A tmux window's output as JSON lines in the agent's log: ``pipe-pane`` runs this module.

What a window shows is a terminal's stream (ANSI colours, CR LF line ends);
the log must hold one JSON object per line like every log under the root
(so `loopx logs` and `jq` read it whole), and rotate by size like them. Each line becomes
``{"timestamp", "level": "info", "event": "window_line", "agent_id", "line"}``,
with the terminal's escape sequences and carriage returns removed.

A turn's lines carry its goal, so that `loopx logs GOAL` finds them as it does in
a headless agent's log: the window shows the agent console's lines
(:mod:`loopx.agents.console`), where a turn starts with ``HH:MM:SS AGENT claimed
GOAL: turn SEQ ...`` and ends with ``HH:MM:SS AGENT GOAL turn SEQ: OUTCOME ...``;
every line from the first to the last, the host's output between them included,
gets ``goal_id`` and ``seq``.

Usage: ``python -P -m loopx.supervisor.windowlog LOG_PATH AGENT_ID`` (stdin: the pane).
"""

from __future__ import annotations

import json
import re
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO, Final

from loopx.log.rotation import RotatingFile

# CSI (colours, cursor moves), OSC (titles, ended by BEL or ST), and single-character escapes.
_ESCAPES: Final = re.compile(
    rb"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-_]"
)


# The agent console's first and last line of a turn (a test writes them with AgentConsole).
_GOAL: Final = r"(?P<goal>[A-Za-z0-9][A-Za-z0-9._-]{0,63})"
_CLAIMED: Final = re.compile(
    rf"^\d\d:\d\d:\d\d (?P<agent>\S+) claimed {_GOAL}: turn (?P<seq>\d+)\b"
)
_FINISHED: Final = re.compile(rf"^\d\d:\d\d:\d\d (?P<agent>\S+) {_GOAL} turn (?P<seq>\d+): ")


class TurnTracker:
    """Which goal's turn the window's lines belong to, from the console's turn lines."""

    def __init__(self, agent_id: str) -> None:
        self.agent_id = agent_id
        self.turn: tuple[str, int] | None = None

    def place(self, line: str) -> tuple[str, int] | None:
        """The goal and turn ``line`` belongs to (None between turns); moves on at the bounds."""
        claimed = _CLAIMED.match(line)
        if claimed is not None and claimed["agent"] == self.agent_id:
            self.turn = (claimed["goal"], int(claimed["seq"]))
            return self.turn
        turn = self.turn
        finished = _FINISHED.match(line)
        if finished is not None and finished["agent"] == self.agent_id:
            turn = (finished["goal"], int(finished["seq"]))
            self.turn = None
        return turn


def clean(raw: bytes) -> str:
    """One terminal line as plain text: no escape sequences, no CR, no other control bytes."""
    text = _ESCAPES.sub(b"", raw).replace(b"\r", b"").decode(errors="replace")
    return "".join(c for c in text if c == "\t" or c >= " ").rstrip()


def record(agent_id: str, line: str, now: datetime, turn: tuple[str, int] | None = None) -> bytes:
    """The JSON line for one window line, with its goal and turn when it is a turn's. Pure."""
    doc: dict[str, object] = {
        "timestamp": now.isoformat().replace("+00:00", "Z"),
        "level": "info",
        "event": "window_line",
        "agent_id": agent_id,
        "line": line,
    }
    if turn is not None:
        doc["goal_id"], doc["seq"] = turn
    return json.dumps(doc, ensure_ascii=False).encode() + b"\n"


def pump(source: BinaryIO, out: RotatingFile, agent_id: str) -> None:
    """Copy ``source`` to ``out`` line by line until end of file."""
    tracker = TurnTracker(agent_id)
    pending = b""
    while chunk := source.read1(65536) if hasattr(source, "read1") else source.read(65536):
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for raw in lines:
            text = clean(raw)
            if text:
                out.write(record(agent_id, text, datetime.now(UTC), tracker.place(text)))
    if text := clean(pending):
        out.write(record(agent_id, text, datetime.now(UTC), tracker.place(text)))


def main(argv: list[str]) -> int:
    """Entry point of ``pipe-pane``."""
    path, agent_id = Path(argv[0]), argv[1]
    out = RotatingFile(path)
    try:
        pump(sys.stdin.buffer, out, agent_id)
    finally:
        out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
