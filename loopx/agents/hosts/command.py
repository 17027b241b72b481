"""The ``command`` host: any argv speaking docs/host-protocol.md."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from loopx.agents.hosts._parse import read_protocol_result
from loopx.agents.hosts.base import HostInvocation, HostOutput, Interpretation
from loopx.errors import HostMissingError
from loopx.registry.goalrecords import Goal, HostKind
from loopx.turn.protocol import Envelope


def resolve_program(program: str, *, kind: str, cwd: Path | None = None) -> str:
    """The program's path: as given if it contains a slash, else looked up on PATH.

    A relative path is taken from ``cwd`` (the goal's workdir, where the host
    runs), as `loopx goal add` checks it.

    Raises:
        HostMissingError: not found or not executable.

    """
    if os.sep in program:
        path = Path(program)
        if not path.is_absolute() and cwd is not None:
            path = cwd / path
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
        raise HostMissingError(program, kind)
    found = shutil.which(program)
    if found is None:
        raise HostMissingError(program, kind)
    return found


class CommandHost:
    """Runs ``goal.host.argv`` as is; the envelope goes to stdin."""

    kind = HostKind.COMMAND

    def prepare(self, goal: Goal, envelope: Envelope) -> HostInvocation:
        """The goal's argv with its program resolved.

        Raises:
            HostMissingError: the program cannot be found.

        """
        argv = list(goal.host.argv)
        argv[0] = resolve_program(argv[0], kind=self.kind.value, cwd=Path(goal.workdir))
        return HostInvocation(argv=argv, stdin=envelope.model_dump_json().encode())

    def interpret(self, envelope: Envelope, output: HostOutput) -> Interpretation:  # noqa: ARG002 - protocol
        """Read the protocol result. Pure."""
        return read_protocol_result(output)
