"""The Ray back-end: each agent a Ray actor running the same agent loop as a local agent.

An actor (:class:`AgentActor`) wraps the agent loop the runner was given
(:data:`loopx.fleet.AgentLoopFactory`: the CLI passes
:class:`loopx.agents.loop.Agent`, which Ray ships to the worker by reference,
so this module never imports :mod:`loopx.agents`); its ``run`` method is the
agent's ``run()`` loop, and its hosts are subprocesses
of the actor's worker process on whatever node Ray placed it. The root
(a shared filesystem mounted at the same path on every node) is the only
channel between agents, exactly as on one machine: leases, fencing epochs
and journals are unchanged.

The supervisor keeps the policy (restart backoff, crash loops, stall
detection, graceful stop); this module only starts, polls, stops and kills
actors. Actors are owned by the supervisor's Ray driver, so they die with
it (Ray's fate sharing): a supervisor that is SIGKILLed leaves no actor.

``ray`` is an optional extra (``pip install 'loopx[ray]'``); this module
imports it only inside functions, so it loads without ray.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from loopx import environ, process
from loopx.errors import LoopxError, UsageError
from loopx.fleet import (
    AgentConfig,
    AgentLoopFactory,
    Backend,
    ExitKind,
    ExitStatus,
    RayPlacement,
)
from loopx.log import get_logger
from loopx.registry.catalog import load_registry
from loopx.registry.goalrecords import GoalStatus, Registry
from loopx.root import Layout
from loopx.supervisor.process import fleet_processes
from loopx.supervisor.runner import AgentSpec

if TYPE_CHECKING:
    from loopx.supervisor.config import SupervisorConfig

log = get_logger(__name__)

STOP_CALL_TIMEOUT_S: Final = 2.0  # a frozen actor must not hold the supervisor's tick
# Keep a private cluster private: nothing but loopback, no usage report.
PRIVATE_CLUSTER_ENV: Final = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",  # makes a started-here cluster bind to 127.0.0.1
}
MB: Final = 1024 * 1024
HANDLED_SIGNALS: Final = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCHLD)


class RayUnavailableError(UsageError):
    """``--backend ray`` was asked for but the ``ray`` package is not installed (exit 2)."""

    def __init__(self) -> None:
        super().__init__(
            "--backend ray needs the `ray` package, which is not installed in this environment",
            hint="pip install 'loopx[ray]' (or use the default --backend local)",
        )

    def __reduce__(self) -> tuple[object, ...]:
        return type(self), ()


def ray_available() -> bool:
    """Whether ``import ray`` can work here."""
    return importlib.util.find_spec("ray") is not None


def resource_profiles(registry: Registry) -> list[dict[str, float]]:
    """The distinct custom-resource sets the active goals ask for; slot i gets profile i mod n. Pure.

    The plain profile (``{}``) comes first whenever a goal needs no custom
    resource (or there is no goal), so a one-agent fleet serves plain goals.
    """
    active = [g for g in registry.goals.values() if g.status is GoalStatus.ACTIVE]
    wanted: list[dict[str, float]] = []
    for goal in sorted(active, key=lambda g: g.id):
        if goal.resources and goal.resources not in wanted:
            wanted.append(dict(goal.resources))
    if not wanted or any(not g.resources for g in active):
        return [{}, *wanted]
    return wanted


def profile_for(profiles: list[dict[str, float]], index: int) -> dict[str, float]:
    """The custom resources slot ``index`` (1-based) reserves. Pure."""
    return profiles[(index - 1) % len(profiles)] if profiles else {}


# --- the actor -----------------------------------------------------------------------------------


class AgentActor:
    """One agent inside a Ray actor (decorated with ``ray.remote`` by :func:`_actor_class`).

    Threaded (``max_concurrency``): ``run`` occupies one thread for the
    agent's life; ``info``, ``request_stop`` and ``kill_hosts``
    answer from the others.
    """

    def __init__(  # noqa: PLR0917 - Ray passes actor arguments positionally
        self,
        root: str,
        registry: str,
        agent_id: str,
        index: int,
        spec: AgentSpec,
        resources: dict[str, float],
        env: dict[str, str],
        make_agent: AgentLoopFactory,
    ) -> None:
        from loopx.log import configure_logging  # noqa: PLC0415
        from loopx.root import ResolvedRoot, RootSource, open_root  # noqa: PLC0415

        # Hosts inherit these; psutil finds them by LOOPX_ROOT + LOOPX_AGENT_ID.
        os.environ.update(env | {environ.ROOT: root, environ.AGENT_ID: agent_id})
        self.layout = open_root(
            ResolvedRoot(Path(root), Path(registry), RootSource.FLAG), create=False
        )
        log_path = self.layout.logs_dir / f"agent-{index}.log"
        fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
        self._log = os.fdopen(fd, "a", buffering=1)
        configure_logging(stream=self._log, level=spec.log_level, force=True)
        self.agent_id = agent_id
        # A previous actor of this slot on this node may have left its hosts.
        self.kill_hosts(0.5)
        self.agent = make_agent(
            self.layout,
            AgentConfig(
                agent_id=agent_id,
                max_turns=spec.max_turns,
                heartbeat_s=spec.heartbeat_s,
                idle_max_s=spec.idle_max_s,
                resources=resources,
            ),
        )

    def info(self) -> tuple[int, float, RayPlacement]:
        """The worker process's pid, its psutil create_time, and where Ray placed the actor."""
        import ray  # noqa: PLC0415 - optional extra; this runs in a Ray worker

        me = process.ProcessIdentity.current()
        context = ray.get_runtime_context()
        placement = RayPlacement(
            node_id=context.get_node_id(),
            node_ip=ray.util.get_node_ip_address(),  # type: ignore[no-untyped-call]
            hostname=socket.gethostname(),
            actor_id=context.get_actor_id() or "",
        )
        return me.pid, me.started_at, placement

    def run(self) -> int:
        """The agent loop until stopped; its exit code (0)."""
        return int(self.agent.run())

    def request_stop(self) -> None:
        """Stop at the next safe point (the local agent's first SIGTERM)."""
        self.agent.request_stop()

    def kill_hosts(self, grace_s: float) -> int:
        """Kill this agent's hosts on this node (processes with its root and agent id)."""
        procs = fleet_processes(self.layout.root, agent_id=self.agent_id)
        process.kill_tree(procs, grace_s=grace_s)
        return len(procs)


