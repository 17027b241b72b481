"""Reading what the status projection needs from the runtime root, cheaply.

The shell around the pure :mod:`loopx.status.projection`: fingerprints of a goal's files,
history tails (:mod:`loopx.history.reader`), the quota window's buckets (from
the ledger's aggregate, the same reader the quota decision uses),
the quarantine listing, probe observations and the fleet (the change hints that let
a refresh skip the scan of unchanged goals are :mod:`loopx.root.hints`).
"""

from __future__ import annotations

import contextlib
import os
import socket
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Final, TypeVar

from loopx.errors import LoopxError
from loopx.fleet import AgentHeartbeat, FleetRecord, process_runs, ray_fleet, ray_slot_of
from loopx.history.reader import HistoryCounts, tail_and_counts
from loopx.memo import Fingerprint, fingerprint
from loopx.model import utcnow
from loopx.quota.ledger import window_buckets_at
from loopx.quota.window import SpendColumns
from loopx.registry.goalrecords import Goal, GoalStatus
from loopx.retention.policy import RETENTION_FILE
from loopx.retention.space import root_problem
from loopx.root import GOALS_NAME, Layout
from loopx.root.hints import note_goal_changed
from loopx.state import GoalState
from loopx.status.fleetview import HEARTBEAT_STALE_S, FleetLiveness, fleet_view
from loopx.status.inputs import NO_SPEND, GoalInputs
from loopx.status.view import FleetView, ProbeObservation
from loopx.storage.dirs import ensure_dir
from loopx.storage.files import (
    atomic_write_model,
    open_dir,
    parse_model,
    read_bytes,
    read_bytes_at,
    read_model_or_none,
)
from loopx.turn.historyline import HistoryLine
from loopx.turn.lease import Lease
from loopx.turn.workdirfiles import WAIT_FILE, WorkdirWait

PROBES_DIR: Final = "probes"
_READ_ORDER: Final = ("state.json", "lease.json", "history.jsonl", "quota.jsonl")
READ_NAMES: Final = frozenset(_READ_ORDER)
NO_COUNTS: Final = HistoryCounts()  # a goal without history (frozen, so shared)
M = TypeVar("M", GoalState, Lease, WorkdirWait)


# --- goals -------------------------------------------------------------------------------------


def _damage(path: str, error: LoopxError | OSError) -> str:
    return error.message if isinstance(error, LoopxError) else f"{path}: {error}"


def gather_goal(
    layout: Layout,
    goal: Goal,
    *,
    now: datetime,
    quarantined: tuple[str, ...] = (),
    probe: ProbeObservation | None = None,
    absent: frozenset[str] = frozenset(),
    counted: HistoryCounts = NO_COUNTS,
) -> tuple[GoalInputs, HistoryCounts]:
    """Read one goal's status inputs, and its history counts extended from ``counted``.

    A damaged file becomes a ``damage`` line, not an error. ``absent`` names
    files the goal's fingerprint, taken just before, found missing: they are
    not opened (a goal that never ran has none of them). A file created since
    is seen by the next refresh, whose fingerprint differs. The goal's
    directory is opened once and its files are read relative to it
    (:func:`~loopx.storage.files.open_dir`), none through a symlink.
    """
    if absent >= READ_NAMES:  # a goal that never ran: nothing to open
        return GoalInputs(goal=goal, quarantined=quarantined, probe=probe), NO_COUNTS
    goal_dir = os.path.join(layout.root, GOALS_NAME, goal.id)
    try:
        dir_fd = open_dir(goal_dir)
    except FileNotFoundError:
        return GoalInputs(goal=goal, quarantined=quarantined, probe=probe), NO_COUNTS
    except (LoopxError, OSError) as e:
        # Every file of the goal is out of reach, for the one reason.
        damage = tuple(
            _damage(os.path.join(goal_dir, name), e) for name in _READ_ORDER if name not in absent
        )
        inputs = GoalInputs(goal=goal, quarantined=quarantined, damage=damage, probe=probe)
        return inputs, NO_COUNTS
    try:
        files = _read_goal_files(dir_fd, goal_dir, goal, now=now, absent=absent, counted=counted)
    finally:
        os.close(dir_fd)
    inputs = GoalInputs(
        goal=goal,
        state=files.state,
        lease=files.lease,
        history=tuple(files.history),
        spend=files.spend,
        quarantined=quarantined,
        damage=tuple(files.damage),
        probe=probe,
        workdir_wait=files.workdir_wait,
    )
    return inputs, files.counts


