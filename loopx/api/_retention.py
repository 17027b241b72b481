"""``root.retention``: `loopx retention set|show` and `loopx gc`."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from loopx.model import utcnow
from loopx.retention.gc import GcReport, collect
from loopx.retention.policy import (
    RetentionSettings,
    apply_change,
    load_settings,
    retention_change,
    update_settings,
)
from loopx.retention.space import check_space
from loopx.root import Layout


@dataclass(frozen=True, slots=True)
class Retention:
    """What one root keeps of its goals' past, and its disk limits."""

    layout: Layout

    def show(self) -> RetentionSettings:
        """`loopx retention show`: the root's policy, its limits and the goals' overrides.

        Raises:
            CorruptFileError: ``retention.json`` is damaged.
        """
        return load_settings(self.layout)

    def set(
        self,
        *,
        goal_id: str | None = None,
        keep_turns: int | None = None,
        keep_days: float | None = None,
        keep_failed_days: float | None = None,
        max_root_mb: int | None = None,
        min_free_disk_mb: int | None = None,
    ) -> RetentionSettings:
        """`loopx retention set`: change the fields given, of the root or of one goal (``goal_id``).

        ``max_root_mb=0`` removes the size quota.

        Raises:
            UsageError: a value is out of range.
            GoalNotFoundError: ``goal_id`` names no goal.
            CorruptFileError: ``retention.json`` is damaged.
        """
        change = retention_change(
            goal_id=goal_id,
            keep_turns=keep_turns,
            keep_days=keep_days,
            keep_failed_days=keep_failed_days,
            max_root_mb=max_root_mb,
            min_free_disk_mb=min_free_disk_mb,
        )
        if goal_id is not None:
            from loopx.registry.goals import get_goal  # noqa: PLC0415 - only for a goal's override

            get_goal(self.layout, goal_id)
        return update_settings(self.layout, lambda s: apply_change(s, change))

    def gc(
        self,
        *,
        dry_run: bool = False,
        goals: list[str] | None = None,
        now: datetime | None = None,
    ) -> GcReport:
        """`loopx gc`: fold old turns into checkpoints and remove what they replace.

        ``dry_run`` only reports what would go. Leased goals are skipped.
        """
        return collect(self.layout, now=now or utcnow(), dry_run=dry_run, goals=goals)

    def space_problem(self, *, now: datetime | None = None) -> str | None:
        """Why no new turn may start for lack of disk space (with the figures), or None."""
        return check_space(self.layout, now=now or utcnow())
