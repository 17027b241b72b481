"""The status projection: who must act next on each goal, and why. Pure.

Every function here takes typed inputs plus ``now`` and returns records: no
files, no clock, no psutil. :mod:`loopx.status.cache` gathers the inputs from
the runtime root, caches the per-goal views and re-reads only what changed.

The rules, first match wins (see docs/cli.md "loopx status"):

==================  ======  ==============================================
reason              actor   when
==================  ======  ==============================================
gate_pending        human   done (as below), with a gate open (a merge's gate: the base
                            moved meanwhile); the work waits on the answer
done                none    registry status ``done`` or the last turn completed (and the
                            goal was not made active again after it)
paused              human   registry status ``paused`` or quota compute 0
quarantined         human   a turn journal of the goal is in ``quarantine/``,
                            or one of its files is damaged
gate_pending        human   a gate is open
running             agent   a live lease (an expired one is reported too)
waiting             none    another goal's turn holds the workdir ("workdir busy: goal X
                            runs a turn there"; ``goals/<id>/turns/.workdir-wait.json``)
failing             human   ``consecutive_failures`` >= FAILING_HUMAN_AFTER
quota_exhausted     none    the window's allowance is spent
failing             agent   failures below the threshold (retried after backoff)
waiting             none    ``next_eligible_at`` is in the future
ready               agent   none of the above
==================  ======  ==============================================

``crash_loop`` (human) overlays ``ready``/``running`` when the lease holder's
agent slot, or every agent slot, is in a crash loop: no agent can make
progress there until a human looks at the logs.

``waiting`` on an account overlays ``ready``/``waiting`` when the
goal's account holds its goals back: ``account NAME limited until 19:05:34
UTC (seen by goal G, turn T)``, overloaded, probing, staggered (actor none,
until the account's time), or spent or needing a human (actor human). It is
applied when the queue is assembled, from the account files read then, so a
parked account shows at once on every goal of it without re-projecting them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

from loopx.accounts.model import AccountSummary, Condition, account_of
from loopx.fleet import AgentHeartbeat, FleetRecord
from loopx.model import iso_utc
from loopx.quota.budget import QuotaView, quota_view, spend_at
from loopx.quota.window import SpendColumns, WindowSpend
from loopx.registry.model import Goal, GoalStatus
from loopx.registry.quota_policy import QuotaPolicy
from loopx.sandbox import sandbox_line
from loopx.state import GoalState
from loopx.status.fleetview import fleet_view, overlay_crash_loop
from loopx.status.view import (
    Actor,
    FleetView,
    GoalStatusView,
    LastTurn,
    LeaseView,
    ProbeObservation,
    StatusCounts,
    StatusProjection,
    StatusReason,
    share_values,
    trusted,
)
from loopx.turn.historyline import HistoryLine
from loopx.turn.lease import Lease
from loopx.turn.outcome import ResultKind
from loopx.turn.workdir import WorkdirWait

FAILING_HUMAN_AFTER: Final = 3  # consecutive failed turns before a human must look
_OBJECTIVE_CHARS: Final = 200
_SUMMARY_CHARS: Final = 500
NO_SPEND: Final = SpendColumns()  # a goal that never ran has no bucket (frozen, so shared)


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


# --- inputs ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GoalInputs:
    """Everything the projection reads about one goal (gathered by the caller).

    ``history`` is the tail of ``history.jsonl``, oldest first; ``spend`` the
    ledger's minute buckets reaching back at least to the quota window's start
    (:func:`loopx.quota.ledger.window_spend`); ``damage`` one line per
    file that could not be read; ``quarantined`` the names of the goal's
    journals in ``quarantine/``.
    """

    goal: Goal
    state: GoalState | None = None
    lease: Lease | None = None
    history: Sequence[HistoryLine] = ()
    spend: SpendColumns = NO_SPEND
    quarantined: Sequence[str] = ()
    damage: Sequence[str] = ()
    probe: ProbeObservation | None = None
    # The goal waits for another goal's turn in its workdir (goals/<id>/turns/.workdir-wait.json).
    workdir_wait: WorkdirWait | None = None


# --- pieces ------------------------------------------------------------------------------------


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def _norm(text: str) -> str:
    return " ".join(text.split()).casefold()


def _host_activity(lease: Lease) -> str:
    """``; last output <time>; stalled: rung 1 of 4, resuming session``, as far as known."""
    parts = []
    if lease.last_output_at is not None:
        parts.append(f"last output {iso_utc(lease.last_output_at, 'seconds')}")
    if lease.activity:
        parts.append(lease.activity)
    return "".join(f"; {p}" for p in parts)


def _lease_view(lease: Lease, now: datetime) -> LeaseView:
    return trusted(
        LeaseView,
        {
            "agent_id": lease.agent_id,
            "hostname": lease.hostname,
            "pid": lease.pid,
            "epoch": lease.epoch,
            "turn_key": lease.turn_key,
            "acquired_at": lease.acquired_at,
            "expires_at": lease.expires_at,
            "expired": lease.expires_at <= now,
            "last_output_at": lease.last_output_at,
            "activity": lease.activity,
        },
    )


def _last_turn(history: Sequence[HistoryLine]) -> LastTurn | None:
    if not history:
        return None
    h = history[-1]
    return trusted(
        LastTurn,
        {
            "turn_key": h.turn_key,
            "seq": h.seq,
            "status": h.status,
            "kind": h.kind,
            "failure": h.failure,
            "summary": _clip(h.summary, _SUMMARY_CHARS),
            "next_action": h.next_action,
            "ended_at": h.ended_at,
            "failure_message": h.failure_message,
            "account": h.account,
            "host_kind": h.host_kind,
            "handed_off": h.handed_off,
        },
    )


def _recommended_next_action(history: Sequence[HistoryLine]) -> str | None:
    for h in reversed(history):
        if h.status == "committed" and h.next_action:
            return h.next_action
    return None


def _warnings(inputs: GoalInputs, state: GoalState, now: datetime) -> list[str]:
    out: list[str] = []
    recommended = _recommended_next_action(inputs.history)
    if recommended and state.next_action and _norm(recommended) != _norm(state.next_action):
        out.append(
            f"next action disagrees: state says {_clip(state.next_action, 120)!r}, "
            f"the last run recommended {_clip(recommended, 120)!r}"
        )
    if inputs.lease is not None and inputs.lease.expires_at <= now:
        out.append(
            f"lease of agent {inputs.lease.agent_id} expired at "
            f"{iso_utc(inputs.lease.expires_at)}; the next agent takes it over"
        )
    out.extend(inputs.damage)
    return out


def _decide(  # noqa: C901, PLR0911, PLR0912 - one branch per rule of the table in the module docstring
    inputs: GoalInputs, state: GoalState, quota: QuotaView, now: datetime
) -> tuple[Actor, StatusReason, str, datetime | None]:
    goal, lease, failures = inputs.goal, inputs.lease, state.consecutive_failures
    last = inputs.history[-1] if inputs.history else None
    # A goal made active after its last turn completed (resumed, or a failed merge sent it
    # back to its agent) is not done.
    reactivated = last is not None and goal.updated_at > last.ended_at
    completed = last is not None and last.kind is ResultKind.COMPLETED and not reactivated
    if (goal.status is GoalStatus.DONE or completed) and state.open_gates:
        gate = state.open_gates[0]
        return (
            Actor.HUMAN,
            StatusReason.GATE_PENDING,
            (
                f"done, and gate {gate.id} waits for an answer: "
                f"`loopx gate resolve {goal.id} --answer TEXT`"
            ),
            None,
        )
    if goal.status is GoalStatus.DONE or completed:
        return Actor.NONE, StatusReason.DONE, "done; nothing left to do", None
    if goal.status is GoalStatus.PAUSED:
        return (
            Actor.HUMAN,
            StatusReason.PAUSED,
            f"paused; resume with `loopx goal resume {goal.id}`",
            None,
        )
    if goal.quota.compute == 0:
        return (
            Actor.HUMAN,
            StatusReason.PAUSED,
            (
                "quota compute is 0 (a hard pause); raise it with `loopx goal add --update "
                f"{goal.id} --quota-compute F`"
            ),
            None,
        )
    if inputs.quarantined or inputs.damage:
        what = (
            f"{len(inputs.quarantined)} turn journal(s) quarantined ({', '.join(inputs.quarantined[:3])})"
            if inputs.quarantined
            else inputs.damage[0]
        )
        return Actor.HUMAN, StatusReason.QUARANTINED, f"{what}; inspect with `loopx doctor`", None
    gates = state.open_gates
    if gates:
        return (
            Actor.HUMAN,
            StatusReason.GATE_PENDING,
            f"gate {gates[0].id} waits for an answer: `loopx gate resolve {goal.id} --answer TEXT`",
            None,
        )
    if lease is not None:
        since = iso_utc(lease.acquired_at, "seconds")
        if lease.expires_at > now:
            return (
                Actor.AGENT,
                StatusReason.RUNNING,
                f"agent {lease.agent_id} runs a turn since {since}{_host_activity(lease)}",
                None,
            )
        return (
            Actor.AGENT,
            StatusReason.RUNNING,
            f"agent {lease.agent_id}'s lease expired; another agent takes the goal over",
            None,
        )
    if inputs.workdir_wait is not None:  # one turn per workdir
        return Actor.NONE, StatusReason.WAITING, inputs.workdir_wait.describe(), None
    failure = last.failure if last is not None and last.failure else "unknown reason"
    if last is not None and last.status == "stopped":
        # A stop is not a failure (the streak is kept, not raised): name it as what it was.
        failure = "the last turn was stopped, not failed"
    if failures >= FAILING_HUMAN_AFTER:
        return (
            Actor.HUMAN,
            StatusReason.FAILING,
            (
                f"the last {failures} turns failed (latest: {failure}); read the run logs in "
                f"goals/{goal.id}/runs/ and fix the cause; agents keep retrying with backoff"
            ),
            state.eligible_at(now),
        )
    if quota.exhausted is not None:
        when = iso_utc(quota.refills_at, "seconds") if quota.refills_at else "later"
        return (
            Actor.NONE,
            StatusReason.QUOTA_EXHAUSTED,
            (
                f"the {quota.exhausted} budget of the {quota.window_hours:g}h window is spent; "
                f"eligible again at {when}"
            ),
            quota.refills_at,
        )
    later = eligible if (eligible := state.eligible_at(now)) and eligible > now else None
    if failures > 0:
        when = f"at {iso_utc(later, 'seconds')}" if later else "now"
        return (
            Actor.AGENT,
            StatusReason.FAILING,
            f"{failures} failed turn(s) in a row (latest: {failure}); an agent retries {when}",
            later,
        )
    if later is not None:
        return (
            Actor.NONE,
            StatusReason.WAITING,
            f"waiting until {iso_utc(later, 'seconds')}",
            later,
        )
    return Actor.AGENT, StatusReason.READY, "ready for the next agent", None


def _recheck_at(
    inputs: GoalInputs, state: GoalState, spend: WindowSpend, quota: QuotaView, now: datetime
) -> datetime | None:
    # The oldest bucket of the window is the next to leave it and change the spend.
    last_end = spend.buckets.last_end
    leaves = (
        datetime.fromtimestamp(last_end[0], UTC) + inputs.goal.quota.window if last_end else None
    )
    candidates = [
        state.eligible_at(now),
        inputs.lease.expires_at if inputs.lease is not None else None,
        quota.refills_at,
        leaves,
    ]
    future = [t for t in candidates if t is not None and t > now]
    return min(future) if future else None


# The state of a goal without a state.json. The projection never reads a
# state's goal_id, so one frozen instance serves every such goal (validating
# one per goal was a tenth of a cold refresh's projection).
_FRESH_STATE: Final = GoalState(goal_id="-")


@dataclass(frozen=True, slots=True)
class _Unspent:
    """The account of a window nothing was spent in, and when it changes by time alone."""

    spend: WindowSpend
    quota: QuotaView
    # What _recheck_at gives a goal without state, lease or buckets: the refill, if one is due.
    recheck_at: datetime | None


# Accounts of unspent windows by (now, the policy's field values): hashing and
# comparing the policy models themselves cost as much as the rest of an account.
_UNSPENT: dict[tuple[object, ...], _Unspent] = {}
_UNSPENT_MAX: Final = 64


def _unspent(policy: QuotaPolicy, now: datetime) -> _Unspent:
    """The window of a goal that spent nothing in it, and its account; pure, so shared.

    Most goals of a large root have no spend in their window (they never ran or
    ran long ago) and the same policy: one account serves them all at ``now``.
    """
    key = (now, *policy.__dict__.values())
    account = _UNSPENT.get(key)
    if account is None:
        if len(_UNSPENT) >= _UNSPENT_MAX:
            _UNSPENT.clear()
        spend = spend_at(policy, NO_SPEND, now=now)
        quota = quota_view(policy, spend, now=now)
        refills = quota.refills_at if quota.refills_at and quota.refills_at > now else None
        account = _UNSPENT[key] = _Unspent(spend, quota, refills)
    return account


def _never_ran(inputs: GoalInputs) -> bool:
    """No state, lease, history or spend: what most goals of a large root look like."""
    return (
        inputs.state is None
        and inputs.lease is None
        and not inputs.history
        and len(inputs.spend) == 0
    )


# The fields of plain never-ran views (no damage, quarantine or probe) by (now, the goal's
# fields but its id): goals of one policy share them but for the id, unless it is in the
# explanation. The status cache rebuilds thousands of such views when it loads its shards.
_PLAIN_UNRUN: dict[tuple[object, ...], dict[str, object]] = {}
_PLAIN_UNRUN_MAX: Final = 256


def _unrun_key(goal: Goal, now: datetime) -> tuple[object, ...]:
    """What a never-ran goal's view depends on besides its id: its key in ``_PLAIN_UNRUN``."""
    return (
        now, goal.status, goal.priority, goal.objective, goal.account, goal.host.kind,
        tuple(goal.fallback_accounts) if goal.handoff else (),
        goal.sandbox is not None and sandbox_line(goal.sandbox), *goal.quota.__dict__.values(),
    )  # fmt: skip


