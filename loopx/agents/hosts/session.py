"""Session continuity for CLI hosts: when to resume, what to keep, what a turn used.

A goal's ``state.host_session`` names the CLI session (Codex thread, Claude
session) the next turn resumes, on its own account and host kind only. It
is dropped when the host kind changes,
after ``HostSpec.session_max_turns`` turns of one session, and on request
(``loopx goal reset-session``). All functions here are pure.
"""

from __future__ import annotations

from loopx.accounts.records import account_of
from loopx.registry.goalrecords import Goal
from loopx.state import HostSession


def session_to_resume(goal: Goal, session: HostSession | None) -> HostSession | None:
    """The session this goal's next turn continues, or None to start fresh.

    Args:
        goal: the goal (its host kind and ``session_max_turns``).
        session: ``state.host_session`` as the envelope carries it.

    """
    if session is None or session.kind != goal.host.kind or not session.session_id:
        return None
    if session.account is not None and session.account != account_of(goal.account, goal.host.kind):
        return None  # another account's session (a hand-off): that CLI home does not hold it
    limit = goal.host.session_max_turns
    if limit is not None and session.turns >= limit:
        return None
    return session


def session_after_turn(
    kind: str,
    previous: HostSession | None,
    session_id: str,
    *,
    reported_input_tokens: int | None = None,
    reported_output_tokens: int | None = None,
    reported_cost_usd: float | None = None,
    reported_model_tokens: int | None = None,
) -> HostSession:
    """The session to keep after a turn ran in CLI session ``session_id``.

    A turn that continued ``previous`` (same id) adds one to its turn count; a
    new id starts at one. ``reported_*`` are the figures the CLI printed, kept
    to compute the next turn's difference when they are session-cumulative
    (None: unchanged).
    """
    same = continues(kind, previous, session_id)
    base = (
        previous if same and previous is not None else HostSession(kind=kind, session_id=session_id)
    )
    reported = {
        "reported_input_tokens": reported_input_tokens,
        "reported_output_tokens": reported_output_tokens,
        "reported_cost_usd": reported_cost_usd,
        "reported_model_tokens": reported_model_tokens,
    }
    update: dict[str, object] = {k: v for k, v in reported.items() if v is not None}
    return base.model_copy(update={"turns": base.turns + 1, **update})


def continues(kind: str, previous: HostSession | None, session_id: str) -> bool:
    """Whether a run in CLI session ``session_id`` continued ``previous``. Pure."""
    return previous is not None and previous.kind == kind and previous.session_id == session_id


def no_session(kind: str) -> HostSession:
    """The session to keep when the CLI lost ours: an empty id, so the next turn starts fresh.

    None in ``Interpretation.session`` means "nothing to report" and keeps the
    stored session; a session without an id replaces it and is never resumed.
    """
    return HostSession(kind=kind, session_id="")


def turn_tokens(
    kind: str,
    previous: HostSession | None,
    session_id: str,
    cumulative_in: int,
    cumulative_out: int,
) -> tuple[int, int]:
    """The turn's (input, output) tokens from session-cumulative counters.

    Codex reports a resumed thread's totals since it began
    (openai/codex#17539); the turn's share is the increase over the counters
    kept in the session. A counter that went down (the CLI restarted its
    count) is taken as this turn's own figure.
    """
    if not continues(kind, previous, session_id) or previous is None:
        return cumulative_in, cumulative_out
    d_in = cumulative_in - previous.reported_input_tokens
    d_out = cumulative_out - previous.reported_output_tokens
    return (d_in if d_in >= 0 else cumulative_in), (d_out if d_out >= 0 else cumulative_out)


def turn_cost(  # noqa: PLR0917 - the figures of one run, as turn_tokens takes them
    kind: str,
    previous: HostSession | None,
    session_id: str,
    cost_usd: float,
    run_tokens: int,
    model_tokens: int | None,
) -> float:
    """The run's own cost from a figure that may cover the whole resumed session. Pure.

    Claude Code 2.1.197 prints ``total_cost_usd`` and ``modelUsage`` of the
    run; 2.1.332 prints both for the whole session since it began, beside a
    ``usage`` that stays the run's own. The figures are cumulative when the
    per-model token total (``model_tokens``) holds at least the previous run's
    total plus this run's own tokens (``run_tokens``, from ``usage``); then the
    run cost the increase over the cost kept in the session. A new session,
    figures of one run, or a total that went down are taken as they are.
    """
    if model_tokens is None or previous is None or not continues(kind, previous, session_id):
        return cost_usd
    if previous.reported_model_tokens <= 0:
        return cost_usd
    if model_tokens < previous.reported_model_tokens + run_tokens:
        return cost_usd  # the run's own figures
    delta = cost_usd - previous.reported_cost_usd
    return delta if delta >= 0 else cost_usd
