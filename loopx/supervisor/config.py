"""The supervisor's settings and the back-end they name.

:class:`SupervisorConfig` is what ``loopx supervisor run`` parses into;
:func:`make_runner` picks the back-end (:class:`~loopx.supervisor.runner.LocalRunner`,
or the Ray one when ``ray`` is installed and asked for).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

from loopx.fleet import Backend, Visibility
from loopx.supervisor.backoff import RestartPolicy
from loopx.supervisor.runner import AgentSpec


@dataclass(frozen=True, slots=True)
class SupervisorConfig:
    """How the supervisor runs (the `loopx supervisor run` options)."""

    agents: int = 1
    visible: Visibility = Visibility.NONE
    until_idle: bool = False
    stop_grace_s: float = 30.0
    refresh_interval_s: float = 5.0
    status_cache_ttl_s: float = 5.0
    heartbeat_s: float = 2.0
    stall_s: float = 60.0
    tick_s: float = 1.0
    idle_check_s: float = 0.5
    idle_horizon_s: float = 60.0
    agent_max_turns: int | None = None
    agent_idle_max_s: float = 2.0
    restart: RestartPolicy = field(default_factory=RestartPolicy)
    python: str = sys.executable
    log_level: str = "info"
    backend: Backend = Backend.LOCAL
    ray_address: str | None = None  # None: start a private local Ray cluster
    agent_cpus: float = 1.0  # Ray: CPUs reserved per agent actor
    agent_memory_mb: int | None = None  # Ray: memory reserved per agent actor

    def agent_spec(self) -> AgentSpec:
        """What each agent is started with."""
        return AgentSpec(
            heartbeat_s=self.heartbeat_s,
            idle_max_s=self.agent_idle_max_s,
            max_turns=self.agent_max_turns,
            log_level=self.log_level,
            python=self.python,
        )