def _actor_class() -> Any:  # noqa: ANN401 - a ray ActorClass
    import ray  # noqa: PLC0415 - optional extra

    return ray.remote(max_concurrency=4)(AgentActor)  # type: ignore[call-overload]


# --- the supervisor's side -----------------------------------------------------------------------


@dataclass(slots=True)
class RayAgent:
    """The supervisor's handle on one agent actor."""

    agent_id: str
    actor: Any
    run_ref: Any
    info_ref: Any
    root: Path
    me_pid: int
    _ref: process.ProcessIdentity | None = None
    _placement: RayPlacement | None = None
    _ended: ExitStatus | None = None

    @property
    def ref(self) -> process.ProcessIdentity | None:
        """The actor's worker process (on its node), once the actor runs."""
        if self._ref is None:
            self._learn_placement()
        return self._ref

    @property
    def placement(self) -> RayPlacement | None:
        """The actor's node and id, once the actor runs."""
        if self._placement is None:
            self._learn_placement()
        return self._placement

    def _learn_placement(self) -> None:
        import ray  # noqa: PLC0415

        ready, _ = ray.wait([self.info_ref], timeout=0)
        if ready:
            with contextlib.suppress(Exception):
                pid, started, self._placement = ray.get(self.info_ref)
                self._ref = process.ProcessIdentity(int(pid), float(started))

    def exit_status(self) -> ExitStatus | None:
        """How the actor's loop ended, or None while it runs (or waits for a node)."""
        if self._ended is not None:
            return self._ended
        import ray  # noqa: PLC0415

        ready, _ = ray.wait([self.run_ref], timeout=0)
        if not ready:
            return None
        try:
            code = ray.get(self.run_ref)
            self._ended = ExitStatus(kind=ExitKind.EXITED, code=int(code))
        except ray.exceptions.RayActorError as e:
            self._ended = _describe_actor_death(e, self._ref, self._placement)
        except ray.exceptions.RayError as e:
            self._ended = ExitStatus(kind=ExitKind.FAILED, detail=str(e).splitlines()[0][:200])
        return self._ended

    def request_stop(self) -> None:
        """Ask the actor's agent to stop at a safe point."""
        with contextlib.suppress(Exception):
            self.actor.request_stop.remote()

    def kill(self, *, grace_s: float) -> None:
        """Kill the actor's hosts (on its node and this one), then the actor."""
        import ray  # noqa: PLC0415

        if grace_s > 0:
            self.request_stop()
            with contextlib.suppress(Exception):
                ray.wait([self.run_ref], timeout=grace_s)
        with contextlib.suppress(Exception):
            ray.get(self.actor.kill_hosts.remote(0.5), timeout=STOP_CALL_TIMEOUT_S)
        with contextlib.suppress(Exception):
            ray.kill(self.actor, no_restart=True)
        # Same machine (a local cluster, or the head node): what the actor could not reach.
        procs = fleet_processes(self.root, agent_id=self.agent_id)
        ref, placement = self._ref, self._placement
        # A pid from another machine would name some unrelated process here.
        here = placement is None or placement.hostname == socket.gethostname()
        if ref is not None and here and (found := ref.find()) is not None:
            procs.append(found)
        process.kill_tree([p for p in procs if p.pid != self.me_pid], grace_s=0)
        if self._ended is None:
            self._ended = ExitStatus(kind=ExitKind.KILLED, detail="ray.kill")


