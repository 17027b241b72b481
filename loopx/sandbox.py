"""A goal's sandbox: its policy, whether this machine can run it, and what a turn's proxy saw.

A goal with ``--sandbox bwrap`` runs its host and its done-check inside
bubblewrap (docs/sandbox.md); the agent builds the sandbox
(:mod:`loopx.agents.sandbox`). Here are the records every layer reads:
the goal's :class:`SandboxSpec`, the :class:`NetworkReport` a turn's proxy
leaves in its journal, and :func:`unavailable`, the one check of the
machine that ``goal add`` and ``doctor`` share (it reads files, it runs
nothing).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Final, Literal, NamedTuple

from pydantic import Field, ValidationError, field_validator

from loopx.errors import InvalidPolicyError, SandboxUnavailableError
from loopx.model import Record

# The limits a sandboxed turn gets when its quota names none.
DEFAULT_MAX_PROCESSES: Final = 256
DEFAULT_MAX_FILE_MB: Final = 1024
# goals/<id>/sandbox/: the sandboxed host's own home, kept between turns.
SANDBOX_FOLDER: Final = "sandbox"
# A domain of --allow-domain: host names, a leading "*." for every subdomain.
_DOMAIN = r"^(\*\.)?[A-Za-z0-9]([A-Za-z0-9-]{0,62})(\.[A-Za-z0-9]([A-Za-z0-9-]{0,62}))*$"
Domain = Annotated[str, Field(pattern=_DOMAIN, max_length=253)]


class SandboxSpec(Record):
    """``goal.json``'s ``sandbox``: how the goal's host and check are confined."""

    kind: Literal["bwrap"] = "bwrap"
    # Domains the host may reach through the proxy besides its account's provider.
    allow_domains: list[Domain] = Field(default_factory=list)
    # full: the CLI runs with every permission inside the sandbox (docs/hosts.md).
    autonomy: Literal["default", "full"] = "default"
    max_processes: Annotated[int, Field(ge=8, le=65536)] = DEFAULT_MAX_PROCESSES
    max_file_mb: Annotated[int, Field(ge=1)] = DEFAULT_MAX_FILE_MB

    @field_validator("allow_domains")
    @classmethod
    def _lower_unique(cls, domains: list[str]) -> list[str]:
        return sorted({d.lower() for d in domains})


def sandbox_line(spec: SandboxSpec) -> str:
    """The sandbox in status's words: ``bwrap: pypi.org, github.com``. Pure."""
    return f"{spec.kind}: {', '.join(spec.allow_domains) or 'provider only'}"


class SandboxOptions(NamedTuple):
    """What `goal add` was told of the sandbox; None: not given."""

    kind: str | None = None  # "bwrap", or "none" to remove the sandbox
    allow_domains: Sequence[str] | None = None
    autonomy: str | None = None
    max_processes: int | None = None
    max_file_mb: int | None = None


def sandbox_spec(options: SandboxOptions, existing: SandboxSpec | None) -> SandboxSpec | None:
    """The goal's sandbox after ``options`` (None: none, or unchanged when none was given). Pure.

    Raises:
        InvalidPolicyError: a sandbox option without a sandbox, or a value out of range.
    """
    if options.kind == "none":
        return None
    given = {k: v for k, v in options._asdict().items() if v is not None and k != "kind"}
    if options.kind is None and existing is None:
        if given:
            flag = "--" + next(iter(given)).replace("_", "-").removesuffix("s")
            raise InvalidPolicyError(flag, "applies to a sandboxed goal: add --sandbox bwrap")
        return None
    if "allow_domains" in given:
        given["allow_domains"] = list(given["allow_domains"])
    base = existing.model_dump() if existing is not None else {}
    try:
        return SandboxSpec.model_validate({**base, **given})
    except ValidationError as e:
        first = e.errors()[0]
        field = "--" + str(first["loc"][0]).replace("_", "-") if first["loc"] else "--sandbox"
        raise InvalidPolicyError(field, f"{first['msg']} (got {first['input']!r})") from e


def domain_allowed(host: str, allowed: list[str]) -> bool:
    """Whether ``host`` is one of ``allowed`` or under a ``*.`` entry of it. Pure."""
    host = host.lower().rstrip(".")
    for entry in allowed:
        if entry.startswith("*."):
            if host.endswith(entry[1:]) or host == entry[2:]:
                return True
        elif host == entry:
            return True
    return False


class Refusal(Record):
    """One connection the proxy refused: where to, and how many times."""

    target: str  # host:port
    count: int = 1


class NetworkReport(Record):
    """What a sandboxed turn's proxy saw (the journal's host outcome's ``network``)."""

    allowed: list[str] = Field(default_factory=list)  # the allow-list the proxy enforced
    refused: list[Refusal] = Field(default_factory=list)
    bytes_up: int = 0  # from the sandbox to the world
    bytes_down: int = 0
    keys_injected: int = 0  # provider requests the proxy added the account's key to

    def lines(self) -> list[str]:
        """One line per refused target, for the turn's record."""
        return [
            f"sandbox: connection to {r.target} refused ({r.count}x): not in the allow-list "
            "(add it with `loopx goal add ID --update --allow-domain HOST`)"
            for r in self.refused
        ]


def unavailable(
    *,
    path: str | None = None,
    sysctl_dir: Path = Path("/proc/sys"),
    is_root: bool | None = None,
) -> SandboxUnavailableError | None:
    """Why ``--sandbox bwrap`` cannot run here (None: it can). Reads PATH and two sysctls."""
    if shutil.which("bwrap", path=path) is None:
        return SandboxUnavailableError(
            "bubblewrap (bwrap) is not installed",
            "install the `bubblewrap` package (apt-get install bubblewrap)",
        )
    if _sysctl(sysctl_dir / "user" / "max_user_namespaces") == 0:
        return SandboxUnavailableError(
            "user namespaces are off (user.max_user_namespaces = 0)",
            "sysctl -w user.max_user_namespaces=15000",
        )
    root = os.geteuid() == 0 if is_root is None else is_root
    if not root and _sysctl(sysctl_dir / "kernel" / "unprivileged_userns_clone") == 0:
        return SandboxUnavailableError(
            "unprivileged user namespaces are off (kernel.unprivileged_userns_clone = 0)",
            "sysctl -w kernel.unprivileged_userns_clone=1",
        )
    return None


def _sysctl(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


__all__ = [
    "DEFAULT_MAX_FILE_MB",
    "DEFAULT_MAX_PROCESSES",
    "SANDBOX_FOLDER",
    "NetworkReport",
    "Refusal",
    "SandboxOptions",
    "SandboxSpec",
    "domain_allowed",
    "sandbox_line",
    "sandbox_spec",
    "unavailable",
]
