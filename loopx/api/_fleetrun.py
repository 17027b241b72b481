"""The options of `loopx supervisor run|start`, checked once, and a foreground run in a child.

:class:`FleetOptions` names every option by its Python name with the CLI's
default; :func:`fleet_config` turns them into the supervisor's config and
refuses what the CLI refuses, with the same messages; :func:`run_argv` is the
way back to `supervisor run` arguments for a child process.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from typing import TYPE_CHECKING, Final, TypedDict

from pydantic import ValidationError

from loopx.batch.report import RunSummary
from loopx.errors import LoopxError, UsageError
from loopx.fleet import Backend, Visibility
from loopx.log.rotation import open_log
from loopx.process import set_parent_death_signal
from loopx.root import Layout
from loopx.storage.dirs import ensure_dir
from loopx.supervisor.child import last_error, log_end, log_env, supervisor_argv
from loopx.supervisor.notify import child_env

if TYPE_CHECKING:
    from loopx.supervisor.config import SupervisorConfig

CHILD_POLL_S: Final = 0.5
CHILD_KILL_AFTER_S: Final = 15.0  # past its stop grace, a child that ignores SIGTERM is killed


class FleetOptions(TypedDict, total=False):
    """`loopx supervisor run|start` options by Python name; a missing key takes the CLI default."""

    agents: int  # --agents (1)
    visible: Visibility | str  # --visible none|tmux ("none")
    until_idle: bool  # --until-idle (False)
    stop_grace_s: float  # --stop-grace-seconds (30)
    refresh_interval_s: float  # --refresh-interval-seconds (5)
    status_cache_ttl_s: float  # --status-projection-cache-ttl-seconds (5)
    heartbeat_s: float  # --heartbeat-seconds (2)
    stall_s: float  # --stall-seconds (60)
    idle_horizon_s: float  # --idle-horizon-seconds (60)
    agent_max_turns: int | None  # --agent-max-turns (None)
    crash_loop_restarts: int  # --crash-loop-restarts (5)
    crash_loop_window_s: float  # --crash-loop-window-seconds (120)
    restart_max_s: float  # --restart-max-seconds (60)
    backend: Backend | str  # --backend local|ray ("local")
    ray_address: str | None  # --ray-address (None)
    agent_cpus: float  # --agent-cpus (1)
    agent_memory_mb: int | None  # --agent-memory-mb (None)
    log_level: str  # --log-level ("info": the supervisor's log is its product)


class SupervisorRunError(LoopxError):
    """A supervisor run in a child process ended without its summary (it could not run)."""


def _choice(kind: type[Visibility | Backend], value: str, flag: str) -> str:
    choices = [m.value for m in kind]
    if value not in choices:
        raise UsageError(
            f"{flag} must be one of {', '.join(choices)}, got {value!r}",
            hint=f"pass {flag} {choices[0]}",
        )
    return value


def fleet_config(options: FleetOptions) -> SupervisorConfig:
    """The supervisor config ``options`` describe, refused as the CLI refuses it.

    Raises:
        UsageError: an option is out of range or does not fit the back-end.
    """
    from loopx.supervisor.backoff import RestartPolicy  # noqa: PLC0415 - heavy
    from loopx.supervisor.config import SupervisorConfig  # noqa: PLC0415

    agents = options.get("agents", 1)
    if agents < 1:
        raise UsageError(f"--agents must be at least 1, got {agents}", hint="pass --agents N")
    visible = _choice(Visibility, str(options.get("visible", Visibility.NONE)), "--visible")
    backend = _choice(Backend, str(options.get("backend", Backend.LOCAL)), "--backend")
    ray_address, memory = options.get("ray_address"), options.get("agent_memory_mb")
    cpus = options.get("agent_cpus", 1.0)
    stop_grace_s = options.get("stop_grace_s", 30.0)
    if stop_grace_s < 0:
        raise UsageError("--stop-grace-seconds must be 0 or more", hint="pass a number of seconds")
    if backend != Backend.RAY and (ray_address or memory is not None):
        raise UsageError(
            "--ray-address and --agent-memory-mb apply to the Ray back-end only",
            hint="add --backend ray",
        )
    if backend == Backend.RAY and visible != Visibility.NONE:
        raise UsageError(
            "--visible tmux needs local agents", hint="drop --visible or --backend ray"
        )
    if cpus < 0 or (memory is not None and memory <= 0):
        raise UsageError(
            "--agent-cpus must be 0 or more and --agent-memory-mb more than 0",
            hint="pass e.g. --agent-cpus 0.5 --agent-memory-mb 512",
        )
    return SupervisorConfig(
        agents=agents,
        visible=Visibility(visible),
        until_idle=options.get("until_idle", False),
        stop_grace_s=stop_grace_s,
        refresh_interval_s=options.get("refresh_interval_s", 5.0),
        status_cache_ttl_s=options.get("status_cache_ttl_s", 5.0),
        heartbeat_s=options.get("heartbeat_s", 2.0),
        stall_s=options.get("stall_s", 60.0),
        idle_horizon_s=options.get("idle_horizon_s", 60.0),
        agent_max_turns=options.get("agent_max_turns"),
        restart=RestartPolicy(
            max_s=options.get("restart_max_s", 60.0),
            window_s=options.get("crash_loop_window_s", 120.0),
            crash_loop_restarts=options.get("crash_loop_restarts", 5),
        ),
        log_level=options.get("log_level", "info"),
        backend=Backend(backend),
        ray_address=ray_address,
        agent_cpus=cpus,
        agent_memory_mb=memory,
    )


def run_argv(config: SupervisorConfig) -> list[str]:
    """The `loopx supervisor run` arguments that give a child process ``config``."""
    argv = [
        "--agents", str(config.agents), "--max-agents", str(max(config.agents, 1)),
        "--visible", config.visible.value, "--backend", config.backend.value,
        "--log-level", config.log_level,
        "--stop-grace-seconds", str(config.stop_grace_s),
        "--refresh-interval-seconds", str(config.refresh_interval_s),
        "--status-projection-cache-ttl-seconds", str(config.status_cache_ttl_s),
        "--heartbeat-seconds", str(config.heartbeat_s),
        "--stall-seconds", str(config.stall_s),
        "--idle-horizon-seconds", str(config.idle_horizon_s),
        "--crash-loop-restarts", str(config.restart.crash_loop_restarts),
        "--crash-loop-window-seconds", str(config.restart.window_s),
        "--restart-max-seconds", str(config.restart.max_s),
        "--agent-cpus", str(config.agent_cpus),
    ]  # fmt: skip
    if config.until_idle:
        argv.append("--until-idle")
    for flag, value in (
        ("--agent-max-turns", config.agent_max_turns),
        ("--ray-address", config.ray_address),
        ("--agent-memory-mb", config.agent_memory_mb),
    ):
        if value is not None:
            argv += [flag, str(value)]
    return argv


def _stop_child(child: subprocess.Popen[bytes], grace_s: float) -> None:
    """SIGTERM the child (it stops its fleet gracefully), SIGKILL it past the grace."""
    with contextlib.suppress(ProcessLookupError):
        child.send_signal(signal.SIGTERM)
    try:
        child.wait(timeout=grace_s + CHILD_KILL_AFTER_S)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()


def run_child(layout: Layout, config: SupervisorConfig, stop: threading.Event | None) -> RunSummary:
    """Run `loopx supervisor run --json` as a child (log in logs/supervisor.log); its summary.

    The child dies with this process (``PR_SET_PDEATHSIG``) and is stopped
    when this call is interrupted or ``stop`` is set.

    Raises:
        SupervisorRunError: the child ended without a summary (its error is in the message).
    """
    log_path = ensure_dir(layout.logs_dir) / "supervisor.log"
    since = log_end(log_path)
    fd = open_log(log_path)
    try:
        child = subprocess.Popen(
            supervisor_argv(layout, [*run_argv(config), "--json"]),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,  # the summary: one small JSON document at the end
            stderr=fd,
            env=log_env(child_env(os.environ), log_path),
            preexec_fn=set_parent_death_signal,  # noqa: PLW1509 - one prctl, no lock taken
        )
    finally:
        os.close(fd)
    out = b""
    try:
        stopping = False
        while True:
            try:
                out, _ = child.communicate(timeout=CHILD_POLL_S)
                break
            except subprocess.TimeoutExpired:
                if stop is not None and stop.is_set() and not stopping:
                    child.send_signal(signal.SIGTERM)
                    stopping = True
    finally:
        if child.poll() is None:
            _stop_child(child, config.stop_grace_s)
    try:
        return RunSummary.model_validate_json(out)
    except ValidationError:
        raise SupervisorRunError(
            f"the supervisor child exited with code {child.returncode} and no summary: "
            f"{last_error(log_path, since)}",
            hint=f"see {log_path}",
        ) from None