def _describe_actor_death(
    error: Exception, ref: process.ProcessIdentity | None, placement: RayPlacement | None
) -> ExitStatus:
    """A dead actor's end, with its worker pid and node."""
    pid = f"worker pid {ref.pid}" if ref is not None else "worker pid unknown"
    if placement is not None:
        pid += f" on node {placement.node_ip} {placement.node_id[:12]}"
    if "ray.kill" in str(error):
        return ExitStatus(kind=ExitKind.KILLED, detail=f"actor killed ({pid})")
    died = "worker process exited unexpectedly (killed, OOM, or node lost)"
    return ExitStatus(kind=ExitKind.DIED, detail=f"actor died ({pid}): {died}")


@dataclass(slots=True)
class RayRunner:
    """Agents as Ray actors on a cluster (``--ray-address``) or a private local one."""

    layout: Layout
    spec: AgentSpec
    make_agent: AgentLoopFactory
    address: str | None = None
    agent_cpus: float = 1.0
    agent_memory_mb: int | None = None
    name: Backend = Backend.RAY
    me_pid: int = field(default_factory=os.getpid)
    _cls: Any = None
    _started_ray: bool = False

    @classmethod
    def from_config(
        cls, layout: Layout, config: SupervisorConfig, make_agent: AgentLoopFactory
    ) -> RayRunner:
        """The runner ``loopx supervisor run --backend ray`` describes; actors run ``make_agent``.

        Raises:
            RayUnavailableError: ray is not installed.

        """
        if not ray_available():
            raise RayUnavailableError
        return cls(
            layout,
            config.agent_spec(),
            make_agent,
            address=config.ray_address,
            agent_cpus=config.agent_cpus,
            agent_memory_mb=config.agent_memory_mb,
        )

    @property
    def tmux_name(self) -> str | None:
        """Ray agents have no tmux session."""
        return None

    def open(self) -> None:
        """Connect to the cluster at ``address`` (or start a private local one)."""
        if self.address is None:
            for key, value in PRIVATE_CLUSTER_ENV.items():
                os.environ.setdefault(key, value)
        try:
            import ray  # noqa: PLC0415
        except ImportError as e:
            raise RayUnavailableError from e
        kwargs: dict[str, Any] = {
            "include_dashboard": False,
            "log_to_driver": False,
            "configure_logging": False,
            "ignore_reinit_error": True,
        }
        if self.address is not None:
            kwargs["address"] = self.address
        # ray.init installs its own SIGTERM handler (sys.exit) in a driver; the
        # supervisor's handlers record intent and must stay in charge.
        handlers = {s: signal.getsignal(s) for s in HANDLED_SIGNALS}
        try:
            ray.init(**kwargs)
        finally:
            for signum, handler in handlers.items():
                if handler is not None:
                    signal.signal(signum, handler)
        self._started_ray = True
        self._cls = _actor_class()
        log.info(
            "ray_connected",
            address=self.address or "local",
            resources=ray.cluster_resources(),  # type: ignore[no-untyped-call]
        )

    def _env(self) -> dict[str, str]:
        # The actor takes the supervisor's LOOPX_* variables (the turn's timing knobs,
        # the lock mode, faults for tests): its worker was started by Ray, not by us.
        return environ.loopx_items()

    def spawn(self, index: int, agent_id: str) -> RayAgent:
        """Create the actor (reserving CPUs, memory and the slot's custom resources) and run it."""
        try:
            profiles = resource_profiles(load_registry(self.layout))
        except LoopxError as e:
            log.warning("registry_unreadable_for_resources", error=e.message)
            profiles = [{}]
        resources = profile_for(profiles, index)
        options: dict[str, Any] = {"num_cpus": self.agent_cpus, "max_restarts": 0}
        if self.agent_memory_mb is not None:
            options["memory"] = self.agent_memory_mb * MB
        if resources:
            options["resources"] = resources
        actor = self._cls.options(**options).remote(
            str(self.layout.root),
            str(self.layout.registry),
            agent_id,
            index,
            self.spec,
            resources,
            self._env(),
            self.make_agent,
        )
        log.info("ray_actor_created", agent_id=agent_id, resources=resources or None)
        return RayAgent(
            agent_id=agent_id,
            actor=actor,
            run_ref=actor.run.remote(),
            info_ref=actor.info.remote(),
            root=self.layout.root,
            me_pid=self.me_pid,
        )

    def close(self, *, grace_s: float) -> None:  # noqa: ARG002 - agents were killed before
        """Disconnect (stopping a private local cluster); the driver's actors die with it."""
        if not self._started_ray:
            return
        import ray  # noqa: PLC0415

        with contextlib.suppress(Exception):
            ray.shutdown()
        self._started_ray = False
