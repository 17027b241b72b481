"""``root.logs``: `loopx logs`, the agents' and supervisor's logs and a goal's turns."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta

from loopx.errors import UsageError
from loopx.history.logreader import LogEntry, LogQuery, follow, parse_duration, read
from loopx.model import utcnow
from loopx.root import Layout


@dataclass(frozen=True, slots=True)
class Logs:
    """The logs of one root."""

    layout: Layout

    def read(
        self,
        goal_id: str | None = None,
        *,
        agent: int | None = None,
        supervisor: bool = False,
        since: timedelta | str | None = None,
        now: datetime | None = None,
    ) -> list[LogEntry]:
        """Entries oldest first, across rotated files; ``goal_id`` also brings its turns.

        ``since`` is a duration (or its text: ``30s``, ``10m``, ``2h``, ``1d``).

        Raises:
            UsageError: ``since`` is not a duration, or no goal ``goal_id`` is registered.
            InvalidGoalIdError: ``goal_id`` is not a goal id.
        """
        return read(
            self.layout,
            _query(self.layout, goal_id, agent=agent, supervisor=supervisor, since=since, now=now),
        )

    def follow(
        self,
        goal_id: str | None = None,
        *,
        agent: int | None = None,
        supervisor: bool = False,
        since: timedelta | str | None = None,
        stop: Callable[[], bool] = lambda: False,
        poll_s: float = 0.25,
    ) -> Iterator[LogEntry]:
        """:meth:`read`'s entries, then each new one as it is written, until ``stop()``.

        Raises:
            UsageError: as :meth:`read`, before anything is read.
        """
        query = _query(
            self.layout, goal_id, agent=agent, supervisor=supervisor, since=since, now=None
        )
        return follow(self.layout, query, stop=stop, poll_s=poll_s)


def _query(
    layout: Layout,
    goal_id: str | None,
    *,
    agent: int | None,
    supervisor: bool,
    since: timedelta | str | None,
    now: datetime | None,
) -> LogQuery:
    if goal_id is not None:
        from loopx.ids import validate_goal_id  # noqa: PLC0415 - light, but only when asked

        validate_goal_id(goal_id)
        if not _known(layout, goal_id):
            # A typo would print nothing, and `-f` would wait forever for lines that never come.
            raise UsageError(
                f"no goal {goal_id!r} in {layout.root}",
                hint="list the goals with `loopx goal list`; without GOAL `loopx logs` shows all",
            )
    if isinstance(since, str):
        since = parse_duration(since)
    start = None if since is None else (now or utcnow()) - since
    return LogQuery(goal_id=goal_id, agent=agent, supervisor=supervisor, since=start)


def _known(layout: Layout, goal_id: str) -> bool:
    """Whether the root has files of ``goal_id``: registered, or archived (``<id>-<stamp>``)."""
    if layout.goal_dir(goal_id).is_dir():
        return True
    archive = layout.archive_dir
    return archive.is_dir() and any(archive.glob(f"{goal_id}-*"))
