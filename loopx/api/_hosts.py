"""``root.hosts``: `loopx hosts` and `loopx hosts check KIND [--accept]`.

The first lists the host CLIs, their versions and the canary's verdicts; the
second probes a kind again and, with ``--accept``, trusts its version.
"""

from __future__ import annotations

from loopx.agents.canary import check, probed_kinds
from loopx.agents.canary.probe import installed_version, program_name, tested_versions
from loopx.agents.hosts import host_for
from loopx.errors import LoopxError, UsageError
from loopx.hostcanary import (
    HostCheck,
    HostList,
    HostView,
    TrustStatus,
    accept_version,
    read_hosts,
    within_range,
)
from loopx.model import utcnow
from loopx.registry.hostprogram import cli_programs
from loopx.root import Layout


class Hosts:
    """The host kinds with a CLI of their own, on one root."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout

    def list(self) -> HostList:
        """Every installed kind with a CLI: found where, which version, tested, trusted.

        Raises:
            CorruptFileError: hosts.json is damaged (left as it is).
        """
        return HostList(hosts=[self._view(kind) for kind in probed_kinds()])

    def check(self, kind: str, *, accept: bool = False) -> HostCheck:
        """Probe ``kind`` now and record the verdict; with ``accept``, trust its version.

        Raises:
            UsageError: ``kind`` has no CLI to probe, or ``accept`` without a version to accept.
            HostUnsupportedError: no adapter of ``kind`` is installed.
            CorruptFileError: hosts.json is damaged (left as it is).
        """
        if kind not in cli_programs():
            msg = f"host kind {kind!r} has no CLI of its own to probe"
            raise UsageError(msg, hint=f"probe one of: {', '.join(probed_kinds())}")
        record = check(self.layout, [kind])[0]
        version = record.last.fingerprint.version if record.last.fingerprint else None
        if accept:
            if version is None:
                msg = f"host {kind}: no version to accept ({record.last.detail})"
                raise UsageError(msg, hint=f"install {program_name(kind)} so it prints --version")
            accept_version(self.layout, kind, version, now=utcnow())
        return HostCheck(
            probe=record.last, accepted=version if accept else None, host=self._view(kind)
        )

    def _view(self, kind: str) -> HostView:
        try:
            tested = list(tested_versions(host_for(kind)))
        except LoopxError:
            tested = []  # a plug-in that does not load: its goals fail host_missing anyway
        binary, version = installed_version(program_name(kind))
        record = read_hosts(self.layout).kinds.get(kind)
        return HostView(
            kind=kind,
            program=program_name(kind),
            binary=binary,
            version=version,
            tested_versions=tested,
            tested=None if version is None else version in tested,
            within_tested_range=None if version is None else within_range(version, tested),
            status=record.status if record else TrustStatus.TRUSTED,
            reason=record.reason if record else "",
            accepted_versions=list(record.accepted_versions) if record else [],
            last_probe=record.last if record else None,
        )
