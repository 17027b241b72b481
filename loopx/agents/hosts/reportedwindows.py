"""The provider usage windows each CLI reports, read from its output or session records (pure).

* Codex (0.171) reads the ``x-codex-primary-used-percent``,
  ``-window-minutes`` and ``-reset-at`` headers (and ``secondary``) of every
  response and records them in its session file
  (``$CODEX_HOME/sessions/YYYY/MM/DD/rollout-...-<thread>.jsonl``), as
  ``event_msg`` records of type ``token_count`` holding ``rate_limits``:
  ``limit_id``, ``primary`` and ``secondary`` (``used_percent``,
  ``window_minutes``, ``resets_at`` in epoch seconds). ``codex exec --json``
  prints none of it.
* Claude Code (2.1) reads the ``anthropic-ratelimit-unified-*`` headers of a
  subscriber's responses and, in ``--output-format stream-json``, prints a
  ``rate_limit_event`` whenever that state changes: ``rate_limit_info`` with
  ``rateLimitType`` (``five_hour``, ``seven_day``, ``seven_day_opus``, ...),
  ``utilization`` (a fraction, given from a warning threshold on),
  ``resetsAt`` (epoch seconds) and ``status`` (``rejected`` at the wall).
  Its ``json`` output reports none of it.
* Gemini CLI (0.61) reports a quota only when it is spent: its daily quota
  error is the ``daily`` window at 100%.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any, Final

from loopx.accounts.windows import UsageWindow

RECORDS_TAIL_BYTES: Final = 256 * 1024  # the newest snapshot is in a session file's last lines
CODEX_LIMIT: Final = "codex"  # the limit id of the account's own windows (no prefix in names)
MAX_EPOCH_S: Final = 1e11  # a reset further out is not a time (year 5138)
MAX_PERCENT: Final = 1000.0  # what a report may claim at most (AdmissionPolicy's bound)
SAFE_ID: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,127}")


def _epoch(value: object) -> datetime | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and 0 < value < MAX_EPOCH_S:
        return datetime.fromtimestamp(value, UTC)
    return None


def _stamp(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        at = datetime.fromisoformat(value)
    except ValueError:
        return None
    return at if at.tzinfo is not None else None


def _percent(value: object) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value <= MAX_PERCENT:
        return float(value)
    return None


def _json_lines(text: str) -> Iterable[dict[str, Any]]:
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped.startswith("{"):
            continue
        try:
            value = json.loads(stripped)
        except ValueError:
            continue
        if isinstance(value, dict):
            yield value


def _newest(windows: Iterable[UsageWindow]) -> list[UsageWindow]:
    """The last report of each window, by name."""
    out: dict[str, UsageWindow] = {}
    for window in windows:
        out[window.name] = window
    return sorted(out.values(), key=lambda w: w.name)


def codex_snapshot(snapshot: dict[str, Any], *, seen_at: datetime | None) -> list[UsageWindow]:
    """The windows of one Codex ``rate_limits`` snapshot. Pure."""
    limit = snapshot.get("limit_id")
    prefix = f"{limit}:" if isinstance(limit, str) and limit and limit != CODEX_LIMIT else ""
    out = []
    for slot in ("primary", "secondary"):
        part = snapshot.get(slot)
        if not isinstance(part, dict):
            continue
        used = _percent(part.get("used_percent"))
        if used is None:
            continue
        minutes = part.get("window_minutes")
        out.append(
            UsageWindow(
                name=prefix + slot,
                used_percent=used,
                window_minutes=minutes if isinstance(minutes, int) and minutes > 0 else None,
                resets_at=_epoch(part.get("resets_at")),
                seen_at=seen_at,
            )
        )
    return out


def codex_windows(records: str) -> list[UsageWindow]:
    """The newest window reports in (the tail of) a Codex session file. Pure."""
    found: list[UsageWindow] = []
    for record in _json_lines(records):
        payload = record.get("payload")
        if not isinstance(payload, dict) or not isinstance(payload.get("rate_limits"), dict):
            continue
        found += codex_snapshot(payload["rate_limits"], seen_at=_stamp(record.get("timestamp")))
    return _newest(found)


def claude_windows(stdout: str) -> list[UsageWindow]:
    """The windows of Claude Code's ``rate_limit_event`` messages (stream-json output). Pure.

    A ``rejected`` window is at 100% whatever utilization it gives.
    """
    found = []
    for message in _json_lines(stdout):
        info = message.get("rate_limit_info")
        if message.get("type") != "rate_limit_event" or not isinstance(info, dict):
            continue
        kind = info.get("rateLimitType")
        if not isinstance(kind, str) or not SAFE_ID.fullmatch(kind):
            continue
        fraction = _percent(info.get("utilization"))
        used = 100.0 if info.get("status") == "rejected" else None
        if used is None and fraction is not None:
            used = fraction * 100
        if used is None:
            continue
        found.append(
            UsageWindow(name=kind, used_percent=used, resets_at=_epoch(info.get("resetsAt")))
        )
    return _newest(found)


def spent_window(name: str, resets_at: datetime | None) -> list[UsageWindow]:
    """A quota the provider said is spent: window ``name`` at 100% until ``resets_at``."""
    return [UsageWindow(name=name, used_percent=100.0, resets_at=resets_at)]
