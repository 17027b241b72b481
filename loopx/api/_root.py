"""``Root``: one runtime root, opened as the CLI opens it, and its method groups."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loopx.root import Layout, open_root, resolve_root
from loopx.web import serving

# Each group is imported when first used: a command pays only for the layers it touches.
if TYPE_CHECKING:
    from loopx.api._accounts import Accounts
    from loopx.api._demo import Demo
    from loopx.api._fleet import Fleet
    from loopx.api._gates import Gates
    from loopx.api._goals import Goals
    from loopx.api._hosts import Hosts
    from loopx.api._logs import Logs
    from loopx.api._notify import Notify
    from loopx.api._quota import Quota
    from loopx.api._retention import Retention
    from loopx.api._serve import StatusServer
    from loopx.api._status import Status
    from loopx.api._turns import Turns
    from loopx.doctor import DoctorReport
    from loopx.registry.initialise import InitReport


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
        return cls(
            open_root(resolve_root(flag=path, registry=registry, env=env, home=home), create=create)
        )

    @staticmethod
    def init(
        path: str | os.PathLike[str] | None = None,
        *,
        registry: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
        home: Path | None = None,
        upgrade: bool = False,
        **sandbox: Any,  # noqa: ANN401 - SandboxOptions' fields, as `goal add` takes them
    ) -> InitReport:
        """`loopx init`: create the root (0700) and an empty registry; idempotent.

        ``upgrade`` (`init --upgrade`) first moves an old single-file
        registry's goals into one goal file each. ``sandbox``, ``allow_domains``,
        ``autonomy``, ``max_processes``, ``max_file_mb`` set the root's default
        sandbox of goals added without one (docs/sandbox.md).
        """
        from loopx.registry.initialise import initialise  # noqa: PLC0415 - lazy group
        from loopx.sandbox import SandboxOptions  # noqa: PLC0415 - lazy group

        options = SandboxOptions(kind=sandbox.pop("sandbox", None), **sandbox)
        return initialise(
            resolve_root(flag=path, registry=registry, env=env, home=home),
            upgrade=upgrade,
            sandbox=options,
        )

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
        from loopx.doctor import diagnose  # noqa: PLC0415 - lazy group

        return diagnose(
            Layout.of(resolve_root(flag=path, registry=registry, env=env, home=home)), now=now
        )

    @staticmethod
    def repair_clock(
        path: str | os.PathLike[str] | None = None,
        *,
        registry: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
        home: Path | None = None,
        now: datetime | None = None,
    ) -> list[Path]:
        """`loopx doctor --repair`: date future-dated goal states (a clock ran ahead) back to ``now``.

        Each goal keeps the wait it asked for; runs under each goal's lock.

        Returns:
            The state files rewritten.

        Raises:
            CorruptFileError: the registry cannot be read.
        """
        from loopx.clock import repair_future_dated  # noqa: PLC0415 - only for --repair
        from loopx.model import utcnow  # noqa: PLC0415
        from loopx.registry.catalog import load_registry  # noqa: PLC0415

        layout = Layout.of(resolve_root(flag=path, registry=registry, env=env, home=home))
        goals = sorted(load_registry(layout).goals)
        repaired = repair_future_dated(layout, goals, now=now or utcnow())
        return [layout.state_file(goal_id) for goal_id in repaired]

    @staticmethod
    def repair_worktree_locks(
        path: str | os.PathLike[str] | None = None,
        *,
        registry: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
        home: Path | None = None,
    ) -> list[Path]:
        """`loopx doctor --repair`: remove worktree goals' git locks whose git process is gone.

        Only git's ``locked`` ("initializing", or naming a dead pid) and
        ``index.lock`` files of a goal's worktree, each proven ownerless; no
        tracked file changes, so ``git status`` there stays as it was.

        Returns:
            The lock files removed.

        Raises:
            CorruptFileError: the registry cannot be read.
        """
        from loopx.doctor.worktreecheck import repair_worktree_locks  # noqa: PLC0415 - only for --repair
        from loopx.registry.catalog import load_registry  # noqa: PLC0415

        layout = Layout.of(resolve_root(flag=path, registry=registry, env=env, home=home))
        goals = sorted(load_registry(layout).goals.values(), key=lambda g: g.id)
        return repair_worktree_locks(layout, goals)

    @staticmethod
    def demo(path: str | os.PathLike[str] | None = None) -> Demo:
        """`loopx demo`: a fresh demo directory and root (``path``, else inside it), ready to run.

        ``Root.demo().run()`` runs it; see :class:`loopx.api.Demo`.
        """
        from loopx.api._demo import Demo  # noqa: PLC0415 - lazy group

        return Demo.create(path)

    @staticmethod
    def schema_names() -> list[str]:
        """Every name `loopx schema NAME` knows: file kinds and ``--json`` outputs, sorted."""
        from loopx.api._schemas import schema_names  # noqa: PLC0415 - imports every model

        return schema_names()

    @staticmethod
    def schema(name: str) -> dict[str, Any]:
        """`loopx schema NAME`: the JSON Schema of a file kind or a ``--json`` output.

        Raises:
            UsageError: unknown name (the hint lists the known ones).
        """
        from loopx.api._schemas import json_schema  # noqa: PLC0415 - imports every model

        return json_schema(name)

    @property
    def path(self) -> Path:
        """The runtime root directory."""
        return self.layout.root

    @property
    def goals(self) -> Goals:
        """Register and manage goals (`loopx goal ...`, `loopx archive`)."""
        from loopx.api._goals import Goals  # noqa: PLC0415 - lazy group

        return Goals(self.layout)

    @property
    def gates(self) -> Gates:
        """Open and resolve human gates (`loopx gate ...`)."""
        from loopx.api._gates import Gates  # noqa: PLC0415 - lazy group

        return Gates(self.layout)

    @property
    def status(self) -> Status:
        """The attention queue (`loopx status`, `loopx refresh`)."""
        from loopx.api._status import Status  # noqa: PLC0415 - lazy group

        return Status(self.layout)

    @property
    def quota(self) -> Quota:
        """Quota reports and decisions (`loopx quota ...`)."""
        from loopx.api._quota import Quota  # noqa: PLC0415 - lazy group

        return Quota(self.layout)

    @property
    def retention(self) -> Retention:
        """What the root keeps of its past, compaction and disk limits (`loopx retention|gc`)."""
        from loopx.api._retention import Retention  # noqa: PLC0415 - lazy group

        return Retention(self.layout)

    @property
    def accounts(self) -> Accounts:
        """Provider accounts, their limits and budgets (`loopx account ...`)."""
        from loopx.api._accounts import Accounts  # noqa: PLC0415 - lazy group

        return Accounts(self.layout)

    @property
    def hosts(self) -> Hosts:
        """The host CLIs, their versions and the canary's verdicts (`loopx hosts ...`)."""
        from loopx.api._hosts import Hosts  # noqa: PLC0415 - lazy group

        return Hosts(self.layout)

    @property
    def notify(self) -> Notify:
        """Notification targets (`loopx notify ...`)."""
        from loopx.api._notify import Notify  # noqa: PLC0415 - lazy group

        return Notify(self.layout)

    @property
    def turns(self) -> Turns:
        """Run, inspect, recover and replay turns (`loopx turn|journal|recover|replay`)."""
        from loopx.api._turns import Turns  # noqa: PLC0415 - lazy group

        return Turns(self.layout)

    def serve(
        self,
        *,
        host: str = serving.DEFAULT_HOST,  # the defaults of StatusServer (imported on use)
        port: int = serving.DEFAULT_PORT,
        token_file: Path | None = None,
        no_token: bool = False,
        actions: bool = False,
        refresh_interval_s: float = serving.SERVE_REFRESH_S,
        ttl_s: float = serving.SERVE_TTL_S,
        allowed_hosts: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
    ) -> StatusServer:
        """`loopx serve`: bind the dashboard and HTTP status API of this root (not serving yet).

        The token is read from ``token_file``, else ``$LOOPX_SERVE_TOKEN`` (of
        ``env``), else the root's ``serve.token`` (created 0600 on first use);
        ``no_token`` serves without one (loopback only). ``.token`` and
        ``.page_url`` say what a client needs. ``port`` 0 picks a free port
        (see ``.address``). Serve with ``.start()`` (a background thread) or
        ``.serve_forever()``; ``.stop()`` ends it, and ``with root.serve(...)
        as server:`` does both.

        Raises:
            InsecureBindError: ``host`` is not loopback and there is no token.
            NoTokenOffLoopbackError: ``no_token`` off loopback.
            TokenFileError: the token file is missing, empty or readable by others.
            ActionsNeedTokenError: ``actions`` without a token.
            UsageError: the address cannot be bound.
        """
        from loopx.api._serve import StatusServer  # noqa: PLC0415 - lazy group

        token = StatusServer.resolve_token(
            self.layout, host=host, env=env, token_file=token_file, no_token=no_token
        )
        return StatusServer(
            self.layout,
            host=host,
            port=port,
            token=token,
            actions=actions,
            refresh_interval_s=refresh_interval_s,
            ttl_s=ttl_s,
            allowed_hosts=allowed_hosts,
        )

    @property
    def logs(self) -> Logs:
        """The agents' and supervisor's logs and each goal's turns (`loopx logs`)."""
        from loopx.api._logs import Logs  # noqa: PLC0415 - lazy group

        return Logs(self.layout)

    @property
    def fleet(self) -> Fleet:
        """The agent fleet (`loopx supervisor ...`, `loopx agent run`, `loopx batch run`)."""
        from loopx.api._fleet import Fleet  # noqa: PLC0415 - lazy group

        return Fleet(self.layout)
