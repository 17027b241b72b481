"""The stall ladder: what a turn does when its host stops giving a sign of life.

A host is stalled when it wrote nothing for the goal's stall timeout (its
run killed ``host_stalled``) or reported a stream idle timeout of its own
(the adapter reads it as a ``host_stalled`` failure). A stall is the
provider's trouble, never the goal's failure. The ladder's rungs, in order,
each a row of the turn's table (:mod:`loopx.turn.steps.stalling`), each
bounded in runs (:data:`RUNG_RUNS`) and in time (the turn's timeout from the
rung's first run), each run journaled before it starts:

1. ``resume``: the same session again, with a short "continue" prompt;
2. ``fresh``: a fresh session in the same workdir, with the goal's state;
3. ``handoff``: for a goal that may hand off (fallback accounts, not pinned, its
   daily cap not reached, this turn on its own account), the turn ends as a
   wait whose evidence backs the account off like a 5xx, so that the next
   turn's ``handoff`` row runs it on the first fallback that admits it;
4. ``gate``: a gate for a human, with the last output lines and what was tried.

Rungs 1 to 3 are automatic: at most :data:`MAX_RESUMES_PER_DAY` of them per
goal in any 24 hours. The ladder never steps down. Everything here is pure.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from enum import StrEnum
from typing import Final

from pydantic import Field

from loopx.model import Record, UtcDatetime
from loopx.state import HostSession
from loopx.turn.failures import FailureReason
from loopx.turn.outcome import ResultKind
from loopx.turn.protocol import Envelope, HostResult

# The default stall timeout of a host kind that streams a sign of life (claude, codex).
DEFAULT_STALL_TIMEOUT_S: Final = 300.0
MAX_RESUMES_PER_DAY: Final = 12
RESUME_WINDOW: Final = timedelta(hours=24)
LAST_LINES: Final = 20
_LAST_CHARS: Final = 2000


class Rung(StrEnum):
    """A rung of the ladder, in climbing order."""

    RESUME = "resume"
    FRESH = "fresh"
    HANDOFF = "handoff"
    GATE = "gate"


RUNGS: Final = tuple(Rung)
# Host runs a rung may start (hand-off and the gate start none).
RUNG_RUNS: Final = {Rung.RESUME: 2, Rung.FRESH: 1}
# The rungs counted against MAX_RESUMES_PER_DAY.
AUTOMATIC: Final = frozenset({Rung.RESUME, Rung.FRESH, Rung.HANDOFF})
_DOING: Final = {
    Rung.RESUME: "resuming session",
    Rung.FRESH: "fresh session",
    Rung.HANDOFF: "handing off",
    Rung.GATE: "waiting for a human",
}


def rung_number(rung: Rung) -> int:
    """The rung's place on the ladder, from 1."""
    return RUNGS.index(rung) + 1


def activity(rung: Rung) -> str:
    """What status shows while ``rung`` is in force: ``stalled: rung 1 of 4, resuming session``."""
    return f"stalled: rung {rung_number(rung)} of {len(RUNGS)}, {_DOING[rung]}"


class StallSeen(Record):
    """One host run that stalled."""

    on: Rung | None  # the rung whose run stalled; None: the turn's own run
    cause: str
    at: UtcDatetime


class RungRun(Record):
    """One host run a rung started."""

    rung: Rung
    at: UtcDatetime


class StallLadder(Record):
    """A journal's ``stall``: the stalls seen, the runs each rung started, what to resume."""

    seen: list[StallSeen] = Field(default_factory=list)
    runs: list[RungRun] = Field(default_factory=list)
    session: HostSession | None = None  # the stalled session ``resume`` continues
    last_output: str = ""  # the newest stalled run's last lines

    @property
    def rung(self) -> Rung | None:
        """The rung whose run is in force (None: none started yet)."""
        return self.runs[-1].rung if self.runs else None

    def runs_on(self, rung: Rung) -> int:
        """How many runs ``rung`` started."""
        return sum(1 for r in self.runs if r.rung is rung)

    def tried(self) -> list[str]:
        """What was tried, one line per stalled run, oldest first."""
        return [
            f"{'the turn' if s.on is None else f'rung {rung_number(s.on)} ({s.on})'} "
            f"stalled at {s.at:%H:%M:%S} UTC: {s.cause}"
            for s in self.seen
        ]


def stall_cause(
    killed: FailureReason | None, failure_reason: FailureReason | None, message: str
) -> str | None:
    """Why a host run counts as stalled (None: it did not stall). Pure.

    ``killed`` is why LoopX stopped it, ``failure_reason`` and ``message`` the adapter's reading.
    """
    if killed is FailureReason.HOST_STALLED:
        return "it wrote nothing for the stall timeout and was stopped"
    if killed is None and failure_reason is FailureReason.HOST_STALLED:
        return message[:300]
    return None


def last_lines(stdout: str, stderr: str) -> str:
    """The last :data:`LAST_LINES` lines a stalled run wrote (stderr after stdout), bounded."""
    lines = [line for line in (stdout + "\n" + stderr).splitlines() if line.strip()]
    return "\n".join(lines[-LAST_LINES:])[-_LAST_CHARS:]


