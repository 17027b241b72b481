"""Reset clocks read right: the minute's end, "now" for a clock just passed, DST, midnight.

And bad times are typed: a reset too far away, or past any date a ``datetime``
holds, is clamped to a limit with a warning in the turn's record; fuzzed reset
texts and headers never make a parser raise.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loopx.agents.hosts.diagnosis import (
    MAX_RATE_LIMIT_WAIT_S,
    MIN_RATE_LIMIT_WAIT_S,
    RESET_CLAMPED,
    rate_limited,
)
from loopx.agents.hosts.resettime import MAX_RESET_S, read_reset, retry_after_s
from loopx.registry.goalrecords import HostKind
from loopx.root import Layout
from loopx.testing import install_fake_host
from loopx.turn.journal import journal_files, read_journal
from loopx.turn.outcome import ResultKind
from loopx.turn.protocol import Envelope
from tests.fleet_helpers import cli
from tests.hostkit import make_envelope, make_goal

BERLIN = ZoneInfo("Europe/Berlin")
NYC = ZoneInfo("America/New_York")
LA = ZoneInfo("America/Los_Angeles")
CODEX = "You\u2019ve hit your usage limit. Upgrade to Pro, or try again at {}."
CLAUDE = "You've hit your session limit \u00b7 resets {}"


def _reset(message: str, now: datetime, local: ZoneInfo = UTC) -> datetime | None:  # type: ignore[assignment]
    seconds = retry_after_s(message, now, local)
    return None if seconds is None else now + timedelta(seconds=seconds)


@pytest.mark.parametrize(
    ("message", "now", "local", "reset"),
    [
        # The case seen: the limit resets 19:05:34, both CLIs print 19:05. Read before the
        # clock, it is the minute's end, never 34 s early.
        (CODEX.format("7:05 PM"), datetime(2026, 12, 1, 18, 3, 34, tzinfo=BERLIN), BERLIN,
         datetime(2026, 12, 1, 19, 6, tzinfo=BERLIN)),
        (CLAUDE.format("7:05pm (Europe/Berlin)"), datetime(2026, 12, 1, 17, 3, 34, tzinfo=UTC),
         UTC, datetime(2026, 12, 1, 19, 6, tzinfo=BERLIN)),
        # A second after the clock passed it means now, not tomorrow (the 86,399 s wait).
        (CODEX.format("7:05 PM"), datetime(2026, 12, 1, 19, 5, 1, tzinfo=BERLIN), BERLIN,
         datetime(2026, 12, 1, 19, 5, 1, tzinfo=BERLIN)),
        (CLAUDE.format("7:05pm (Europe/Berlin)"), datetime(2026, 12, 1, 18, 6, 0, tzinfo=UTC),
         UTC, datetime(2026, 12, 1, 18, 6, 0, tzinfo=UTC)),
        # 59 minutes past still means now; more than an hour behind is tomorrow.
        (CODEX.format("7:05 PM"), datetime(2026, 12, 1, 20, 4, tzinfo=BERLIN), BERLIN,
         datetime(2026, 12, 1, 20, 4, tzinfo=BERLIN)),
        (CODEX.format("7:05 PM"), datetime(2026, 12, 1, 20, 6, tzinfo=BERLIN), BERLIN,
         datetime(2026, 12, 2, 19, 6, tzinfo=BERLIN)),
        # Midnight: a clock just before it, read just after, is now; one just after, read
        # just before, is in a minute.
        (CODEX.format("11:59 PM"), datetime(2026, 12, 2, 0, 0, 20, tzinfo=BERLIN), BERLIN,
         datetime(2026, 12, 2, 0, 0, 20, tzinfo=BERLIN)),
        (CODEX.format("12:00 AM"), datetime(2026, 12, 1, 23, 59, 30, tzinfo=BERLIN), BERLIN,
         datetime(2026, 12, 2, 0, 1, tzinfo=BERLIN)),
        # DST: the clock is read in its zone on its own day (Berlin leaves summer time
        # 2026-10-25 03:00 CEST -> 02:00 CET; New York enters it 2026-03-08 02:00 -> 03:00).
        (CLAUDE.format("4:30am (Europe/Berlin)"), datetime(2026, 10, 25, 0, 30, tzinfo=UTC),
         UTC, datetime(2026, 10, 25, 3, 31, tzinfo=UTC)),
        (CLAUDE.format("1:30am (Europe/Berlin)"), datetime(2026, 10, 24, 23, 15, tzinfo=UTC),
         UTC, datetime(2026, 10, 24, 23, 31, tzinfo=UTC)),  # still CEST (UTC+2) at 1:30
        (CLAUDE.format("3:30am (America/New_York)"), datetime(2026, 3, 8, 6, 0, tzinfo=UTC),
         UTC, datetime(2026, 3, 8, 7, 31, tzinfo=UTC)),  # EDT: 3:30 is 07:30 UTC that day
        # The text names the day: a date, a weekday, "tomorrow".
        (CODEX.format("Dec 3rd, 2026 6:56 PM"), datetime(2026, 12, 1, 19, 0, tzinfo=BERLIN),
         BERLIN, datetime(2026, 12, 3, 18, 57, tzinfo=BERLIN)),
        (CLAUDE.format("Dec 3, 7:56pm (Europe/Berlin)"), datetime(2026, 12, 1, 12, tzinfo=UTC),
         UTC, datetime(2026, 12, 3, 19, 57, tzinfo=BERLIN)),
        (CLAUDE.format("tomorrow 7:05pm (UTC)"), datetime(2026, 12, 1, 12, tzinfo=UTC), UTC,
         datetime(2026, 12, 2, 19, 6, tzinfo=UTC)),
        (CLAUDE.format("Thu 7:05pm (UTC)"), datetime(2026, 12, 1, 20, tzinfo=UTC), UTC,
         datetime(2026, 12, 3, 19, 6, tzinfo=UTC)),  # 2026-12-01 is a Tuesday
        (CLAUDE.format("Tue 7:05pm (UTC)"), datetime(2026, 12, 1, 21, tzinfo=UTC), UTC,
         datetime(2026, 12, 8, 19, 6, tzinfo=UTC)),  # today's passed two hours ago
        # A dated clock that passed means now.
        (CODEX.format("Dec 1st, 2026 7:05 PM"), datetime(2026, 12, 1, 19, 30, tzinfo=BERLIN),
         BERLIN, datetime(2026, 12, 1, 19, 30, tzinfo=BERLIN)),
        # Gemini CLI: "Access resets at" with Intl's short zone names.
        ("Access resets at 7:05 PM UTC.", datetime(2026, 12, 1, 18, tzinfo=UTC), UTC,
         datetime(2026, 12, 1, 19, 6, tzinfo=UTC)),
        ("Access resets at 11:05 AM PST.", datetime(2026, 12, 1, 18, tzinfo=UTC), UTC,
         datetime(2026, 12, 1, 11, 6, tzinfo=LA)),
        ("Access resets at 8:05 PM GMT+1.", datetime(2026, 12, 1, 18, tzinfo=UTC), UTC,
         datetime(2026, 12, 1, 19, 6, tzinfo=UTC)),
        # Exact instants are not minutes: codex's resets_at (epoch or ISO), Gemini's seconds.
        ('{"error":{"type":"usage_limit_reached","resets_at":1796151934}}',
         datetime(2026, 12, 1, 19, tzinfo=UTC), UTC, datetime.fromtimestamp(1796151934, UTC)),
        ('{"resets_at": "2026-12-01T19:05:34Z"}', datetime(2026, 12, 1, 19, tzinfo=UTC), UTC,
         datetime(2026, 12, 1, 19, 5, 34, tzinfo=UTC)),
        ("Please retry in 57.5s.", datetime(2026, 12, 1, 19, tzinfo=UTC), UTC,
         datetime(2026, 12, 1, 19, 0, 57, 500000, tzinfo=UTC)),
        ("Suggested retry after 120s.", datetime(2026, 12, 1, 19, tzinfo=UTC), UTC,
         datetime(2026, 12, 1, 19, 2, tzinfo=UTC)),
    ],
)  # fmt: skip
def test_reset_clock(message: str, now: datetime, local: ZoneInfo, reset: datetime):
    """Each CLI's wording, read at ``now`` in the host's zone, names this reset."""
    assert _reset(message, now, local) == reset


def test_a_clock_just_passed_waits_the_minimum_not_a_day(tmp_path):
    """The turn's committed wait for a clock passed a second ago is the minimum wait."""
    goal = make_goal(tmp_path, HostKind.CODEX)
    started = datetime(2026, 12, 1, 18, 5, 1, tzinfo=UTC)
    envelope = make_envelope(tmp_path, goal, started=started)
    result = rate_limited("codex", CODEX.format("7:05 PM"), envelope, BERLIN)
    assert result.wait_seconds == MIN_RATE_LIMIT_WAIT_S


