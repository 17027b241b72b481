"""``root.goals``: `loopx goal add|update|list|show|pause|resume|done|reset-session`, `archive`."""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar

from loopx.archive import ArchiveResult, archive_goal, parse_archive_root
from loopx.errors import InvalidPolicyError, UsageError
from loopx.model import utcnow
from loopx.registry.bulk import ImportReport, check_import, import_goals, read_import
from loopx.registry.checks import check_program, check_workdir
from loopx.registry.goals import GoalChanges, add_goal, get_goal, reset_session, set_status
from loopx.registry.model import GoalStatus, HostKind, HostSpec
from loopx.registry.views import (
    GoalDocument,
    GoalList,
    GoalView,
    SessionReset,
    goal_list,
    goal_view,
)
from loopx.root import Layout
from loopx.status.probe import DEFAULT_MAX_BYTES, DEFAULT_TIMEOUT_S, run_probe
from loopx.status.view import ProbeObservation


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


@dataclass(frozen=True, slots=True)
class Goals:
    """The goals of one root."""

    layout: Layout
    PROBE_TIMEOUT_S: ClassVar[float] = DEFAULT_TIMEOUT_S  # `loopx probe --timeout` default
    PROBE_MAX_BYTES: ClassVar[int] = DEFAULT_MAX_BYTES  # `loopx probe --max-bytes` default

    def add(
        self,
        goal_id: str,
        *,
        objective: str | None = None,
        workdir: str | os.PathLike[str] | None = None,
        host: str | Sequence[str] | None = None,
        host_kind: HostKind | str | None = None,
        session_max_turns: int | None = None,
        unreachable_after_s: float | None = None,
        priority: int | None = None,
        quota: Mapping[str, Any] | None = None,
        next_probe: str | None = None,
        max_host_attempts: int | None = None,
        resources: Mapping[str, float] | None = None,
        update: bool = False,
        check: bool = True,
        default_workdir: Path | None = None,
        now: datetime | None = None,
    ) -> GoalDocument:
        """`loopx goal add`: register a goal (change one with ``update=True``).

        ``quota`` holds :class:`loopx.QuotaPolicy` fields; ``workdir`` defaults
        to ``default_workdir`` (the current directory) for a new goal. With
        ``check`` (``--no-check`` off) the workdir must exist and a command
        host's program must be found, as the CLI checks.

        Raises:
            GoalExistsError: the id is registered and ``update`` is False.
            GoalNotFoundError: ``update`` and no such goal.
            InvalidPolicyError: a field is out of range, or a new goal has no objective.
            UsageError: the host is malformed.
        """
        spec = host_spec(host, host_kind, session_max_turns, unreachable_after_s)
        where = Path(workdir).expanduser().resolve() if workdir is not None else None
        if check and where is not None:
            check_workdir(where)
        if check and spec is not None and spec.kind == HostKind.COMMAND and spec.argv:
            check_program(spec.argv[0], where or (None if update else Path.cwd()))
        changes = GoalChanges(
            objective=objective,
            workdir=None if where is None else str(where),
            host=spec,
            priority=priority,
            next_probe=next_probe,
            max_host_attempts=max_host_attempts,
            resources=None if resources is None else dict(resources),
            quota={k: v for k, v in (quota or {}).items() if v is not None},
        )
        goal = add_goal(
            self.layout,
            goal_id,
            changes,
            update=update,
            default_workdir=default_workdir or Path.cwd(),
            now=now or utcnow(),
        )
        return GoalDocument(goal=goal)

    def update(self, goal_id: str, **changes: Any) -> GoalDocument:  # noqa: ANN401 - add's keywords
        """`loopx goal add --update`: change the named fields of an existing goal."""
        return self.add(goal_id, update=True, **changes)

    def list(self) -> GoalList:
        """`loopx goal list`: every goal, highest priority first."""
        return goal_list(self.layout)

    def import_file(
        self,
        path: str | os.PathLike[str],
        *,
        default_workdir: str | os.PathLike[str] | None = None,
        check: bool = True,
    ) -> ImportReport:
        """`loopx goal import`: register every goal of a JSON Lines file or batch plan.

        The whole file is checked before anything is written; goals already
        registered with the same policy are skipped. With ``check``
        (``--no-check`` off) every workdir must exist and every command host's
        program be found, as `goal add` checks.

        Raises:
            GoalImportError: a bad line, an id twice, a missing workdir or
                program, or a registered goal with another policy; nothing was
                registered.
        """
        source = Path(path).expanduser().resolve()
        workdir = Path(default_workdir) if default_workdir is not None else Path.cwd()
        goals = read_import(source, default_workdir=workdir, now=utcnow())
        if check:
            check_import(source, goals)
        return import_goals(self.layout, source, goals)

    def show(self, goal_id: str) -> GoalView:
        """`loopx goal show`: a goal's policy and state.

        Raises:
            GoalNotFoundError: no such goal.
        """
        return goal_view(self.layout, get_goal(self.layout, goal_id))

    def set_status(
        self, goal_id: str, status: GoalStatus, *, now: datetime | None = None
    ) -> GoalDocument:
        """Pause, resume or finish a goal.

        Raises:
            GoalNotFoundError: no such goal.
            GoalStateError: the goal is archived.
        """
        return GoalDocument(goal=set_status(self.layout, goal_id, status, now=now or utcnow()))

    def pause(self, goal_id: str, *, now: datetime | None = None) -> GoalDocument:
        """`loopx goal pause`: stop scheduling a goal."""
        return self.set_status(goal_id, GoalStatus.PAUSED, now=now)

    def resume(self, goal_id: str, *, now: datetime | None = None) -> GoalDocument:
        """`loopx goal resume`: schedule a paused goal again."""
        return self.set_status(goal_id, GoalStatus.ACTIVE, now=now)

    def done(self, goal_id: str, *, now: datetime | None = None) -> GoalDocument:
        """`loopx goal done`: mark a goal done."""
        return self.set_status(goal_id, GoalStatus.DONE, now=now)

    def reset_session(self, goal_id: str, *, now: datetime | None = None) -> SessionReset:
        """`loopx goal reset-session`: the next turn starts a fresh host CLI session."""
        dropped = reset_session(self.layout, goal_id, now=now or utcnow())
        return SessionReset(goal_id=goal_id, dropped=dropped)

    def probe(
        self,
        goal_id: str,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_bytes: int = DEFAULT_MAX_BYTES,
        now: datetime | None = None,
    ) -> ProbeObservation:
        """`loopx probe`: run the goal's read-only ``next_probe`` and record what it saw.

        Raises:
            GoalNotFoundError: no such goal.
            UsageError: the goal has no ``next_probe``.
        """
        goal = get_goal(self.layout, goal_id)
        return run_probe(
            self.layout, goal, now=now or utcnow(), timeout_s=timeout_s, max_bytes=max_bytes
        )

    def archive(
        self,
        goal_id: str,
        *,
        archive_root: str | os.PathLike[str] | None = None,
        allow_registered: bool = False,
        dry_run: bool = False,
        copy: bool = False,
        now: datetime | None = None,
    ) -> ArchiveResult:
        """`loopx archive`: move a goal's files aside and mark it archived."""
        where = (
            parse_archive_root(archive_root)
            if isinstance(archive_root, str) or archive_root is None
            else Path(archive_root)
        )
        return archive_goal(
            self.layout,
            goal_id,
            now=now or utcnow(),
            archive_root=where,
            allow_registered=allow_registered,
            dry_run=dry_run,
            copy=copy,
        )
