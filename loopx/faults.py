"""Fault points and injected I/O errors, for crash and resource-fault tests.

* ``LOOPX_FAULT=<point>``: the process dies right there (``os._exit(137)``).
  Crash tests set it in a child process and check that recovery converges to
  the undisturbed result.
* ``LOOPX_FAULT=io:<ERRNO>@<first>[-[<last>]][:<path part>]``: the file
  primitives' writes number ``first`` to ``last`` (counted from 1 in this
  process, among writes whose path contains ``path part``) raise
  ``OSError(ERRNO)`` as a full or failing disk would: ``io:ENOSPC@3`` fails the
  third write, ``io:EIO@1-`` every write, ``io:ENOSPC@2-4:lease.json`` the
  second to fourth write of a lease. :func:`inject_io_errors` does the same
  inside one process.

* ``LOOPX_FAULT=loop:<point>:<ERROR>@<first>[-[<last>]]``: the passes number
  ``first`` to ``last`` of a long-running loop's point (:func:`loop_fault_point`)
  raise ``ERROR``: ``MemoryError``, or an errno name (``OSError``), for the
  resource errors a test cannot make for real (ENOMEM, EIO):
  ``loop:agent:step:MemoryError@1-3``. Points: ``supervisor:slots``,
  ``supervisor:refresh``, ``supervisor:root``, ``supervisor:idle``, ``supervisor:gc``,
  ``agent:step``, ``agent:beat``, ``serve:refresh``.

Entries are separated by commas. Without the variable a point is one
dictionary lookup.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sys
import threading

from loopx import environ, exitcodes
from loopx.errors import UsageError

TYPE_CHECKING = False  # not `typing`: a warm `quota should-run` must not pay for its import
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Final

FAULT_EXIT_CODE: Final = exitcodes.FAULT
FAULT_ENV: Final = environ.FAULT
_IO_PREFIX: Final = "io:"
_LOOP_PREFIX: Final = "loop:"


def fault_point(name: str) -> None:
    """Exit the process at once with code 137 if ``LOOPX_FAULT`` names this point.

    ``LOOPX_FAULT`` may list several points separated by commas.
    """
    wanted = os.environ.get(environ.FAULT)
    if wanted and name in wanted.split(","):
        sys.stderr.write(f"loopx: fault point {name} reached, exiting 137\n")
        sys.stderr.flush()
        os._exit(FAULT_EXIT_CODE)


class IoFault:
    """Writes ``first``..``last`` (None: no end) to paths containing ``path_part`` fail.

    A plain class, not a dataclass: every file write imports this module, and
    ``dataclasses`` costs a warm CLI 10 ms.
    """

    __slots__ = ("code", "first", "last", "path_part")

    def __init__(self, code: int, first: int, last: int | None = None, path_part: str = "") -> None:
        self.code, self.first, self.last, self.path_part = code, first, last, path_part

    def _key(self) -> tuple[int, int, int | None, str]:
        return self.code, self.first, self.last, self.path_part

    def __eq__(self, other: object) -> bool:
        return isinstance(other, IoFault) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return "IoFault(code={}, first={}, last={}, path_part={!r})".format(*self._key())

    def hits(self, n: int) -> bool:
        """Whether the ``n``-th matching write fails. Pure."""
        return n >= self.first and (self.last is None or n <= self.last)


def parse_io_fault(text: str) -> IoFault:
    """Parse ``io:<ERRNO>@<first>[-[<last>]][:<path part>]``. Pure.

    Raises:
        UsageError: the text is not such a spec.

    """
    body = text.removeprefix(_IO_PREFIX)
    try:
        name, _, rest = body.partition("@")
        span, _, path_part = rest.partition(":")
        lo, dash, hi = span.partition("-")
        code = getattr(errno, name)
        first = int(lo)
        last = None if dash and not hi else int(hi) if hi else first
    except (AttributeError, ValueError) as e:
        raise UsageError(
            f"{FAULT_ENV}: {text!r} is not an I/O fault",
            hint="write io:ENOSPC@3, io:EIO@1- or io:ENOSPC@2-4:lease.json",
        ) from e
    return IoFault(code=code, first=first, last=last, path_part=path_part)


class _Injector:
    """The active I/O faults of this process and their write counters."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.source: str | None = None  # the LOOPX_FAULT text the faults were parsed from
        self.from_env: list[IoFault] = []
        self.in_process: list[IoFault] = []
        self.counts: dict[IoFault, int] = {}

    def faults(self) -> list[IoFault]:
        text = os.environ.get(FAULT_ENV)
        if text != self.source:
            self.source = text
            entries = (text or "").split(",")
            self.from_env = [parse_io_fault(e) for e in entries if e.startswith(_IO_PREFIX)]
        return self.from_env + self.in_process


_INJECTOR = _Injector()


def io_fault_point(path: os.PathLike[str] | str) -> None:
    """Raise the injected ``OSError`` if this write to ``path`` is one that must fail.

    Called by the file primitives before each write.

    Raises:
        OSError: an injected fault.

    """
    if not _INJECTOR.in_process and _IO_PREFIX not in os.environ.get(FAULT_ENV, ""):
        return
    where = os.fspath(path)
    with _INJECTOR.lock:
        for fault in _INJECTOR.faults():
            if fault.path_part not in where:
                continue
            n = _INJECTOR.counts.get(fault, 0) + 1
            _INJECTOR.counts[fault] = n
            if fault.hits(n):
                raise OSError(fault.code, f"{os.strerror(fault.code)} (injected)", where)


@contextlib.contextmanager
def inject_io_errors(spec: str) -> Iterator[IoFault]:
    """Inside the block, writes fail as ``spec`` (the ``io:`` syntax) says; counted from 1."""
    fault = parse_io_fault(spec)
    with _INJECTOR.lock:
        _INJECTOR.in_process.append(fault)
        _INJECTOR.counts.pop(fault, None)
    try:
        yield fault
    finally:
        with _INJECTOR.lock:
            _INJECTOR.in_process.remove(fault)
            _INJECTOR.counts.pop(fault, None)


# --- loop faults ---------------------------------------------------------------------------------

_loop_lock = threading.Lock()
_loop_counts: dict[str, int] = {}


def _loop_error(name: str) -> BaseException:
    if name == "MemoryError":
        return MemoryError("out of memory (injected)")
    code = getattr(errno, name, None)
    if not isinstance(code, int):
        raise UsageError(
            f"{FAULT_ENV}: {name!r} is no error a loop fault can raise",
            hint="write MemoryError or an errno name: loop:agent:step:EMFILE@1-3",
        )
    return OSError(code, f"{os.strerror(code)} (injected)")


def loop_fault_point(point: str) -> None:
    """Raise the injected error if this pass of ``point`` is one that must fail.

    Called once per pass of a long-running loop's duty, inside the guard that
    must weather it (``LOOPX_FAULT=loop:<point>:<ERROR>@<first>[-[<last>]]``).

    Raises:
        MemoryError | OSError: an injected fault.
        UsageError: the spec is malformed.

    """
    text = os.environ.get(FAULT_ENV)
    if not text or _LOOP_PREFIX not in text:
        return
    for entry in text.split(","):
        head, _, rest = entry.removeprefix(_LOOP_PREFIX).rpartition(":")
        if not entry.startswith(_LOOP_PREFIX) or head != point:
            continue
        name, _, span = rest.partition("@")
        fault = parse_io_fault(f"io:EIO@{span}")  # the same span syntax
        with _loop_lock:
            n = _loop_counts[entry] = _loop_counts.get(entry, 0) + 1
        if fault.hits(n):
            raise _loop_error(name)
