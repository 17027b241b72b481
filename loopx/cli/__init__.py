"""The `loopx` command line: thin over the library."""

import os
import signal
import sys

# Set by a command whose objects only the operating system needs to free (leave_heap_to_os).
_heap_to_os = False
# Answered by argparse itself, so never remembered (`loopx.api.replay_answer`): not looked up.
_PARSER_OWN = frozenset({"-h", "--help", "--version"})


class _EarlyInterrupt:
    """SIGINT until a command owns it: the KeyboardInterrupt, and a note that it came.

    CPython raises a signal's exception in whichever Python code runs next. When
    that is a weakref callback (importlib's module locks have one, run at every
    import) the interpreter prints "Exception ignored" and goes on: the Ctrl-C
    would be lost, and a server that starts afterwards would serve on. A command
    that installs its own handler through :func:`loopx.process.own_sigint` is
    handed the noted one.
    """

    interrupted = False

    def __call__(self, _signum: int, _frame: object) -> None:
        self.interrupted = True
        raise KeyboardInterrupt


def _note_ctrl_c() -> None:
    """SIGINT to :class:`_EarlyInterrupt`; a dropped KeyboardInterrupt is noted, not printed."""
    signal.signal(signal.SIGINT, _EarlyInterrupt())
    sys.unraisablehook = _unraisable


def _unraisable(unraisable: "sys.UnraisableHookArgs") -> None:
    if not isinstance(unraisable.exc_value, KeyboardInterrupt):
        sys.__unraisablehook__(unraisable)


def run() -> None:
    """Console-script entry: a Ctrl-C while the CLI is still importing exits 130 quietly.

    A warm `status --json` or `quota should-run` is answered before argparse
    (:func:`warm_answer`).
    """
    _note_ctrl_c()
    try:
        argv = sys.argv[1:]
        if argv and _PARSER_OWN.isdisjoint(argv):
            code = warm_answer(argv)
            if code is not None:
                sys.exit(code)
        from loopx.cli._app import main  # noqa: PLC0415 - inside the Ctrl-C guard
    except KeyboardInterrupt:
        print("loopx: interrupted", file=sys.stderr)
        sys.exit(130)
    code = main()
    if _heap_to_os:
        _exit_now(code)
    sys.exit(code)


def warm_answer(argv: list[str]) -> int | None:
    """Print the stored answer this exact command line gave last time while it holds; its exit code.

    The call a warm command made is remembered by the words of its command
    line (``args.warm``, kept by ``_app.main``), so this parses nothing; None
    (nothing written) sends the command through argparse as usual.
    """
    if (sys.stdout.encoding or "").lower().replace("-", "") != "utf8":
        return None  # the stored bytes are UTF-8, as print() writes them on a UTF-8 stdout
    from loopx.api import replay_answer  # noqa: PLC0415 - standard library only

    sys.stdout.flush()
    try:
        out = sys.stdout.fileno()
    except (OSError, ValueError):  # not a file: argparse's path writes through Python
        return None
    return replay_answer(argv, out=out)


def leave_heap_to_os() -> None:
    """Let the console script end the process without freeing its objects one by one.

    For a command that is done and holds a large heap: a cold ``status --json``
    at 10,000 goals spent about 30 ms at exit deallocating its views. Only
    :func:`run` acts on it; :func:`main` called in-process (tests) returns as usual.
    """
    global _heap_to_os  # noqa: PLW0603 - one process, one exit
    _heap_to_os = True


def _exit_now(code: int) -> None:
    """Flush what Python's exit would flush, then end the process at once."""
    import contextlib  # noqa: PLC0415 - imported already by the command that asks for this
    import logging  # noqa: PLC0415 - likewise

    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        # The reader went away (`loopx status --json | head`): nothing more to say, as in main().
        with contextlib.suppress(BrokenPipeError):
            stream.flush()
    os._exit(code)


def main(argv: list[str] | None = None) -> int:
    """Run the `loopx` command line on ``argv``; returns the exit code."""
    from loopx.cli._app import main as app_main  # noqa: PLC0415 - keep import cheap

    return app_main(argv)


__all__ = ["main", "run"]
