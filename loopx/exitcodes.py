"""Named exit codes of the `loopx` command; scripts depend on these numbers."""

from typing import Final

OK: Final = 0  # the command did what was asked; for a batch run: every goal completed
FAILURE: Final = 1  # an operation failed (bad file, lock timeout, a goal failed)
USAGE: Final = 2  # the command line or an argument is malformed
NEEDS_HUMAN: Final = 2  # batch/until-idle: no failure, but some goal waits for a human
NOT_ALLOWED: Final = 3  # `quota should-run`: the goal may not run now
