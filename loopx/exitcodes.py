"""Named exit codes of the `loopx` command; scripts depend on these numbers.

Within one command no two outcomes share a code, so a CI script can branch on
it: a usage error (2) is never mistaken for "a human is needed" (4).
"""

from __future__ import annotations

TYPE_CHECKING = False  # not `typing`: a warm `quota should-run` must not pay for its import
if TYPE_CHECKING:
    from typing import Final
del TYPE_CHECKING  # every upper-case name here is an exit code

OK: Final = 0  # the command did what was asked; for a batch run: every goal completed
FAILURE: Final = 1  # an operation failed (bad file, lock timeout, a goal failed)
USAGE: Final = 2  # the command line or an argument is malformed
NOT_ALLOWED: Final = 3  # `quota should-run`, `turn run-once`: the goal may not run now
NEEDS_HUMAN: Final = 4  # `batch run`, `supervisor run --until-idle`: none failed, a human must act
INTERRUPTED: Final = 130  # Ctrl-C (SIGINT) ended the command, or an agent's second signal: 128 + 2
FAULT: Final = 137  # a `LOOPX_FAULT` point was reached: what a SIGKILLed process reports (128 + 9)
