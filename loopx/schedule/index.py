"""The scheduling index: an agent's in-memory view of which goals may run, kept current cheaply.

Built once (every registered goal's select inputs), then each step looks
again only at goals that may have changed:

* goals hinted as changed since the last step (every write to a goal's
  files leaves a hint, :mod:`loopx.root.hints`), and new or removed goals
  (the goal index, :mod:`loopx.registry.catalog`);
* goals whose wake time passed: a future ``next_eligible_at``, a lease
  another agent holds, a quota window that frees up
  (:func:`loopx.schedule.select.wake_at`);
* goals this agent just tried, and goals leased at the last look;
* the safety net for a lost hint, by ``stat`` only: the goal directories of a
  round-robin slice of goals each step, and of every goal once per sweep
  (``sweep_s``, 60 s, or one goal per ``1 / SWEEP_RATE`` s when that is longer:
  500 s at 100,000 goals); a goal is read again only when its directory changed
  (every LoopX write of a goal's state, lease, policy or journal replaces,
  creates or removes a file there; :func:`loopx.status.watch.dir_stat`). An
  append or in-place edit that changes no directory is caught by the deep
  sweep (``deep_sweep_s``, 10 min, or one goal per ``1 / DEEP_SWEEP_RATE`` s),
  which compares each goal's file fingerprints
  (:func:`loopx.status.fingerprint.goal_fingerprint`).

Both sweeps are spread over time (:class:`~loopx.schedule.rollingsweep.RollingSweep`): a step takes the
goals whose turn came since the last one, at most ``SWEEP_CHUNK`` of them, so
no step pays for every goal. A goal waiting on a human (a gate, paused,
compute 0) costs nothing until its files change. So a step costs O(changed
goals + slice + chunk + log N), not O(N), and an idle agent sleeps until
:meth:`ScheduleIndex.next_wake`, the next chunk of a sweep or a hint: with
every goal waiting, an idle agent's work is a ``stat`` per goal per sweep,
at most ``SWEEP_RATE`` a second however many goals there are.

The index only advises: a claim re-checks state, lease and quota under the
goal's lock, so a stale entry costs a lost race, never a wrong turn. Ranking
is :func:`loopx.schedule.select.rank_key`, the same as :func:`select`.
"""

from __future__ import annotations

import heapq
import os
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Final

from loopx.accounts.accountfiles import HeldAccount, account_fingerprints, held_account
from loopx.accounts.records import Condition, account_of
from loopx.accounts.rollingbudget import ROOT_BUDGET
from loopx.accounts.rules import same_admission
from loopx.errors import LoopxError
from loopx.hostcanary import QuarantineWatch
from loopx.log import get_logger
from loopx.quota.headroom import HostHeadroom, measure_headroom
from loopx.registry.catalog import GoalCatalog
from loopx.registry.goalrecords import Goal, GoalStatus
from loopx.root import Layout
from loopx.root.hints import changes_file
from loopx.schedule.candidates import candidate_and_decision
from loopx.schedule.rollingsweep import DEEP_SWEEP_RATE, SWEEP_CHUNK, SWEEP_RATE, RollingSweep
from loopx.schedule.select import Candidate, rank_key, wake_at, why_ineligible
from loopx.status.fingerprint import Fingerprint, goal_fingerprint
from loopx.status.watch import DirStat, dir_stat

log = get_logger(__name__)

DEFAULT_SLICE: Final = 32  # goal directories stat-checked per step as a safety net
DEFAULT_SWEEP_S: Final = 60.0  # every goal directory stat-checked this often
DEFAULT_DEEP_SWEEP_S: Final = 600.0  # every goal's file fingerprints compared this often
DEFAULT_RANKED: Final = 8  # goals offered per step (tried in order until a claim wins)


UNREADABLE_RETRY_S: Final = 30.0  # a goal whose files cannot be read is tried again after this

RankKey = tuple[int, float, str]


def _accept_all(_goal: Goal) -> bool:
    return True


