"""``Root``: one runtime root, opened as the CLI opens it, and its method groups."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from loopx.api._fleet import Fleet
from loopx.api._gates import Gates
from loopx.api._goals import Goals
from loopx.api._quota import Quota
from loopx.api._status import Status
from loopx.api._turns import Turns
from loopx.doctor import DoctorReport, diagnose
from loopx.registry.initialise import InitReport, initialise
from loopx.root import Layout, ResolvedRoot, open_root, resolve_root


def _resolve(
    path: str | os.PathLike[str] | None,
    registry: str | os.PathLike[str] | None,
    env: Mapping[str, str] | None,
    home: Path | None,
) -> ResolvedRoot:
    return resolve_root(
        flag=path,
        registry=registry,
        env=os.environ if env is None else env,
        home=Path.home() if home is None else home,
    )


@dataclass(frozen=True, slots=True)
class Root:
    """A checked runtime root. Holds nothing but its paths: every call reads the files.

    Safe to share between threads, and to open in several processes at once:
    writes take the same file locks the CLI and the agents take.
    """

    layout: Layout

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str] | None = None,
        *,
        create: bool = False,
        registry: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
        home: Path | None = None,
    ) -> Root:
        """Open the runtime root the CLI would use (``path`` is ``--root``).

        ``path``, else ``$LOOPX_ROOT``, else the ``common_runtime_root`` of
        ``registry``, else ``$XDG_STATE_HOME/loopx``. ``env`` defaults to
        ``os.environ`` and ``home`` to ``Path.home()``.

        Raises:
            RootError: the root is missing (without ``create``), shared or not ours.
        """
        return cls(open_root(_resolve(path, registry, env, home), create=create))

    @staticmethod
    def init(
        path: str | os.PathLike[str] | None = None,
        *,
        registry: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
        home: Path | None = None,
        upgrade: bool = False,
    ) -> InitReport:
        """`loopx init`: create the root (0700) and an empty registry; idempotent.

        ``upgrade`` (`init --upgrade`) first moves an old single-file
        registry's goals into one goal file each.
        """
        return initialise(_resolve(path, registry, env, home), upgrade=upgrade)

    @staticmethod
    def diagnose(
        path: str | os.PathLike[str] | None = None,
        *,
        registry: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
        home: Path | None = None,
        now: datetime | None = None,
    ) -> DoctorReport:
        """`loopx doctor`: check the whole root, read-only (also one ``open`` refuses)."""
        return diagnose(Layout.of(_resolve(path, registry, env, home)), now=now)

    @property
    def path(self) -> Path:
        """The runtime root directory."""
        return self.layout.root

    @property
    def goals(self) -> Goals:
        """Register and manage goals (`loopx goal ...`, `loopx archive`)."""
        return Goals(self.layout)

    @property
    def gates(self) -> Gates:
        """Open and resolve human gates (`loopx gate ...`)."""
        return Gates(self.layout)

    @property
    def status(self) -> Status:
        """The attention queue (`loopx status`, `loopx refresh`)."""
        return Status(self.layout)

    @property
    def quota(self) -> Quota:
        """Quota reports and decisions (`loopx quota ...`)."""
        return Quota(self.layout)

    @property
    def turns(self) -> Turns:
        """Run, inspect, recover and replay turns (`loopx turn|journal|recover|replay`)."""
        return Turns(self.layout)

    @property
    def fleet(self) -> Fleet:
        """The agent fleet (`loopx supervisor ...`, `loopx batch run`)."""
        return Fleet(self.layout)
