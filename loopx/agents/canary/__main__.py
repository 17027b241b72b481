"""``python -m loopx.agents.canary --root ROOT [KIND ...]``: probe host kinds, record the verdicts.

The supervisor starts this when it starts (every kind with a CLI) and when a
CLI's binary changes (that kind); it exits 0 once every verdict is recorded,
whatever they are, and 1 when the root cannot record them.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from loopx import exitcodes
from loopx.agents.canary import check, probed_kinds
from loopx.errors import LoopxError
from loopx.log import configure_logging
from loopx.root import Layout


def main(argv: list[str] | None = None) -> int:
    """Probe the kinds named (default: every installed kind with a CLI)."""
    parser = argparse.ArgumentParser(prog="python -m loopx.agents.canary")
    parser.add_argument("--root", required=True, type=Path)
    parser.add_argument("kinds", nargs="*", metavar="KIND")
    args = parser.parse_args(argv)
    configure_logging()
    try:
        check(Layout.at(args.root), args.kinds or probed_kinds())
    except LoopxError as e:
        print(f"loopx canary: {e.message}", file=sys.stderr)
        return exitcodes.FAILURE
    return exitcodes.OK


if __name__ == "__main__":
    sys.exit(main())