class ScheduleIndex:
    """Which goals may run now, best first, and when the next waiting one may.

    Args:
        layout: the root.
        accept: which goals this agent may run (a Ray agent's resources).
        slice_size: goal directories stat-checked per step whatever the hints say.
        sweep_s: every goal directory is stat-checked at least this often.
        deep_sweep_s: every goal's file fingerprints are compared this often.
    """

    def __init__(
        self,
        layout: Layout,
        *,
        accept: Callable[[Goal], bool] = _accept_all,
        slice_size: int = DEFAULT_SLICE,
        sweep_s: float = DEFAULT_SWEEP_S,
        deep_sweep_s: float = DEFAULT_DEEP_SWEEP_S,
    ) -> None:
        self.layout = layout
        self._accept = accept
        self._slice = slice_size
        self._catalog = GoalCatalog(layout, persist=False)
        self._built = False
        self.candidates: dict[str, Candidate] = {}
        self._gen: dict[str, int] = {}  # bumped on every update; older heap entries are stale
        self._ready: list[tuple[RankKey, int, str]] = []
        self._timers: list[tuple[float, int, str]] = []
        self._leased: set[str] = set()
        self._touched: set[str] = set()
        self._order: list[str] = []  # round-robin order of the safety-net slice
        self._pos = 0
        self._hint_stat: tuple[int, int] = (0, -1)
        self._sweep = RollingSweep(sweep_s, SWEEP_RATE)
        self._deep = RollingSweep(deep_sweep_s, DEEP_SWEEP_RATE, chunk=SWEEP_CHUNK // 10)
        self._goals_dir = str(layout.goals_dir)
        self._hints_file = str(changes_file(layout))  # stat 4 times a second when idle
        # Per goal, as last seen: its directory's stat (None: changed too recently to
        # trust) and, for a goal whose inputs were read, its files' fingerprints.
        self._dirs: dict[str, DirStat | None] = {}
        self._prints: dict[str, Fingerprint] = {}
        # Account states as last read, and their files' stats: a parked account's goals wait
        # on a timer at its reset, and are looked at again when its state or policy file moves
        # (a damaged one repaired).
        self._account_prints: dict[str, tuple[int, ...]] = {}
        self._accounts: dict[str, HeldAccount] = {}
        # The host kinds the canary quarantined: their goals leave the index and come back
        # when hosts.json moves (a probe passed, a version accepted).
        self._hosts = QuarantineWatch(layout)

    # --- keeping current -----------------------------------------------------------------------

    def touch(self, goal_id: str) -> None:
        """Look at ``goal_id`` again at the next refresh (this agent just tried or ran it)."""
        self._touched.add(goal_id)

    def refresh(self, *, now: datetime) -> int:
        """Bring the index up to date; returns how many goals were read again.

        Raises:
            NewerRootError: a newer LoopX wrote the registry.
            CorruptFileError: the registry settings are damaged.
        """
        ts = now.timestamp()
        # The catalog's own stat of every goal file is left to the deep sweep: the
        # directory sweep below sees a replaced goal file sooner and cheaper.
        verify_s = self._deep.period(len(self._order))
        try:
            changed = self._catalog.refresh(now=now, verify_after_s=verify_s)
            if not self._built or self._catalog.hints_lost:
                # First build, or the hint log was replaced (hints may be lost): look at all.
                self._built = True
                recheck = set(self._catalog.goals)
                self._sweep.restart(ts)
                self._deep.restart(ts)
            else:
                recheck = changed | self._touched | self._leased | self._due(now)
                recheck |= self._safety_net(ts)
            recheck |= self._account_moves(now)
            recheck |= self._host_moves()
            self._touched = set()
            if changed or len(self._order) != len(self._catalog.goals):
                self._order = sorted(self._catalog.goals)
            headroom: HostHeadroom | None = None
            for goal_id in recheck:
                goal = self._catalog.goals.get(goal_id)
                self._note_dir(goal_id)
                if (
                    goal is None
                    or goal.status is not GoalStatus.ACTIVE
                    or not self._accept(goal)
                    or goal.host.kind in self._hosts.quarantined
                ):
                    self._drop(goal_id)
                    continue
                headroom = headroom or measure_headroom(now=now)
                self._update(goal, now=now, headroom=headroom)
        except BaseException:
            # Cut short (EMFILE, MemoryError): the goals it had taken off its lists (the
            # touched, the hinted) are looked at again, all of them, at the next refresh.
            self._built = False
            raise
        self._hint_stat = self._stat_hints()
        return len(recheck)

    def _account_moves(self, now: datetime) -> set[str]:
        """The goals of every account whose state, policy or budget file changed since the last look.

        A ``stat`` per account file each step; the goals are listed only when one
        moved and its admission changed (a turn's new window report alone does not).
        """
        prints = account_fingerprints(self.layout)
        if prints == self._account_prints:
            return set()
        names = prints.keys() | self._account_prints.keys()
        moved = {n for n in names if prints.get(n) != self._account_prints.get(n)}
        self._account_prints = prints
        for name in sorted(moved):
            before = self._accounts.pop(name, None)
            if before is None or name == ROOT_BUDGET:
                continue
            try:
                after = held_account(self.layout, name)
            except LoopxError:
                continue  # read again, and logged, when a goal of it is looked at
            self._accounts[name] = after
            if same_admission(before, after, now=now):
                moved.discard(name)
        if ROOT_BUDGET in moved:
            return set(self._catalog.goals)  # the root's budget holds every goal
        return {
            goal_id
            for goal_id, goal in self._catalog.goals.items()
            if account_of(goal.account, goal.host.kind) in moved
            or not moved.isdisjoint(goal.fallback_accounts)
        }

    def _host_moves(self) -> set[str]:
        """The goals of every host kind whose quarantine began or ended since the last look."""
        moved = self._hosts.moved()
        if not moved:
            return set()
        return {goal_id for goal_id, goal in self._catalog.goals.items() if goal.host.kind in moved}

    def _account_state(self, goal: Goal | None) -> HeldAccount | None:
        """The goal's account state and policy (None: the root's) as last read; None: unreadable."""
        name = ROOT_BUDGET if goal is None else account_of(goal.account, goal.host.kind)
        if name not in self._accounts:
            try:
                held = held_account(self.layout, name)
            except LoopxError as e:
                log.warning("account_unreadable", account=name, error=e.message)
                return None
            if held.state.condition is Condition.DAMAGED:  # its goals wait until the file moves
                log.warning("account_damaged", account=name, error=held.state.reason)
            self._accounts[name] = held
        return self._accounts[name]

    # --- the safety net for lost hints ---------------------------------------------------------

    def _safety_net(self, ts: float) -> set[str]:
        """Goals whose files changed without a hint: by directory ``stat``, or by fingerprint."""
        deep = {
            g
            for g in self._deep.take(self._order, ts)
            if self._dir_moved(g) or self._print_moved(g)
        }
        looked = {*self._sweep.take(self._order, ts), *self._next_slice()}
        moved = deep | {g for g in looked if self._dir_moved(g)}
        # A goal file replaced without a hint: the catalog reads it again.
        return moved | self._catalog.reread(moved)

    def _stat_dir(self, goal_id: str) -> DirStat | None:
        return dir_stat(os.path.join(self._goals_dir, goal_id))

    def _note_dir(self, goal_id: str) -> None:
        """Remember how the goal's directory looks before its files are read."""
        self._dirs[goal_id] = self._stat_dir(goal_id)

    def _dir_moved(self, goal_id: str) -> bool:
        seen = self._dirs.get(goal_id)
        return seen is None or self._stat_dir(goal_id) != seen

    def _print_moved(self, goal_id: str) -> bool:
        seen = self._prints.get(goal_id)
        return seen is not None and goal_fingerprint(os.path.join(self._goals_dir, goal_id)) != seen

    def next_sweep(self) -> datetime:
        """When the next chunk of a sweep is due (an idle agent wakes for it)."""
        n = len(self._order)
        return datetime.fromtimestamp(min(self._sweep.next_at(n), self._deep.next_at(n)), tz=UTC)

    def _due(self, now: datetime) -> set[str]:
        due: set[str] = set()
        ts = now.timestamp()
        while self._timers and self._timers[0][0] <= ts:
            _, gen, goal_id = heapq.heappop(self._timers)
            if self._gen.get(goal_id) == gen:
                due.add(goal_id)
        return due

    def _next_slice(self) -> set[str]:
        if not self._order or self._slice <= 0:
            return set()
        if self._pos >= len(self._order):
            self._pos = 0
        picked = self._order[self._pos : self._pos + self._slice]
        self._pos += self._slice
        return set(picked)

    def _update(self, goal: Goal, *, now: datetime, headroom: HostHeadroom) -> None:
        goal_id = goal.id
        gen = self._gen.get(goal_id, 0) + 1
        self._gen[goal_id] = gen
        self._prints[goal_id] = goal_fingerprint(os.path.join(self._goals_dir, goal_id))
        try:
            candidate, decision = candidate_and_decision(
                self.layout,
                goal,
                now=now,
                headroom=headroom,
                account=self._account_state(goal),
                root=self._account_state(None),
            )
        except LoopxError as e:
            log.warning("candidate_unreadable", goal_id=goal_id, error=e.message)
            self.candidates.pop(goal_id, None)
            self._leased.discard(goal_id)
            retry = now.timestamp() + UNREADABLE_RETRY_S
            heapq.heappush(self._timers, (retry, gen, goal_id))
            return
        self.candidates[goal_id] = candidate
        if candidate.leased_until is not None and candidate.leased_until > now:
            self._leased.add(goal_id)
        else:
            self._leased.discard(goal_id)
        wake = wake_at(candidate, now=now, quota_next=decision.next_eligible_at)
        if wake is None:
            return  # waits for a change to its files (a hint)
        if wake <= now:
            heapq.heappush(self._ready, (rank_key(candidate), gen, goal_id))
        else:
            heapq.heappush(self._timers, (wake.timestamp(), gen, goal_id))

    def _drop(self, goal_id: str) -> None:
        if goal_id in self._gen:
            self._gen[goal_id] += 1
        self.candidates.pop(goal_id, None)
        self._leased.discard(goal_id)
        self._prints.pop(goal_id, None)
        if goal_id not in self._catalog.goals:
            self._dirs.pop(goal_id, None)

    # --- reading -------------------------------------------------------------------------------

    def ranked(self, *, now: datetime, limit: int = DEFAULT_RANKED) -> list[Candidate]:
        """Up to ``limit`` goals that may run now, best first (O(limit log N))."""
        out: list[Candidate] = []
        keep: list[tuple[RankKey, int, str]] = []
        while self._ready and len(out) < limit:
            entry = heapq.heappop(self._ready)
            _, gen, goal_id = entry
            if self._gen.get(goal_id) != gen:
                continue  # stale: the goal was looked at again since
            candidate = self.candidates[goal_id]
            if why_ineligible(candidate, now=now) is None:
                out.append(candidate)
            keep.append(entry)
        for entry in keep:
            heapq.heappush(self._ready, entry)
        return out

    def next_wake(self) -> datetime | None:
        """The earliest time a waiting goal may become eligible, or None when none waits on time."""
        while self._timers and self._gen.get(self._timers[0][2]) != self._timers[0][1]:
            heapq.heappop(self._timers)
        if not self._timers:
            return None
        return datetime.fromtimestamp(self._timers[0][0], tz=UTC)

    def hinted_since_refresh(self) -> bool:
        """Whether a writer left a change hint since the last refresh (one ``stat``)."""
        return self._stat_hints() != self._hint_stat

    def _stat_hints(self) -> tuple[int, int]:
        try:
            st = os.stat(self._hints_file)
        except FileNotFoundError:
            return (0, -1)
        return st.st_ino, st.st_size

    def has_ready(self, *, now: datetime) -> bool:
        """Whether some goal may run now (an idle step then lost its races or hit errors)."""
        return bool(self.ranked(now=now, limit=1))

    def idle_sleep(self, *, now: datetime, longest: float) -> float:
        """How long an idle agent may sleep.

        With a goal eligible now (its claim lost a race) or leased by another
        agent (whose death frees it before the lease expires), at most
        ``longest``; otherwise until the next wake time or the next sweep,
        whichever comes first (a hint ends the sleep sooner).
        """
        due = self.next_sweep()
        wake = self.next_wake()
        if wake is not None:
            due = min(due, wake)
        until = (due - now).total_seconds()
        if self._leased or self.has_ready(now=now):
            until = min(until, longest)
        return max(0.0, until)
