"""When a CLI's rate limit resets, read from the words it printed.

The real CLIs print the moment in several forms (captured in
tests/realhosts/captures/):

- Codex 0.171: ``try again at 7:56 PM.`` (today, the host's local zone, no
  zone named) or ``try again at Dec 3rd, 2026 6:56 PM.``
- Claude Code 2.1.197: ``resets 8:56pm (Europe/Berlin)``, ``resets 9pm (UTC)``,
  ``resets Dec 3, 7:56pm (Europe/Berlin)`` or ``resets Dec 3, 2027, 7:56pm (…)``;
  its fast-mode limit ``resets in 2h 30m``.
- Gemini CLI 0.61: the API's ``Please retry in 57.8s.`` / ``Suggested retry after 120s.``
  and its own ``Access resets at 7:05 PM PST.`` (``Intl.DateTimeFormat`` short zone
  names: ``UTC``, ``GMT+1``, ``PST``).
- APIs and older CLIs: an epoch (``usage limit reached|1750708800``,
  ``resets_at``), seconds (``resets_in_seconds``, ``retry-after``) or a
  duration (``try again in 2 days 3 hours``).

Every clock is printed to the minute, so it means the end of that minute; a
clock that passed less than an hour ago means "now" (retry after the minimum
wait), and a reset lies a day ahead only when the text names the day (a
date, a weekday, "tomorrow") or the clock is more than an hour behind.

A reset further than :data:`MAX_RESET_S` away, or one no ``datetime`` can
hold (``resets Dec 31, 9999, 11pm (Pacific/Honolulu)`` is past
``datetime.max`` in UTC), is read as :data:`MAX_RESET_S` with a warning for
the turn's record: a text never raises.

Pure functions: "now" and the host's local zone are arguments.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta, timezone, tzinfo
from typing import Final
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

# The furthest a reset is believed to be: past the longest limit the CLIs have (a weekly one)
# with room to spare. A reset further away is a misreading or a provider's mistake.
MAX_RESET_S: Final = 35 * 24 * 3600.0

_MONTHS = {
    m: i
    for i, m in enumerate(
        ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"), 1
    )
}
_EPOCH = re.compile(r"(?:\||resets?_?at\"?\s*[:=]\s*)(\d{10})\b", re.IGNORECASE)
_SECONDS = re.compile(r"(?:resets_in_seconds|retry[- ]after)\"?\s*[:=]?\s*(\d+)", re.IGNORECASE)
_UNIT_S = {"d": 86400, "h": 3600, "m": 60, "s": 1}
_DURATION_PART = r"\d+(?:\.\d+)?\s*(?:days?|d|hours?|hrs?|h|minutes?|mins?|m|seconds?|secs?|s)\b"
_DURATION = re.compile(
    rf"(?:try again|retry|resets?)\s+in\s+((?:{_DURATION_PART}[\s,]*(?:and\s+)?)+)", re.IGNORECASE
)
_PART = re.compile(r"(\d+(?:\.\d+)?)\s*([a-z]+)", re.IGNORECASE)
_WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_MOMENT = re.compile(
    r"(?:resets?|try again at|retry at)\s+(?:at\s+)?(?:on\s+)?"
    r"(?:(?P<tomorrow>tomorrow)\s+(?:at\s+)?)?"
    r"(?:(?P<weekday>mon|tue|wed|thu|fri|sat|sun)[a-z]*\.?,?\s+(?:at\s+)?)?"
    r"(?:(?P<month>jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\.?\s+"
    r"(?P<day>\d{1,2})(?:st|nd|rd|th)?,?\s+(?:(?P<year>\d{4}),?\s+)?(?:at\s+)?)?"
    r"(?P<hour>\d{1,2})(?::(?P<minute>\d{2}))?\s*(?P<ampm>[ap]\.?m\b\.?)?"
    r"(?:\s*\((?P<zone>[A-Za-z_]+(?:/[A-Za-z0-9_+-]+)*)\)"
    r"|\s+(?P<abbr>UTC|GMT(?:[+-]\d{1,2}(?::?\d{2})?)?|[ECMP][SD]T|AK[SD]T|HST)\b)?",
    re.IGNORECASE,
)
_ISO_AT = re.compile(
    r"resets?_?at\"?\s*[:=]\s*\"?(\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?"
    r"(?:Z|[+-]\d{2}:?\d{2}))",
    re.IGNORECASE,
)
_MAX_HOUR = 23
# A clock printed to the minute stands for the whole minute: the reset is at its end (a limit
# resetting at 19:05:34 prints "7:05 PM").
_MINUTE = timedelta(minutes=1)
# A clock that passed less than this long ago means the reset is now, not tomorrow: the CLI
# printed it truncated, or the turn started just after it.
_RECENTLY = timedelta(hours=1)
# Intl.DateTimeFormat's short zone names for the US zones Gemini CLI prints (timeZoneName "short").
_ABBREVIATIONS = {
    "EST": "America/New_York", "EDT": "America/New_York",
    "CST": "America/Chicago", "CDT": "America/Chicago",
    "MST": "America/Denver", "MDT": "America/Denver",
    "PST": "America/Los_Angeles", "PDT": "America/Los_Angeles",
    "AKST": "America/Anchorage", "AKDT": "America/Anchorage",
    "HST": "Pacific/Honolulu",
}  # fmt: skip
_GMT_OFFSET = re.compile(r"GMT([+-])(\d{1,2})(?::?(\d{2}))?", re.IGNORECASE)


def host_zone(environ: dict[str, str] | None = None) -> tzinfo:
    """The zone a host process prints local times in: ``TZ`` if it names one, else the system's."""
    name = (environ if environ is not None else os.environ).get("TZ", "").lstrip(":")
    if name:
        try:
            return ZoneInfo(name)
        except (ZoneInfoNotFoundError, ValueError):
            pass
    return datetime.now().astimezone().tzinfo or ZoneInfo("UTC")


