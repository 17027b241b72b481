"""`python -m loopx`: the same as the `loopx` console script."""

from loopx.cli import run

run()
