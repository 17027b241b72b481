"""Pure parts of the CLI host adapters: prompt, result extraction, diagnosis, sessions."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from loopx.agents.hosts.diagnosis import (
    MAX_RATE_LIMIT_WAIT_S,
    Diagnosis,
    diagnose,
    rate_limited,
)
from loopx.agents.hosts.extract import find_json_object, parse_result
from loopx.agents.hosts.prompt import build_prompt, result_schema
from loopx.agents.hosts.resettime import MAX_RESET_S, retry_after_s
from loopx.agents.hosts.session import session_after_turn, session_to_resume, turn_tokens
from loopx.registry.goalrecords import HostKind
from loopx.state import Gate, HostSession, Todo, TodoStatus
from loopx.turn.failures import FailureReason, TurnFailure
from loopx.turn.outcome import ResultKind
from loopx.turn.protocol import HostResult
from tests.hostkit import STARTED, make_envelope, make_goal

NOW = datetime(2026, 1, 2, 3, 0, tzinfo=UTC)


# --- prompt -------------------------------------------------------------------------------------


def test_prompt_carries_state_and_the_exact_schema(tmp_path: Path):
    """The prompt holds open todos, answered gates and HostResult's JSON Schema; not done todos."""
    goal = make_goal(tmp_path, HostKind.CLAUDE)
    envelope = make_envelope(tmp_path, goal)
    state = envelope.state.model_copy(
        update={
            "todos": [
                Todo(id="t1", text="fix parser"),
                Todo(id="t2", text="old", status=TodoStatus.DONE),
            ],
            "gates": [Gate(id=1, question="use sqlite?", answer="yes", opened_at=STARTED)],
        }
    )
    prompt = build_prompt(envelope.model_copy(update={"state": state}))
    assert "[t1] fix parser" in prompt
    assert "old" not in prompt.split("## Open todos")[1].split("##")[0]
    assert "Q: use sqlite?" in prompt
    assert "A: yes" in prompt
    assert json.dumps(result_schema(), separators=(",", ":")) in prompt


def test_prompt_is_a_pure_function_of_the_envelope(tmp_path: Path):
    """The same envelope gives the same prompt (a journal can rebuild it)."""
    goal = make_goal(tmp_path, HostKind.CODEX)
    envelope = make_envelope(tmp_path, goal)
    assert build_prompt(envelope) == build_prompt(envelope)


# --- extraction ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        '{"kind": "progress"}',
        'Here you go:\n```json\n{"kind": "progress"}\n```\n',
        'Here you go:\n```\n{"kind": "progress"}\n```',
        'Done. {"kind": "progress"} Bye.',
        'I looked at {"a": 1} and then: {"kind": "progress", "state_patch": {"beliefs": ["x"]}}',
    ],
)
def test_find_json_object_finds_the_result(text: str):
    """Bare, fenced and prose-wrapped results are all found."""
    found = find_json_object(text)
    assert found is not None
    assert found["kind"] == "progress"


def test_find_json_object_prefers_an_object_with_kind():
    """An object with `kind` wins over a later unrelated one."""
    assert find_json_object('{"kind": "wait", "wait_seconds": 5} then {"x": 1}') == {
        "kind": "wait",
        "wait_seconds": 5,
    }


def test_find_json_object_none_without_an_object():
    """Prose without JSON gives None."""
    assert find_json_object("no json here {not json}") is None


def test_parse_result_drops_top_level_nulls():
    """`"state_patch": null` means not given."""
    result = parse_result('{"kind": "progress", "state_patch": null, "evidence": null}', source="t")
    assert isinstance(result, HostResult)
    assert result.kind is ResultKind.PROGRESS


def test_parse_result_explains_a_schema_error():
    """A wrong kind is invalid_result naming the field."""
    failure = parse_result('{"kind": "maybe"}', source="the message")
    assert isinstance(failure, TurnFailure)
    assert failure.reason is FailureReason.INVALID_RESULT
    assert "kind" in failure.message


