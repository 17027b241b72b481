"""When a CLI's rate limit resets, read from the words it printed.

The real CLIs print the moment in several forms (captured in
tests/realhosts/captures/):

- Codex 0.171: ``try again at 7:56 PM.`` (today, the host's local zone, no
  zone named) or ``try again at Dec 3rd, 2026 6:56 PM.``
- Claude Code 2.1.197: ``resets 8:56pm (Europe/Berlin)``, ``resets 9pm (UTC)``,
  ``resets Dec 3, 7:56pm (Europe/Berlin)`` or ``resets Dec 3, 2027, 7:56pm (…)``;
  its fast-mode limit ``resets in 2h 30m``.
- APIs and older CLIs: an epoch (``usage limit reached|1750708800``,
  ``resets_at``), seconds (``resets_in_seconds``, ``retry-after``) or a
  duration (``try again in 2 days 3 hours``).

Pure functions: "now" and the host's local zone are arguments.
"""

from __future__ import annotations

import os
import re
from datetime import datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

_MONTHS = {
    m: i
    for i, m in enumerate(
        ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"), 1
    )
}
_EPOCH = re.compile(r"(?:\||resets?_?at\"?\s*[:=]\s*)(\d{10})\b", re.IGNORECASE)
_SECONDS = re.compile(r"(?:resets_in_seconds|retry[- ]after)\"?\s*[:=]?\s*(\d+)", re.IGNORECASE)
_UNIT_S = {"d": 86400, "h": 3600, "m": 60, "s": 1}
_DURATION_PART = r"\d+\s*(?:days?|d|hours?|hrs?|h|minutes?|mins?|m|seconds?|secs?|s)\b"
_DURATION = re.compile(
    rf"(?:try again|retry|resets?)\s+in\s+((?:{_DURATION_PART}[\s,]*(?:and\s+)?)+)", re.IGNORECASE
)
_PART = re.compile(r"(\d+)\s*([a-z]+)", re.IGNORECASE)
_MOMENT = re.compile(
    r"(?:resets?|try again at|retry at)\s+(?:at\s+)?"
    r"(?:(?P<month>jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\.?\s+"
    r"(?P<day>\d{1,2})(?:st|nd|rd|th)?,?\s+(?:(?P<year>\d{4}),?\s+)?)?"
    r"(?P<hour>\d{1,2})(?::(?P<minute>\d{2}))?\s*(?P<ampm>[ap]\.?m\.?)?"
    r"(?:\s*\((?P<zone>[A-Za-z_]+(?:/[A-Za-z0-9_+-]+)*)\))?",
    re.IGNORECASE,
)
_MAX_HOUR = 23


def host_zone(environ: dict[str, str] | None = None) -> tzinfo:
    """The zone a host process prints local times in: ``TZ`` if it names one, else the system's."""
    name = (environ if environ is not None else os.environ).get("TZ", "").lstrip(":")
    if name:
        try:
            return ZoneInfo(name)
        except (ZoneInfoNotFoundError, ValueError):
            pass
    return datetime.now().astimezone().tzinfo or ZoneInfo("UTC")


def _zone(name: str | None, local: tzinfo) -> tzinfo | None:
    if not name:
        return local
    try:
        return ZoneInfo("UTC" if name.upper() in ("UTC", "GMT") else name)
    except (ZoneInfoNotFoundError, ValueError):
        return None


def _hour24(hour: int, ampm: str | None) -> int | None:
    if ampm:
        if not 1 <= hour <= 12:  # noqa: PLR2004 - a 12-hour clock
            return None
        return hour % 12 + (12 if ampm.lower().startswith("p") else 0)
    return hour if hour <= _MAX_HOUR else None


def moment(match: re.Match[str], now: datetime, local: tzinfo) -> datetime | None:
    """The reset moment a ``_MOMENT`` match names, or None when it names none. Pure.

    A clock alone is its next occurrence after ``now``; a date without a year
    is its next occurrence no more than a day in the past (a reset "Jan 2"
    printed on Dec 30 is next year).
    """
    if match.group("ampm") is None and match.group("minute") is None:
        return None  # a bare number ("resets 3 times") is no clock
    tz = _zone(match.group("zone"), local)
    hour = _hour24(int(match.group("hour")), match.group("ampm"))
    minute = int(match.group("minute") or 0)
    if tz is None or hour is None or minute > 59:  # noqa: PLR2004 - minutes of an hour
        return None
    local_now = now.astimezone(tz)
    if match.group("month") is None:
        reset = local_now.replace(hour=hour, minute=minute, second=0, microsecond=0)
        return reset if reset > local_now else reset + timedelta(days=1)
    month = _MONTHS[match.group("month")[:3].lower()]
    year = int(match.group("year") or local_now.year)
    try:
        reset = datetime(year, month, int(match.group("day")), hour, minute, tzinfo=tz)
        if match.group("year") is None and reset < local_now - timedelta(days=1):
            reset = reset.replace(year=year + 1)
    except ValueError:
        return None
    return reset


def retry_after_s(message: str, now: datetime, local: tzinfo | None = None) -> float | None:
    """Seconds from ``now`` until the limit in ``message`` resets, or None if it says not. Pure.

    Args:
        message: the CLI's error text.
        now: the turn's start (interpreting a journal again gives the same answer).
        local: the zone a clock without a zone is read in (the host's; default UTC).

    """
    local = local or ZoneInfo("UTC")
    if m := _EPOCH.search(message):
        return float(m.group(1)) - now.timestamp()
    if m := _SECONDS.search(message):
        return float(m.group(1))
    if m := _DURATION.search(message):
        total = sum(int(n) * _UNIT_S[unit[0].lower()] for n, unit in _PART.findall(m.group(1)))
        return float(total)
    for m in _MOMENT.finditer(message):
        if (reset := moment(m, now, local)) is not None:
            return (reset - now).total_seconds()
    return None
