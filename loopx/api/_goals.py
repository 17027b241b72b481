"""``root.goals``: `loopx goal add|update|list|show|pause|resume|done|reopen|reset-session`, `archive`."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar, Final

from loopx.accounts.accountfiles import check_goal_account, read_account
from loopx.api._hostspec import host_spec
from loopx.api._work import (
    WorktreeOptions,
    abort_merge_worktree,
    check_worktrees,
    merge_worktree,
    show_worktree,
    worktree_of,
)
from loopx.donecheck import DoneCheckSpec, done_check_spec
from loopx.errors import GoalNotFoundError, HostUnsupportedError, InvalidPolicyError, UsageError
from loopx.model import utcnow
from loopx.registry.bulk import (
    GoalImportError,
    ImportReport,
    check_import,
    import_goals,
    read_import,
)
from loopx.registry.catalog import own_workdirs
from loopx.registry.checks import check_program, check_workdir
from loopx.registry.goalrecords import GoalStatus, HostKind
from loopx.registry.goals import GoalChanges, add_goal, get_goal, reset_session
from loopx.registry.lifecycle import StatusRequest, change_status
from loopx.registry.store import read_settings
from loopx.registry.views import (
    GoalDocument,
    GoalList,
    GoalView,
    SessionReset,
    goal_list,
    goal_view,
)
from loopx.root import Layout
from loopx.sandbox import SandboxOptions, SandboxSpec, sandbox_spec
from loopx.sandbox import unavailable as sandbox_unavailable
from loopx.turn.sharedworkdirs import shared_workdirs

# Imported where used: archiving, probing and merging cost `goal add` a fifth of its start.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from loopx.retention.archive import ArchiveResult
    from loopx.status.view import ProbeObservation
    from loopx.worktree.mergejournal import MergeJournal, MergeMode
    from loopx.worktree.show import WorktreeView

# loopx.status.nextprobe's DEFAULT_TIMEOUT_S and DEFAULT_MAX_BYTES (a test checks they agree).
_PROBE_TIMEOUT_S: Final = 30.0
_PROBE_MAX_BYTES: Final = 64 * 1024


@dataclass(frozen=True, slots=True)
class Goals:
    """The goals of one root."""

    layout: Layout
    PROBE_TIMEOUT_S: ClassVar[float] = _PROBE_TIMEOUT_S  # `loopx probe --timeout` default
    PROBE_MAX_BYTES: ClassVar[int] = _PROBE_MAX_BYTES  # `loopx probe --max-bytes` default

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
        done_check: str | Sequence[str] | None = None,
        done_check_timeout_s: float | None = None,
        done_check_every_turn: bool | None = None,
        worktree: bool = False,
        base: str | None = None,
        worktree_include: Sequence[str] = (),
        worktree_dir: str | os.PathLike[str] | None = None,
        auto_merge: bool | None = None,
        account: str | None = None,
        on_limit: str | None = None,
        max_limit_waits: int | None = None,
        fallback_accounts: Sequence[str] | None = None,
        handoff: bool | None = None,
        max_handoffs_per_day: int | None = None,
        sandbox: str | None = None,
        allow_domains: Sequence[str] | None = None,
        autonomy: str | None = None,
        max_processes: int | None = None,
        max_file_mb: int | None = None,
        update: bool = False,
        check: bool = True,
        default_workdir: Path | None = None,
        now: datetime | None = None,
    ) -> GoalDocument:
        """`loopx goal add`: register a goal (change one with ``update=True``).

        ``worktree``: the goal's turns run in a git worktree of the ``workdir``
        repository on branch ``loopx/<id>``, made from ``base`` (default: the
        branch checked out there now) under ``worktree_dir`` (default
        ``<root>/worktrees``), with the untracked files matching
        ``worktree_include`` copied in; ``auto_merge`` merges it once done
        (docs/work.md).

        ``quota`` holds :class:`loopx.QuotaPolicy` fields; ``workdir`` defaults
        to ``default_workdir`` (the current directory) for a new goal. With
        ``check`` (``--no-check`` off) the workdir must exist and a command
        host's program must be found, as the CLI checks. ``done_check`` (split
        like ``host``) runs in the workdir when the host reports ``completed``
        (after every turn with ``done_check_every_turn``); its program must be
        found too (docs/work.md).

        ``fallback_accounts`` (replacing the goal's list) are the accounts, of any
        host kind, its turns hand off to while its own account does not admit
        them; ``handoff=False`` pins it to its own; ``max_handoffs_per_day`` caps
        them (-1: no cap) (docs/work.md, "Hand-off between accounts").

        Raises:
            GoalExistsError: the id is registered and ``update`` is False.
            GoalNotFoundError: ``update`` and no such goal.
            InvalidPolicyError: a field is out of range, or a new goal has no objective.
            UsageError: the host is malformed.
            WorktreeError: ``worktree`` on a folder that is not a repository's top, or a
                ``base`` that is not one of its branches.
        """
        spec = host_spec(host, host_kind, session_max_turns, unreachable_after_s)
        where = Path(workdir).expanduser().resolve() if workdir is not None else None
        tree = worktree_of(
            self.layout,
            goal_id,
            where,
            WorktreeOptions(worktree, base, tuple(worktree_include), worktree_dir),
            update=update,
            default_workdir=default_workdir,
        )
        if check and where is not None:
            check_workdir(where)
        if check and spec is not None and spec.kind == HostKind.COMMAND and spec.argv:
            check_program(spec.argv[0], where or (None if update else Path.cwd()))
        check_spec = self._done_check(
            goal_id, done_check, done_check_timeout_s, done_check_every_turn, update=update
        )
        if check and check_spec is not None and done_check is not None:
            check_program(
                check_spec.argv[0],
                where or (None if update else Path.cwd()),
                role="done-check",
            )
        box = self._sandbox(
            goal_id,
            SandboxOptions(sandbox, allow_domains, autonomy, max_processes, max_file_mb),
            update=update,
            account=account,
        )
        changes = GoalChanges(
            sandbox=box,
            no_sandbox=sandbox == "none",
            objective=objective,
            workdir=None if where is None else str(where),
            host=spec,
            priority=priority,
            next_probe=next_probe,
            max_host_attempts=max_host_attempts,
            resources=None if resources is None else dict(resources),
            quota={k: v for k, v in (quota or {}).items() if v is not None},
            done_check=check_spec,
            worktree=tree,
            auto_merge=auto_merge,
            account=account,
            on_limit=on_limit,
            max_limit_waits=max_limit_waits,
            fallback_accounts=None if fallback_accounts is None else list(fallback_accounts),
            handoff=handoff,
            max_handoffs_per_day=max_handoffs_per_day,
        )
        goal = add_goal(
            self.layout,
            goal_id,
            changes,
            update=update,
            default_workdir=default_workdir or Path.cwd(),
            now=now or utcnow(),
            validate=lambda goal: check_goal_account(self.layout, goal),
        )
        shared = shared_workdirs([goal], own_workdirs(self.layout)).get(goal.id, [])
        return GoalDocument(goal=goal, shared_workdir=shared)

    def _sandbox(
        self, goal_id: str, options: SandboxOptions, *, update: bool, account: str | None
    ) -> SandboxSpec | None:
        """The goal's sandbox: as given, over its own (update) or its account's (a new goal)."""
        existing = None
        if update:
            with contextlib.suppress(GoalNotFoundError):
                existing = get_goal(self.layout, goal_id).sandbox
        elif options.kind != "none":  # a new goal: its account's default, else the root's
            named = (
                read_account(self.layout, account) if account else None
            )  # missing: refused later
            existing = named.sandbox if named is not None else None
            existing = existing or read_settings(self.layout).sandbox
            options = options._replace(kind=options.kind or ("bwrap" if existing else None))
        box = sandbox_spec(options, existing)
        if box is not None and options.kind == "bwrap":
            refused = sandbox_unavailable()
            if refused is not None:
                raise refused
        return box

    def _existing_check(self, goal_id: str, *, update: bool) -> DoneCheckSpec | None:
        if not update:
            return None
        try:
            return get_goal(self.layout, goal_id).done_check
        except GoalNotFoundError:
            return None

    def _done_check(
        self,
        goal_id: str,
        command: str | Sequence[str] | None,
        timeout_s: float | None,
        every_turn: bool | None,
        *,
        update: bool,
    ) -> DoneCheckSpec | None:
        existing = self._existing_check(goal_id, update=update)
        return done_check_spec(
            command, timeout_s=timeout_s, every_turn=every_turn, existing=existing
        )

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
            GoalImportError: a bad line, an id twice, a host kind no adapter
                runs, an unknown account, a missing workdir or program, or a
                registered goal with another policy; nothing was registered.
        """
        source = Path(path).expanduser().resolve()
        workdir = Path(default_workdir) if default_workdir is not None else Path.cwd()
        goals = read_import(source, default_workdir=workdir, now=utcnow())
        from loopx.agents.hosts.plugins import require_kind  # noqa: PLC0415 - the adapters are heavy

        # An unknown account or host kind is bad input, --no-check or not; each kind is
        # looked up once (a file may hold 100,000 goals).
        kinds: set[str] = set()
        for number, goal in goals:
            try:
                if goal.host.kind not in kinds:
                    kinds.add(require_kind(goal.host.kind))
                check_goal_account(self.layout, goal)
            except (UsageError, HostUnsupportedError) as e:
                raise GoalImportError(source, number, e.message, hint=e.hint) from e
        if check:
            check_import(source, goals)
        check_worktrees(source, goals)  # a worktree's repository and base, even with --no-check
        report = import_goals(self.layout, source, goals)
        shared = shared_workdirs([g for _, g in goals], own_workdirs(self.layout))
        return report.model_copy(update={"shared_workdir": shared}) if shared else report

    def worktree(self, goal_id: str, *, remove: bool = False) -> WorktreeView:
        """`loopx goal worktree [--remove]`: the goal's worktree (path, branch, ahead/behind, dirty).

        ``remove`` removes it and its branch, refusing while either holds work the base lacks.

        Raises:
            GoalNotFoundError: no such goal.
            WorktreeError: the goal has no worktree, or it holds work (nothing removed).
        """
        return show_worktree(self.layout, goal_id, remove=remove)

    def merge(
        self, goal_id: str, *, mode: MergeMode | str | None = None, now: datetime | None = None
    ) -> MergeJournal:
        """`loopx goal merge`: the done goal's branch into its base, after the check passes.

        An unfinished merge (killed) is finished first, in its own mode.

        Returns:
            The merge's journal; ``outcome`` says merged, up to date, or why the base is
            unchanged (conflict, check failed, base moved: a gate is open on the goal).

        Raises:
            MergeRefusedError: not a done worktree goal, a dirty base checkout or worktree,
                or ``ff`` cannot fast-forward; nothing moved.
        """
        from loopx.worktree.mergejournal import MergeMode  # noqa: PLC0415

        chosen = None if mode is None else MergeMode(mode)
        return merge_worktree(self.layout, goal_id, mode=chosen, now=now)

    def abort_merge(self, goal_id: str) -> MergeJournal:
        """`loopx goal merge --abort`: cancel the goal's unfinished merge, undoing what it did.

        Returns:
            The merge's journal, ``aborted``; ``undone`` says what was undone. The base is
            where the merge found it; the goal stays done.

        Raises:
            MergeRefusedError: no merge is in progress, or the base moved on after the
                merge moved it (finish it instead).
            MergeBusyError: a live process still holds what a killed merge left.
        """
        return abort_merge_worktree(self.layout, goal_id)

    def show(self, goal_id: str) -> GoalView:
        """`loopx goal show`: a goal's policy and state.

        Raises:
            GoalNotFoundError: no such goal.
        """
        return goal_view(self.layout, get_goal(self.layout, goal_id))

    def set_status(
        self, goal_id: str, status: GoalStatus, *, now: datetime | None = None
    ) -> GoalDocument:
        """Pause (``paused``), resume (``active``) or finish (``done``) a goal.

        Raises:
            GoalNotFoundError: no such goal.
            GoalStateError: the goal is archived, or done and asked to pause or resume
                (finished work runs again only by :meth:`reopen`); nothing changed.
            InvalidPolicyError: ``status`` is not paused, active or done.
        """
        requests = {
            GoalStatus.PAUSED: StatusRequest.PAUSE,
            GoalStatus.ACTIVE: StatusRequest.RESUME,
            GoalStatus.DONE: StatusRequest.DONE,
        }
        if status not in requests:
            raise InvalidPolicyError("status", f"must be paused, active or done, not {status}")
        return self._change(goal_id, requests[status], now=now)

    def _change(
        self, goal_id: str, request: StatusRequest, *, now: datetime | None
    ) -> GoalDocument:
        change = change_status(self.layout, goal_id, request, now=now or utcnow())
        return GoalDocument(goal=change.goal, repeated=change.repeated)

    def pause(self, goal_id: str, *, now: datetime | None = None) -> GoalDocument:
        """`loopx goal pause`: stop scheduling a goal (refused on a done goal)."""
        return self._change(goal_id, StatusRequest.PAUSE, now=now)

    def resume(self, goal_id: str, *, now: datetime | None = None) -> GoalDocument:
        """`loopx goal resume`: schedule a paused goal again (refused on a done goal)."""
        return self._change(goal_id, StatusRequest.RESUME, now=now)

    def done(self, goal_id: str, *, now: datetime | None = None) -> GoalDocument:
        """`loopx goal done`: mark a goal done."""
        return self._change(goal_id, StatusRequest.DONE, now=now)

    def reopen(self, goal_id: str, *, now: datetime | None = None) -> GoalDocument:
        """`loopx goal reopen --yes`: make a done goal active again; its agents run more turns.

        Raises:
            GoalNotFoundError: no such goal.
            GoalStateError: the goal is archived, or paused (resume it instead).
        """
        return self._change(goal_id, StatusRequest.REOPEN, now=now)

    def reset_session(self, goal_id: str, *, now: datetime | None = None) -> SessionReset:
        """`loopx goal reset-session`: the next turn starts a fresh host CLI session."""
        dropped = reset_session(self.layout, goal_id, now=now or utcnow())
        return SessionReset(goal_id=goal_id, dropped=dropped)

    def probe(
        self,
        goal_id: str,
        *,
        timeout_s: float = _PROBE_TIMEOUT_S,
        max_bytes: int = _PROBE_MAX_BYTES,
        now: datetime | None = None,
    ) -> ProbeObservation:
        """`loopx probe`: run the goal's read-only ``next_probe`` and record what it saw.

        Raises:
            GoalNotFoundError: no such goal.
            UsageError: the goal has no ``next_probe``.
        """
        from loopx.status.nextprobe import run_probe  # noqa: PLC0415

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
        from loopx.retention.archive import archive_goal, parse_archive_root  # noqa: PLC0415

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
