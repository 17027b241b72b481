"""``root.status``: `loopx status` (the attention queue) and `loopx refresh`."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import ClassVar

from loopx.model import utcnow
from loopx.root import Layout
from loopx.status.cache import DEFAULT_TTL_S
from loopx.status.current import (
    clear_status_cache,
    current_status,
    refresh_status,
    status_document,
)
from loopx.status.refresh import RefreshReport
from loopx.status.view import Actor, StatusProjection


def _filtered(
    projection: StatusProjection, actor: Actor | str | None, limit: int | None
) -> StatusProjection:
    goals = [g for g in projection.goals if actor is None or g.actor == actor]
    if limit is not None:
        goals = goals[: max(0, limit)]
    if len(goals) == len(projection.goals):
        return projection
    return projection.model_copy(update={"goals": goals})


@dataclass(frozen=True, slots=True)
class Status:
    """The status projection of one root."""

    layout: Layout
    DEFAULT_TTL_S: ClassVar[float] = DEFAULT_TTL_S  # `loopx status --ttl` default

    def project(
        self,
        *,
        ttl_s: float = DEFAULT_TTL_S,
        full_scan_after_s: float = 0.0,
        actor: Actor | str | None = None,
        limit: int | None = None,
        clear_cache: bool = False,
        force: bool = False,
        now: datetime | None = None,
    ) -> StatusProjection:
        """`loopx status`: who must act next on each goal, and why.

        The goals hinted since the last call are read again; all of them when the
        cache is older than ``ttl_s``; ``actor``
        and ``limit`` filter the goals as ``--actor`` and ``--limit`` do;
        ``force`` re-reads every goal whatever the cache holds.
        """
        if clear_cache:
            clear_status_cache(self.layout)
        at = now or utcnow()
        refresh_status(
            self.layout, now=at, ttl_s=ttl_s, full_scan_after_s=full_scan_after_s, force=force
        )
        projection = current_status(self.layout, now=at)
        return _filtered(projection, actor, limit)

    def document(
        self,
        *,
        ttl_s: float = DEFAULT_TTL_S,
        full_scan_after_s: float = 0.0,
        now: datetime | None = None,
    ) -> bytes:
        """`loopx status --json`'s bytes (every goal), kept for the next warm CLI to print as is.

        The same document as ``project()`` serialised with an indent of 2.
        """
        return status_document(
            self.layout,
            now=now or utcnow(),
            ttl_s=ttl_s,
            full_scan_after_s=full_scan_after_s,
        )

    def clear_cache(self) -> None:
        """`loopx status --clear-cache`: the next projection is rebuilt from scratch."""
        clear_status_cache(self.layout)

    def refresh(self, *, full: bool = False, now: datetime | None = None) -> RefreshReport:
        """`loopx refresh`: refresh the cache now, re-reading changed goals (all with ``full``)."""
        return refresh_status(
            self.layout, now=now or utcnow(), ttl_s=0.0, full_scan_after_s=0.0 if full else 60.0
        )