def _shared_unrun(key: tuple[object, ...], goal_id: str) -> GoalStatusView | None:
    """The view of goal ``goal_id`` from the fields shared under ``key``; None before the first."""
    shared = _PLAIN_UNRUN.get(key)
    if shared is None:
        return None
    return trusted(
        GoalStatusView, {**shared, "goal_id": goal_id, "warnings": [], "quarantined": []}
    )


def _head(
    goal: Goal, decided: tuple[Actor, StatusReason, str, datetime | None]
) -> dict[str, object]:
    """A view's first fields: the goal's own, then who acts and why (``_decide``'s answer)."""
    actor, reason, explanation, eligible = decided
    return {
        "goal_id": goal.id,
        "objective": _clip(goal.objective, _OBJECTIVE_CHARS),
        "goal_status": goal.status,
        "priority": goal.priority,
        "actor": actor,
        "reason": reason,
        "explanation": explanation,
        "next_eligible_at": eligible,
    }


def _sandbox(goal: Goal) -> str | None:
    return sandbox_line(goal.sandbox) if goal.sandbox is not None else None


def _project_unrun(inputs: GoalInputs, now: datetime) -> GoalStatusView:
    """:func:`project_goal` of a goal that never ran, from facts that are validated already.

    Such a view differs from its neighbours' only in the goal's own fields, so
    it is assembled as it is (:func:`trusted`) instead of validated: at 10,000
    goals, validation was most of a cold projection. The rules are the same
    ``_decide``; the tests compare these views with validated ones. Goals of
    one policy without damage, quarantine or probe share one set of fields.
    """
    goal = inputs.goal
    key: tuple[object, ...] | None = None
    if not inputs.damage and not inputs.quarantined and inputs.probe is None:
        key = _unrun_key(goal, now)
        view = _shared_unrun(key, goal.id)
        if view is not None:
            return view
    account = _unspent(goal.quota, now)
    decided = _decide(inputs, _FRESH_STATE, account.quota, now)
    fields = _head(goal, decided) | {
        "lease": None,
        "last_turn": None,
        "quota": account.quota,
        "next_action": None,
        "open_gates": 0,
        "gate_question": None,
        "consecutive_failures": 0,
        "turns_applied": 0,
        "warnings": list(inputs.damage),
        "quarantined": list(inputs.quarantined),
        "probe": inputs.probe,
        "recheck_at": account.recheck_at,
        "last_check": None,
        "account": account_of(goal.account, goal.host.kind),
        "handoffs": 0,
        "fallback_accounts": list(goal.fallback_accounts) if goal.handoff else [],
        "host_kind": goal.host.kind,
        "sandbox": _sandbox(goal),
    }
    # Its values shared (in place: ``fields`` is the view's), so the views made from them
    # hold shared values already (share_values: a long-lived cache's memory).
    view = share_values(trusted(GoalStatusView, fields))
    if key is not None and goal.id not in decided[2]:  # the explanation names no goal
        if len(_PLAIN_UNRUN) >= _PLAIN_UNRUN_MAX:
            _PLAIN_UNRUN.clear()
        _PLAIN_UNRUN[key] = fields
    return view


