"""The ``echo`` host kind: a plug-in whose host answers with the goal's objective."""

from __future__ import annotations

import json
import sys

from loopx.agents.hosts.base import HostInvocation, HostOutput, Interpretation
from loopx.registry.goalrecords import Goal
from loopx.turn.failures import FailureReason, TurnFailure
from loopx.turn.protocol import Envelope, HostResult

_ANSWER = "import json, sys; e = json.load(sys.stdin); print(json.dumps({'echo': e['objective']}))"


class EchoHost:
    """Runs a tiny Python program that echoes the objective; reads its one JSON line."""

    kind = "echo"

    def prepare(self, goal: Goal, envelope: Envelope) -> HostInvocation:
        """This interpreter with the envelope on stdin."""
        return HostInvocation(
            argv=[sys.executable, "-c", _ANSWER], stdin=envelope.model_dump_json().encode()
        )

    def interpret(self, envelope: Envelope, output: HostOutput) -> Interpretation:
        """A progress result naming what the host echoed. Pure."""
        try:
            echoed = json.loads(output.stdout)["echo"]
        except (ValueError, KeyError) as e:
            failure = TurnFailure.of(FailureReason.MALFORMED_OUTPUT, f"echo printed {e!r}")
            return Interpretation(failure=failure)
        result = HostResult(kind="progress", summary=f"echo: {echoed}", next_action="again")
        return Interpretation(result=result, input_tokens=3, output_tokens=2)
