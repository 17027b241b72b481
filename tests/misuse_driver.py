"""Run many `loopx` command lines in one process and report how each ended, as JSON.

`tests/test_cli_misuse.py` starts this as a real subprocess, so the CLI's whole
entry point (`loopx.cli._app.main`) runs against real files, while Python and
LoopX are imported once instead of once per command line (hundreds of them).
Started as root, it drops to ``nobody`` after importing, so that a root without
write permission is really unwritable for it.

stdin: ``{"uid": int | null, "cases": [[arg, ...], ...]}``; stdout: one result
per case: ``{"argv", "code", "stdout", "stderr", "crash"}``, where ``crash`` is
the traceback of an exception that escaped ``main`` (never expected).
"""

from __future__ import annotations

import codecs
import contextlib
import importlib
import io
import json
import os
import pkgutil
import signal
import sys
import tempfile
import time
import traceback
from types import FrameType
from typing import Any

CASE_TIMEOUT_S = 20  # a case that has not failed by then is running for real: a bug


class CaseHung(BaseException):
    """Raised by SIGALRM when a case outlives CASE_TIMEOUT_S (BaseException: no net catches it)."""


def _on_alarm(_signum: int, _frame: FrameType | None) -> None:
    raise CaseHung


def _preload() -> None:
    """Import every LoopX module (and what it imports) before the privileges go."""
    import loopx

    codecs.lookup("unicode_escape")  # codecs load lazily too (softlock reads /proc/mounts with it)

    for info in pkgutil.walk_packages(loopx.__path__, "loopx."):
        if "ray" in info.name or info.name.endswith("__main__"):
            continue
        with contextlib.suppress(Exception):
            importlib.import_module(info.name)


def run_case(argv: list[str]) -> dict[str, Any]:
    """Run one command line through the CLI's entry point; capture how it ended."""
    from loopx.cli._app import main
    from loopx.log import configure_logging

    started = time.monotonic()
    out, err = io.StringIO(), io.StringIO()
    code: int | str
    crash = None
    configure_logging(stream=err, level="warning", force=True)
    signal.alarm(CASE_TIMEOUT_S)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            sys.stdin = io.StringIO("")
            code = main(argv)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except CaseHung:
        code, crash = "hung", f"still running after {CASE_TIMEOUT_S}s"
    except BaseException:  # noqa: BLE001 - the point: anything that escapes main is a bug
        code, crash = "crash", traceback.format_exc()
    finally:
        signal.alarm(0)
    return {
        "argv": argv,
        "code": code,
        "stdout": out.getvalue(),
        "stderr": err.getvalue(),
        "crash": crash,
        "seconds": round(time.monotonic() - started, 3),
    }


def main() -> None:
    """Read the cases, drop privileges if asked, run them, print the results."""
    request = json.load(sys.stdin)
    _preload()
    signal.signal(signal.SIGALRM, _on_alarm)
    uid = request.get("uid")
    if uid is not None and os.getuid() == 0:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
        # nobody's own cache, as a real user has (the suite's XDG_CACHE_HOME is root's).
        os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="loopx-misuse-cache-")
    os.environ.pop("LOOPX_ROOT", None)
    results = [run_case(list(argv)) for argv in request["cases"]]
    sys.__stdout__.write(json.dumps(results))  # type: ignore[union-attr]


if __name__ == "__main__":
    main()
