"""Host adapters by kind: ``host_for(kind)`` returns the adapter a turn uses.

An adapter translates (envelope -> what to spawn) and (captured output ->
result or typed failure); it never spawns. Add a kind by registering an
instance in :data:`HOSTS` (or with :func:`register_host`).
"""

from __future__ import annotations

from loopx.agents.hosts.base import Host, HostInvocation, HostOutput, Interpretation
from loopx.agents.hosts.claude import ClaudeHost
from loopx.agents.hosts.codex import CodexHost
from loopx.agents.hosts.command import CommandHost
from loopx.agents.hosts.demo import DemoHost
from loopx.errors import HostUnsupportedError
from loopx.registry.model import HostKind

HOSTS: dict[HostKind, Host] = {
    HostKind.COMMAND: CommandHost(),
    HostKind.DEMO: DemoHost(),
    HostKind.CODEX: CodexHost(),
    HostKind.CLAUDE: ClaudeHost(),
}


def register_host(host: Host) -> None:
    """Make ``host`` the adapter of its kind."""
    HOSTS[host.kind] = host


def host_for(kind: HostKind) -> Host:
    """The adapter of ``kind``.

    Raises:
        HostUnsupportedError: no adapter is registered for it.

    """
    try:
        return HOSTS[kind]
    except KeyError:
        raise HostUnsupportedError(str(kind), sorted(k.value for k in HOSTS)) from None


__all__ = [
    "HOSTS",
    "ClaudeHost",
    "CodexHost",
    "CommandHost",
    "DemoHost",
    "Host",
    "HostInvocation",
    "HostOutput",
    "Interpretation",
    "host_for",
    "register_host",
]
