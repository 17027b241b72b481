"""Which host kinds the fleet trusts: the canary's verdicts, one entry per kind, in ``hosts.json``.

The canary (``loopx.agents.canary``) probes a host kind's CLI when the
supervisor starts and whenever the CLI's binary changes on disk: its version,
the flags its adapter uses in its ``--help``, and a two-turn smoke against a
loopback endpoint that costs no tokens. A probe that fails quarantines the
kind: its goals wait (the ``host_kind`` step of the turn) with the reason,
one notification tells people, and the other kinds keep running. A later
probe that passes, or a person accepting the version (``loopx hosts check
KIND --accept``), lifts it. A failing probe never fails a goal.

The rules are pure functions over :class:`HostsFile`; the reads and the
locked read-modify-write are at the end.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Mapping, Sequence
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Final, Literal

from pydantic import Field

from loopx.errors import CorruptFileError
from loopx.log import get_logger
from loopx.model import Record, UtcDatetime
from loopx.root import Layout
from loopx.storage.files import atomic_write_model, read_model_or_none
from loopx.storage.locks import locked

log = get_logger(__name__)

HOSTS_FILE: Final = "hosts.json"


class ProbeOutcome(StrEnum):
    """What one probe of a host kind's CLI found: passed, or the first check that failed."""

    PASSED = "passed"
    MISSING = "missing"  # no binary on PATH: nothing to probe, nothing quarantined
    VERSION_UNREADABLE = "version_unreadable"  # `--version` failed or printed no version
    FLAG_MISSING = "flag_missing"  # a flag the adapter passes is not in `--help`
    OUTPUT_UNPARSED = "output_unparsed"  # a smoke run's output did not read as a result
    SESSION_NOT_RESUMED = "session_not_resumed"  # the second run did not continue the first's
    USAGE_NOT_PER_RUN = "usage_not_per_run"  # the second run's tokens or cost were not its own
    PROBE_ERROR = "probe_error"  # the CLI could not be run (timeout, not executable)


class TrustStatus(StrEnum):
    """Whether a host kind's goals may start turns."""

    TRUSTED = "trusted"
    QUARANTINED = "quarantined"


class Fingerprint(Record):
    """A host CLI's binary as found: path, size and mtime from a ``stat``, and its version."""

    path: str
    size: int
    mtime_ns: int
    version: str | None = None


class ProbeResult(Record):
    """One probe of one host kind."""

    kind: str
    outcome: ProbeOutcome
    detail: str = ""  # what failed, in words: "--output-format missing from `claude --help`"
    fingerprint: Fingerprint | None = None
    tested: bool = False  # the version is one the adapter declares it was tested with
    smoke: bool = False  # the two-turn smoke ran (the CLI takes a custom endpoint)
    checked_at: UtcDatetime

    @property
    def passed(self) -> bool:
        """Whether every check passed."""
        return self.outcome is ProbeOutcome.PASSED


class HostKindRecord(Record):
    """The canary's verdict on one host kind."""

    kind: str
    status: TrustStatus = TrustStatus.TRUSTED
    reason: str = ""  # why it is quarantined: "host claude: 2.1.340 untested: ..."
    quarantined_at: UtcDatetime | None = None
    last: ProbeResult
    # Versions a person accepted (`loopx hosts check KIND --accept`): trusted even if a probe fails.
    accepted_versions: list[str] = Field(default_factory=list)


class HostsFile(Record):
    """``hosts.json``: the canary's verdict per host kind."""

    schema_version: Literal[1] = 1
    kinds: dict[str, HostKindRecord] = Field(default_factory=dict)


class HostView(Record):
    """One host kind as `loopx hosts` shows it: its CLI, version, and the canary's verdict."""

    kind: str
    program: str  # the program's name, looked up on PATH
    binary: str | None = None  # where it was found; None: not installed
    version: str | None = None  # what `--version` printed now; None: not installed or unreadable
    tested_versions: list[str] = Field(default_factory=list)  # the adapter's declaration
    tested: bool | None = None  # the version is one of them (None: no version)
    within_tested_range: bool | None = None  # between the lowest and highest of them
    status: TrustStatus = TrustStatus.TRUSTED
    reason: str = ""
    accepted_versions: list[str] = Field(default_factory=list)
    last_probe: ProbeResult | None = None


class HostList(Record):
    """`loopx hosts --json`: every installed host kind with a CLI of its own."""

    schema_version: Literal[1] = 1
    hosts: list[HostView]


class HostCheck(Record):
    """`loopx hosts check KIND --json`: the probe that ran and the kind's verdict after it."""

    schema_version: Literal[1] = 1
    probe: ProbeResult
    accepted: str | None = None  # the version `--accept` recorded as trusted
    host: HostView


# --- rules (pure) -------------------------------------------------------------------------------


def reason_of(result: ProbeResult) -> str:
    """The quarantine's reason in one line: kind, version, tested or not, what failed. Pure."""
    version = result.fingerprint.version if result.fingerprint else None
    tested = "tested" if result.tested else "untested"
    return f"host {result.kind}: {version or 'version unknown'} {tested}: {result.detail}"


def apply_probe(hosts: HostsFile, result: ProbeResult) -> HostsFile:
    """``hosts`` after ``result``: a failure quarantines the kind unless its version was accepted.

    A passing probe, or one of an accepted version, trusts the kind; a missing
    binary leaves the verdict as it was (there is nothing to run, so no goal
    of the kind starts a host either way). Pure.
    """
    before = hosts.kinds.get(result.kind)
    if result.outcome is ProbeOutcome.MISSING and before is not None:
        return hosts
    accepted = before.accepted_versions if before is not None else []
    version = result.fingerprint.version if result.fingerprint else None
    trusted = result.passed or result.outcome is ProbeOutcome.MISSING or version in accepted
    since = before.quarantined_at if before is not None else None
    record = HostKindRecord(
        kind=result.kind,
        status=TrustStatus.TRUSTED if trusted else TrustStatus.QUARANTINED,
        reason="" if trusted else reason_of(result),
        quarantined_at=None if trusted else (since or result.checked_at),
        last=result,
        accepted_versions=accepted,
    )
    return hosts.model_copy(update={"kinds": {**hosts.kinds, result.kind: record}})


