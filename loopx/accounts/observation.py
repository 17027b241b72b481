"""What a turn teaches an account, pure: its state after the turn's signal.

:func:`observe` applies one turn's :class:`~loopx.accounts.records.TurnSignal`
to the account's state, fenced by turn key and attempt (a turn key already
applied changes nothing); the windows it reported are kept, newest each. A
signal parks the account (a limit, an overload, a refused login), opens a gate
past its bounds, or (a turn that got through) reopens it. :func:`resolved` is
the state after a human answered the account's gate. What the state then
admits is :mod:`loopx.accounts.rules`' question.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Final

from loopx.accounts.records import (
    APPLIED_KEPT,
    AccountGate,
    AccountState,
    Condition,
    OnLimit,
    Signal,
    TurnSignal,
    is_default,
)
from loopx.accounts.windows import merged
from loopx.model import iso_utc

STAGGER_WINDOW_S: Final = 30.0  # after a probe got through, goals start staggered this long
OVERLOAD_BASE_S: Final = 15.0  # the first overload backs the account off this long, doubling
OVERLOAD_MAX_S: Final = 300.0  # ... to at most this
OVERLOADS_FOR_GATE: Final = 5  # overloads in a row that open a gate (the account's default)
LIMIT_BACKOFF_BASE_S: Final = 60.0  # a probe hitting the limit again waits at least this, doubling
LIMIT_BACKOFF_MAX_S: Final = 3600.0
# A limit without a reset (a bare 429): the account backs off this long, doubling per hit in a
# row, to at most RATE_LIMIT_MAX_S. Short, since it is often a request rate, not a usage window;
# bounded, so twenty goals overnight lose at most that long once it clears, at one probe a try.
RATE_LIMIT_BASE_S: Final = 60.0
RATE_LIMIT_MAX_S: Final = 900.0


def _backoff(base: float, top: float, n: int) -> timedelta:
    return timedelta(seconds=min(base * 2 ** max(n - 1, 0), top))


def observe(state: AccountState, turn: TurnSignal) -> AccountState:
    """The account's state after ``turn``. Pure; a turn applied before changes nothing.

    The windows the turn reported are kept first, whatever its signal (a
    failed turn's report is as true); each keeps its newest report.
    """
    if turn.windows:
        windows = merged(state.windows, turn.windows, at=turn.at)
        if windows != state.windows:
            state = state.model_copy(update={"windows": windows, "updated_at": turn.at})
    return _observed(state, turn)


def _observed(state: AccountState, turn: TurnSignal) -> AccountState:
    """The state after the turn's signal, the windows aside: one step per signal. Pure."""
    if turn.turn_key in state.applied or turn.signal is Signal.NONE:
        return _without_word(state, turn)
    applied = [*state.applied, turn.turn_key][-APPLIED_KEPT:]
    seen = {"seen_by_goal": turn.goal_id, "seen_by_turn": turn.turn_key}
    probe = state.probe_goal is not None and state.probe_goal == turn.goal_id
    base: dict[str, object] = {"applied": applied, "updated_at": turn.at}
    if probe:
        base |= {"probe_goal": None, "probe_until": None}  # the probe's turn is over
    if turn.signal is Signal.THROUGH:
        return _through(state, turn, base, probe=probe)
    if turn.signal is Signal.LIMIT:
        return _limited(state, turn, base | seen, applied=applied, probe=probe)
    if turn.signal is Signal.OVERLOAD:
        return _overloaded(state, turn, base | seen)
    # AUTH: an agent cannot fix a credential; a new login (or a human) must.
    refused = refuse_login(state, turn.message, at=turn.at, by=turn.turn_key, goal_id=turn.goal_id)
    return refused.model_copy(update=base | seen | {"updated_at": turn.at})


def _without_word(state: AccountState, turn: TurnSignal) -> AccountState:
    """A turn applied before, or one without word from the provider: only a probe's hold ends."""
    if turn.signal is Signal.NONE and state.probe_goal == turn.goal_id:
        # The probe's turn ended without word from the provider: another goal may probe.
        return state.model_copy(
            update={"probe_goal": None, "probe_until": None, "updated_at": turn.at}
        )
    return state


def _through(
    state: AccountState, turn: TurnSignal, base: dict[str, object], *, probe: bool
) -> AccountState:
    """A turn that got through: the account reopens (staggered after a probe). Pure."""
    parked = state.condition in (Condition.LIMITED, Condition.OVERLOADED)
    if parked and not probe:
        # A turn that was already running when the account was parked got through before
        # the limit: it says nothing about the account now; only the probe reopens it.
        return state
    if (
        state.condition is Condition.OK
        and state.proven
        and state.overloads == 0
        and state.limit_hits == 0
        and state.probe_goal is None
    ):
        return state  # the common case: nothing to write
    was_probe = state.condition is not Condition.OK or not state.proven
    stagger = (
        {
            "stagger_until": turn.at + timedelta(seconds=STAGGER_WINDOW_S),
            "next_start_at": turn.at,
        }
        if was_probe
        else {}
    )
    return state.model_copy(
        update=base
        | stagger
        | {
            "condition": Condition.OK if state.gate is None else state.condition,
            "until": None,
            "proven": True,
            "overloads": 0,
            "max_overloads": None,
            "limit_hits": 0,
            "limit_waits": 0,
            "reset_unknown": False,
        }
    )


def _limited(
    state: AccountState,
    turn: TurnSignal,
    base: dict[str, object],
    *,
    applied: list[str],
    probe: bool,
) -> AccountState:
    """A usage limit: the account parked until its reset or a backoff, a gate past its bounds."""
    unknown = turn.reset_at is None
    until = turn.reset_at or turn.at
    if state.condition is Condition.LIMITED and not probe:
        # Another turn in flight met the same limit: the account is parked already.
        if state.until is not None and state.until >= until:
            return state.model_copy(update={"applied": applied})
        return state.model_copy(
            update={"applied": applied, "until": until, "reset_unknown": unknown}
        )
    hits = state.limit_hits + 1
    if unknown:  # no reset to wait for: LoopX's own short backoff, growing per hit in a row
        until = turn.at + _backoff(RATE_LIMIT_BASE_S, RATE_LIMIT_MAX_S, hits)
    elif hits > 1:  # the probe met the limit again: wait at least the backoff
        until = max(until, turn.at + _backoff(LIMIT_BACKOFF_BASE_S, LIMIT_BACKOFF_MAX_S, hits - 1))
    waits = state.limit_waits + 1
    update = base | {
        "condition": Condition.LIMITED,
        "until": until,
        "reason": turn.message,
        "limit_hits": hits,
        "limit_waits": waits,
        "reset_unknown": unknown,
        "stagger_until": None,
        "next_start_at": None,
    }
    question = _limit_question(state, turn, until=until, waits=waits, unknown=unknown)
    if question is not None and state.gate is None:
        update |= {"condition": Condition.NEEDS_HUMAN, "gate": _gate(question, turn)}
    return state.model_copy(update=update)


def _limit_question(
    state: AccountState, turn: TurnSignal, *, until: datetime, waits: int, unknown: bool
) -> str | None:
    """The gate a limit opens (the ``gate`` policy, or too many waits), or None. Pure."""
    if turn.on_limit is OnLimit.GATE:
        return (
            f"account {state.name} hit its usage limit (goal {turn.goal_id}); "
            f"{'no reset given, retry at' if unknown else 'it resets at'} "
            f"{iso_utc(until, 'seconds')}: resolve to let its goals go on"
        )
    if turn.max_limit_waits is not None and waits > turn.max_limit_waits:
        return (
            f"account {state.name} hit its usage limit {waits} times (more than "
            f"--max-limit-waits {turn.max_limit_waits}): resolve to wait again"
        )
    return None


def _overloaded(state: AccountState, turn: TurnSignal, base: dict[str, object]) -> AccountState:
    """The model server's overload: a growing backoff, a gate after N in a row. Pure."""
    overloads = state.overloads + 1
    update = base | {
        "condition": Condition.OVERLOADED,
        "until": turn.at + _backoff(OVERLOAD_BASE_S, OVERLOAD_MAX_S, overloads),
        "reason": turn.message,
        "overloads": overloads,
        "max_overloads": turn.max_overloads,
    }
    if overloads >= turn.max_overloads and state.gate is None:
        question = (
            f"account {state.name}'s model server was overloaded "
            f"{overloads} turns in a row (latest: {turn.message[:200]}); resolve to "
            "try again"
        )
        update |= {"condition": Condition.NEEDS_HUMAN, "gate": _gate(question, turn)}
    return state.model_copy(update=update)


def _gate(question: str, turn: TurnSignal) -> AccountGate:
    """The account's gate, opened by ``turn``."""
    return AccountGate(
        question=question, opened_at=turn.at, opened_by=turn.turn_key, goal_id=turn.goal_id
    )


def refuse_login(
    state: AccountState, message: str, *, at: datetime, by: str, goal_id: str | None = None
) -> AccountState:
    """The account parked for its login (``login_refused``, a gate open). Pure.

    ``by`` is what opened the gate (a turn key, or ``check``); a gate already
    open stays as it is.
    """
    gate = state.gate or AccountGate(
        question=login_question(state.name, message), opened_at=at, opened_by=by, goal_id=goal_id
    )
    return state.model_copy(
        update={
            "condition": Condition.LOGIN_REFUSED,
            "reason": f"login refused: {message}" if message else "login refused",
            "gate": gate,
            "proven": False,
            "updated_at": at,
        }
    )


def login_question(name: str, message: str) -> str:
    """The gate's words when an account's login is refused: what the CLI said, what to do. Pure."""
    said = f": {message[:300]}" if message else ""
    if is_default(name):  # the supervisor's own environment: its user logs the CLI in
        return f"account {name}: login refused{said}; log in, then `loopx account resolve {name}`"
    return (
        f"account {name}: login refused{said}; run `loopx account login {name}` (or fix its env "
        f"file), then `loopx account check {name}`"
    )


def resolved(state: AccountState, *, now: datetime) -> AccountState:
    """The state after a human answered the account's gate: its next turn is a probe. Pure."""
    return state.model_copy(
        update={
            "gate": None,
            "condition": Condition.OK,
            "until": None,
            "overloads": 0,
            "max_overloads": None,
            "limit_waits": 0,
            "proven": False,
            "probe_goal": None,
            "probe_until": None,
            "updated_at": now,
        }
    )
