"""``loopx doctor``: check a whole runtime root and say exactly what to repair.

Read-only: it never creates, locks, moves or rewrites anything (a lease with a
dead holder is reported, not cleared), so it is safe next to a running
supervisor. Every finding is typed: a severity, a code, the path, what is
wrong and the exact command or action that repairs it. ``error`` means damage
or an unsafe root, ``warning`` something a human (or ``loopx recover``) must
deal with, ``info`` a fact that needs nothing. A root is healthy when it has
neither errors nor warnings.
"""

from __future__ import annotations

import os
import shlex
import socket
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import Final, Literal

import psutil
from pydantic import BaseModel

from loopx.errors import CorruptFileError, LoopxError, UnsafePathError
from loopx.fleet import AgentHeartbeat, FleetRecord
from loopx.history.line import HistoryLine
from loopx.ids import is_valid_goal_id
from loopx.model import Record, utcnow
from loopx.process import ProcessIdentity
from loopx.quota.ledger import SpendAggregate, SpendRecord
from loopx.registry.model import Goal, RegistrySettings
from loopx.registry.store import SETTINGS_VERSION, registry_version
from loopx.root import Layout
from loopx.state import GoalState
from loopx.status.cache import StatusIndex, StatusShard
from loopx.status.projection import ProbeObservation
from loopx.storage.files import read_bytes, read_model
from loopx.storage.jsonl import read_records
from loopx.turn.inspection import RecoveryDecision, inspect
from loopx.turn.journal import TurnJournal, parse_turn_key
from loopx.turn.lease import DEFAULT_GRACE_S, Holder, Lease, holder_state, read_epoch
from loopx.turn.writeback import RunReport

# A temp file of a live writer younger than this is an atomic write in flight.
TEMP_IN_FLIGHT: Final = timedelta(hours=1)
_ACTIVE_SUPERVISOR_STATES: Final = frozenset({"starting", "running", "stopping"})


class Severity(StrEnum):
    """How much a finding matters."""

    ERROR = "error"  # damage, or a root LoopX must not trust
    WARNING = "warning"  # needs a human or `loopx recover`
    INFO = "info"  # a fact; needs nothing


class FindingCode(StrEnum):
    """What kind of problem a finding is."""

    ROOT_MISSING = "root_missing"
    PERMISSIONS = "permissions"  # mode broader than 0700/0600
    OWNER = "owner"  # not owned by the user running LoopX
    SYMLINK = "symlink"  # LoopX never follows it
    UNEXPECTED_ENTRY = "unexpected_entry"  # a name LoopX never writes where it sits
    SCHEMA = "schema"  # not JSON, or not the file kind's schema
    MISSING_FILE = "missing_file"
    EPOCH = "epoch"  # the fencing counter is behind a lease or journal
    STALE_LEASE = "stale_lease"  # a lease whose holder is gone
    INVALID_JOURNAL = "invalid_journal"  # recovery will quarantine it
    ORPHANED_JOURNAL = "orphaned_journal"  # in_progress with no live lease holder
    TORN_LINE = "torn_line"  # a JSON Lines file ends in a partial record
    STRAY_TEMP = "stray_temp"  # an atomic write's temp file whose writer died
    QUARANTINED = "quarantined"  # a file set aside for a human
    SUPERVISOR_DEAD = "supervisor_dead"  # supervisor.json says running; its process is gone
    SUPERVISOR_RUNNING = "supervisor_running"
    CRASH_LOOP = "crash_loop"
    STALE_HEARTBEAT = "stale_heartbeat"
    ORPHAN_GOAL = "orphan_goal"  # a goal directory without a goal file (goal.json)
    OLD_LAYOUT = "old_layout"  # a single-file registry of LoopX 0.x, migrated on the next open
    MISSING_RECORD = "missing_record"  # a finished turn's history/ledger line or state is absent


class Finding(Record):
    """One thing doctor found, and how to repair it."""

    severity: Severity
    code: FindingCode
    path: str
    problem: str
    repair: str  # the exact command, or the action, that fixes it ("" for info)
    goal_id: str | None = None


class DoctorReport(Record):
    """``loopx doctor --json``."""

    schema_version: Literal[1] = 1
    root: str
    healthy: bool
    counts: dict[Severity, int]
    files_checked: int
    goals_checked: int
    journals_checked: int
    findings: list[Finding]


def q(path: Path | str) -> str:
    """A path quoted for a shell command line."""
    return shlex.quote(str(path))


