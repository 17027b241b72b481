"""The hand-off decision, pure: which account runs a goal's next turn, in its rules' order."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from loopx.accounts.accountfiles import HeldAccount
from loopx.accounts.handoff import ChoiceReason, Handoff, choose_account, handoffs_in_window
from loopx.accounts.records import AccountState, AccountSummary, Condition
from loopx.accounts.windows import AdmissionPolicy
from loopx.agents.hosts.session import session_to_resume
from loopx.errors import InvalidPolicyError
from loopx.registry.goalrecords import Goal, HostSpec
from loopx.registry.goals import GoalChanges, build_goal
from loopx.state import HostSession
from loopx.status.projection import project_unrun
from loopx.status.queue import overlay_accounts
from loopx.status.view import StatusReason
from loopx.turn.steps.handing import handed_goal

NOW = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
KINDS = {"b": "claude", "c": "codex", "default-gemini": "gemini"}


def _goal(**changes: object) -> Goal:
    fields: dict[str, object] = {
        "objective": "o",
        "workdir": "/tmp",
        "host": HostSpec(kind="codex", argv=["--model", "m"]),
        "account": "a",
        "fallback_accounts": ["b", "c"],
    } | changes
    changes = GoalChanges.model_validate(fields)
    return build_goal("g", None, changes, default_workdir=Path("/tmp"), now=NOW)


def _ok(name: str) -> AccountState:
    return AccountState(name=name, proven=True)


def _limited(name: str, until: datetime = NOW + timedelta(hours=1)) -> AccountState:
    return AccountState(name=name, condition=Condition.LIMITED, until=until, proven=True)


def _choose(goal: Goal, states: dict[str, AccountState], **kw: object) -> object:
    args: dict[str, object] = {"handed_off_at": [], "pending": None, "now": NOW} | kw
    held = {name: HeldAccount(state, AdmissionPolicy()) for name, state in states.items()}
    return choose_account(goal, states=held, kinds=KINDS, **args)  # type: ignore[arg-type]


def test_the_own_account_runs_the_turn_while_it_admits_it() -> None:
    """Its own account admits it: no hand-off, whatever the fallbacks."""
    choice = _choose(_goal(), {"a": _ok("a"), "b": _ok("b")})
    assert (choice.account, choice.host_kind, choice.reason) == ("a", "codex", ChoiceReason.OWN)


def test_a_capped_account_hands_the_turn_to_the_first_fallback_that_admits_it() -> None:
    """Own limited, first fallback limited too: the second one (another host kind) takes it."""
    choice = _choose(_goal(), {"a": _limited("a"), "b": _limited("b"), "c": _ok("c")})
    assert (choice.account, choice.host_kind, choice.reason) == ("c", "codex", "handed_off")
    choice = _choose(_goal(), {"a": _limited("a"), "b": _ok("b"), "c": _ok("c")})
    assert (choice.account, choice.host_kind) == ("b", "claude")
    assert "account a limited until" in choice.message


def test_after_the_reset_the_goal_is_back_on_its_own_account() -> None:
    """The own account's limit ran out: the turn runs there again."""
    choice = _choose(_goal(), {"a": _limited("a", NOW - timedelta(seconds=1)), "b": _ok("b")})
    assert (choice.account, choice.reason) == ("a", ChoiceReason.OWN)


def test_a_pinned_goal_or_one_without_fallbacks_stays() -> None:
    """`--no-handoff`, or no fallback named: it stays, and says why."""
    states = {"a": _limited("a"), "b": _ok("b")}
    pinned = _choose(_goal(handoff=False), states)
    assert (pinned.account, pinned.reason) == ("a", ChoiceReason.PINNED)
    alone = _choose(_goal(fallback_accounts=[]), states)
    assert (alone.account, alone.reason) == ("a", ChoiceReason.PINNED)


