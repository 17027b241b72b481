"""Provider usage windows read from the rate-limit headers of the provider's answers (pure).

A sandboxed turn's proxy records the latest value of each rate-limit header
the account's provider sent (:mod:`loopx.accounts.headers`); here they become
:class:`~loopx.accounts.windows.UsageWindow` values in the names the CLIs
report them by, so that admission reads one set of windows whichever told it:

* OpenAI (Codex): ``x-codex-<primary|secondary>-used-percent``, ``-window-minutes``
  and ``-reset-at`` (epoch seconds) or ``-reset-after-seconds``;
* Anthropic (Claude Code): ``anthropic-ratelimit-unified-<5h|7d|7d_opus|...>-utilization``
  (a fraction) and ``-reset`` (epoch seconds), named ``five_hour``, ``seven_day``, ...
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Final

from loopx.accounts.windows import UsageWindow

_CODEX: Final = re.compile(r"x-codex-(?P<name>[a-z]+)-used-percent")
_ANTHROPIC: Final = re.compile(r"anthropic-ratelimit-unified-(?P<code>[0-9a-z_]+)-utilization")
_ANTHROPIC_NAMES: Final = {"5h": "five_hour", "7d": "seven_day"}


def _number(text: str | None) -> float | None:
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


def _epoch(text: str | None) -> datetime | None:
    value = _number(text)
    return datetime.fromtimestamp(value, UTC) if value is not None and value > 0 else None


def _anthropic_name(code: str) -> str:
    """``5h`` -> ``five_hour``, ``7d_opus`` -> ``seven_day_opus``: the CLI's own names."""
    head, _, rest = code.partition("_")
    name = _ANTHROPIC_NAMES.get(head, head)
    return f"{name}_{rest}" if rest else name


def header_windows(headers: Mapping[str, tuple[str, datetime]]) -> list[UsageWindow]:
    """The windows in ``headers`` (lower-case name -> (value, when seen)). Pure.

    A header whose value does not parse is left out; a window is dated by when
    its utilization header was seen.
    """
    out: list[UsageWindow] = []
    for key, (value, seen) in headers.items():
        if (codex := _CODEX.fullmatch(key)) is not None:
            name = codex["name"]
            used = _number(value)
            if used is None:
                continue
            minutes = _number(headers.get(f"x-codex-{name}-window-minutes", ("", seen))[0])
            resets = _epoch(headers.get(f"x-codex-{name}-reset-at", ("", seen))[0])
            after = _number(headers.get(f"x-codex-{name}-reset-after-seconds", ("", seen))[0])
            if resets is None and after is not None:
                resets = seen + timedelta(seconds=after)
            out.append(_window(name, used, minutes, resets, seen))
        elif (claude := _ANTHROPIC.fullmatch(key)) is not None:
            fraction = _number(value)
            if fraction is None:
                continue
            reset = headers.get(f"anthropic-ratelimit-unified-{claude['code']}-reset", ("", seen))
            name = _anthropic_name(claude["code"])
            out.append(_window(name, fraction * 100, None, _epoch(reset[0]), seen))
    return sorted(out, key=lambda w: w.name)


def _window(
    name: str, used: float, minutes: float | None, resets: datetime | None, seen: datetime
) -> UsageWindow:
    return UsageWindow(
        name=name,
        used_percent=min(max(used, 0.0), 1000.0),
        window_minutes=int(minutes) if minutes is not None and minutes >= 1 else None,
        resets_at=resets,
        seen_at=seen,
    )


__all__ = ["header_windows"]