# --- pure classification -----------------------------------------------------------------------


def mode_problem(mode: int, *, is_dir: bool) -> tuple[Severity, str] | None:
    """Whether a file mode is broader than LoopX's (0700 dirs, 0600 files). Pure."""
    wanted = 0o700 if is_dir else 0o600
    perms = stat.S_IMODE(mode)
    if perms & (stat.S_IWGRP | stat.S_IWOTH):
        return Severity.ERROR, f"mode {perms:o} lets other users write (want {wanted:o})"
    if perms & 0o077:
        return Severity.WARNING, f"mode {perms:o} lets other users read (want {wanted:o})"
    return None


def lease_problem(
    lease: Lease, holder: Holder, *, now: datetime, grace_s: float = DEFAULT_GRACE_S
) -> str | None:
    """Why a lease is stale, or None when its holder may still be working. Pure."""
    if holder is Holder.DEAD:
        return f"held by {lease.agent_id} (pid {lease.pid}), which is no longer running"
    if holder is Holder.UNKNOWN and now > lease.expires_at + timedelta(seconds=grace_s):
        return (
            f"held by {lease.agent_id} on host {lease.hostname}, expired at "
            f"{lease.expires_at.isoformat()} and not renewed since"
        )
    return None


def temp_writer_pid(name: str) -> int | None:
    """The writer pid in an atomic write's temp name ``.<name>.<pid>.<hex>.tmp``. Pure."""
    parts = name.split(".")
    if len(parts) >= 5 and parts[0] == "" and parts[-1] == "tmp" and parts[-3].isdigit():  # noqa: PLR2004
        return int(parts[-3])
    return None


# --- the checks --------------------------------------------------------------------------------


