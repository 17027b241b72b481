"""What the steps of a turn share: one small typed context, the stops, the process side.

A step (:mod:`loopx.turn.steps.table`) takes a :class:`TurnContext` and returns
the next one, or a :class:`Stop` that says why the turn ends here. The
context is frozen: a step hands on a copy with what it learnt (the lease,
the workdir's hold, the quota decision, the journal).

Whatever runs a process (the host, the done-check, a merge's check, killing
a stale host tree) or belongs to the agent process (its heartbeat, its
console) is injected as :class:`TurnProcesses`: the kernel starts no
process of its own, and never imports the agent package.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import TYPE_CHECKING, Final, Protocol

from loopx import environ
from loopx.errors import resource_fault
from loopx.log import get_logger
from loopx.model import utcnow
from loopx.turn.fencing import Fence
from loopx.turn.lease import (
    DEFAULT_GRACE_S,
    DEFAULT_TTL_S,
    Lease,
    lease_grace_s,
    lease_ttl_s,
    renew,
)

if TYPE_CHECKING:
    from loopx.accounts.handoff import Handoff
    from loopx.accounts.records import Account
    from loopx.donecheck import CheckResult
    from loopx.quota.decision import QuotaDecision
    from loopx.registry.goalrecords import Goal
    from loopx.root import Layout
    from loopx.turn.journal import TurnJournal
    from loopx.turn.recovery import RecoveryAction
    from loopx.turn.workdirfiles import WorkdirHold

log = get_logger(__name__)

# SIGTERM to SIGKILL when a stale or a running host tree is stopped; the host runner
# (loopx.agents.hostrun) defaults to the same when called outside a turn.
DEFAULT_KILL_GRACE_S: Final = 3.0


@dataclass(frozen=True, slots=True)
class TurnConfig:
    """Timing knobs of a turn (lease TTL and grace, kill grace)."""

    lease_ttl_s: float = DEFAULT_TTL_S
    lease_grace_s: float = DEFAULT_GRACE_S
    kill_grace_s: float = DEFAULT_KILL_GRACE_S

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> TurnConfig:
        """Read ``LOOPX_LEASE_TTL_S``, ``LOOPX_LEASE_GRACE_S``, ``LOOPX_KILL_GRACE_S``."""
        return cls(
            lease_ttl_s=lease_ttl_s(env),
            lease_grace_s=lease_grace_s(env),
            kill_grace_s=environ.seconds(environ.KILL_GRACE_S, DEFAULT_KILL_GRACE_S, env),
        )

    @property
    def renew_every_s(self) -> float:
        """How often a running host's or check's lease is renewed: three times per TTL."""
        return max(self.lease_ttl_s / 3, 0.05)


class TurnSandboxHandle(Protocol):
    """A turn's open sandbox (the agent package's), closed by the turn's last rows."""

    def close(self) -> None:
        """Stop its proxy and remove its scratch."""


class TurnProcesses(Protocol):
    """The process side of a turn, which the agent package provides."""

    def kill_stale(self, layout: Layout, goal_id: str) -> None:
        """Kill every process of this root still working for ``goal_id`` (a stale host tree)."""

    def end_turn(
        self, layout: Layout, turn_key: str, *, found: Callable[[list[int]], None]
    ) -> list[int]:
        """Kill every process of this root carrying ``turn_key`` and wait until it is gone.

        ``found(pids)`` is told what runs before the kill starts. Returns the
        pids still running when the bounded wait ended (empty: all gone).
        """

    def turn_started(self, turn_key: str, at: datetime) -> None:
        """The turn's journal exists and its host is about to run (the heartbeat shows it)."""

    def run_host(self, ctx: TurnContext) -> TurnJournal:
        """Run the journal's host; the journal with its outcome and usage (not yet settled).

        A host that cannot start gives the journal with its ``failure`` and no outcome.
        """

    def run_check(self, ctx: TurnContext, journal: TurnJournal) -> CheckResult:
        """Run the journal's done-check in its workdir, the lease renewed meanwhile."""

    def open_sandbox(self, ctx: TurnContext) -> TurnSandboxHandle:
        """Prepare the planned sandbox of the turn: its scratch and its network proxy."""

    def merge(self, layout: Layout, goal_id: str) -> None:
        """Merge a goal with ``--auto-merge`` that a turn made done (its check on the merged tree)."""