def test_a_clock_two_minutes_ahead_waits_until_the_minute_ends(tmp_path):
    """A limit resetting 2 minutes ahead at 19:05:34 waits until 19:06:00, not a day."""
    goal = make_goal(tmp_path, HostKind.CLAUDE)
    started = datetime(2026, 12, 1, 18, 3, 34, tzinfo=UTC)
    envelope = make_envelope(tmp_path, goal, started=started)
    result = rate_limited("claude", CLAUDE.format("7:05pm (Europe/Berlin)"), envelope, UTC)
    assert result.wait_seconds == 146.0


# --- bad times are typed ------------------------------------------------------------------------

FAR = "You've hit your session limit \u00b7 resets Dec 31, 9999, 11pm (Pacific/Honolulu)"
FUZZ = settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
_NUMBER = st.one_of(
    st.integers(min_value=0, max_value=10**12).map(str),
    st.text("0123456789", min_size=1, max_size=400),  # up to an endless number of seconds
    st.builds("{}.{}".format, st.integers(0, 10**6), st.integers(0, 999)),
)
_ZONE = st.sampled_from(
    ["(UTC)", "(Pacific/Honolulu)", "(Pacific/Kiritimati)", "(Europe/Berlin)", "(America)",
     "(Mars/Base)", "(../etc/passwd)", "UTC", "PST", "HST", "GMT+14", "GMT-12", "GMT+99:99", ""]
)  # fmt: skip
_CLOCK = st.builds(
    "{}{}{} {}".format,
    st.integers(0, 99),
    st.sampled_from(["", ":00", ":59", ":99", ":7"]),
    st.sampled_from(["am", "pm", " PM", ""]),
    _ZONE,
)
_DATE = st.builds(
    "{} {}{}, ".format,
    st.sampled_from(["Jan", "Feb", "Dec", "December", "Sept"]),
    st.integers(0, 40),
    st.sampled_from(["", "st", "nd"]),
)
_YEAR = st.one_of(st.just(""), st.integers(0, 9999).map(lambda y: f"{y:04d}, "))
_ISO = st.builds(
    "{:04d}-{:02d}-{:02d}T{:02d}:{:02d}:{:02d}{}".format,
    st.integers(0, 9999), st.integers(0, 99), st.integers(0, 99), st.integers(0, 99),
    st.integers(0, 99), st.integers(0, 99), st.sampled_from(["Z", "+14:00", "-12:00", "+99:99"]),
)  # fmt: skip
_TEXT = st.one_of(
    # Moments as the CLIs print them, with days, years and zones past any calendar.
    st.builds(
        "{}{}{}{}{}".format,
        st.sampled_from(["resets ", "try again at ", "retry at ", "Access resets at "]),
        st.sampled_from(["", "tomorrow ", "Thu ", "on Sunday at "]),
        st.one_of(st.just(""), _DATE),
        _YEAR,
        _CLOCK,
    ),
    # Durations and the header lines an API error carries.
    st.builds(
        "{} {}{}".format,
        st.sampled_from(["try again in", "retry in", "resets in", "Please retry in"]),
        _NUMBER,
        st.sampled_from(["s", " seconds", "h", " days", "d 3h", " hours and 2 minutes"]),
    ),
    st.builds(
        "{}{}".format,
        st.sampled_from(
            [
                "retry-after: ",
                "Retry-After: ",
                "resets_in_seconds=",
                '"resets_at": ',
                "usage limit reached|",
                "x-ratelimit-reset: ",
            ]
        ),
        _NUMBER,
    ),
    st.builds('{{"resets_at": "{}"}}'.format, _ISO),
    st.text(max_size=200),
)
# Hypothesis takes naive bounds; ``timezones`` makes every value aware.
_NOW = st.datetimes(
    min_value=datetime(1, 1, 2),  # noqa: DTZ001
    max_value=datetime(9999, 12, 30),  # noqa: DTZ001
    timezones=st.just(UTC),
)
_LOCAL = st.sampled_from([UTC, ZoneInfo("Pacific/Honolulu"), ZoneInfo("Pacific/Kiritimati")])