@dataclass(slots=True)
class _Doctor:
    layout: Layout
    now: datetime
    hostname: str = field(default_factory=socket.gethostname)
    findings: list[Finding] = field(default_factory=list)
    files: int = 0
    goals: int = 0
    journals: int = 0

    def add(
        self,
        severity: Severity,
        code: FindingCode,
        path: Path | str,
        problem: str,
        repair: str = "",
        goal_id: str | None = None,
    ) -> None:
        self.findings.append(
            Finding(
                severity=severity,
                code=code,
                path=str(path),
                problem=problem,
                repair=repair,
                goal_id=goal_id,
            )
        )

    # permissions, symlinks, temp files: one walk of the whole root
    def walk(self) -> None:
        root = self.layout.root
        self._entry(root, root.lstat())
        for top, dirs, names in os.walk(root, followlinks=False):
            for name in [*dirs, *names]:
                path = Path(top) / name
                try:
                    st = path.lstat()
                except FileNotFoundError:
                    continue  # removed while we walked
                self._entry(path, st)

    def _entry(self, path: Path, st: os.stat_result) -> None:
        if stat.S_ISLNK(st.st_mode):
            self.add(
                Severity.ERROR,
                FindingCode.SYMLINK,
                path,
                f"a symlink (to {os.readlink(path)!r}) inside the root; LoopX refuses to use it",
                f"rm {q(path)}",
            )
            return
        is_dir = stat.S_ISDIR(st.st_mode)
        if not is_dir and not stat.S_ISREG(st.st_mode):
            return  # sockets (tmux.sock) and the like are not LoopX's durable files
        if not is_dir:
            self.files += 1
        if (
            not is_dir
            and path.parent.name == "results"
            and path.parent.parent.parent == (self.layout.goals_dir)
        ):
            # The host's drop box: it writes there with its own umask. A file left
            # behind is a result (or its temp file) of a turn that is over.
            self.add(
                Severity.INFO,
                FindingCode.STRAY_TEMP,
                path,
                "left by a host in its result drop box; LoopX read what it needed",
                f"rm {q(path)}",
            )
            return
        if hasattr(os, "getuid") and st.st_uid != os.getuid():
            self.add(
                Severity.ERROR,
                FindingCode.OWNER,
                path,
                f"owned by uid {st.st_uid}, not by you (uid {os.getuid()})",
                f"chown {os.getuid()} {q(path)}",
            )
        bad = mode_problem(st.st_mode, is_dir=is_dir)
        if bad is not None:
            self.add(
                bad[0],
                FindingCode.PERMISSIONS,
                path,
                bad[1],
                f"chmod {'700' if is_dir else '600'} {q(path)}",
            )
        pid = temp_writer_pid(path.name) if not is_dir else None
        if pid is not None:
            age = self.now.timestamp() - st.st_mtime
            if psutil.pid_exists(pid) and age < TEMP_IN_FLIGHT.total_seconds():
                return  # an atomic write in flight
            self.add(
                Severity.INFO,
                FindingCode.STRAY_TEMP,
                path,
                f"temp file of an atomic write whose writer (pid {pid}) died before the "
                "rename; the file it was for is intact",
                f"rm {q(path)}",
            )

    def model(
        self,
        path: Path,
        model: type[BaseModel],
        repair: str,
        *,
        severity: Severity = Severity.ERROR,
        goal_id: str | None = None,
    ) -> BaseModel | None:
        """Read and validate one file; a failure becomes a finding."""
        try:
            return read_model(path, model)
        except FileNotFoundError:
            return None
        except CorruptFileError as e:
            self.add(severity, FindingCode.SCHEMA, path, e.problem, repair, goal_id)
        except (UnsafePathError, OSError) as e:
            self.add(
                Severity.ERROR, FindingCode.SCHEMA, path, f"cannot be read: {e}", repair, goal_id
            )
        return None

    def lines(
        self, path: Path, model: type[Record], goal_id: str, repair: str
    ) -> list[Record] | None:
        """A JSON Lines file's records; None (and a finding) when it is damaged."""
        try:
            records = read_records(path, model)
            data = read_bytes(path) if path.exists() else b""
        except CorruptFileError as e:
            self.add(Severity.ERROR, FindingCode.SCHEMA, path, e.problem, repair, goal_id)
            return None
        except (UnsafePathError, OSError) as e:
            self.add(
                Severity.ERROR, FindingCode.SCHEMA, path, f"cannot be read: {e}", repair, goal_id
            )
            return None
        if data and not data.endswith(b"\n"):
            self.add(
                Severity.INFO,
                FindingCode.TORN_LINE,
                path,
                "ends in a partial record (a writer died mid-append); readers skip it and "
                "the next append cuts it off",
                "",
                goal_id,
            )
        for record in records:
            if getattr(record, "goal_id", goal_id) != goal_id:
                self.add(
                    Severity.ERROR,
                    FindingCode.SCHEMA,
                    path,
                    f"a line of turn {getattr(record, 'turn_key', '?')} names goal "
                    f"{getattr(record, 'goal_id', '?')!r}",
                    repair,
                    goal_id,
                )
                break
        return records

    # the registry
    def registry(self) -> bool:
        """Check the root-wide settings file; True when it is an old single-file registry.

        Each goal's policy (``goal.json``) is checked with the goal.
        """
        path = self.layout.registry
        repair = (
            f"restore {q(path)} from a backup  (or fix the named field by hand: `loopx schema "
            "registry` prints the format; every goal's own files are intact)"
        )
        try:
            version = registry_version(path)
        except CorruptFileError as e:
            self.add(Severity.ERROR, FindingCode.SCHEMA, path, e.problem, repair)
            return False
        except (UnsafePathError, OSError) as e:
            self.add(Severity.ERROR, FindingCode.SCHEMA, path, f"cannot be read: {e}", repair)
            return False
        if version is not None and version < SETTINGS_VERSION:
            self.add(
                Severity.WARNING,
                FindingCode.OLD_LAYOUT,
                path,
                "a single-file registry written by an older LoopX",
                f"loopx init --upgrade --root {q(self.layout.root)}  (or any command opening it)",
            )
            return True
        self.model(path, RegistrySettings, repair)
        return False

    def _goal_names(self) -> list[str]:
        try:
            return sorted(os.listdir(self.layout.goals_dir))
        except (FileNotFoundError, NotADirectoryError):
            return []

    # one goal
    def goal(self, goal_id: str, registered: bool) -> None:
        layout = self.layout
        goal_dir = layout.goals_dir / goal_id
        if not is_valid_goal_id(goal_id):
            self.add(
                Severity.WARNING,
                FindingCode.UNEXPECTED_ENTRY,
                goal_dir,
                "not a valid goal id; LoopX ignores it",
                f"move it out of {q(layout.goals_dir)}",
            )
            return
        if goal_dir.is_symlink() or not goal_dir.is_dir():
            return  # reported by the walk (symlink) or not a goal
        self.goals += 1
        policy = layout.goal_file(goal_id)
        if not registered:
            self.model(
                policy,
                Goal,
                f"restore {q(policy)} from a backup, or register the goal again with "
                f"`loopx goal add {goal_id} --update ...`",
                goal_id=goal_id,
            )
        if not registered and not policy.exists():
            self.add(
                Severity.WARNING,
                FindingCode.ORPHAN_GOAL,
                goal_dir,
                "a goal directory without a goal file (goal.json)",
                f"loopx archive {goal_id}  (or re-register it with `loopx goal add {goal_id} ...`)",
                goal_id,
            )
        replay = f"loopx replay {goal_id} --repair"
        state = self.model(layout.state_file(goal_id), GoalState, replay, goal_id=goal_id)
        history = self.lines(layout.history_file(goal_id), HistoryLine, goal_id, replay)
        ledger = self.lines(layout.quota_file(goal_id), SpendRecord, goal_id, replay)
        agg = layout.quota_aggregate_file(goal_id)
        self.model(
            agg,
            SpendAggregate,
            f"rm {q(agg)}  (a cache; rebuilt on the next read)",
            severity=Severity.WARNING,
            goal_id=goal_id,
        )
        runs = layout.runs_dir(goal_id)
        if runs.is_dir() and not runs.is_symlink():
            for name in sorted(os.listdir(runs)):
                if name.endswith(".json") and not name.startswith("."):
                    self.model(
                        runs / name, RunReport, replay, severity=Severity.WARNING, goal_id=goal_id
                    )
        finished = self._lease_and_journals(goal_id)
        self._cross_check(goal_id, finished, state, history, ledger)

    def _cross_check(
        self,
        goal_id: str,
        finished: list[TurnJournal],
        state: BaseModel | None,
        history: list[Record] | None,
        ledger: list[Record] | None,
    ) -> None:
        """Every finished turn must have its history line, its ledger line, and be in the state."""
        layout = self.layout
        repair = f"loopx replay {goal_id} --repair  (rebuilds them from the journals)"
        checks: tuple[tuple[Path, list[Record] | None, Callable[[TurnJournal], bool], str], ...] = (
            (layout.history_file(goal_id), history, _any_turn, "history line"),
            (layout.quota_file(goal_id), ledger, _host_ran, "ledger line"),
        )
        for path, records, needed, what in checks:
            if records is None:
                continue  # damaged: reported already
            keys = {getattr(r, "turn_key", None) for r in records}
            missing = [j.turn_key for j in finished if needed(j) and j.turn_key not in keys]
            if missing:
                self.add(
                    Severity.ERROR,
                    FindingCode.MISSING_RECORD,
                    path,
                    f"no {what} for {len(missing)} finished turn(s): {', '.join(missing[:5])}",
                    repair,
                    goal_id,
                )
        newest = max((j.seq for j in finished), default=0)
        if isinstance(state, GoalState) and state.turn_seq < newest:
            self.add(
                Severity.ERROR,
                FindingCode.MISSING_RECORD,
                layout.state_file(goal_id),
                f"the state is at turn {state.turn_seq} but turn {newest} finished",
                repair,
                goal_id,
            )
        elif state is None and finished and not layout.state_file(goal_id).exists():
            self.add(
                Severity.ERROR,
                FindingCode.MISSING_FILE,
                layout.state_file(goal_id),
                "missing, though turns finished",
                repair,
                goal_id,
            )

    def _lease_and_journals(self, goal_id: str) -> list[TurnJournal]:
        """Check the lease, the epoch and every journal; return the finished journals."""
        layout = self.layout
        epoch_path = layout.epoch_file(goal_id)
        try:
            epoch: int | None = read_epoch(layout, goal_id)
        except (CorruptFileError, UnsafePathError) as e:
            epoch = None
            self.add(Severity.ERROR, FindingCode.SCHEMA, epoch_path, str(e), "", goal_id)
        lease_path = layout.lease_file(goal_id)
        lease = self.model(
            lease_path,
            Lease,
            f"rm {q(lease_path)}  (a damaged lease belongs to nobody; the next claim replaces it)",
            severity=Severity.WARNING,
            goal_id=goal_id,
        )
        live = False
        if isinstance(lease, Lease):
            holder = holder_state(lease, hostname=self.hostname)
            stale = lease_problem(lease, holder, now=self.now)
            live = stale is None
            if stale is not None:
                self.add(
                    Severity.WARNING,
                    FindingCode.STALE_LEASE,
                    lease_path,
                    stale,
                    "loopx recover  (clears a dead holder's lease and finishes its turn)",
                    goal_id,
                )
        high = lease.epoch if isinstance(lease, Lease) else 0
        finished: list[TurnJournal] = []
        turns = layout.turns_dir(goal_id)
        names = sorted(os.listdir(turns)) if turns.is_dir() and not turns.is_symlink() else []
        for name in names:
            path = turns / name
            if name.startswith(".") or path.is_symlink() or not path.is_file():
                continue
            if not name.endswith(".json"):
                self.add(
                    Severity.WARNING,
                    FindingCode.UNEXPECTED_ENTRY,
                    path,
                    "not a turn journal",
                    f"move it out of {q(turns)}",
                    goal_id,
                )
                continue
            self.journals += 1
            turn_key = name.removesuffix(".json")
            parsed = parse_turn_key(turn_key)
            high = max(high, parsed[2] if parsed else 0)
            raw = read_bytes(path)
            view = inspect(raw, goal_id=goal_id, turn_key=turn_key)
            if view.recovery_decision is RecoveryDecision.NONE:
                finished.append(TurnJournal.model_validate_json(raw))
            elif view.recovery_decision is RecoveryDecision.QUARANTINE:
                self.add(
                    Severity.ERROR,
                    FindingCode.INVALID_JOURNAL,
                    path,
                    "; ".join(f"{v.code}: {v.message}" for v in view.violations),
                    "loopx recover  (moves it to quarantine/ with a reason file)",
                    goal_id,
                )
            elif not live:
                self.add(
                    Severity.WARNING,
                    FindingCode.ORPHANED_JOURNAL,
                    path,
                    f"in_progress at {view.next_phase or 'host_execute'} and no live agent "
                    f"holds the goal (recovery would {view.recovery_decision})",
                    "loopx recover  (or start the supervisor, which recovers first)",
                    goal_id,
                )
        if epoch is not None and high > epoch:
            self.add(
                Severity.ERROR,
                FindingCode.EPOCH,
                epoch_path,
                f"the fencing counter is {epoch} but a lease or journal carries epoch {high}; "
                "a stale holder's writes would not be refused",
                f"printf '{high}\\n' > {q(epoch_path)}",
                goal_id,
            )
        return finished

    # fleet
    def fleet(self) -> None:
        path = self.layout.supervisor_file
        record = self.model(
            path,
            FleetRecord,
            f"rm {q(path)}  (rewritten by the next supervisor)",
            severity=Severity.WARNING,
        )
        supervisor_alive = False
        if isinstance(record, FleetRecord):
            supervisor_alive = ProcessIdentity(record.pid, record.pid_started_at).alive()
            if record.state in _ACTIVE_SUPERVISOR_STATES and not supervisor_alive:
                self.add(
                    Severity.WARNING,
                    FindingCode.SUPERVISOR_DEAD,
                    path,
                    f"the supervisor (pid {record.pid}) is recorded as {record.state} but is "
                    "gone; turns it ran may be unfinished",
                    f"loopx supervisor start --agents {record.agents_wanted}  (reaps what is "
                    "left and recovers), or `loopx recover`",
                )
            elif supervisor_alive:
                self.add(
                    Severity.INFO,
                    FindingCode.SUPERVISOR_RUNNING,
                    path,
                    f"supervisor pid {record.pid} is {record.state} with "
                    f"{record.agents_wanted} agent(s)",
                )
                for slot in record.slots:
                    if slot.crash_loop:
                        log_file = self.layout.logs_dir / f"agent-{slot.index}.log"
                        self.add(
                            Severity.WARNING,
                            FindingCode.CRASH_LOOP,
                            path,
                            f"agent slot {slot.index} ({slot.agent_id}) is in a crash loop: "
                            f"{slot.recent_restarts} recent restarts, last {slot.last_exit}",
                            f"read {q(log_file)}, fix the cause, then "
                            "`loopx supervisor stop` and start it again",
                        )
        agents = self.layout.agents_dir
        for name in sorted(os.listdir(agents)) if agents.is_dir() else []:
            beat_path = agents / name
            if not name.endswith(".json") or name.startswith("."):
                continue
            beat = self.model(
                beat_path,
                AgentHeartbeat,
                f"rm {q(beat_path)}  (rewritten by the agent every few seconds)",
                severity=Severity.WARNING,
            )
            if (
                isinstance(beat, AgentHeartbeat)
                and not supervisor_alive
                and not ProcessIdentity(beat.pid, beat.pid_started_at).alive()
                and beat.phase != "stopping"
            ):
                self.add(
                    Severity.INFO,
                    FindingCode.STALE_HEARTBEAT,
                    beat_path,
                    f"agent {beat.agent_id} (pid {beat.pid}) is gone",
                    f"rm {q(beat_path)}",
                )

    def projections(self) -> None:
        clear = "loopx status --clear-cache  (a cache; rebuilt from the durable files)"
        self.model(self.layout.status_file, StatusIndex, clear, severity=Severity.WARNING)
        shards = self.layout.projections_dir / "status.d"
        for name in (
            sorted(os.listdir(shards)) if shards.is_dir() and not shards.is_symlink() else []
        ):
            if name.endswith(".json") and not name.startswith("."):
                self.model(shards / name, StatusShard, clear, severity=Severity.WARNING)
        probes = self.layout.projections_dir / "probes"
        for name in (
            sorted(os.listdir(probes)) if probes.is_dir() and not probes.is_symlink() else []
        ):
            if name.endswith(".json") and not name.startswith("."):
                path = probes / name
                self.model(
                    path,
                    ProbeObservation,
                    f"rm {q(path)}  (rerun `loopx probe`)",
                    severity=Severity.WARNING,
                )

    def quarantine(self) -> None:
        top = self.layout.quarantine_dir
        if not top.is_dir() or top.is_symlink():
            return
        for dirpath, _dirs, names in os.walk(top, followlinks=False):
            for name in sorted(names):
                if name.endswith((".reason.json", ".reason")):
                    continue
                path = Path(dirpath) / name
                reason = path.with_name(name + ".reason.json")
                why = ""
                if reason.is_file():
                    try:
                        why = ": " + read_bytes(reason)[:400].decode("utf-8", "replace").replace(
                            "\n", " "
                        )
                    except (OSError, LoopxError):
                        why = ""
                goal = Path(dirpath).name if Path(dirpath) != top else name.split("__", 1)[0]
                extra = f" {q(reason)}" if reason.is_file() else ""
                self.add(
                    Severity.WARNING,
                    FindingCode.QUARANTINED,
                    path,
                    f"set aside for a human{why}",
                    f"rm {q(path)}{extra}  (once you have inspected it; LoopX never "
                    "reads it again)",
                    goal if is_valid_goal_id(goal) else None,
                )