@dataclass(frozen=True, slots=True)
class TurnOptions:
    """How the caller wants this turn taken."""

    # Set: no new host starts, a running one is terminated, the journal ends `stopped`.
    stop: threading.Event | None = None
    # The goal's lock is busy right now: give up at once (``busy``) instead of waiting for it.
    skip_if_busy: bool = False
    # The goals whose turn the caller runs now (an agent's, shared by its turns): a lease of
    # this process for a goal not in it is one an error left, and is taken over at once.
    # None: the caller does not know, and a lease of this process is never taken over early.
    in_flight: set[str] | None = None

    @property
    def stopping(self) -> bool:
        """Whether a stop was requested."""
        return self.stop is not None and self.stop.is_set()


class LeaseHolder:
    """The held lease, renewed while a host or a check runs."""

    def __init__(self, layout: Layout, lease: Lease, config: TurnConfig) -> None:
        self.layout = layout
        self.lease = lease
        self.config = config
        # Shown with the next renewal (status): the host's last output, a stall rung in force.
        self.last_output_at: datetime | None = None
        self.activity: str | None = None

    def renew(self) -> None:
        """Extend the lease; a refused write (disk full) is tolerated while the lease lasts.

        Raises:
            LeaseLostError: a takeover happened.
            OSError: renewals kept failing past the lease's expiry and grace, after
                which another agent may take the goal: the host must stop now.

        """
        now = utcnow()
        try:
            self.lease = renew(
                self.layout,
                self.lease,
                now=now,
                ttl_s=self.config.lease_ttl_s,
                last_output_at=self.last_output_at,
                activity=self.activity,
            )
        except OSError as e:
            reason = resource_fault(e)
            grace = timedelta(seconds=self.config.lease_grace_s)
            if reason is None or now >= self.lease.expires_at + grace:
                raise
            log.warning("lease_renewal_deferred", reason=reason)


@dataclass(frozen=True, slots=True)
class Claim:
    """What the claim holds: the lease as claimed, its write fence, and its renewal."""

    lease: Lease
    fence: Fence
    holder: LeaseHolder


@dataclass(frozen=True, slots=True)
class TurnContext:
    """One turn of one goal, as far as its steps have taken it."""

    layout: Layout
    goal: Goal
    agent_id: str
    config: TurnConfig
    options: TurnOptions
    processes: TurnProcesses
    claim: Claim | None = None  # the claim step's
    workdir: WorkdirHold | None = None  # the workdir step's
    recovered: tuple[RecoveryAction, ...] = ()  # what the leftovers step finished
    decision: QuotaDecision | None = None  # the quota step's
    handoff: Handoff | None = None  # the hand-off step's (None: the goal's own account)
    account: Account | None = None  # the account step's (None: the host kind's default)
    journal: TurnJournal | None = None  # planned, or left by an earlier attempt
    sandbox: TurnSandboxHandle | None = None  # the sandbox step's

    def but(self, **changes: object) -> TurnContext:
        """A copy with ``changes``."""
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    @property
    def claimed(self) -> Claim:
        """The claim (only after the claim step)."""
        if self.claim is None:
            msg = "the turn has no claim yet: the claim step runs first"
            raise RuntimeError(msg)
        return self.claim

    @property
    def fence(self) -> Fence:
        """The claim's write fence (only after the claim step)."""
        return self.claimed.fence

    @property
    def planned(self) -> TurnJournal:
        """The turn's journal (only after the journal step or a leftover)."""
        if self.journal is None:
            msg = "the turn has no journal yet: the journal step runs first"
            raise RuntimeError(msg)
        return self.journal


class StopKind(StrEnum):
    """Why a turn ended before its last step."""

    WAIT = "wait"  # not now: held, busy, workdir, quota, account or a stop before a host
    GATE = "gate"  # a person must act: a gate says why
    LOST = "lost"  # a newer epoch took the goal: nothing more was written
    STOPPED = "stopped"  # a stop ended the turn midway; the journal waits for the next claim


@dataclass(frozen=True, slots=True)
class Stop:
    """A typed stop: what the caller is told (``TurnAttempt``) when a step ends the turn."""

    kind: StopKind
    reason: str  # a snake_case code for the log: held, busy, quota, workdir_busy, ...
    claimed: bool = True  # False: the goal was not taken (a holder, a busy lock or workdir)
    blocking_agent: str | None = None
    busy: bool = False
    workdir_busy: str | None = None
    quota: QuotaDecision | None = None
    turn_key: str = ""  # the turn that was lost
    message: str = ""  # why it was lost
