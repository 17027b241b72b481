"""The done-check: a goal's own command that decides whether a ``completed`` is true.

A kernel leaf (it imports only the model and the usage record): the goal
model, the goal state and the turn journal all hold its records.

A goal may name a check (``goal add --done-check CMD``). When its host reports
``completed`` (or after every turn, with ``every_turn``) the check runs in the
goal's workdir as the turn's ``done_check`` phase (:mod:`loopx.turn.phases`),
and its result is recorded in the journal before any effect of the turn is
written: a crash before the record runs it again, a recorded one is never run
again. The runner is :func:`loopx.agents.checkrun.run_done_check`; this module
holds the records and the pure decisions over them.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import Annotated, Final

from pydantic import Field

from loopx.errors import InvalidPolicyError, UsageError
from loopx.model import Record, UtcDatetime
from loopx.usage import Usage

DEFAULT_CHECK_TIMEOUT_S: Final = 600.0
# The tail of the check's output kept as evidence: it must fit a result's
# evidence entry (4,000 characters) and the prompts that show it.
OUTPUT_TAIL_CHARS: Final = 3000
NEXT_ACTION: Final = "make the done-check pass"


class DoneCheckSpec(Record):
    """A goal's done-check: the program and its arguments (never a shell), and when to run it."""

    argv: Annotated[list[str], Field(min_length=1)]
    timeout_s: Annotated[float, Field(gt=0)] = DEFAULT_CHECK_TIMEOUT_S
    every_turn: bool = False

    @property
    def command(self) -> str:
        """The argv as one line, for people."""
        return " ".join(self.argv)


class CheckResult(Record):
    """What one run of a done-check gave: exit, the tail of its output, its usage."""

    argv: list[str]
    exit_code: int | None = None
    signal: int | None = None
    timed_out: bool = False
    spawn_error: str | None = None  # the program could not be started at all
    output_tail: str = ""  # the last OUTPUT_TAIL_CHARS of stdout and stderr, interleaved
    output_dropped: int = 0  # bytes of output before the tail
    usage: Usage = Field(default_factory=Usage)
    started_at: UtcDatetime
    ended_at: UtcDatetime

    @property
    def passed(self) -> bool:
        """Exit 0, within the timeout."""
        return self.exit_code == 0 and not self.timed_out and self.spawn_error is None

    def describe(self) -> str:
        """One line: passed, or how it failed."""
        if self.passed:
            return "passed"
        if self.spawn_error is not None:
            return f"could not start: {self.spawn_error}"
        if self.timed_out:
            return "killed at its timeout"
        if self.signal is not None:
            return f"killed by signal {self.signal}"
        return f"failed with exit code {self.exit_code}"


class LastCheck(Record):
    """The newest recorded check of a goal, kept in its state (and so in every envelope)."""

    turn_key: str
    passed: bool
    exit_code: int | None = None
    summary: str  # CheckResult.describe()
    output_tail: str = ""
    checked_at: UtcDatetime

    @classmethod
    def of(cls, turn_key: str, result: CheckResult) -> LastCheck:
        """The state's record of ``result``, made in turn ``turn_key``."""
        return cls(
            turn_key=turn_key,
            passed=result.passed,
            exit_code=result.exit_code,
            summary=result.describe(),
            output_tail=result.output_tail,
            checked_at=result.ended_at,
        )


def done_check_spec(
    command: str | Sequence[str] | None,
    *,
    timeout_s: float | None = None,
    every_turn: bool | None = None,
    existing: DoneCheckSpec | None = None,
) -> DoneCheckSpec | None:
    """The check a `goal add` names (None: none given, keep the goal's).

    ``command`` is split like ``--host`` (a shell's words, never run by a
    shell) or is an argv list. ``--done-check-timeout`` and
    ``--done-check-every-turn`` alone change the ``existing`` check.

    Raises:
        UsageError: the command cannot be split or is empty, or the options
            are given for a goal without a check.
        InvalidPolicyError: the timeout is not positive.

    """
    if command is None:
        if timeout_s is None and every_turn is None:
            return None
        if existing is None:
            raise UsageError(
                "--done-check-timeout and --done-check-every-turn need a check",
                hint="add --done-check 'CMD ARGS' (e.g. --done-check 'pytest -q')",
            )
        argv = list(existing.argv)
    elif isinstance(command, str):
        try:
            argv = shlex.split(command)
        except ValueError as e:
            raise UsageError(
                f"--done-check {command!r} cannot be split: {e}", hint="check its quotes"
            ) from e
    else:
        argv = list(command)
    if not argv:
        raise UsageError("--done-check needs a command", hint="e.g. --done-check 'pytest -q'")
    if timeout_s is not None and not timeout_s > 0:
        raise InvalidPolicyError(
            "--done-check-timeout", f"must be more than 0 seconds, got {timeout_s}"
        )
    base = existing or DoneCheckSpec(argv=argv)
    return DoneCheckSpec(
        argv=argv,
        timeout_s=base.timeout_s if timeout_s is None else timeout_s,
        every_turn=base.every_turn if every_turn is None else every_turn,
    )


__all__ = [
    "DEFAULT_CHECK_TIMEOUT_S",
    "NEXT_ACTION",
    "OUTPUT_TAIL_CHARS",
    "CheckResult",
    "DoneCheckSpec",
    "LastCheck",
    "done_check_spec",
]
