"""``python -m loopx.agents.canary --root ROOT [KIND ...]``: probe host kinds, record the verdicts.

The supervisor starts this when it starts (every kind with a CLI) and when a
CLI's binary changes (that kind); it exits 0 once every verdict is recorded,
whatever they are, and 1 when the root cannot record them.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from types import FrameType

from loopx import exitcodes, process
from loopx.agents.canary import check, probed_kinds
from loopx.errors import LoopxError
from loopx.log import configure_logging
from loopx.root import Layout


def _stop(signum: int, _frame: FrameType | None) -> None:
    # Unwinding ends the CLI a probe runs (subprocess.run kills its child on the way out).
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    """Probe the kinds named (default: every installed kind with a CLI)."""
    parser = argparse.ArgumentParser(prog="python -m loopx.agents.canary")
    parser.add_argument("--root", required=True, type=Path)
    parser.add_argument("kinds", nargs="*", metavar="KIND")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _stop)
    process.set_parent_death_signal()  # a supervisor killed outright leaves no probe behind
    configure_logging()
    try:
        check(Layout.at(args.root), args.kinds or probed_kinds())
    except LoopxError as e:
        print(f"loopx canary: {e.message}", file=sys.stderr)
        return exitcodes.FAILURE
    return exitcodes.OK


if __name__ == "__main__":
    sys.exit(main())
