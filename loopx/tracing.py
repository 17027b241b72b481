"""Turn traces over OTLP/HTTP, when an endpoint is configured (docs/operations.md, "Traces").

With ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``)
set in a process that runs turns, each turn is one trace: a ``turn`` span
with one child span per row of the turn table that runs (``claim``,
``quota``, ``host``, ``check``, ``writeback``, ...), each carrying the goal,
the turn and its outcome as attributes, exported in batches by
opentelemetry-sdk's OTLP/HTTP exporter (the ``otel`` extra), which reads the
other ``OTEL_*`` variables itself. While a span is open its ids are bound into
the structured logs (``trace_id``, ``span_id``).

Without an endpoint (or with ``OTEL_SDK_DISABLED=true``) nothing is imported
and :func:`span` returns one shared no-op context: a turn pays a dictionary
lookup per step. A configured endpoint without the SDK installed is logged
once and ignored: telemetry never fails a turn.
"""

from __future__ import annotations

import contextlib
import importlib
import os
from collections.abc import Iterator, Mapping
from typing import Any, Final, Protocol

import structlog

from loopx.log import get_logger

ENDPOINT_VARS: Final = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
DISABLED_VAR: Final = "OTEL_SDK_DISABLED"
RESOURCE_VAR: Final = "OTEL_RESOURCE_ATTRIBUTES"  # also handed to hosts, naming goal and turn
SERVICE_NAME: Final = "loopx"

Attribute = str | int | float | bool

log = get_logger(__name__)


class Marks(Protocol):
    """What a hook may do to its open span: add an attribute."""

    def set(self, name: str, value: Attribute) -> None:
        """Set attribute ``name`` (a no-op when traces are off)."""


class _Off:
    def set(self, name: str, value: Attribute) -> None:
        del name, value


_OFF: Final = _Off()
_NO_SPAN: Final = contextlib.nullcontext(_OFF)  # reusable: entering it twice is fine
# One provider and tracer per process and endpoint (None: the SDK is missing); a provider
# exports what is left at the process's exit.
_tracers: dict[str, tuple[Any, Any] | None] = {}


def endpoint(env: Mapping[str, str] = os.environ) -> str | None:
    """The OTLP endpoint traces go to, or None when traces are off."""
    if env.get(DISABLED_VAR, "").strip().lower() == "true":
        return None
    return next((env[name] for name in ENDPOINT_VARS if env.get(name)), None)


def _tracer() -> Any:  # noqa: ANN401 - an opentelemetry Tracer: the SDK is an optional extra
    where = endpoint()
    if where is None:
        return None
    if where not in _tracers:
        _tracers[where] = _make_tracer(where)
    made = _tracers[where]
    return made[1] if made is not None else None


def flush(timeout_s: float = 5.0) -> None:
    """Export the spans this process has not sent yet (at most ``timeout_s`` per endpoint)."""
    for made in _tracers.values():
        if made is not None:
            made[0].force_flush(int(timeout_s * 1000))


def _make_tracer(where: str) -> tuple[Any, Any] | None:
    try:
        sdk = importlib.import_module("opentelemetry.sdk.trace")
        export = importlib.import_module("opentelemetry.sdk.trace.export")
        resources = importlib.import_module("opentelemetry.sdk.resources")
        otlp = importlib.import_module("opentelemetry.exporter.otlp.proto.http.trace_exporter")
    except ImportError as e:
        log.warning(
            "otel_sdk_missing",
            endpoint=where,
            error=str(e),
            hint="install the otel extra (pip install 'loopx[otel]') to export traces",
        )
        return None
    # Resource.create adds OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES of this process.
    resource = resources.Resource.create({"service.name": SERVICE_NAME})
    provider = sdk.TracerProvider(resource=resource)
    provider.add_span_processor(export.BatchSpanProcessor(otlp.OTLPSpanExporter()))
    return provider, provider.get_tracer("loopx")


class _Live:
    __slots__ = ("_span",)

    def __init__(self, span: Any) -> None:  # noqa: ANN401 - an opentelemetry Span
        self._span = span

    def set(self, name: str, value: Attribute) -> None:
        self._span.set_attribute(name, value)


@contextlib.contextmanager
def _live_span(tracer: Any, name: str, attributes: Mapping[str, Attribute]) -> Iterator[Marks]:  # noqa: ANN401 - see _tracer
    with tracer.start_as_current_span(name, attributes=dict(attributes)) as opened:
        ids = opened.get_span_context()
        with structlog.contextvars.bound_contextvars(
            trace_id=f"{ids.trace_id:032x}", span_id=f"{ids.span_id:016x}"
        ):
            yield _Live(opened)


def span(
    name: str, attributes: Mapping[str, Attribute] | None = None
) -> contextlib.AbstractContextManager[Marks]:
    """A span ``name`` (a child of the open one) around a block; a shared no-op when off.

    An exception leaving the block is recorded on the span, which is marked
    as an error, and raised on.
    """
    tracer = _tracer()
    if tracer is None:
        return _NO_SPAN
    return _live_span(tracer, name, attributes or {})


def resource_attributes(goal_id: str, turn_key: str, inherited: str | None) -> str:
    """``OTEL_RESOURCE_ATTRIBUTES`` for a host: ``inherited`` plus the goal and the turn. Pure.

    A host CLI that exports its own telemetry (Claude Code, Codex) then
    lands in the trace store under the same goal and turn as LoopX's spans.
    """
    ours = f"loopx.goal_id={goal_id},loopx.turn_key={turn_key}"
    return f"{inherited},{ours}" if inherited else ours