def test_the_per_day_cap_counts_the_last_24_hours_only() -> None:
    """Two hand-offs today with a cap of 2: it stays; one of them yesterday: it hands off."""
    goal = _goal(max_handoffs_per_day=2)
    states = {"a": _limited("a"), "b": _ok("b")}
    today = [NOW - timedelta(hours=1), NOW - timedelta(hours=2)]
    capped = _choose(goal, states, handed_off_at=today)
    assert (capped.account, capped.reason) == ("a", ChoiceReason.CAPPED)
    assert "--max-handoffs-per-day" in capped.message
    older = [NOW - timedelta(hours=25), NOW - timedelta(hours=2)]
    assert handoffs_in_window(older, now=NOW) == 1
    assert _choose(goal, states, handed_off_at=older).account == "b"
    assert _choose(_goal(max_handoffs_per_day=-1), states, handed_off_at=today * 50).account == "b"


def test_a_pending_side_effect_keeps_the_goal_on_its_own_account() -> None:
    """Uncommitted changes or an unsettled turn: no fresh session elsewhere."""
    choice = _choose(_goal(), {"a": _limited("a"), "b": _ok("b")}, pending="2 uncommitted changes")
    assert (choice.account, choice.reason) == ("a", ChoiceReason.PENDING)
    assert choice.message.endswith("no hand-off: 2 uncommitted changes")


def test_no_fallback_admitting_it_keeps_it_waiting_on_its_own() -> None:
    """Every account limited, or a fallback unknown (not in the states): it stays."""
    choice = _choose(_goal(), {"a": _limited("a"), "b": _limited("b")})
    assert (choice.account, choice.reason) == ("a", ChoiceReason.NONE_ADMITS)


def test_the_handed_goal_runs_on_the_fallbacks_account_and_host_kind() -> None:
    """Another kind drops the goal's host flags; a default account is no named account."""
    goal = _goal(fallback_accounts=["b", "default-gemini"])
    handoff = Handoff(
        from_account="a", from_kind="codex", to_account="b", to_kind="claude", why="w",
        decided_at=NOW,
    )  # fmt: skip
    on_b = handed_goal(goal, handoff)
    assert (on_b.account, on_b.host.kind, on_b.host.argv) == ("b", "claude", [])
    default = handoff.model_copy(update={"to_account": "default-gemini", "to_kind": "gemini"})
    assert (handed_goal(goal, default).account, handed_goal(goal, default).host.kind) == (
        None,
        "gemini",
    )
    same = handoff.model_copy(update={"to_account": "c", "to_kind": "codex"})
    assert handed_goal(goal, same).host.argv == ["--model", "m"]


def test_a_session_is_resumed_only_on_its_own_account_and_host_kind() -> None:
    """Account a's codex thread: resumed on a, never on another codex account or CLI."""
    thread = HostSession(kind="codex", session_id="t1", account="a", turns=1)
    goal = _goal()
    assert session_to_resume(goal, thread) == thread
    on_c = goal.model_copy(update={"account": "c"})
    assert session_to_resume(on_c, thread) is None
    on_b = goal.model_copy(update={"account": "b", "host": HostSpec(kind="claude")})
    assert session_to_resume(on_b, thread) is None


def test_fallback_names_are_checked_and_named_once() -> None:
    """A bad name or one named twice is refused when the goal is built."""
    with pytest.raises(InvalidPolicyError):
        _goal(fallback_accounts=["b", "b"])
    with pytest.raises(InvalidPolicyError):
        _goal(fallback_accounts=["../x"])


def test_status_shows_a_goal_a_fallback_takes_on_as_not_held_by_its_account() -> None:
    """Own account limited, fallback free: not `waiting` on it; both limited: waiting."""
    goal = _goal(fallback_accounts=["b"])
    view = project_unrun(goal, now=NOW)
    assert view.fallback_accounts == ["b"]
    limited = AccountSummary(name="a", state=Condition.LIMITED, message="account a limited")
    free = AccountSummary(name="b", state=Condition.OK)
    (shown,), _ = overlay_accounts([view], [limited, free])
    assert shown.reason is not StatusReason.WAITING
    busy = free.model_copy(update={"state": Condition.LIMITED, "message": "account b limited"})
    (shown,), _ = overlay_accounts([view], [limited, busy])
    assert (shown.reason, shown.explanation) == (StatusReason.WAITING, "account a limited")
    pinned = project_unrun(_goal(fallback_accounts=["b"], handoff=False), now=NOW)
    (shown,), _ = overlay_accounts([pinned], [limited, free])
    assert shown.reason is StatusReason.WAITING
