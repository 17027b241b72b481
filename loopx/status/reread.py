"""What a status refresh reads again: the shared sources, and one goal's entry from its files.

:class:`~loopx.status.cache.StatusCache` decides which goals and sources
changed; these read them. The shared sources (quarantine, probes) are
listed again only when their directories changed or on a full scan; the
fleet is read on every refresh.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from loopx.history.reader import HistoryCounts
from loopx.memo import fingerprint
from loopx.registry.goalrecords import Goal
from loopx.root import Layout
from loopx.root.hints import HintCursor
from loopx.status.fingerprint import Fingerprint, absent_files
from loopx.status.projection import project_goal, project_unrun
from loopx.status.refresh import CachedGoal, SharedSources, StatusIndex
from loopx.status.sources import (
    NO_COUNTS,
    READ_NAMES,
    current_fleet,
    gather_goal,
    probes_dir,
    quarantine_fingerprint,
    quarantine_listing,
    read_probes,
)
from loopx.status.view import GoalStatusView, share_values


def read_shared(
    layout: Layout,
    index: StatusIndex | None,
    *,
    full: bool,
    goals: Mapping[str, Goal],
    now: datetime,
    registry_fp: list[int],
    hints: HintCursor,
) -> SharedSources:
    """Quarantine and probes (re-listed when their directories changed), and the fleet."""
    quarantine_fp = quarantine_fingerprint(layout)
    quarantine = {g: tuple(v) for g, v in index.quarantine.items()} if index else {}
    quarantined_total = index.quarantined_total if index else 0
    if full or index is None or quarantine_fp != index.quarantine_fp:
        quarantine, quarantined_total = quarantine_listing(layout, set(goals))
    probes_fp = list(fingerprint(probes_dir(layout)))
    probes = None
    if full or index is None or probes_fp != index.probes_fp:
        probes = read_probes(layout)
    return SharedSources(
        registry_fp=registry_fp,
        quarantine_fp=quarantine_fp,
        probes_fp=probes_fp,
        quarantine=quarantine,
        quarantined_total=quarantined_total,
        probes=probes,
        fleet=current_fleet(layout, now=now),
        hints=hints,
    )


def reread_goal(
    layout: Layout,
    goal: Goal,
    fp: Fingerprint,
    previous: CachedGoal | None,
    sources: SharedSources,
    *,
    now: datetime,
) -> CachedGoal:
    """One goal's cache entry read again from its files (``fp`` their fingerprint)."""
    if sources.probes is not None:
        probe = sources.probes.get(goal.id)
    else:
        probe = previous.probe if previous else None
    quarantined = sources.quarantine.get(goal.id, ())
    absent = absent_files(fp)
    if absent >= READ_NAMES and not quarantined and probe is None and not previous:
        # A goal that never ran: nothing to open, nothing to say but its policy (what
        # gather_goal and project_goal would find, without its files).
        return _entry(fp, project_unrun(goal, now=now), counts=NO_COUNTS, epoch=0, shared=True)
    inputs, counts = gather_goal(
        layout,
        goal,
        now=now,
        quarantined=quarantined,
        probe=probe,
        absent=absent,
        counted=previous.history if previous else NO_COUNTS,
    )
    view = project_goal(inputs, now=now)
    epoch = max(
        counts.max_epoch,
        inputs.lease.epoch if inputs.lease else 0,
        previous.epoch if previous else 0,
    )
    return _entry(fp, view, counts=counts, epoch=epoch)


def _entry(
    fp: Fingerprint,
    view: GoalStatusView,
    *,
    counts: HistoryCounts,
    epoch: int,
    shared: bool = False,
) -> CachedGoal:
    """The cache entry of ``view``, its values shared unless they are (``shared``)."""
    at = view.recheck_at
    return CachedGoal(
        fingerprint=fp,
        view=view if shared else share_values(view),
        history=counts,
        epoch=epoch,
        recheck_ts=at.timestamp() if at is not None else None,
        leased=view.lease is not None,
        probe=view.probe,
    )