@dataclass(slots=True)
class _GoalFiles:
    state: GoalState | None = None
    lease: Lease | None = None
    history: list[HistoryLine] = field(default_factory=list)
    counts: HistoryCounts = NO_COUNTS
    spend: SpendColumns = NO_SPEND
    damage: list[str] = field(default_factory=list)
    workdir_wait: WorkdirWait | None = None


def _read_goal_files(
    dir_fd: int,
    goal_dir: str,
    goal: Goal,
    *,
    now: datetime,
    absent: frozenset[str],
    counted: HistoryCounts,
) -> _GoalFiles:
    out = _GoalFiles()
    if "state.json" not in absent:
        out.state = _model_at(dir_fd, goal_dir, "state.json", GoalState, out.damage)
    if "lease.json" not in absent:
        out.lease = _model_at(dir_fd, goal_dir, "lease.json", Lease, out.damage)
    if out.lease is None and goal.status is GoalStatus.ACTIVE:
        # Written and removed with a change hint, so a hint re-reads it.
        out.workdir_wait = _model_at(dir_fd, goal_dir, WAIT_FILE, WorkdirWait, out.damage)
    if "history.jsonl" not in absent:
        try:
            read = tail_and_counts(dir_fd, goal_dir, counted)
        except (LoopxError, OSError) as e:
            out.damage.append(_damage(os.path.join(goal_dir, "history.jsonl"), e))
        else:
            out.history, out.counts = read.tail, read.counts
            if read.damage is not None:
                out.damage.append(read.damage.message)
    if "quota.jsonl" not in absent:
        try:
            window_start = goal.quota.window_start(now)
            out.spend = window_buckets_at(dir_fd, goal_dir, goal.id, window_start=window_start)
        except (LoopxError, OSError) as e:
            out.damage.append(_damage(os.path.join(goal_dir, "quota.jsonl"), e))
    return out


def _model_at(dir_fd: int, goal_dir: str, name: str, model: type[M], damage: list[str]) -> M | None:
    """A goal file read as ``model``; None when missing, or damaged (then a line in ``damage``)."""
    path = f"{goal_dir}/{name}"
    try:
        return parse_model(path, model, read_bytes_at(dir_fd, name, path))
    except FileNotFoundError:
        return None
    except (LoopxError, OSError) as e:
        damage.append(_damage(path, e))
        return None


# --- quarantine, probes, fleet -----------------------------------------------------------------


def _is_quarantine_entry(name: str) -> bool:
    # Reason notes (recovery writes ``<file>.reason.json``), lock files and dotfiles
    # explain or guard entries; they are not entries themselves.
    return not (
        name.startswith(".")
        or name.endswith((".reason", ".reason.json", ".lock"))
        or name in {"reason", "reason.json"}
    )


def quarantine_fingerprint(layout: Layout) -> list[int]:
    """``quarantine/``'s mtime and each per-goal subdirectory's.

    Moves into a subdirectory change only that subdirectory.
    """
    out = list(fingerprint(layout.quarantine_dir))
    try:
        with os.scandir(layout.quarantine_dir) as entries:
            for entry in sorted(entries, key=lambda e: e.name):
                if entry.is_dir(follow_symlinks=False):
                    st = entry.stat(follow_symlinks=False)
                    out.extend((entry.inode(), st.st_mtime_ns))
    except FileNotFoundError:
        pass
    return out