def _zone(name: str | None, abbr: str | None, local: tzinfo) -> tzinfo | None:
    """The zone a clock names (None: one no zone can be: ``GMT+99``, ``Mars/Base``)."""
    if abbr:
        upper = abbr.upper()
        if m := _GMT_OFFSET.fullmatch(upper):
            sign = 1 if m.group(1) == "+" else -1
            offset = timedelta(hours=int(m.group(2)), minutes=int(m.group(3) or 0))
            try:
                return timezone(sign * offset)
            except ValueError:  # a day or more: no zone is that far from UTC
                return None
        return ZoneInfo(_ABBREVIATIONS.get(upper, "UTC"))
    if not name:
        return local
    try:
        return ZoneInfo("UTC" if name.upper() in ("UTC", "GMT") else name)
    except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: a tzdata directory's name
        return None


def _hour24(hour: int, ampm: str | None) -> int | None:
    if ampm:
        if not 1 <= hour <= 12:  # noqa: PLR2004 - a 12-hour clock
            return None
        return hour % 12 + (12 if ampm.lower().startswith("p") else 0)
    return hour if hour <= _MAX_HOUR else None


def _on(day: date, hour: int, minute: int, tz: tzinfo) -> datetime:
    """The instant a wall clock shows ``hour:minute`` on ``day`` in ``tz``, in UTC."""
    return datetime(day.year, day.month, day.day, hour, minute, tzinfo=tz).astimezone(UTC)


def _after(clock: datetime, now: datetime) -> datetime:
    """The reset a printed minute ``clock`` means: the minute's end, or ``now`` if it passed."""
    return now if clock <= now else clock + _MINUTE


def _clock_only(hour: int, minute: int, tz: tzinfo, now: datetime) -> datetime:
    """A clock without a date: the first occurrence no more than an hour behind ``now``.

    Yesterday's, today's and tomorrow's occurrences are weighed in UTC (so a
    DST change or midnight between them counts right); one that passed within
    the last hour is a reset now (never tomorrow).
    """
    today = now.astimezone(tz).date()
    days = (today - timedelta(days=1), today, today + timedelta(days=1))
    occurrences = sorted(_on(d, hour, minute, tz) for d in days)
    clock = next((c for c in occurrences if c > now - _RECENTLY), occurrences[-1])
    return _after(clock, now)


