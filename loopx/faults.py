"""Fault points: with ``LOOPX_FAULT=<point>`` the process dies right there.

Crash tests set the variable in a child process and check that recovery
converges to the undisturbed result. Without the variable a point is one
dictionary lookup.
"""

from __future__ import annotations

import os
import sys
from typing import Final

from loopx import environ, exitcodes

FAULT_EXIT_CODE: Final = exitcodes.FAULT


def fault_point(name: str) -> None:
    """Exit the process at once with code 137 if ``LOOPX_FAULT`` names this point.

    ``LOOPX_FAULT`` may list several points separated by commas.
    """
    wanted = os.environ.get(environ.FAULT)
    if wanted and name in wanted.split(","):
        sys.stderr.write(f"loopx: fault point {name} reached, exiting 137\n")
        sys.stderr.flush()
        os._exit(FAULT_EXIT_CODE)