def may_climb(
    ladder: StallLadder | None, rung: Rung, *, now: datetime, resumes: int, turn_timeout_s: float
) -> bool:
    """Whether ``rung`` may start one more host run. Pure.

    Args:
        ladder: the journal's ladder so far (None: the turn's own run just stalled).
        rung: a rung that runs a host (``resume``, ``fresh``).
        now: the time.
        resumes: automatic resumes of the goal in the last 24 hours, this turn's included.
        turn_timeout_s: the turn's timeout, which bounds each rung's time.

    """
    limit = RUNG_RUNS.get(rung, 0)
    if resumes >= MAX_RESUMES_PER_DAY or limit == 0:
        return False
    if ladder is None:
        return True
    if ladder.rung is not None and rung_number(ladder.rung) > rung_number(rung):
        return False  # the ladder never steps down
    first = next((r.at for r in ladder.runs if r.rung is rung), None)
    if first is not None and now - first > timedelta(seconds=turn_timeout_s):
        return False
    return ladder.runs_on(rung) < limit


def climbed(
    ladder: StallLadder | None,
    rung: Rung,
    *,
    cause: str,
    stalled_at: datetime,
    session: HostSession | None,
    output: str,
    now: datetime,
) -> StallLadder:
    """The ladder with the stall just seen and ``rung``'s next run. Pure."""
    ladder = ladder or StallLadder()
    seen = StallSeen(on=ladder.rung, cause=cause, at=stalled_at)
    return ladder.model_copy(
        update={
            "seen": [*ladder.seen, seen],
            "runs": [*ladder.runs, RungRun(rung=rung, at=now)],
            "session": session if session is not None else ladder.session,
            "last_output": output,
        }
    )


def at_gate(
    ladder: StallLadder | None,
    *,
    cause: str,
    stalled_at: datetime,
    output: str,
    rung: Rung = Rung.GATE,
) -> StallLadder:
    """The ladder with its last stall recorded, at the gate (or ``rung``, the hand-off). Pure."""
    ladder = ladder or StallLadder()
    seen = StallSeen(on=ladder.rung, cause=cause, at=stalled_at)
    return ladder.model_copy(
        update={
            "seen": [*ladder.seen, seen],
            "runs": [*ladder.runs, RungRun(rung=rung, at=stalled_at)],
            "last_output": output,
        }
    )


def may_hand_off(*, can_hand_off: bool, resumes: int) -> bool:
    """Whether the ladder's third rung ends the turn for a hand-off. Pure.

    ``can_hand_off``: the goal names fallback accounts, is not pinned, has not
    reached its daily hand-off cap, and this turn runs on its own account;
    ``resumes``: the goal's automatic rungs in the last 24 hours (a hand-off is one).
    """
    return can_hand_off and resumes < MAX_RESUMES_PER_DAY


def handoff_result(ladder: StallLadder, *, turn_key: str, goal_id: str) -> HostResult:
    """The ``wait`` the ladder's hand-off rung ends the turn with. Pure.

    Its evidence ``host_stalled`` backs the account off like a 5xx, so the next
    turn's ``handoff`` row finds it not admitting and takes a fallback account.
    """
    return HostResult(
        kind=ResultKind.WAIT,
        summary=f"the host stalled {len(ladder.seen)} times; its next turn goes to a "
        "fallback account",
        next_action="continue the goal on a fallback account",
        evidence=[FailureReason.HOST_STALLED.value],
        wait_seconds=0,
        turn_key=turn_key,
        goal_id=goal_id,
    )


def stalled_envelope(envelope: Envelope, ladder: StallLadder | None) -> Envelope:
    """The envelope of the run a rung starts: its session and its note. Pure.

    ``resume`` continues the stalled session (the adapter resumes it and sends
    a short prompt); ``fresh`` starts without one.
    """
    rung = ladder.rung if ladder is not None else None
    if ladder is None or rung not in RUNG_RUNS:
        return envelope
    cause = ladder.seen[-1].cause if ladder.seen else "it stopped writing"
    if rung is Rung.RESUME:
        session = ladder.session
        note = (
            f"Your previous reply in this session stopped giving any sign of life ({cause}). "
            "Continue where you left off."
        )
    else:
        session = None
        note = (
            f"An earlier session of this turn stalled ({cause}) and resuming it did not help: "
            "this is a fresh session. Check the working directory's state before repeating or "
            "undoing work."
        )
    state = envelope.state.model_copy(update={"host_session": session})
    return envelope.model_copy(update={"state": state, "stalled": note})


def gate_result(ladder: StallLadder, *, turn_key: str, goal_id: str) -> HostResult:
    """The ``needs_human`` result the ladder ends with: what was tried, the last output. Pure."""
    tried = "\n".join(f"- {line}" for line in ladder.tried()) or "- nothing"
    output = ladder.last_output or "(it wrote nothing)"
    question = (
        "The host stalled and LoopX's automatic resumes did not bring it back. Tried:\n"
        f"{tried}\nIts last output:\n```\n{output}\n```\n"
        "Check the provider and the host, then answer to let the goal run again."
    )
    return HostResult(
        kind=ResultKind.NEEDS_HUMAN,
        summary=f"the host stalled {len(ladder.seen)} times; the stall ladder ended at a gate",
        question=question[:4000],
        evidence=[FailureReason.HOST_STALLED.value],
        turn_key=turn_key,
        goal_id=goal_id,
    )
