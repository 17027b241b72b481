"""A tmux window's output as JSON lines in the agent's log: ``pipe-pane`` runs this module.

What a window shows is a terminal's stream (ANSI colours, CR LF line ends);
the log must hold one JSON object per line like every log under the root
(so `loopx logs` and `jq` read it whole), and rotate by size like them. Each line becomes
``{"timestamp", "level": "info", "event": "window_line", "agent_id", "line"}``,
with the terminal's escape sequences and carriage returns removed.

Usage: ``python -P -m loopx.supervisor.windowlog LOG_PATH AGENT_ID`` (stdin: the pane).
"""

from __future__ import annotations

import json
import re
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO, Final

from loopx.logfile import RotatingFile

# CSI (colours, cursor moves), OSC (titles, ended by BEL or ST), and single-character escapes.
_ESCAPES: Final = re.compile(
    rb"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-_]"
)


def clean(raw: bytes) -> str:
    """One terminal line as plain text: no escape sequences, no CR, no other control bytes."""
    text = _ESCAPES.sub(b"", raw).replace(b"\r", b"").decode(errors="replace")
    return "".join(c for c in text if c == "\t" or c >= " ").rstrip()


def record(agent_id: str, line: str, now: datetime) -> bytes:
    """The JSON line for one window line. Pure."""
    doc = {
        "timestamp": now.isoformat().replace("+00:00", "Z"),
        "level": "info",
        "event": "window_line",
        "agent_id": agent_id,
        "line": line,
    }
    return json.dumps(doc, ensure_ascii=False).encode() + b"\n"


def pump(source: BinaryIO, out: RotatingFile, agent_id: str) -> None:
    """Copy ``source`` to ``out`` line by line until end of file."""
    pending = b""
    while chunk := source.read1(65536) if hasattr(source, "read1") else source.read(65536):
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for raw in lines:
            text = clean(raw)
            if text:
                out.write(record(agent_id, text, datetime.now(UTC)))
    if clean(pending):
        out.write(record(agent_id, clean(pending), datetime.now(UTC)))


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