def _any_turn(_journal: TurnJournal) -> bool:
    return True


def _host_ran(journal: TurnJournal) -> bool:
    return journal.outcome is not None


def diagnose(layout: Layout, *, now: datetime | None = None) -> DoctorReport:
    """Check the whole root (read-only) and return every finding, worst first."""
    doctor = _Doctor(layout, now or utcnow())
    root = layout.root
    if not root.exists() and not root.is_symlink():
        doctor.add(
            Severity.ERROR,
            FindingCode.ROOT_MISSING,
            root,
            "the runtime root does not exist",
            f"loopx init --root {q(root)}",
        )
    elif root.is_symlink() or not root.is_dir():
        doctor.add(
            Severity.ERROR,
            FindingCode.SYMLINK,
            root,
            "the runtime root is a symlink or not a directory; LoopX refuses it",
            "point --root at the real directory",
        )
    else:
        doctor.walk()
        old_layout = doctor.registry()
        for goal_id in doctor._goal_names():  # noqa: SLF001 - same module
            try:
                doctor.goal(goal_id, registered=old_layout)
            except (LoopxError, OSError) as e:
                doctor.add(
                    Severity.ERROR,
                    FindingCode.SCHEMA,
                    layout.goals_dir / goal_id,
                    f"could not be checked: {e}",
                    "",
                    goal_id,
                )
        doctor.fleet()
        doctor.projections()
        doctor.quarantine()
    order = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.INFO: 2}
    findings = sorted(doctor.findings, key=lambda f: (order[f.severity], f.path, f.code))
    counts = {s: sum(1 for f in findings if f.severity is s) for s in Severity}
    return DoctorReport(
        root=str(root),
        healthy=counts[Severity.ERROR] == 0 and counts[Severity.WARNING] == 0,
        counts=counts,
        files_checked=doctor.files,
        goals_checked=doctor.goals,
        journals_checked=doctor.journals,
        findings=findings,
    )


__all__ = ["DoctorReport", "Finding", "FindingCode", "Severity", "diagnose"]
