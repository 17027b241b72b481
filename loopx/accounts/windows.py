"""Provider usage windows, and where an account stops admitting turns in them (pure).

Providers meter a subscription in windows (Codex: a primary and a
secondary window, 5 hours and a week; Claude: ``five_hour``, ``seven_day``,
per-model weekly ones; Gemini: daily quotas). The CLIs report each window's
utilization and reset (:class:`UsageWindow`); the account keeps the latest of
each (:func:`merged`), and :func:`past_mark` says which hold it back under the
account's :class:`AdmissionPolicy`. A window past its reset no longer
counts: what was used in it is gone.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Annotated, Final

from pydantic import Field

from loopx.model import Record, UtcDatetime

DEFAULT_MARK: Final = 95.0  # percent of a window past which no new turn starts
# A window reported with neither a reset nor a length counts this long after it was seen, so
# a report that is never renewed cannot hold an account for ever.
UNDATED_FOR: Final = timedelta(hours=1)
_LABELS: Final = {
    "five_hour": "5-hour",
    "seven_day": "weekly",
    "seven_day_opus": "weekly Opus",
    "seven_day_sonnet": "weekly Sonnet",
    "seven_day_overage_included": "weekly (overage included)",
    "overage": "usage credit",
    "daily": "daily",
}
_MINUTES: Final = {300: "5-hour", 10080: "weekly", 1440: "daily", 60: "hourly"}


class UsageWindow(Record):
    """One provider window as a CLI reported it: how much of it is used, and when it resets.

    ``name`` is the provider's (``primary``, ``five_hour``, ``seven_day_opus``);
    ``seen_at`` is when it was reported (None in a host's outcome: the turn's end).
    """

    name: Annotated[str, Field(min_length=1, max_length=80)]
    used_percent: Annotated[float, Field(ge=0, le=1000, allow_inf_nan=False)]
    window_minutes: Annotated[int, Field(ge=1)] | None = None
    resets_at: UtcDatetime | None = None
    seen_at: UtcDatetime | None = None


class AdmissionPolicy(Record):
    """Where an account stops starting turns: ``loopx account edit --admit-until ...``.

    ``until_percent`` is the mark of every window (None: off); ``windows``
    sets the mark of a window by name (None: off for that one); goals whose
    priority is above ``past_priority`` still start past the mark (None: none).
    """

    until_percent: Annotated[float, Field(gt=0, le=1000, allow_inf_nan=False)] | None = DEFAULT_MARK
    windows: dict[str, Annotated[float, Field(gt=0, le=1000, allow_inf_nan=False)] | None] = Field(
        default_factory=dict
    )
    past_priority: int | None = None

    def mark(self, name: str) -> float | None:
        """The mark of window ``name`` (None: it never holds the account back)."""
        return self.windows.get(name, self.until_percent)

    def lets_past(self, priority: int | None) -> bool:
        """Whether a goal of ``priority`` (None: any goal) still starts past the mark."""
        return (
            self.past_priority is not None
            and priority is not None
            and (priority > self.past_priority)
        )


def label(window: UsageWindow) -> str:
    """The window in words: ``5-hour``, ``weekly``, ``weekly Opus``, else its name."""
    if window.name in _LABELS:
        return _LABELS[window.name]
    minutes = window.window_minutes
    base = window.name.rsplit(":", 1)[-1]
    if minutes is not None and base in ("primary", "secondary"):
        known = _MINUTES.get(minutes)
        words = known or (f"{minutes // 60}-hour" if minutes % 60 == 0 else f"{minutes}-minute")
        prefix = window.name.rsplit(":", 1)[0] + " " if ":" in window.name else ""
        return prefix + words
    return window.name


def counts_until(window: UsageWindow) -> datetime | None:
    """Until when the report of ``window`` holds: its reset, else its length or an hour on."""
    if window.resets_at is not None:
        return window.resets_at
    if window.seen_at is None:
        return None
    if window.window_minutes is not None:
        return window.seen_at + timedelta(minutes=window.window_minutes)
    return window.seen_at + UNDATED_FOR


def live(window: UsageWindow, now: datetime) -> bool:
    """Whether ``window``'s report still holds at ``now`` (its window has not reset since)."""
    until = counts_until(window)
    return until is None or now < until


def merged(
    known: Sequence[UsageWindow], reported: Iterable[UsageWindow], *, at: datetime
) -> list[UsageWindow]:
    """The account's windows after a turn reported ``reported`` (at ``at``). Pure, idempotent.

    Each window keeps its newest report (a report without ``seen_at`` was seen
    ``at``); an older one, from a replayed turn, changes nothing.
    """
    out = {w.name: w for w in known}
    for window in reported:
        seen = window if window.seen_at is not None else window.model_copy(update={"seen_at": at})
        before = out.get(seen.name)
        if before is None or before.seen_at is None or before.seen_at <= seen.seen_at:  # type: ignore[operator]
            out[seen.name] = seen
    return sorted(out.values(), key=lambda w: w.name)


def past_mark(
    windows: Sequence[UsageWindow], policy: AdmissionPolicy, *, now: datetime
) -> list[UsageWindow]:
    """The live windows at or past their mark, the one that resets last first. Pure."""
    over = [
        w
        for w in windows
        if live(w, now) and (mark := policy.mark(w.name)) is not None and w.used_percent >= mark
    ]
    far = datetime.max.replace(tzinfo=now.tzinfo)
    return sorted(over, key=lambda w: counts_until(w) or far, reverse=True)


def parse_mark(text: str) -> tuple[str | None, float | None]:
    """``95%``, ``95``, ``off``, ``NAME=90%``, ``NAME=off``: (window name or None, mark or None).

    Raises:
        ValueError: not a percentage in (0, 1000] or ``off``.
    """
    name, _, value = text.rpartition("=")
    value = value.strip().removesuffix("%").strip()
    if value.lower() == "off":
        return (name.strip() or None), None
    try:
        mark = float(value)
    except ValueError:
        mark = -1.0
    if not 0 < mark <= 1000:  # noqa: PLR2004 - the bounds of AdmissionPolicy's marks
        msg = f"{text!r} is not a percentage like 95% or off"
        raise ValueError(msg)
    return (name.strip() or None), mark


def with_marks(
    policy: AdmissionPolicy,
    marks: Iterable[str] = (),
    *,
    past_priority: int | None = None,
    no_past: bool = False,
) -> AdmissionPolicy:
    """``policy`` with ``--admit-until`` marks, ``--admit-past-priority`` or ``--no-admit-past``.

    Raises:
        ValueError: a mark is not a percentage or ``off``.
    """
    update: dict[str, object] = {}
    windows = dict(policy.windows)
    for text in marks:
        name, mark = parse_mark(text)
        if name is None:
            update["until_percent"] = mark
        else:
            windows[name] = mark
    update["windows"] = windows
    if past_priority is not None:
        update["past_priority"] = past_priority
    if no_past:
        update["past_priority"] = None
    return AdmissionPolicy.model_validate(policy.model_dump() | update)