# --- diagnosis ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "diagnosis"),
    [
        ("Invalid API key · Please run /login", Diagnosis.AUTH),
        ("exceeded retry limit, last status: 401 Unauthorized, request id: x", Diagnosis.AUTH),
        ("OAuth token has expired. Please obtain a new token", Diagnosis.AUTH),
        ("Claude AI usage limit reached|1750708800", Diagnosis.RATE_LIMIT),
        ("You've hit your usage limit. Try again later.", Diagnosis.RATE_LIMIT),
        ("exceeded retry limit, last status: 429 Too Many Requests", Diagnosis.RATE_LIMIT),
        ("No conversation found with session ID: abc", Diagnosis.SESSION_MISSING),
        (
            "Error: thread/resume failed: no rollout found for thread id x",
            Diagnosis.SESSION_MISSING,
        ),
        ("stream disconnected before completion", Diagnosis.OTHER),
    ],
)
def test_diagnose(message: str, diagnosis: Diagnosis):
    """Known CLI wordings are classified."""
    assert diagnose(message) is diagnosis


@pytest.mark.parametrize(
    ("message", "seconds"),
    [
        (f"Claude AI usage limit reached|{int(NOW.timestamp()) + 900}", 900),
        ('{"type":"usage_limit_reached","resets_in_seconds":444}', 444),
        ("try again in 3 days 6 hours 57 minutes.", 3 * 86400 + 6 * 3600 + 57 * 60),
        ("try again in 45 minutes", 2700),
        ("You've hit your limit · resets 4pm (UTC)", 13 * 3600 + 60),  # the minute's end
        ("You've hit your limit · resets 1am (UTC)", 22 * 3600 + 60),
        ("You've hit your limit. Try again later.", None),
    ],
)
def test_retry_after_s(message: str, seconds: float | None):
    """Reset times in the CLIs' wordings become seconds from the turn's start."""
    assert retry_after_s(message, NOW) == seconds


# --- sessions -----------------------------------------------------------------------------------


def test_session_after_turn_counts_turns_of_the_same_session():
    """The same id adds a turn; a new id starts over at one."""
    first = session_after_turn("codex", None, "a")
    again = session_after_turn("codex", first, "a")
    other = session_after_turn("codex", again, "b")
    assert (first.turns, again.turns, other.turns) == (1, 2, 1)


def test_turn_tokens_is_the_increase_of_cumulative_counters():
    """A resumed thread's turn is charged only what it added."""
    kept = HostSession(
        kind="codex", session_id="a", turns=1, reported_input_tokens=100, reported_output_tokens=10
    )
    assert turn_tokens("codex", kept, "a", 150, 12) == (50, 2)
    assert turn_tokens("codex", kept, "b", 150, 12) == (150, 12)
    assert turn_tokens("codex", kept, "a", 40, 5) == (40, 5)  # counters restarted


def test_session_to_resume_policy(tmp_path: Path):
    """Resume only a session of the goal's kind below session_max_turns."""
    goal = make_goal(tmp_path, HostKind.CODEX, session_max_turns=2)
    assert session_to_resume(goal, HostSession(kind="codex", session_id="a", turns=1)) is not None
    assert session_to_resume(goal, HostSession(kind="codex", session_id="a", turns=2)) is None
    assert session_to_resume(goal, HostSession(kind="claude", session_id="a", turns=0)) is None
    assert session_to_resume(goal, None) is None


def test_a_dropped_session_is_never_resumed(tmp_path: Path):
    """A session with an empty id (the CLI lost it) means start fresh."""
    goal = make_goal(tmp_path, HostKind.CLAUDE)
    assert session_to_resume(goal, HostSession(kind="claude", session_id="", turns=0)) is None


def test_find_json_object_finds_a_late_result_after_many_braces():
    """A result after thousands of non-JSON braces (pasted code) is still found."""
    text = "if (x) { y } " * 5000 + '\nResult: {"kind": "completed"}'
    assert find_json_object(text) == {"kind": "completed"}


# --- reset times in every form the real CLIs print (tests/realhosts/captures) --------------------

BERLIN = ZoneInfo("Europe/Berlin")


CODEX_LIMIT = (
    "You\u2019ve hit your usage limit. Upgrade to Pro (https://chatgpt.com/explore/pro), "
    "or try again at 7:56 PM."
)
NYC = ZoneInfo("America/New_York")


