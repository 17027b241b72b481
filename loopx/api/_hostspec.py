"""A goal's host as `goal add` and an import file name it: kind, command, model, options."""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from loopx.errors import InvalidPolicyError, UsageError
from loopx.registry.goalrecords import HostKind, HostSpec


def host_spec(
    host: str | Sequence[str] | None,
    host_kind: HostKind | str | None,
    session_max_turns: int | None,
    unreachable_after_s: float | None = None,
) -> HostSpec | None:
    """The host a `goal add` names (None: keep the goal's, or the default for a new goal).

    ``host`` is a command line (split like a shell) or an argv list.

    Raises:
        UsageError: the command cannot be split, or a command host has none.
        InvalidPolicyError: ``session_max_turns`` is below 1.
    """
    if host is None and host_kind is None:
        if session_max_turns is not None or unreachable_after_s is not None:
            raise UsageError(
                "--session-max-turns and --unreachable-after are part of the host: "
                "pass --host-kind with them",
                hint="e.g. --host-kind codex --session-max-turns 20",
            )
        return None
    if isinstance(host, str):
        try:
            argv = shlex.split(host)
        except ValueError as e:
            raise UsageError(
                f"--host {host!r} cannot be split: {e}", hint="check its quotes"
            ) from e
    else:
        argv = list(host or [])
    from loopx.agents.hosts.plugins import require_kind  # noqa: PLC0415 - the adapters are heavy

    kind = require_kind(str(host_kind)) if host_kind else HostKind.COMMAND
    if kind == HostKind.COMMAND and not argv:
        raise UsageError("--host-kind command needs --host 'CMD ARGS'", hint="name the program")
    if session_max_turns is not None and session_max_turns < 1:
        raise InvalidPolicyError(
            "--session-max-turns", f"must be at least 1, got {session_max_turns}"
        )
    if unreachable_after_s is not None and not unreachable_after_s > 0:
        raise InvalidPolicyError(
            "--unreachable-after", f"must be more than 0 seconds, got {unreachable_after_s}"
        )
    return HostSpec(
        kind=kind,
        argv=argv,
        session_max_turns=session_max_turns,
        unreachable_after_s=unreachable_after_s,
    )
