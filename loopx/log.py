"""structlog, configured once: JSON lines on stderr, console rendering on a TTY."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from typing import TextIO

import structlog

from loopx.secrets import RedactSecrets, secret_values

_configured = False


class _Tolerant:
    """A log stream whose writes never raise for a full or failing disk.

    The supervisor's and agents' stderr is often a file under the root: when
    that disk fills, a log line must be lost, not the process (issue 18).
    """

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError:
            return 0

    def flush(self) -> None:
        with contextlib.suppress(OSError):
            self._stream.flush()


def _stderr_logger(*_args: object) -> structlog.PrintLogger:
    # Resolve sys.stderr per logger, not once: a test runner or a daemonising
    # parent may replace (and close) the stream after configuration.
    return structlog.PrintLogger(_Tolerant(sys.stderr))  # type: ignore[arg-type]


def configure_logging(
    *, stream: TextIO | None = None, level: str = "info", force: bool = False
) -> None:
    """Configure structlog for this process (idempotent unless ``force``).

    Context bound with ``structlog.contextvars.bind_contextvars`` (goal_id,
    agent_id, turn_key, epoch) is merged into every event.
    """
    global _configured  # noqa: PLW0603 - configured once per process by design
    if _configured and not force:
        return
    out = stream if stream is not None else sys.stderr
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
            RedactSecrets(secret_values(os.environ)),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping()[level.upper()]
        ),
        logger_factory=structlog.PrintLoggerFactory(file=_Tolerant(out))  # type: ignore[arg-type]
        if stream is not None
        else _stderr_logger,
        cache_logger_on_first_use=False,
    )
    _configured = True
