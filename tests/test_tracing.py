"""Turn traces over OTLP/HTTP: a real `loopx turn run-once` exports to a receiver on 127.0.0.1.

The receiver decodes the exporter's protobuf with the OTLP's own message
classes (installed with the ``otel`` extra, as the exporter needs them).
"""

from __future__ import annotations

import gzip
import json
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import structlog

from loopx import tracing
from loopx.registry.goalrecords import HostKind
from loopx.root import Layout
from tests.turnkit import demo_goal, loopx

trace_pb2 = pytest.importorskip(
    "opentelemetry.proto.collector.trace.v1.trace_service_pb2",
    reason="the otel extra is not installed (pip install -e '.[otel]'); .ci/run installs it",
)
pytest.importorskip("opentelemetry.sdk.trace", reason="the otel extra is not installed")

# A host that records the resource attributes it was given, then completes the goal.
HOST = """
import json, os, sys
open(sys.argv[1], "w").write(os.environ.get("OTEL_RESOURCE_ATTRIBUTES", ""))
open(os.environ["LOOPX_RESULT_FILE"], "w").write(json.dumps({"kind": "completed", "summary": "ok"}))
"""


class Receiver:
    """An OTLP/HTTP endpoint on a free loopback port that keeps every span it is sent."""

    def __init__(self) -> None:
        self.spans: list[Any] = []
        self.paths: list[str] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                request = trace_pb2.ExportTraceServiceRequest.FromString(body)
                found = [
                    span
                    for resource in request.resource_spans
                    for scope in resource.scope_spans
                    for span in scope.spans
                ]
                reply = trace_pb2.ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)
                receiver.paths.append(self.path)
                receiver.spans.extend(found)

            def log_message(self, *args: object) -> None:
                del args

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


def attributes(span: Any) -> dict[str, Any]:
    """A span's attributes as a dict of plain values."""
    found: dict[str, Any] = {}
    for item in span.attributes:
        value = item.value
        found[item.key] = getattr(value, value.WhichOneof("value"))
    return found


def wait_for(check: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_a_turn_is_one_trace_with_a_span_per_step(layout: Layout, tmp_path: Path, receiver):
    """The turn span holds claim, quota, host, writeback...; ids and outcomes as attributes."""
    seen = tmp_path / "resource.txt"
    demo_goal(layout, "g1", tmp_path / "work", sys.executable, "-c", HOST, str(seen),
              kind=HostKind.COMMAND)  # fmt: skip
    done = loopx(layout.root, "turn", "run-once", "g1", "--json",
                 OTEL_EXPORTER_OTLP_ENDPOINT=receiver.url, OTEL_SERVICE_NAME="loopx-test")  # fmt: skip
    assert done.returncode == 0, done.stderr
    turn_key = json.loads(done.stdout)["report"]["turn_key"]
    wait_for(lambda: any(s.name == "turn" for s in receiver.spans), 10, "the turn span")
    assert set(receiver.paths) == {"/v1/traces"}
    turn = next(s for s in receiver.spans if s.name == "turn")
    steps = [s for s in receiver.spans if s.name != "turn"]
    assert {s.trace_id for s in receiver.spans} == {turn.trace_id}  # one trace
    assert {s.parent_span_id for s in steps} == {turn.span_id}
    names = [s.name for s in sorted(steps, key=lambda s: s.start_time_unix_nano)]
    assert names == [
        "claim", "leftovers", "workdir", "quota", "account", "host_kind", "journal", "host", "settle",
        "writeback", "unlock_workdir", "release",
    ]  # fmt: skip
    assert attributes(turn) == {
        "loopx.goal_id": "g1",
        "loopx.agent_id": attributes(turn)["loopx.agent_id"],
        "loopx.outcome": "ok",
        "loopx.turn_key": turn_key,
        "loopx.turn_status": "committed",
    }
    host = next(s for s in steps if s.name == "host")
    assert (attributes(host)["loopx.outcome"], attributes(host)["loopx.turn_key"]) == (
        "ok",
        turn_key,
    )
    assert seen.read_text() == f"loopx.goal_id=g1,loopx.turn_key={turn_key}"


@pytest.fixture
def in_process_tracer():
    """The provider a test makes in this process, shut down after it (its export thread goes:
    a later test in this worker may fork)."""
    yield
    for made in tracing._tracers.values():
        if made is not None:
            made[0].shutdown()
    tracing._tracers.clear()


def test_a_spans_ids_are_bound_into_the_structured_logs(monkeypatch, receiver, in_process_tracer):
    """Inside a span, every log event carries its trace_id and span_id, as exported."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
    with tracing.span("turn", {"loopx.goal_id": "g"}):
        bound = structlog.contextvars.get_contextvars()
    tracing.flush()
    wait_for(lambda: receiver.spans, 10, "the span")
    (span,) = receiver.spans
    assert (bound["trace_id"], bound["span_id"]) == (span.trace_id.hex(), span.span_id.hex())
    assert "trace_id" not in structlog.contextvars.get_contextvars()


def test_without_an_endpoint_a_span_is_the_shared_no_op(monkeypatch):
    """No endpoint, or the SDK disabled: one shared context, nothing imported or exported."""
    for name in (*tracing.ENDPOINT_VARS, tracing.DISABLED_VAR):
        monkeypatch.delenv(name, raising=False)
    assert tracing.span("claim") is tracing.span("host")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv(tracing.DISABLED_VAR, "true")
    assert tracing.endpoint() is None
    with tracing.span("claim") as span:
        span.set("loopx.outcome", "ok")


def test_a_hosts_resource_attributes_keep_the_inherited_ones():
    """A host's OTEL_RESOURCE_ATTRIBUTES: what the agent had, then the goal and the turn."""
    assert tracing.resource_attributes("g", "g-000001-1", None) == (
        "loopx.goal_id=g,loopx.turn_key=g-000001-1"
    )
    assert tracing.resource_attributes("g", "k", "team=ops") == (
        "team=ops,loopx.goal_id=g,loopx.turn_key=k"
    )
