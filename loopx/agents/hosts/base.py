"""The host adapter interface: a turn envelope in, a typed interpretation out.

The turn runner (``loopx.agents.turn``) spawns what :meth:`Host.prepare`
returns, measures it, and hands the captured output to
:meth:`Host.interpret`. Adapters are pure translations: they never spawn.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Protocol, runtime_checkable

from pydantic import Field

from loopx.accounts.windows import UsageWindow
from loopx.agents.hosts.stallwatch import StallWatch
from loopx.model import Record
from loopx.registry.goalrecords import Goal
from loopx.state import HostSession
from loopx.turn.failures import TurnFailure
from loopx.turn.protocol import Envelope, HostResult


class HostInvocation(Record):
    """What to spawn: argv (never through a shell), stdin bytes, extra environment.

    ``stall`` names output that means the host is stuck (see ``watch.py``);
    the turn runner stops it then instead of waiting for the turn timeout.
    ``streams``: the host writes a sign of life while it works, so writing
    nothing for the stall timeout means it stalled (``loopx.turn.stall``).
    """

    argv: list[str]
    stdin: bytes = b""
    env: dict[str, str] = Field(default_factory=dict)
    stall: StallWatch | None = None
    streams: bool = False


class HostOutput(Record):
    """What a finished host left behind, bounded.

    ``stdout``/``stderr`` hold at most the first 1 MiB each (decoded with
    replacement); ``*_dropped`` counts the bytes beyond that.
    """

    exit_code: int | None  # None when killed by a signal
    signal: int | None = None
    stdout: str = ""
    stderr: str = ""
    stdout_dropped: int = 0
    stderr_dropped: int = 0
    result_file_text: str | None = None  # contents of LOOPX_RESULT_FILE, if written


class Interpretation(Record):
    """A host's output understood: exactly one of ``result`` and ``failure``.

    ``input_tokens``/``output_tokens``/``cost_usd`` are what the CLI reported;
    ``session`` is the session to resume next turn (None: keep none);
    ``windows`` the provider's usage windows the CLI reported.
    """

    result: HostResult | None = None
    failure: TurnFailure | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    session: HostSession | None = None
    windows: list[UsageWindow] = Field(default_factory=list)

    @classmethod
    def of(
        cls,
        outcome: HostResult | TurnFailure,
        *,
        session: HostSession | None = None,
        input_tokens: int = 0,
        output_tokens: int = 0,
        cost_usd: float = 0.0,
        windows: list[UsageWindow] | None = None,
    ) -> Interpretation:
        """The interpretation whose result or failure (whichever ``outcome`` is) is ``outcome``."""
        failed = isinstance(outcome, TurnFailure)
        return cls(
            result=None if failed else outcome,
            failure=outcome if failed else None,
            session=session,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            cost_usd=cost_usd,
            windows=windows or [],
        )


class Host(Protocol):
    """One host kind's adapter: what a plug-in implements (docs/hosts.md).

    ``kind`` is the name goals use (``--host-kind``) and the entry point's
    name. ``prepare`` may raise ``HostMissingError``; ``interpret`` must be
    pure (it may run again on the same output during recovery).
    """

    @property
    def kind(self) -> str:
        """The kind's name (a class attribute in the built-in adapters)."""
        ...

    def prepare(self, goal: Goal, envelope: Envelope) -> HostInvocation:
        """The process to spawn for this turn.

        Raises:
            HostMissingError: the host program cannot be found.
        """
        ...

    def interpret(self, envelope: Envelope, output: HostOutput) -> Interpretation:
        """Turn the captured output into a result or a typed failure. Pure."""
        ...


@runtime_checkable
class ActivityFiles(Protocol):
    """An adapter whose CLI writes session records while it works (a sign of life).

    The turn runner looks at :meth:`activity_paths` only once the host's pipes
    have been quiet past the stall timeout: a file there modified since is not a stall.
    """

    def activity_paths(self, env: Mapping[str, str]) -> list[str]:
        """The files or folders the CLI writes while it works, under ``env``'s homes."""
        ...


@runtime_checkable
class SessionRecords(Protocol):
    """An adapter whose CLI reports usage windows only in its session records (Codex).

    After the host ran, the agent reads the tail of :meth:`records_file` and
    hands it to :meth:`windows_in`, which must be pure.
    """

    def records_file(self, env: Mapping[str, str], reading: Interpretation) -> Path | None:
        """The session record file the run wrote to (None: none known)."""
        ...

    def windows_in(self, records: str) -> list[UsageWindow]:
        """The usage windows the records' tail reports, newest per window. Pure."""
        ...
