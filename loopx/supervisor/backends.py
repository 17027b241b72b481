"""The back-end that runs a fleet's agents: local processes, or Ray actors (the `ray` extra)."""

from __future__ import annotations

from collections.abc import Mapping

from loopx.errors import UsageError
from loopx.fleet import AgentLoopFactory, Backend
from loopx.root import Layout
from loopx.supervisor.config import SupervisorConfig
from loopx.supervisor.runner import AgentRunner, LocalRunner


def make_runner(
    layout: Layout,
    config: SupervisorConfig,
    env: Mapping[str, str],
    make_agent: AgentLoopFactory | None = None,
) -> AgentRunner:
    """The back-end ``config.backend`` names.

    Raises:
        RayUnavailableError: ``--backend ray`` without ray installed.
        UsageError: ``--backend ray`` without ``make_agent``.

    """
    if config.backend is Backend.RAY:
        from loopx.supervisor.ray_backend import RayRunner  # noqa: PLC0415 - optional extra

        if make_agent is None:
            raise UsageError(
                "--backend ray runs the agent loop inside each actor, and none was given",
                hint="start the supervisor with `loopx supervisor run --backend ray`",
            )
        return RayRunner.from_config(layout, config, make_agent)
    return LocalRunner(layout, config.agent_spec(), env, visible=config.visible)