def quarantine_listing(
    layout: Layout, goal_ids: set[str]
) -> tuple[dict[str, tuple[str, ...]], int]:
    """Quarantined entries by goal, and the total count.

    An entry belongs to a goal when it sits in ``quarantine/<goal_id>/`` (where
    recovery puts invalid journals) or is named ``<goal_id>__<anything>``;
    reason notes (``*.reason.json``, ``*.reason``) are not entries.
    """
    by_goal: dict[str, list[str]] = {}
    total = 0
    try:
        entries = sorted(os.scandir(layout.quarantine_dir), key=lambda e: e.name)
    except FileNotFoundError:
        return {}, 0
    for entry in entries:
        name = entry.name
        if not _is_quarantine_entry(name):
            continue
        if entry.is_dir(follow_symlinks=False):
            inner = sorted(n for n in os.listdir(entry.path) if _is_quarantine_entry(n))
            total += len(inner)
            if name in goal_ids:
                by_goal.setdefault(name, []).extend(inner)
            continue
        total += 1
        owner = name.split("__", 1)[0] if "__" in name else None
        if owner in goal_ids:
            by_goal.setdefault(owner, []).append(name)
    return {g: tuple(v) for g, v in by_goal.items()}, total


def probes_dir(layout: Layout) -> Path:
    """``projections/probes/``: the latest probe observation of each goal."""
    return layout.projections_dir / PROBES_DIR


def probe_file(layout: Layout, goal_id: str) -> Path:
    """``projections/probes/<goal_id>.json``."""
    return probes_dir(layout) / f"{goal_id}.json"


def write_probe(layout: Layout, observation: ProbeObservation) -> Path:
    """Store a probe observation and hint the status refresh."""
    ensure_dir(probes_dir(layout))
    path = probe_file(layout, observation.goal_id)
    atomic_write_model(path, observation)
    note_goal_changed(layout, observation.goal_id)
    return path


def read_probes(layout: Layout) -> dict[str, ProbeObservation]:
    """Every stored probe observation by goal id; damaged ones are skipped."""
    out: dict[str, ProbeObservation] = {}
    try:
        names = os.listdir(probes_dir(layout))
    except FileNotFoundError:
        return out
    for name in names:
        if not name.endswith(".json") or name.startswith("."):
            continue
        path = probes_dir(layout) / name
        with contextlib.suppress(LoopxError, OSError):
            obs = parse_model(path, ProbeObservation, read_bytes(path))
            out[obs.goal_id] = obs
    return out


def read_fleet(layout: Layout) -> tuple[FleetRecord | None, list[AgentHeartbeat]]:
    """``supervisor.json`` and the agent heartbeats; damaged files are skipped."""
    fleet: FleetRecord | None = None
    with contextlib.suppress(LoopxError, OSError):
        fleet = read_model_or_none(layout.supervisor_file, FleetRecord)
    beats: list[AgentHeartbeat] = []
    for name in _heartbeat_names(layout):
        with contextlib.suppress(LoopxError, OSError):
            beats.append(
                parse_model(
                    layout.agents_dir / name, AgentHeartbeat, read_bytes(layout.agents_dir / name)
                )
            )
    return fleet, beats


def fleet_liveness(
    layout: Layout, fleet: FleetRecord | None, beats: list[AgentHeartbeat]
) -> FleetLiveness:
    """Which of the recorded agents run now, and the root's write health.

    Processes are looked up on this host; a running Ray supervisor's record
    says which of its agents live, on any node.
    """
    host = socket.gethostname()
    supervisor_alive = None
    if fleet is not None and fleet.hostname == host:
        supervisor_alive = process_runs(fleet.pid, fleet.pid_started_at)
    vouching = ray_fleet(fleet, supervisor_running=bool(supervisor_alive))
    if vouching is not None:
        live = frozenset(b.agent_id for b in beats if ray_slot_of(vouching, b) is not None)
    else:
        live = frozenset(
            b.agent_id for b in beats if b.hostname != host or process_runs(b.pid, b.pid_started_at)
        )
    return FleetLiveness(
        supervisor_alive=supervisor_alive,
        live_agents=live,
        degraded=root_problem(layout, now=utcnow())
        or fleet_degraded(fleet if supervisor_alive else None, beats, live),
    )


