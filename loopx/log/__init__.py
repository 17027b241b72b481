"""structlog, configured once: JSON lines on stderr, console rendering on a TTY.

structlog is imported on the first event, not at start: importing it costs
more than the rest of a quick command such as ``loopx quota should-run``. The
files the logs go to rotate by size (:mod:`loopx.log.rotation`).
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TextIO, cast

from loopx.log.rotation import StdioRotation
from loopx.secrets import RedactSecrets, secret_values

if TYPE_CHECKING:
    import structlog
    from structlog.typing import FilteringBoundLogger

_configured = False
_pending: Callable[[], None] | None = None  # a configuration not applied yet (no event so far)
_pending_level = 0  # that configuration's level: events below it need no structlog at all
_LEVELS = {"debug": 10, "info": 20, "warning": 30, "warn": 30, "error": 40, "exception": 40}
_LEVELS |= {"critical": 50, "fatal": 50}
_rotation: StdioRotation | None = None  # set by configure_logging when stderr is LOOPX_LOG_FILE


def _dropped(*_args: object, **_kw: object) -> None:
    return None


class _DeferredLogger:
    """Stands for ``structlog.get_logger(name)`` until its first use."""

    __slots__ = ("_logger", "_name")

    def __init__(self, name: str) -> None:
        self._name = name
        self._logger: Any = None

    def __getattr__(self, method: str) -> Any:  # noqa: ANN401 - whatever structlog's logger has
        if self._logger is None:
            # A debug event under a warning-level configuration is filtered anyway; skipping
            # it here keeps structlog (and rich) out of a command that never logs for real.
            if _pending is not None and _LEVELS.get(method, 100) < _pending_level:
                return _dropped
            import structlog  # noqa: PLC0415 - deferred on purpose (see the module docstring)

            if not _configured and not structlog.is_configured():
                # A library user who configured nothing: structlog's own default prints
                # every level, debug included, on stdout. Warnings on stderr.
                configure_logging(level="warning")
            _apply_pending()
            self._logger = structlog.get_logger(self._name)
        return getattr(self._logger, method)


def get_logger(name: str) -> FilteringBoundLogger:
    """The module logger ``name``; structlog is imported when it first logs."""
    return cast("FilteringBoundLogger", _DeferredLogger(name))


class TolerantStream:
    """A text stream whose writes never raise for a full or failing disk.

    The supervisor's and agents' stderr and stdout are often files under the
    root: when that disk fills, a log or console line must be lost, not the
    process or the turn that wrote it.
    """

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._line_start = True  # rotate only between lines (print writes "\n" on its own)

    def write(self, text: str) -> int:
        """Write ``text``; 0 when the stream refused it. Rotates this process's log file first."""
        if _rotation is not None and self._line_start and text:
            with contextlib.suppress(OSError, ValueError):
                self._stream.flush()  # what is buffered belongs to the file before the rotation
            _rotation.check()
        if text:
            self._line_start = text.endswith("\n")
        try:
            return self._stream.write(text)
        except OSError:
            return 0

    def flush(self) -> None:
        """Flush what the stream takes; a refusal keeps the rest buffered or lost."""
        with contextlib.suppress(OSError):
            self._stream.flush()


def _stderr_logger(*_args: object) -> structlog.PrintLogger:
    # Resolve sys.stderr per logger, not once: a test runner or a daemonising
    # parent may replace (and close) the stream after configuration.
    import structlog  # noqa: PLC0415 - deferred (see the module docstring)

    return structlog.PrintLogger(TolerantStream(sys.stderr))  # type: ignore[arg-type]


def configure_logging(
    *, stream: TextIO | None = None, level: str = "info", force: bool = False
) -> None:
    """Configure structlog for this process (idempotent unless ``force``).

    Takes effect at the first event (or now, if structlog is already in use);
    the stream, level and secret values are the ones of this call.
    Context bound with ``structlog.contextvars.bind_contextvars`` (goal_id,
    agent_id, turn_key, epoch) is merged into every event.
    """
    global _configured, _pending, _pending_level, _rotation  # noqa: PLW0603 - once per process by design
    if _configured and not force:
        return
    _configured = True
    _rotation = StdioRotation.from_env(os.environ)
    _pending_level = _LEVELS.get(level.lower(), 0)
    out = stream if stream is not None else sys.stderr
    secrets = secret_values(os.environ)
    _pending = functools.partial(_apply, stream=stream, out=out, level=level, secrets=secrets)
    if "structlog" in sys.modules:
        _apply_pending()


def _apply_pending() -> None:
    global _pending
    if _pending is not None:
        apply, _pending = _pending, None
        apply()


def _apply(*, stream: TextIO | None, out: TextIO, level: str, secrets: list[str]) -> None:
    import logging  # noqa: PLC0415 - deferred with structlog

    import structlog  # noqa: PLC0415 - deferred (see the module docstring)

    renderer: structlog.typing.Processor
    if out.isatty():
        renderer = structlog.dev.ConsoleRenderer(colors=True)
    else:
        renderer = structlog.processors.JSONRenderer()
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            RedactSecrets(secrets),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping()[level.upper()]
        ),
        logger_factory=structlog.PrintLoggerFactory(file=TolerantStream(out))  # type: ignore[arg-type]
        if stream is not None
        else _stderr_logger,
        cache_logger_on_first_use=False,
    )
