"""Host adapters by kind: ``host_for(kind)`` returns the adapter a turn uses.

An adapter translates (envelope -> what to spawn) and (captured output ->
result or typed failure); it never spawns. Every kind, built-in or not, is an
entry point of the ``loopx.hosts`` group (see :mod:`.plugins`);
:func:`register_host` adds one in-process (tests, embedding).
"""

from __future__ import annotations

from loopx.agents.hosts.aider import AiderHost
from loopx.agents.hosts.base import Host, HostInvocation, HostOutput, Interpretation
from loopx.agents.hosts.claude import ClaudeHost
from loopx.agents.hosts.codex import CodexHost
from loopx.agents.hosts.command import CommandHost
from loopx.agents.hosts.demohost import DemoHost
from loopx.agents.hosts.gemini import GeminiHost
from loopx.agents.hosts.opencode import OpencodeHost
from loopx.agents.hosts.pi import PiHost
from loopx.agents.hosts.plugins import ENTRY_POINT_GROUP, installed, kind_names, load
from loopx.agents.hosts.qwen import QwenHost
from loopx.errors import HostUnsupportedError
from loopx.registry.goalrecords import HostKind

# The loaded adapters, by kind.
HOSTS: dict[str, Host] = {}
# LoopX's own kinds, used as they are when the package metadata that declares them is
# missing (running from a source tree that was never installed).
_BUILTIN: dict[str, type[Host]] = {
    HostKind.COMMAND: CommandHost,
    HostKind.DEMO: DemoHost,
    HostKind.CODEX: CodexHost,
    HostKind.CLAUDE: ClaudeHost,
    HostKind.GEMINI: GeminiHost,
    HostKind.OPENCODE: OpencodeHost,
    HostKind.QWEN: QwenHost,
    HostKind.PI: PiHost,
    HostKind.AIDER: AiderHost,
}


def register_host(host: Host) -> None:
    """Make ``host`` the adapter of its kind in this process."""
    HOSTS[host.kind] = host


def host_for(kind: str) -> Host:
    """The adapter of ``kind``: registered, else loaded from its entry point.

    Raises:
        HostUnsupportedError: no installed package provides it.
        PluginError: the plug-in that declares it does not load.

    """
    if kind in HOSTS:
        return HOSTS[kind]
    entry = installed().get(kind)
    if entry is not None:
        host = load(entry)
    elif kind in _BUILTIN:
        host = _BUILTIN[kind]()
    else:
        raise HostUnsupportedError(kind, kind_names())
    HOSTS[kind] = host
    return host


__all__ = [
    "ENTRY_POINT_GROUP",
    "HOSTS",
    "AiderHost",
    "ClaudeHost",
    "CodexHost",
    "CommandHost",
    "DemoHost",
    "GeminiHost",
    "Host",
    "HostInvocation",
    "HostOutput",
    "Interpretation",
    "OpencodeHost",
    "PiHost",
    "QwenHost",
    "host_for",
    "kind_names",
    "register_host",
]
