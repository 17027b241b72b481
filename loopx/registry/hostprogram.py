"""Which program a goal's host runs, and whether it is installed.

The kernel needs this at `goal add` (a missing ``codex``/``claude``/``gemini`` is a clear
error then, not a failed turn hours later) and the host adapters need it at
run time; both ask here so they can never disagree.
"""

from __future__ import annotations

import shutil
import sys

from loopx.errors import HostMissingError
from loopx.registry.goalrecords import HostKind, HostSpec

# The entry-point group where packages declare host kinds (loopx.agents.hosts.plugins).
HOST_ENTRY_POINTS = "loopx.hosts"
# Kinds whose program is the goal's own (command) or LoopX's Python (demo).
NO_CLI_KINDS = frozenset({HostKind.COMMAND.value, HostKind.DEMO.value})

# The program each CLI host kind runs when HostSpec.argv does not name one (a plug-in
# kind's default program is its own name).
DEFAULT_PROGRAMS: dict[str, str] = {
    HostKind.CODEX: "codex",
    HostKind.CLAUDE: "claude",
    HostKind.GEMINI: "gemini",
    HostKind.OPENCODE: "opencode",
    HostKind.QWEN: "qwen",
    HostKind.PI: "pi",
    HostKind.AIDER: "aider",
}


def cli_programs() -> dict[str, str]:
    """Each host kind with a CLI of its own (built-in or an installed plug-in's), and its program."""
    from importlib.metadata import entry_points  # noqa: PLC0415 - only the canary asks

    kinds = {*DEFAULT_PROGRAMS, *(ep.name for ep in entry_points(group=HOST_ENTRY_POINTS))}
    return {k: DEFAULT_PROGRAMS.get(k, k) for k in sorted(kinds - NO_CLI_KINDS)}


def split_program(spec: HostSpec) -> tuple[str, list[str]]:
    """The program a host spec runs and the arguments after it.

    For ``codex``/``claude``/``gemini`` the argv is extra CLI flags; it names the program
    only when its first word is not a flag (``["/opt/codex", "--model", "o3"]``).
    A ``command`` host's argv is the whole command; the demo host is Python.
    """
    if spec.kind == HostKind.COMMAND:
        return spec.argv[0], list(spec.argv[1:])
    if spec.kind == HostKind.DEMO:
        return sys.executable, list(spec.argv)
    if spec.argv and not spec.argv[0].startswith("-"):
        return spec.argv[0], list(spec.argv[1:])
    return DEFAULT_PROGRAMS.get(spec.kind, spec.kind), list(spec.argv)


def find_program(spec: HostSpec, path: str | None = None) -> str | None:
    """The absolute path of the spec's program on ``path`` (default: $PATH), or None."""
    program, _ = split_program(spec)
    return shutil.which(program, path=path)


def require_program(spec: HostSpec, path: str | None = None) -> str:
    """The absolute path of the spec's program.

    Raises:
        HostMissingError: the program is not installed / not on PATH.

    """
    found = find_program(spec, path)
    if found is None:
        raise HostMissingError(split_program(spec)[0], str(spec.kind))
    return found
