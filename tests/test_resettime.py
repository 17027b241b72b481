"""Reset clocks read right: the minute's end, "now" for a clock just passed, DST, midnight."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from loopx.agents.hosts.diagnosis import MIN_RATE_LIMIT_WAIT_S, rate_limited
from loopx.agents.hosts.resettime import retry_after_s
from loopx.registry.model import HostKind
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