def accept(hosts: HostsFile, kind: str, version: str) -> HostsFile:
    """``hosts`` with ``version`` of ``kind`` accepted as trusted, lifting its quarantine. Pure."""
    before = hosts.kinds[kind]
    accepted = sorted({*before.accepted_versions, version})
    record = before.model_copy(
        update={
            "status": TrustStatus.TRUSTED,
            "reason": "",
            "quarantined_at": None,
            "accepted_versions": accepted,
        }
    )
    return hosts.model_copy(update={"kinds": {**hosts.kinds, kind: record}})


def quarantine_reason(hosts: HostsFile, kind: str) -> str | None:
    """Why ``kind`` is quarantined, or None when its goals may run. Pure."""
    record = hosts.kinds.get(kind)
    if record is None or record.status is TrustStatus.TRUSTED:
        return None
    return record.reason


def version_key(version: str) -> tuple[int, ...]:
    """``"2.1.332"`` as ``(2, 1, 332)`` for ordering; a suffix after the numbers is ignored. Pure."""
    parts = []
    for part in version.split("."):
        digits = "".join(itertools.takewhile(str.isdigit, part))
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def within_range(version: str, tested: Sequence[str]) -> bool | None:
    """Whether ``version`` lies between the lowest and highest ``tested`` (None: none). Pure."""
    if not tested:
        return None
    keys = sorted(version_key(v) for v in tested)
    return keys[0] <= version_key(version) <= keys[-1]


def stale_kinds(hosts: HostsFile, stats: Mapping[str, tuple[int, int] | None]) -> list[str]:
    """The kinds whose binary's ``(size, mtime_ns)`` differs from the one last probed. Pure.

    ``stats`` maps each watched kind to its binary's stat now (None: gone).
    """
    stale = []
    for kind, now in sorted(stats.items()):
        record = hosts.kinds.get(kind)
        seen = record.last.fingerprint if record is not None else None
        if now != (None if seen is None else (seen.size, seen.mtime_ns)):
            stale.append(kind)
    return stale


def quarantined_kinds(layout: Layout) -> dict[str, str]:
    """The reason of each host kind the canary quarantined; a damaged file quarantines none.

    As the turn's ``host_kind`` step reads it: the canary's own file must not hold
    the fleet (or fail a root-wide command) until it is repaired.
    """
    try:
        hosts = read_hosts(layout)
    except CorruptFileError as e:
        log.warning("hosts_file_damaged", error=e.message)
        return {}
    return {kind: reason for kind in hosts.kinds if (reason := quarantine_reason(hosts, kind))}


class QuarantineWatch:
    """The quarantined kinds as an agent's index sees them: a ``stat`` a step, a read when moved."""

    def __init__(self, layout: Layout) -> None:
        self.path = hosts_path(layout)
        self.layout = layout
        self.quarantined: frozenset[str] = frozenset()
        self._stat: tuple[int, int, int] | None = None

    def moved(self) -> frozenset[str]:
        """The kinds whose quarantine began or ended since the last call."""
        try:
            st = os.stat(self.path)
            now: tuple[int, int, int] | None = (st.st_ino, st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            now = None
        if now == self._stat:
            return frozenset()
        self._stat = now
        try:
            hosts = read_hosts(self.layout)
        except CorruptFileError as e:
            log.warning("hosts_file_damaged", error=e.message)
            return frozenset()  # looked at again when it moves (repaired)
        quarantined = frozenset(
            kind for kind, r in hosts.kinds.items() if r.status is TrustStatus.QUARANTINED
        )
        moved = quarantined ^ self.quarantined
        self.quarantined = quarantined
        return moved


# --- files --------------------------------------------------------------------------------------


def hosts_path(layout: Layout) -> Path:
    """``<root>/hosts.json``."""
    return layout.root / HOSTS_FILE


def read_hosts(layout: Layout) -> HostsFile:
    """The canary's verdicts (none yet: every kind trusted).

    Raises:
        CorruptFileError: the file is damaged (it is left as it is).
    """
    return read_model_or_none(hosts_path(layout), HostsFile) or HostsFile()


def record_probe(layout: Layout, result: ProbeResult) -> HostKindRecord:
    """Apply ``result`` to the file under its lock; the kind's record after it.

    Raises:
        CorruptFileError: the file is damaged (it is left as it is).
    """
    path = hosts_path(layout)
    with locked(path):
        hosts = apply_probe(read_hosts(layout), result)
        atomic_write_model(path, hosts)
    return hosts.kinds[result.kind]


def accept_version(layout: Layout, kind: str, version: str, *, now: datetime) -> HostKindRecord:
    """Record ``version`` of ``kind`` as trusted, under the file's lock; the kind's record.

    A kind never probed is recorded with a passed, smoke-less result at ``now``.

    Raises:
        CorruptFileError: the file is damaged (it is left as it is).
    """
    path = hosts_path(layout)
    with locked(path):
        hosts = read_hosts(layout)
        if kind not in hosts.kinds:
            first = ProbeResult(kind=kind, outcome=ProbeOutcome.PASSED, checked_at=now)
            hosts = apply_probe(hosts, first)
        hosts = accept(hosts, kind, version)
        atomic_write_model(path, hosts)
    return hosts.kinds[kind]
