"""The `loopx` command line: thin over the library."""

from loopx.cli._app import main, run

__all__ = ["main", "run"]
