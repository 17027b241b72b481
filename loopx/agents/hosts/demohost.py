"""The ``demo`` host: ``python -m loopx.agents.demo`` with the goal's argv as its switches."""

from __future__ import annotations

import sys

from loopx.agents.hosts._parse import read_protocol_result
from loopx.agents.hosts.base import HostInvocation, HostOutput, Interpretation
from loopx.registry.goalrecords import Goal, HostKind
from loopx.turn.protocol import Envelope


class DemoHost:
    """The built-in deterministic demo host (see ``loopx.agents.demo``)."""

    kind = HostKind.DEMO

    def prepare(self, goal: Goal, envelope: Envelope) -> HostInvocation:
        """The running interpreter, running the demo module with the goal's switches."""
        # -P: the workdir is the cwd; a `loopx/` folder there must not shadow ours.
        argv = [sys.executable, "-P", "-m", "loopx.agents.demo", *goal.host.argv]
        return HostInvocation(argv=argv, stdin=envelope.model_dump_json().encode())

    def interpret(self, envelope: Envelope, output: HostOutput) -> Interpretation:  # noqa: ARG002 - protocol
        """Read the protocol result. Pure."""
        return read_protocol_result(output)