def moment(match: re.Match[str], now: datetime, local: tzinfo) -> datetime | None:
    """The reset moment a ``_MOMENT`` match names, or None when it names none. Pure.

    A clock is printed to the minute and means the end of that minute; one
    that passed within the last hour means now. A clock alone is its next
    occurrence after that hour; "tomorrow" and a weekday name their day; a
    date without a year is its next occurrence no more than a day in the past
    (a reset "Jan 2" printed on Dec 30 is next year).
    """
    if match.group("ampm") is None and match.group("minute") is None:
        return None  # a bare number ("resets 3 times") is no clock
    tz = _zone(match.group("zone"), match.group("abbr"), local)
    hour = _hour24(int(match.group("hour")), match.group("ampm"))
    minute = int(match.group("minute") or 0)
    if tz is None or hour is None or minute > 59:  # noqa: PLR2004 - minutes of an hour
        return None
    now = now.astimezone(UTC)
    today = now.astimezone(tz).date()
    if match.group("month") is not None:
        return _dated(match, hour, minute, tz, now)
    if match.group("tomorrow"):
        return _after(_on(today + timedelta(days=1), hour, minute, tz), now)
    if weekday := match.group("weekday"):
        ahead = (_WEEKDAYS.index(weekday[:3].lower()) - today.weekday()) % 7
        clock = _on(today + timedelta(days=ahead), hour, minute, tz)
        if clock <= now - _RECENTLY:
            clock = _on(today + timedelta(days=ahead + 7), hour, minute, tz)
        return _after(clock, now)
    return _clock_only(hour, minute, tz, now)


def _dated(
    match: re.Match[str], hour: int, minute: int, tz: tzinfo, now: datetime
) -> datetime | None:
    month = _MONTHS[match.group("month")[:3].lower()]
    year = int(match.group("year") or now.astimezone(tz).year)
    try:
        clock = _on(date(year, month, int(match.group("day"))), hour, minute, tz)
        if match.group("year") is None and clock < now - timedelta(days=1):
            clock = _on(date(year + 1, month, int(match.group("day"))), hour, minute, tz)
    except ValueError:
        return None
    return _after(clock, now)


@dataclass(frozen=True, slots=True)
class ResetReading:
    """When a limit resets, as a CLI's text says: seconds from now, and why it was clamped."""

    seconds: float  # from now; negative for a reset already past; at most MAX_RESET_S
    warning: str | None = None  # set when the text's reset was clamped to MAX_RESET_S


def read_reset(message: str, now: datetime, local: tzinfo | None = None) -> ResetReading | None:
    """When the limit in ``message`` resets, or None if it says not. Pure; never raises.

    A reset further than :data:`MAX_RESET_S` away, or one that cannot be
    represented (past ``datetime.max``, an endless number of seconds), is
    read as :data:`MAX_RESET_S` with a warning saying so.

    Args:
        message: the CLI's error text (its JSON and header lines included).
        now: the turn's start (interpreting a journal again gives the same answer).
        local: the zone a clock without a zone is read in (the host's; default UTC).

    """
    limit = f"{MAX_RESET_S / 86400:g} days"
    try:
        seconds = _seconds(message, now, local or ZoneInfo("UTC"))
    except OverflowError:
        return ResetReading(
            MAX_RESET_S, f"the reset it names is past the last date LoopX can hold; read as {limit}"
        )
    if seconds is None:
        return None
    if not math.isfinite(seconds) or seconds > MAX_RESET_S:
        far = f"{seconds / 86400:,.0f} days away" if math.isfinite(seconds) else "endless"
        return ResetReading(
            MAX_RESET_S, f"the reset it names is {far}, past the limit of {limit}; read as {limit}"
        )
    return ResetReading(seconds)


def retry_after_s(message: str, now: datetime, local: tzinfo | None = None) -> float | None:
    """Seconds from ``now`` until the limit in ``message`` resets, or None if it says not. Pure.

    :func:`read_reset`'s seconds (at most :data:`MAX_RESET_S`), without its warning.
    """
    reading = read_reset(message, now, local)
    return None if reading is None else reading.seconds


def _seconds(message: str, now: datetime, local: tzinfo) -> float | None:
    """Seconds until the reset ``message`` names, unbounded (None: it names none).

    Raises:
        OverflowError: the reset lies past what a ``datetime`` can hold.
    """
    if m := _EPOCH.search(message):
        return float(m.group(1)) - now.timestamp()
    if m := _ISO_AT.search(message):
        try:
            at = datetime.fromisoformat(m.group(1).replace("Z", "+00:00").replace(" ", "T"))
        except ValueError:
            at = None  # no such date (month 13, February 30): the other forms may still say
        if at is not None:
            return (at - now).total_seconds()
    if m := _SECONDS.search(message):
        return float(m.group(1))
    if m := _DURATION.search(message):
        total = sum(float(n) * _UNIT_S[unit[0].lower()] for n, unit in _PART.findall(m.group(1)))
        return float(total)
    for m in _MOMENT.finditer(message):
        if (reset := moment(m, now, local)) is not None:
            return (reset - now).total_seconds()
    return None
