"""The attention queue: every goal's view in order, with counts and the overlays. Pure.

The views come from :mod:`loopx.status.projection`. ``crash_loop`` (human) overlays
``ready``/``running`` when the lease holder's agent slot, or every agent slot, is in a crash
loop (:func:`loopx.status.fleetview.overlay_crash_loop`).

``waiting`` on an account overlays ``ready``/``waiting`` when the goal's account holds its
goals back: ``account NAME limited until 19:05:34 UTC (seen by goal G, turn T)``,
overloaded, probing, staggered (actor none, until the account's time), or spent or needing a
human (actor human). It is applied when the queue is assembled, from the account files read
then, so a parked account shows at once on every goal of it without re-projecting them. A host
kind the canary quarantined holds its goals the same way.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Final

from loopx.accounts.records import AccountSummary, Condition
from loopx.fleet import AgentHeartbeat, FleetRecord
from loopx.registry.goalrecords import GoalStatus
from loopx.status.fleetview import fleet_view, overlay_crash_loop
from loopx.status.inputs import GoalInputs
from loopx.status.projection import project_goal
from loopx.status.view import (
    Actor,
    FleetView,
    GoalStatusView,
    StatusCounts,
    StatusProjection,
    StatusReason,
)

_ACTOR_RANK: Final = {Actor.HUMAN: 0, Actor.AGENT: 1, Actor.NONE: 2}


# Within an actor: the most urgent first.
_REASON_RANK: Final = {
    StatusReason.CRASH_LOOP: 0,
    StatusReason.QUARANTINED: 1,
    StatusReason.FAILING: 2,
    StatusReason.GATE_PENDING: 3,
    StatusReason.PAUSED: 4,
    StatusReason.RUNNING: 5,
    StatusReason.READY: 6,
    StatusReason.QUOTA_EXHAUSTED: 7,
    StatusReason.WAITING: 8,
    StatusReason.DONE: 9,
}


def order_key(view: GoalStatusView) -> tuple[int, int, int, str]:
    """Humans first, then agents, then quiet goals; urgent reasons, then priority, then id."""
    return (_ACTOR_RANK[view.actor], _REASON_RANK[view.reason], -view.priority, view.goal_id)


_HELD_BY_ACCOUNT: Final = frozenset({StatusReason.READY, StatusReason.WAITING})


_ACCOUNT_NEEDS_HUMAN: Final = frozenset(
    {Condition.NEEDS_HUMAN, Condition.LOGIN_REFUSED, Condition.BUDGET_SPENT, Condition.DAMAGED}
)


def overlay_accounts(
    views: Iterable[GoalStatusView], accounts: Sequence[AccountSummary]
) -> tuple[list[GoalStatusView], list[AccountSummary]]:
    """Goals their account holds back shown ``waiting`` on it; each account with its goals. Pure.

    Only ``ready`` and ``waiting`` goals are overlaid: a running, gated,
    paused, failing or done goal says so first; a goal the account lets past
    its admission mark (its priority above ``lets_past_priority``) is not held,
    nor is a goal a fallback account that holds nothing back may take on (hand-off).
    """
    if not accounts:  # no account to show or to hold a goal back: the views as they are
        return list(views), []
    holding = {a.name: a for a in accounts if a.message}
    goals: dict[str, list[str]] = {a.name: [] for a in accounts}
    waiting: dict[str, list[str]] = {a.name: [] for a in accounts}
    root = next((a for a in accounts if a.whole_root and a.message), None)
    out = []
    for view in views:
        name = view.account or ""
        goals.setdefault(name, []).append(view.goal_id)
        hold = root or holding.get(name)
        if hold is not None and hold.lets_past_priority is not None:
            hold = None if view.priority > hold.lets_past_priority else hold
        if root is None and not all(f in holding for f in view.fallback_accounts):
            hold = None  # a fallback account takes its turns on (hand-off)
        if hold is not None and view.reason in _HELD_BY_ACCOUNT:
            human = hold.state in _ACCOUNT_NEEDS_HUMAN
            view = view.model_copy(  # noqa: PLW2901 - the overlaid view replaces it
                update={
                    "actor": Actor.HUMAN if human else Actor.NONE,
                    "reason": StatusReason.WAITING,
                    "explanation": hold.message,
                    "next_eligible_at": hold.until,
                }
            )
            waiting.setdefault(hold.name, []).append(view.goal_id)
        out.append(view)
    summaries = [
        a.model_copy(
            update={
                "goals": sorted(goals.get(a.name, [])) if not a.whole_root else [],
                "waiting": sorted(waiting.get(a.name, [])),
            }
        )
        for a in accounts
    ]
    return out, summaries


def overlay_hosts(
    views: Iterable[GoalStatusView], quarantined: Mapping[str, str]
) -> Iterable[GoalStatusView]:
    """Goals of a host kind the canary quarantined shown ``waiting`` on it. Pure.

    ``quarantined``: the reason of each quarantined kind (``loopx hosts``). As for
    an account's hold, only ``ready`` and ``waiting`` goals are overlaid.
    """
    if not quarantined:
        return views
    out = []
    for view in views:
        kind = view.host_kind
        if kind is not None and kind in quarantined and view.reason in _HELD_BY_ACCOUNT:
            view = view.model_copy(  # noqa: PLW2901 - the overlaid view replaces it
                update={
                    "actor": Actor.HUMAN,  # `loopx hosts check KIND [--accept]`
                    "reason": StatusReason.WAITING,
                    "explanation": f"{quarantined[kind]} (`loopx hosts check {kind}`, "
                    "or with `--accept` to trust it)",
                    "next_eligible_at": None,
                }
            )
        out.append(view)
    return out


def assemble(
    views: Iterable[GoalStatusView],
    *,
    fleet: FleetView,
    generated_at: datetime,
    checked_at: datetime,
    quarantined_total: int = 0,
    accounts: Sequence[AccountSummary] = (),
    hosts: Mapping[str, str] | None = None,
) -> StatusProjection:
    """The ordered attention queue with counts, the crash-loop, host and account overlays. Pure.

    ``hosts``: the reason of each host kind the canary quarantined.
    """
    held, summaries = overlay_accounts(overlay_hosts(views, hosts or {}), accounts)
    ordered = sorted((overlay_crash_loop(v, fleet) for v in held), key=order_key)
    # One count per (actor, reason) pair: a few dozen keys to sum, not two per goal.
    pairs = Counter([(v.actor, v.reason) for v in ordered])
    actors: Counter[Actor] = Counter()
    reasons: Counter[StatusReason] = Counter()
    for (actor, reason), n in pairs.items():
        actors[actor] += n
        reasons[reason] += n
    return StatusProjection(
        generated_at=generated_at,
        checked_at=checked_at,
        counts=StatusCounts(
            total=len(ordered),
            by_actor={a.value: actors[a] for a in Actor},
            by_reason={r.value: reasons[r] for r in StatusReason},
        ),
        fleet=fleet,
        quarantined_total=quarantined_total,
        accounts=summaries,
        goals=ordered,
    )


def project(
    goals: Iterable[GoalInputs],
    *,
    fleet: FleetRecord | None,
    heartbeats: Iterable[AgentHeartbeat],
    quarantined_total: int,
    now: datetime,
    accounts: Sequence[AccountSummary] = (),
) -> StatusProjection:
    """The whole projection from scratch (the cache does the same incrementally). Pure."""
    views = [project_goal(g, now=now) for g in goals if g.goal.status is not GoalStatus.ARCHIVED]
    return assemble(
        views,
        fleet=fleet_view(fleet, heartbeats, now=now),
        generated_at=now,
        checked_at=now,
        quarantined_total=quarantined_total,
        accounts=accounts,
    )
