"""The fakes print what the real CLIs printed (tests/realhosts/captures/, with their versions)."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from loopx.agents.hosts.diagnosis import Diagnosis, diagnose
from loopx.agents.hosts.gemini import find_json_report
from loopx.agents.hosts.resettime import retry_after_s
from loopx.testing import fake_claude, fake_codex, fake_gemini
from tests.realhosts.conftest import PINNED

CAPTURES = Path(__file__).parent / "realhosts" / "captures"


def capture(name: str) -> dict[str, Any]:
    return json.loads((CAPTURES / f"{name}.json").read_text())


def codex_failure(name: str) -> str:
    events = [json.loads(line) for line in capture(name)["stdout"].splitlines() if line]
    return next(e["error"]["message"] for e in events if e["type"] == "turn.failed")


def claude_result(name: str) -> str:
    return json.loads(capture(name)["stdout"])["result"]


def template(text: str) -> re.Pattern[str]:
    """A fake's message template with ``{...}`` as a wildcard."""
    return re.compile(
        re.escape(text).replace(r"\{when\}", "(?P<when>.+)").replace(r"\{what\}", r"\w+")
    )


def test_captures_name_their_versions():
    """Every capture says which CLI version printed it."""
    versions = {
        (c["cli"], c["version"])
        for c in map(json.loads, map(Path.read_text, CAPTURES.glob("*.json")))
    }
    assert versions == set(PINNED.items())


def test_codex_messages_match():
    """Usage limit, 429, 500 and the reconnect loop: the fake's words are codex 0.171's."""
    limit = template(fake_codex.USAGE_LIMIT).fullmatch(codex_failure("codex-usage_limit"))
    assert limit is not None
    now = datetime(2026, 11, 30, 20, 0, tzinfo=UTC)
    assert retry_after_s(f"try again at {limit['when']}.", now) is not None
    assert codex_failure("codex-429") == fake_codex._failure_message("too_many_requests")
    assert codex_failure("codex-500") == fake_codex._failure_message("server_error")
    assert fake_codex.RECONNECT in capture("codex-unreachable")["stdout"]
    assert fake_codex.MODEL_WARNING.format(model="mock-model") in capture("codex-ok")["stdout"]


def test_codex_stderr_lines_match():
    """The lost-thread line and clap's refusal of `--cd` after `resume`."""
    lost = capture("codex-lost_session")["stderr"]
    assert re.search(r"^Error: thread/resume: thread/resume failed: no rollout found for thread id "
                     r"\S+ \(code -32600\)$", lost, re.MULTILINE)  # fmt: skip
    assert "error: unexpected argument '--cd' found" in capture("codex-resume_cd")["stderr"]
    assert capture("codex-resume_cd")["exit_code"] == 2


@pytest.mark.parametrize("name", ["claude-usage_limit", "claude-weekly_limit"])
def test_claude_limit_wording_matches(name: str):
    """`You've hit your session limit · resets …`: the fake's template, a rate limit, a reset."""
    text = claude_result(name)
    match = template(fake_claude.LIMIT).fullmatch(text)
    assert match is not None, text
    assert diagnose(text) is Diagnosis.RATE_LIMIT
    assert retry_after_s(text, datetime(2026, 11, 30, 20, 0, tzinfo=UTC)) is not None


def test_claude_messages_match():
    """Connection refused, 429 and the lost session: the fake's words are Claude Code 2.1.197's."""
    assert claude_result("claude-unreachable") == fake_claude.UNREACHABLE
    assert claude_result("claude-429").startswith(fake_claude.RATE_LIMITED.rsplit(" \u00b7 ", 1)[0])
    assert capture("claude-lost_session")["stderr"].startswith(
        "No conversation found with session ID: "
    )


def test_claude_server_error_matches():
    """`API Error: 500 <the server's message>. This is a server-side issue, ...`: a server error."""
    text = claude_result("claude-500")
    assert json.loads(capture("claude-500")["stdout"])["api_error_status"] == 500
    assert text.startswith("API Error: 500 ")
    tail = "This is a server-side issue, usually temporary \u2014 try again in a moment."
    assert tail in text
    assert tail in fake_claude.SERVER_ERROR
    assert diagnose(text) is Diagnosis.SERVER_ERROR


def gemini_report(name: str) -> dict[str, Any]:
    """The JSON report of a gemini capture: on stdout on success, after the trace on stderr."""
    record = capture(name)
    report = find_json_report(record["stdout"]) or find_json_report(record["stderr"])
    assert report is not None, record
    return report


@pytest.mark.parametrize(
    ("name", "code", "exit_code"),
    [("gemini-401", 401, 145), ("gemini-429", 429, 173), ("gemini-usage_limit", 429, 173),
     ("gemini-500", 500, 244), ("gemini-unreachable", 1, 1)],
)  # fmt: skip
def test_gemini_error_reports_match(name: str, code: int, exit_code: int):
    """Gemini CLI 0.61 prints its error report on stderr, exit code = HTTP status mod 256."""
    report = gemini_report(name)
    assert report["error"]["code"] == code
    assert capture(name)["exit_code"] == exit_code
    assert capture(name)["stdout"] == ""


def test_gemini_messages_match():
    """The fake's texts are Gemini CLI 0.61's (the mock's model name and server message aside)."""
    assert gemini_report("gemini-usage_limit")["error"]["message"] == fake_gemini.DAILY_QUOTA
    assert gemini_report("gemini-unreachable")["error"]["message"] == fake_gemini.UNREACHABLE
    limit = gemini_report("gemini-429")["error"]["message"]
    assert limit == fake_gemini.RATE_LIMIT.format(model="gemini-mock", seconds=120)
    auth = json.loads(gemini_report("gemini-401")["error"]["message"])
    assert auth == json.loads(fake_gemini.AUTH)
    server = json.loads(gemini_report("gemini-500")["error"]["message"])["error"]
    assert (server["code"], server["status"]) == (500, "INTERNAL")
    assert capture("gemini-lost_session")["stderr"] == fake_gemini.NO_SESSIONS + "\n"
    assert capture("gemini-lost_session")["exit_code"] == 42


def test_gemini_success_report_shape():
    """`session_id`, `response` and per-model `stats.models.<m>.tokens`, as the fake prints."""
    report = gemini_report("gemini-ok")
    assert set(report) == {"session_id", "response", "stats"}
    tokens = report["stats"]["models"]["gemini-mock"]["tokens"]
    assert (tokens["prompt"], tokens["candidates"]) == (1200, 80)
    fake_tokens = fake_gemini._stats("m")["models"]["m"]["tokens"]
    assert set(fake_tokens) == set(tokens)