def fleet_degraded(
    fleet: FleetRecord | None, beats: list[AgentHeartbeat], live: frozenset[str]
) -> str | None:
    """What a resource error stops in the running supervisor or a live agent, if anything. Pure.

    Each publishes its failing duties (EMFILE, ENOMEM, EIO...) in its
    record or heartbeat; the first one named is shown.
    """
    if fleet is not None and fleet.degraded:
        return f"supervisor: {fleet.degraded}"
    for beat in sorted(beats, key=lambda b: b.agent_id):
        if beat.agent_id in live and beat.degraded:
            return f"{beat.agent_id}: {beat.degraded}"
    return None


def current_fleet(layout: Layout, *, now: datetime) -> FleetView:
    """The fleet as it is now: records, heartbeats and process identities read afresh."""
    fleet, beats = read_fleet(layout)
    return fleet_view(fleet, beats, now=now, live=fleet_liveness(layout, fleet, beats))


def current_fleet_keyed(
    layout: Layout, *, now: datetime
) -> tuple[FleetView, dict[str, Fingerprint] | None, float | None]:
    """:func:`current_fleet`, what it was computed from, and when it goes stale by time.

    What it was computed from: the fingerprints, taken before they were read,
    of ``supervisor.json``, ``agents/`` and each heartbeat file, and of
    ``/proc/<pid>`` of each process of this host it judged alive or dead
    (which appears, goes or is replaced with it); None where there is no
    ``/proc`` to tell. A heartbeat counted fresh goes stale at the time given.
    """
    names = [str(layout.supervisor_file), str(layout.agents_dir)]
    names += [str(layout.agents_dir / name) for name in _heartbeat_names(layout)]
    names += _account_files(layout)  # the accounts part and its overlay
    names.append(str(layout.root / RETENTION_FILE))  # the disk limits behind `degraded`
    inputs: dict[str, Fingerprint] | None = {name: fingerprint(name) for name in names}
    fleet, beats = read_fleet(layout)
    host = socket.gethostname()
    pids = {b.pid for b in beats if b.hostname == host}
    if fleet is not None and fleet.hostname == host:
        pids.add(fleet.pid)
    if pids and not os.path.isdir("/proc/self"):
        inputs = None
    elif inputs is not None:
        inputs.update((f"/proc/{pid}", fingerprint(f"/proc/{pid}")) for pid in sorted(pids))
    live = fleet_liveness(layout, fleet, beats)
    stale_at = [b.beat_at.timestamp() + HEARTBEAT_STALE_S for b in beats]
    until = min((t for t in stale_at if t > now.timestamp()), default=None)
    return fleet_view(fleet, beats, now=now, live=live), inputs, until


def _account_files(layout: Layout) -> list[str]:
    """The account files the document's ``accounts`` and its overlay are read from."""
    folder = layout.root / "accounts"
    try:
        names = sorted(e.name for e in os.scandir(folder) if e.is_dir(follow_symlinks=False))
    except (FileNotFoundError, NotADirectoryError):
        return [str(folder)]
    parts = ("account.json", "state.json", "spend.json", "budget.json")
    return [str(folder), *(str(folder / name / part) for name in names for part in parts)]


def _heartbeat_names(layout: Layout) -> list[str]:
    try:
        names = os.listdir(layout.agents_dir)
    except FileNotFoundError:
        return []
    return sorted(n for n in names if n.endswith(".json") and not n.startswith("."))