def project_unrun(goal: Goal, *, now: datetime) -> GoalStatusView:
    """:func:`project_goal` of a goal without files but its goal file, and no quarantine or probe.

    Its values are shared (:func:`loopx.status.view.share_values`), as are a
    never-ran view's from :func:`project_goal`.
    """
    view = _shared_unrun(_unrun_key(goal, now), goal.id)
    return view if view is not None else _project_unrun(GoalInputs(goal=goal), now)


def project_goal(inputs: GoalInputs, *, now: datetime) -> GoalStatusView:
    """One goal's view: actor, reason, explanation and the facts behind them. Pure."""
    if _never_ran(inputs):
        return _project_unrun(inputs, now)
    goal = inputs.goal
    state = inputs.state or _FRESH_STATE
    if len(inputs.spend) == 0:
        account = _unspent(goal.quota, now)
        spend, quota = account.spend, account.quota
    else:
        spend = spend_at(goal.quota, inputs.spend, now=now)
        quota = quota_view(goal.quota, spend, now=now)
    gates = state.open_gates
    # Every value comes from a validated record or is computed here with its field's type:
    # assembled as it is, like a never-ran goal's view (tests compare it with a validated twin).
    return trusted(
        GoalStatusView,
        _head(goal, _decide(inputs, state, quota, now))
        | {
            "lease": _lease_view(inputs.lease, now) if inputs.lease is not None else None,
            "last_turn": _last_turn(inputs.history),
            "quota": quota,
            "next_action": state.next_action,
            "open_gates": len(gates),
            "gate_question": gates[0].question if gates else None,
            "consecutive_failures": state.consecutive_failures,
            "turns_applied": state.turn_seq,
            "warnings": _warnings(inputs, state, now),
            "quarantined": list(inputs.quarantined),
            "probe": inputs.probe,
            "recheck_at": _recheck_at(inputs, state, spend, quota, now),
            "last_check": state.last_check,
            "account": account_of(goal.account, goal.host.kind),
            "handoffs": state.handoffs,
            "fallback_accounts": list(goal.fallback_accounts) if goal.handoff else [],
            "host_kind": goal.host.kind,
            "sandbox": _sandbox(goal),
        },
    )


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
