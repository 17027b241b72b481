"""Talk to a running supervisor from another process: status, stop, scale, start detached, attach."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Sequence
from typing import Final

from loopx import process
from loopx.errors import CorruptFileError, LoopxError
from loopx.fleet import (
    AgentHeartbeat,
    AgentView,
    ExitStatus,
    FleetRecord,
    FleetState,
    LivenessCheck,
    ScaleRequest,
    ScaleResult,
    SupervisorStarted,
    SupervisorStatus,
    SupervisorStopped,
    ray_fleet,
    ray_slot_of,
)
from loopx.model import utcnow
from loopx.root import Layout
from loopx.storage.files import read_model_or_none
from loopx.supervisor.child import last_error, log_end, supervisor_argv
from loopx.supervisor.lock import read_record
from loopx.supervisor.notify import child_env
from loopx.supervisor.process import spawn
from loopx.supervisor.scale import write_scale
from loopx.supervisor.tmux import TmuxError, TmuxSession

START_TIMEOUT_S: Final = 60.0


class SupervisorNotRunningError(LoopxError):
    """An operation needs a running supervisor and there is none on this root."""

    def __init__(self, root: str, what: str) -> None:
        super().__init__(
            f"no supervisor is running on {root}; cannot {what}",
            hint="start one with `loopx supervisor start --agents N` (or `run` in the foreground)",
        )
        self.root = root
        self.what = what


class SupervisorStartError(LoopxError):
    """A detached supervisor did not come up."""


def running_ref(layout: Layout) -> tuple[FleetRecord | None, process.ProcessIdentity | None]:
    """The last supervisor record, and its process if it still runs."""
    record = read_record(layout)
    if record is None or record.state is FleetState.STOPPED:
        return record, None
    ref = process.ProcessIdentity(record.pid, record.pid_started_at)
    return record, ref if ref.alive() else None


def status_document(layout: Layout) -> SupervisorStatus:
    """The supervisor's record and every agent's heartbeat, with liveness (`supervisor status`).

    A local agent is alive when its pid runs here; a Ray agent (on any node)
    when the running supervisor still holds its actor (:func:`ray_slot_of`).
    """
    record, ref = running_ref(layout)
    vouching = ray_fleet(record, supervisor_running=ref is not None)
    agents = []
    if layout.agents_dir.is_dir():
        for path in sorted(layout.agents_dir.glob("*.json")):
            try:
                beat = read_model_or_none(path, AgentHeartbeat)
            except CorruptFileError:
                continue
            if beat is None:
                continue
            age = (utcnow() - beat.beat_at).total_seconds()
            fields = {name: getattr(beat, name) for name in AgentHeartbeat.model_fields}
            if vouching is not None:
                slot = ray_slot_of(vouching, beat)
                view = AgentView(
                    **fields,
                    alive=slot is not None,
                    beat_age_s=round(age, 3),
                    checked_by=LivenessCheck.RAY,
                    ray=slot.ray if slot is not None else None,
                )
            else:
                alive = process.ProcessIdentity(beat.pid, beat.pid_started_at).alive()
                view = AgentView(**fields, alive=alive, beat_age_s=round(age, 3))
            agents.append(view)
    return SupervisorStatus(
        root=str(layout.root),
        running=ref is not None,
        crash_loop=bool(record and ref and record.crash_loop),
        supervisor=record,
        agents=agents,
    )


def stop(
    layout: Layout, *, timeout_s: float | None = None, force: bool = False
) -> SupervisorStopped:
    """SIGTERM the running supervisor and wait until it has stopped its fleet.

    Returns:
        The supervisor's final record (None when none was running).

    Raises:
        LoopxError: it did not stop within the wait.

    """
    record, ref = running_ref(layout)
    if ref is None or record is None:
        return SupervisorStopped(was_running=False, supervisor=None)
    wait = timeout_s if timeout_s is not None else record.stop_grace_s + 15
    found = ref.find()
    if found is None:
        return SupervisorStopped(was_running=True, supervisor=read_record(layout))
    found.send_signal(signal.SIGTERM)
    if force:
        found.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline and ref.alive():
        time.sleep(0.05)
    if ref.alive():
        raise LoopxError(
            f"supervisor pid {ref.pid} on {layout.root} did not stop within {wait:.0f}s",
            hint="run `loopx supervisor stop --force`, or kill it; the next start reaps its agents",
        )
    return SupervisorStopped(was_running=True, supervisor=read_record(layout))


def scale(layout: Layout, agents: int) -> ScaleResult:
    """Ask for ``agents`` agents: write the wanted count and send SIGHUP to a running supervisor.

    Returns:
        Whether a running supervisor was signalled; when none runs the file is ignored (the
        next start's ``--agents`` decides).

    """
    write_scale(layout, ScaleRequest(agents=agents, requested_at=utcnow()))
    _record, ref = running_ref(layout)
    found = ref.find() if ref is not None else None
    if found is None:
        return ScaleResult(agents=agents, signalled=False)
    found.send_signal(signal.SIGHUP)
    return ScaleResult(agents=agents, signalled=True, supervisor_pid=found.pid)


def start_detached(layout: Layout, run_args: Sequence[str]) -> SupervisorStarted:
    """Start `loopx supervisor run RUN_ARGS` in the background (own session, log in logs/).

    Waits until it reports ``running``.

    Raises:
        SupervisorRunningError: one is already running (checked by the child's lock, too).
        SupervisorStartError: it exited or did not come up in time; the log's tail says why.

    """
    from loopx.supervisor.lock import SupervisorRunningError  # noqa: PLC0415

    record, ref = running_ref(layout)
    if ref is not None and record is not None:
        raise SupervisorRunningError(str(layout.root), record.pid)
    log_path = layout.logs_dir / "supervisor.log"
    since = log_end(log_path)
    child = spawn(supervisor_argv(layout, run_args), env=child_env(os.environ), log_path=log_path)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if child.poll() is not None:
            # Two starts raced: ours lost the lock to the other, which now runs.
            record, ref = running_ref(layout)
            if ref is not None and record is not None and record.pid != child.pid:
                raise SupervisorRunningError(str(layout.root), record.pid)
            raise SupervisorStartError(
                f"the background supervisor exited with "
                f"{ExitStatus.of_returncode(child.returncode).describe()}: "
                f"{last_error(log_path, since)}",
                hint=f"see {log_path}",
            )
        record = read_record(layout)
        if record is not None and record.pid == child.pid and record.state is FleetState.RUNNING:
            return SupervisorStarted(supervisor=record)
        time.sleep(0.05)
    raise SupervisorStartError(
        f"the background supervisor (pid {child.pid}) did not report running within "
        f"{START_TIMEOUT_S:.0f}s",
        hint=f"see {log_path}",
    )


def attach_argv(layout: Layout) -> list[str]:
    """The command that attaches a terminal to the fleet's tmux session.

    Raises:
        SupervisorNotRunningError: no supervisor runs.
        HeadlessFleetError: the fleet runs without tmux windows.
        TmuxError: the session is gone.

    """
    record, ref = running_ref(layout)
    if ref is None:
        raise SupervisorNotRunningError(str(layout.root), "attach")
    if record is not None and record.visible != "tmux":
        raise HeadlessFleetError(layout, record.pid)
    session = TmuxSession(layout.root)
    if not session.exists():
        raise TmuxError(
            "attach", f"no session {session.name} on {session.socket}; is the fleet visible?"
        )
    return session.attach_argv()


class HeadlessFleetError(LoopxError):
    """`supervisor attach` on a fleet that runs without tmux windows."""

    def __init__(self, layout: Layout, pid: int) -> None:
        super().__init__(
            f"the supervisor (pid {pid}) on {layout.root} runs headless: there is no tmux "
            "session to attach to",
            hint=f"read {layout.logs_dir}/agent-<n>.log, or restart it with --visible tmux",
        )
        self.pid = pid