@FUZZ
@given(text=_TEXT, now=_NOW, local=_LOCAL)
def test_a_reset_text_never_raises_nor_waits_past_the_limit(
    text: str, now: datetime, local: ZoneInfo
) -> None:
    """Whatever the words and whenever read: no exception, and no wait beyond MAX_RESET_S."""
    reading = read_reset(text, now, local)
    if reading is not None:
        assert reading.seconds <= MAX_RESET_S
        assert reading.seconds == reading.seconds  # not NaN
        assert reading.warning is None or reading.seconds == MAX_RESET_S
    seconds = retry_after_s(text, now, local)
    assert seconds == (None if reading is None else reading.seconds)


@pytest.fixture(scope="module")
def envelope(tmp_path_factory: pytest.TempPathFactory) -> Envelope:
    """One claude turn's envelope; each example moves its start."""
    where = tmp_path_factory.mktemp("envelope")
    return make_envelope(where, make_goal(where, HostKind.CLAUDE))


@FUZZ
@given(
    text=_TEXT,
    started=st.datetimes(
        min_value=datetime(1971, 1, 1),  # noqa: DTZ001
        max_value=datetime(2200, 1, 1),  # noqa: DTZ001
        timezones=st.just(UTC),
    ),
    local=_LOCAL,
)
def test_a_rate_limited_turn_never_raises_and_waits_at_most_its_limit(
    envelope: Envelope, text: str, started: datetime, local: ZoneInfo
) -> None:
    """The wait result of any limit text is valid, bounded, and says when it was clamped."""
    moved = envelope.model_copy(
        update={"deadline_at": started + timedelta(seconds=envelope.turn_timeout_s)}
    )
    result = rate_limited("claude", f"usage limit: {text}", moved, local)
    assert result.kind is ResultKind.WAIT
    assert result.wait_seconds is not None
    assert MIN_RATE_LIMIT_WAIT_S <= result.wait_seconds <= MAX_RATE_LIMIT_WAIT_S
    reading = read_reset(f"usage limit: {text}", started, local)
    clamped = reading is not None and reading.warning is not None
    assert (RESET_CLAMPED in result.evidence) == clamped
    assert ("warning: " in result.summary) == clamped


