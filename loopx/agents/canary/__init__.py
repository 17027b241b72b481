"""The canary: a host kind's CLI probed before the fleet trusts it, and again when it changes.

:func:`check` probes kinds and records each verdict in ``hosts.json``
(:mod:`loopx.hostcanary`); the supervisor runs it as ``python -m
loopx.agents.canary --root ROOT [KIND ...]`` when it starts and when a CLI's
binary changes, `loopx hosts check KIND` in-process.
"""

from __future__ import annotations

from collections.abc import Iterable

from loopx.agents.canary.probe import probe, program_name, tested_versions
from loopx.hostcanary import HostKindRecord, record_probe
from loopx.log import get_logger
from loopx.model import utcnow
from loopx.registry.hostprogram import cli_programs
from loopx.root import Layout

log = get_logger(__name__)


def probed_kinds() -> list[str]:
    """Every installed host kind with a CLI of its own to probe."""
    return list(cli_programs())


def check(layout: Layout, kinds: Iterable[str], *, path: str | None = None) -> list[HostKindRecord]:
    """Probe each of ``kinds`` and record the verdicts; the kinds' records after them.

    Raises:
        HostUnsupportedError: no adapter of a kind is installed.
        CorruptFileError: hosts.json is damaged (left as it is).
    """
    records = []
    for kind in kinds:
        result = probe(kind, now=utcnow(), path=path)
        record = record_probe(layout, result)
        version = result.fingerprint.version if result.fingerprint else None
        log.info(
            "host_probed",
            kind=kind,
            outcome=result.outcome.value,
            version=version,
            status=record.status.value,
            detail=result.detail,
        )
        records.append(record)
    return records


__all__ = ["check", "probe", "probed_kinds", "program_name", "tested_versions"]
