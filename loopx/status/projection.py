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

The queue of every goal in order, and what overlays a goal's view there (a crash loop, an
account's hold, a quarantined host kind), is :mod:`loopx.status.queue`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

from loopx.accounts.records import account_of
from loopx.model import iso_utc
from loopx.quota.budget import QuotaView, quota_view, spend_at
from loopx.quota.window import WindowSpend
from loopx.registry.goalrecords import Goal, GoalStatus
from loopx.registry.quota_policy import QuotaPolicy
from loopx.sandbox import sandbox_line
from loopx.state import GoalState
from loopx.status.inputs import NO_SPEND, GoalInputs
from loopx.status.view import (
    Actor,
    GoalStatusView,
    LastTurn,
    LeaseView,
    StatusReason,
    share_values,
    trusted,
)
from loopx.turn.historyline import HistoryLine
from loopx.turn.lease import Lease
from loopx.turn.outcome import ResultKind

FAILING_HUMAN_AFTER: Final = 3  # consecutive failed turns before a human must look
_OBJECTIVE_CHARS: Final = 200
_SUMMARY_CHARS: Final = 500


# --- inputs ------------------------------------------------------------------------------------


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