@pytest.mark.parametrize(
    ("text", "why"),
    [
        (FAR, "past the last date LoopX can hold"),
        ("resets Dec 30, 9999, 2pm", "2,912,103 days away, past the limit of 35 days"),
        ("retry-after: " + "9" * 400, "endless, past the limit of 35 days"),
        ('{"resets_at": "9999-12-31T23:59:00-12:00"}', "past the limit of 35 days"),
        ("try again in 40 days", "40 days away, past the limit of 35 days"),
    ],
)
def test_a_reset_past_belief_is_read_as_the_limit_with_a_warning(text: str, why: str) -> None:
    """Too far, or past datetime.max in UTC: MAX_RESET_S, and the warning says which."""
    reading = read_reset(text, datetime(2026, 12, 6, tzinfo=UTC), ZoneInfo("Pacific/Honolulu"))
    assert reading is not None
    assert reading.seconds == MAX_RESET_S == 35 * 86400
    assert reading.warning is not None and why in reading.warning
    assert reading.warning.endswith("read as 35 days")


def test_a_reset_within_the_limit_is_read_as_given() -> None:
    """34 days is believed, with no warning; a date that does not exist names no reset."""
    now = datetime(2026, 12, 6, tzinfo=UTC)
    assert read_reset("try again in 34 days", now) == read_reset("retry-after: 2937600", now)
    assert read_reset("try again in 34 days", now).warning is None  # type: ignore[union-attr]
    assert read_reset('{"resets_at": "2026-13-45T00:00:00Z"}', now) is None
    assert read_reset("resets 7pm GMT+99", now) is None


def test_a_host_reporting_a_reset_in_the_year_9999_waits_instead_of_crashing(
    tmp_path: Path,
) -> None:
    """The real claude path: the turn commits a bounded wait, parks the account, says why."""
    root = tmp_path / "root"
    install_fake_host(tmp_path / "bin", "claude")
    env = {
        "PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin",
        "FAKE_CLAUDE_HOME": str(tmp_path / "h"),
        "FAKE_CLAUDE_MODE": "limit_text",
        "FAKE_CLAUDE_LIMIT_TEXT": FAR,
        "TZ": "Pacific/Honolulu",
    }
    assert cli(root, "init", **env).returncode == 0
    (tmp_path / "w").mkdir()
    added = cli(root, "goal", "add", "g", "--objective", "x", "--workdir", str(tmp_path / "w"),
                "--host-kind", "claude", **env)  # fmt: skip
    assert added.returncode == 0, added.stderr
    done = cli(root, "turn", "run-once", "g", "--json", **env)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)["report"]
    assert (report["status"], report["kind"], report["attempt"]) == ("committed", "wait", 1)
    layout = Layout.at(root)
    (path,) = journal_files(layout, "g")
    journal = read_journal(path)
    assert journal.result is not None
    assert journal.result.wait_seconds == MAX_RATE_LIMIT_WAIT_S
    assert journal.result.evidence == ["host_rate_limited", RESET_CLAMPED]
    assert "warning: the reset it names is past the last date LoopX can hold" in (
        journal.result.summary
    )
    # The account waits the bounded time; the next turn is held, not run into the limit again.
    account = json.loads((root / "accounts" / "default-claude" / "state.json").read_text())
    started = journal.plan.envelope.deadline_at - timedelta(
        seconds=journal.plan.envelope.turn_timeout_s
    )
    until = datetime.fromisoformat(account["until"])
    assert (account["condition"], until) == (
        "limited",
        started + timedelta(seconds=MAX_RATE_LIMIT_WAIT_S),
    )
    held = json.loads(cli(root, "turn", "run-once", "g", "--json", **env).stdout)
    assert (held["report"], held["quota"]["allowed"]) == (None, False)