@pytest.mark.parametrize(
    ("message", "local", "reset"),
    [
        # codex 0.171: a clock in the host's local zone, no zone named
        (CODEX_LIMIT, BERLIN, datetime(2026, 1, 2, 19, 56, tzinfo=BERLIN)),
        ("try again at 3:30 AM.", UTC, datetime(2026, 1, 2, 3, 30, tzinfo=UTC)),
        ("try again at 1:30 AM.", UTC, datetime(2026, 1, 3, 1, 30, tzinfo=UTC)),
        ("try again at Dec 3rd, 2026 6:56 PM.", BERLIN,
         datetime(2026, 12, 3, 18, 56, tzinfo=BERLIN)),
        ("try again at Jan 21st, 2026 12:05 AM.", UTC, datetime(2026, 1, 21, 0, 5, tzinfo=UTC)),
        # claude 2.1.197: a clock or date with its zone named
        ("You've hit your session limit · resets 8:56pm (Europe/Berlin)", UTC,
         datetime(2026, 1, 2, 20, 56, tzinfo=BERLIN)),
        ("You've hit your session limit · resets 9pm (UTC)", BERLIN,
         datetime(2026, 1, 2, 21, 0, tzinfo=UTC)),
        ("You've hit your weekly limit · resets Dec 3, 7:56pm (Europe/Berlin)", UTC,
         datetime(2026, 12, 3, 19, 56, tzinfo=BERLIN)),
        ("You've hit your weekly limit · resets Jan 5, 2027, 7am (America/New_York)", UTC,
         datetime(2027, 1, 5, 7, 0, tzinfo=NYC)),
        # a date more than a day in the past without a year is next year's
        ("You've hit your weekly limit · resets Jan 1, 2am (UTC)", UTC,
         datetime(2027, 1, 1, 2, 0, tzinfo=UTC)),
    ],
)  # fmt: skip
def test_reset_moments_in_the_real_wordings(message: str, local: ZoneInfo, reset: datetime):
    """Local clocks, zoned clocks and dates become the end of the minute they name, in its zone.

    A date further ahead than MAX_RESET_S (the longest reset believed) is read as that.
    """
    wait = (reset - NOW).total_seconds() + 60
    assert retry_after_s(message, NOW, local) == min(wait, MAX_RESET_S)


def test_claude_limit_wordings_are_rate_limits():
    """Claude Code 2.1's session and weekly limit wordings are rate limits, not `other`."""
    for text in (
        "You've hit your session limit · resets 8:56pm (Europe/Berlin)",
        "You've hit your weekly limit · resets Dec 3, 7:56pm (Europe/Berlin)",
        "You've hit your Opus limit · resets Dec 3, 7:56pm (Europe/Berlin)",
    ):
        assert diagnose(text) is Diagnosis.RATE_LIMIT, text


@pytest.mark.parametrize(
    "message",
    [
        "Reconnecting... waiting for network (Connection failed: error sending request)",
        "API Error: Unable to connect to API (ConnectionRefused)",
    ],
)
def test_unreachable_wordings(message: str):
    """Codex's reconnect loop and Claude Code's connection error mean the server is unreachable."""
    assert diagnose(message) is Diagnosis.UNREACHABLE


def test_a_three_day_limit_waits_three_days(tmp_path):
    """A reset days away becomes one committed wait until then, not a 30-minute retry loop."""
    goal = make_goal(tmp_path, HostKind.CODEX)
    envelope = make_envelope(tmp_path, goal, started=NOW)
    result = rate_limited("codex", "try again at Jan 5th, 2026 3:00 AM.", envelope, UTC)
    assert (result.kind, result.wait_seconds) == (ResultKind.WAIT, 3 * 86400.0 + 60)


def test_a_reset_beyond_the_maximum_is_bounded(tmp_path):
    """A reset further than MAX_RATE_LIMIT_WAIT_S away waits only that long."""
    goal = make_goal(tmp_path, HostKind.CODEX)
    envelope = make_envelope(tmp_path, goal, started=NOW)
    result = rate_limited("codex", "try again at Dec 3rd, 2026 6:56 PM.", envelope, UTC)
    assert result.wait_seconds == MAX_RATE_LIMIT_WAIT_S
