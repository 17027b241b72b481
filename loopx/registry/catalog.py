"""The goal index: every goal's policy in one derived file, kept current incrementally.

``projections/goals.json`` (:class:`~loopx.registry.goal_index.GoalIndex`)
holds each goal's policy and the ``(inode, mtime_ns, size)`` of the goal file
it was read from, plus where in the change-hint log it was last brought up to
date. It is a cache: the goal files are the truth, and the index is rebuilt
from them when it is missing, damaged, stale or of another schema version.

A refresh costs O(changed goals), found by, in order: the change hints
written since the index's cursor (every goal write leaves one), the
``goals/`` directory's own fingerprint (a new or removed goal directory),
and, every ``verify_after_s`` seconds (10 min by default, the bound the design
gives a hint-less in-place edit) or when hints were lost, a stat of every
goal file. Only goal files whose fingerprint differs are read again.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Final

from pydantic import BaseModel, ConfigDict, ValidationError

from loopx.errors import LoopxError
from loopx.ids import is_valid_goal_id
from loopx.log import get_logger
from loopx.model import utcnow
from loopx.process.collector import collector_paused
from loopx.registry.goal_index import (
    ABSENT,
    Fingerprint,
    GoalIndex,
    IndexWriter,
    built_goals,
    fingerprints_of,
    own_workdirs_of,
)
from loopx.registry.goal_index import VERSION as INDEX_VERSION
from loopx.registry.goalrecords import Goal, GoalStatus, Registry
from loopx.registry.store import read_settings
from loopx.root import Layout
from loopx.root.hints import HintCursor, read_hints
from loopx.root.settings import create_settings
from loopx.storage.dirs import ensure_dir
from loopx.storage.files import atomic_write_model, parse_model, read_bytes

DEFAULT_VERIFY_S: Final = 600.0  # a replaced goal file moves its directory: seen sooner
GOAL_FILE: Final = "goal.json"

log = get_logger(__name__)


class _Versioned(BaseModel):
    """Only the ``schema_version`` of a file, whatever else it holds."""

    model_config = ConfigDict(extra="ignore", defer_build=True)
    schema_version: int


def goal_file_fingerprint(layout: Layout, goal_id: str) -> Fingerprint:
    """``(inode, mtime_ns, size)`` of a goal's file, as the index records it."""
    return _stat_fp(os.path.join(str(layout.goals_dir), goal_id, GOAL_FILE))


def _stat_fp(path: str) -> Fingerprint:
    try:
        st = os.stat(path, follow_symlinks=False)
    except (FileNotFoundError, NotADirectoryError):
        return ABSENT
    return st.st_ino, st.st_mtime_ns, st.st_size


@dataclass(slots=True)
class GoalCatalog:
    """A process's copy of the goal index of one root, refreshed incrementally.

    The goals of the index file are put together when first asked for
    (:attr:`goals`): a caller that needs only the workdirs in use
    (:meth:`own_workdirs`, ``goal add``'s shared-workdir warning) never pays for
    10,000 of them. Until then a goal read again or gone waits in ``_staged``.

    Attributes:
        layout: the root.
        persist: write the index file when it changed (CLI, status); agents
            keep theirs in memory only.
    """

    layout: Layout
    persist: bool = True
    _goals: dict[str, Goal] = field(default_factory=dict)
    _index: GoalIndex | None = None  # the index file read, until its goals are built into _goals
    _staged: dict[str, Goal | None] = field(default_factory=dict)  # changes before the build
    _fps: dict[str, Fingerprint] = field(default_factory=dict)
    _cursor: HintCursor = field(default_factory=HintCursor)
    _dir_fp: Fingerprint = ABSENT
    _verified_at: datetime | None = None
    _loaded: bool = False
    _view: Registry | None = None
    _writer: IndexWriter = field(default_factory=IndexWriter)
    hints_lost: bool = (
        False  # the last refresh found the hint log replaced: anything may have changed
    )

    # --- loading -------------------------------------------------------------------------------

    def _load(self) -> bool:
        """Adopt the index file; False when it is missing or damaged (then a full scan follows)."""
        self._loaded = True
        path = self.layout.goal_index_file
        try:
            data = read_bytes(path)
        except FileNotFoundError:
            return False
        except OSError as e:
            log.warning("goal_index_unreadable", path=str(path), error=str(e))
            return False
        try:
            with collector_paused():
                index = parse_model(path, GoalIndex, data)
                fps = fingerprints_of(index, path)
        except LoopxError as e:
            _report_unusable(path, data, e)
            return False
        self._goals, self._index, self._staged = {}, index, {}
        self._fps = fps
        if self.persist:
            self._writer = IndexWriter.of(index)
        self._cursor = HintCursor(index.hint_inode, index.hint_offset)
        self._dir_fp = index.goals_dir_fp
        self._verified_at = index.verified_at
        return True

    @property
    def goals(self) -> dict[str, Goal]:
        """Every registered goal (archived ones included), by id."""
        if self._index is not None:
            self._goals = self._build(self._index)
        return self._goals

    def _build(self, index: GoalIndex) -> dict[str, Goal]:
        """The goals of the index read, with the changes staged since."""
        with collector_paused():
            goals = built_goals(index)
        if self.persist:  # its entries are the index file's: unchanged goals keep theirs
            self._writer = IndexWriter.of(index, goals)
        for goal_id, goal in self._staged.items():
            if goal is None:
                goals.pop(goal_id, None)
            else:
                goals[goal_id] = goal
        self._index, self._staged = None, {}
        return goals

    def own_workdirs(self) -> list[tuple[str, str]]:
        """``(workdir, id)`` of every goal that turns in its own workdir: not archived, no worktree.

        Without building the goals when they are not built yet.
        """
        if self._index is None:
            goals: Iterable[Goal] = self.goals.values()
            index: list[tuple[str, str]] = []
        else:
            goals = (g for g in self._staged.values() if g is not None)
            index = own_workdirs_of(self._index, skip=self._staged)
        archived = GoalStatus.ARCHIVED
        mine = [(g.workdir, g.id) for g in goals if g.status is not archived and g.worktree is None]
        return index + mine

    # --- refreshing ----------------------------------------------------------------------------

    def refresh(
        self,
        *,
        now: datetime | None = None,
        verify_after_s: float = DEFAULT_VERIFY_S,
        verify: bool = True,
    ) -> set[str]:
        """Bring the catalog up to date with the goal files.

        ``verify=False`` skips the check of every goal file (due every
        ``verify_after_s``, or when hints were lost): for a caller that stats
        every goal file itself next and hands what moved to :meth:`reread`.

        Returns:
            The ids of goals added, removed, or whose goal file changed, plus
            every goal hinted as changed (any of its files) since the last
            refresh: what a scheduling index must look at again.

        Raises:
            NewerRootError: a newer LoopX wrote the registry.
            CorruptFileError: the registry settings are damaged.
        """
        now = now or utcnow()
        read_settings(self.layout)  # migrates an old registry first; refuses a newer root
        if not self._loaded:
            self._load()
        hinted, cursor = read_hints(self.layout, self._cursor)
        self.hints_lost = hinted is None
        goals_dir = str(self.layout.goals_dir)
        dir_fp = _stat_fp(goals_dir)
        full = verify and (
            hinted is None
            or self._verified_at is None
            or (now - self._verified_at).total_seconds() >= verify_after_s
        )
        changed: set[str] = set()
        if full or dir_fp != self._dir_fp:
            names = self._list(goals_dir)
            for goal_id in [g for g in self._fps if g not in names]:
                self._forget(goal_id)
                changed.add(goal_id)
            check = names if full else (names - self._fps.keys()) | (hinted or set())
        else:
            check = hinted or set()
        changed |= self._reread_each(check)
        # A verification that found nothing is not saved: rewriting the whole index to
        # record it would cost more than the next process's own stat scan.
        touched = bool(changed) or dir_fp != self._dir_fp
        self._cursor, self._dir_fp = cursor, dir_fp
        if full:
            self._verified_at = now
        if changed:
            self._view = None
        if touched and self.persist:
            self._save()
        return changed | {g for g in (hinted or ()) if is_valid_goal_id(g)}

    def reread(self, goal_ids: Iterable[str]) -> set[str]:
        """Read the goal files of ``goal_ids`` again where their fingerprint moved.

        For a caller that saw these goals' directories change (a scheduling
        index's sweep, the status cache's full scan): O(len(goal_ids)) stats, no
        hint or listing. A persisting catalog saves the index when an entry changed.

        Returns:
            The ids whose entry changed (new, updated or forgotten).
        """
        changed = self._reread_each(goal_ids)
        # Saved, or the next process pays the same reads: a root restored from a
        # copy (new inodes) had every cold status re-read every goal file.
        if changed and self.persist:
            self._save()
        return changed

    def _reread_each(self, goal_ids: Iterable[str]) -> set[str]:
        goals_dir = str(self.layout.goals_dir)
        changed = {g for g in goal_ids if is_valid_goal_id(g) and self._reread(goals_dir, g)}
        if changed:
            self._view = None
        return changed

    def adopt(self, written: Mapping[str, tuple[Goal, Fingerprint]]) -> None:
        """Take goals this process just wrote, with their files' fingerprints, without reading them.

        For a bulk writer (``goal import``): the refresh that follows finds
        their hints and fingerprints it already has, instead of parsing every
        file it wrote, and saves the index for the next command.
        """
        if not self._loaded:
            self._load()
        for goal_id, (goal, fp) in written.items():
            self._put(goal_id, goal, fp)
        if written:
            self._view = None

    def moved(self, observed: Mapping[str, tuple[int, ...]]) -> list[str]:
        """The goals whose goal file's ``(inode, mtime_ns, size)``, as a caller just saw it, differs.

        A caller that stats every goal's directory anyway (the status cache's
        full scan) hands these to :meth:`reread` instead of paying for a
        verification of its own.
        """
        fps = self._fps
        return [g for g, fp in observed.items() if fps.get(g, ABSENT) != fp]

    def _list(self, goals_dir: str) -> set[str]:
        known = self._fps  # ids already checked: a third of the listing's time at 10,000 goals
        try:
            with os.scandir(goals_dir) as entries:
                return {
                    e.name
                    for e in entries
                    if (e.name in known or is_valid_goal_id(e.name))
                    and e.is_dir(follow_symlinks=False)
                }
        except FileNotFoundError:
            return set()

    def _reread(self, goals_dir: str, goal_id: str) -> bool:
        """Read one goal file again if its fingerprint moved; True when the catalog changed."""
        path = os.path.join(goals_dir, goal_id, GOAL_FILE)
        fp = _stat_fp(path)
        if fp == self._fps.get(goal_id, ABSENT):
            return False
        if fp == ABSENT:
            self._forget(goal_id)
            return True
        try:
            goal = parse_model(Path(path), Goal, read_bytes(Path(path)))
        except FileNotFoundError:
            self._forget(goal_id)
            return True
        except (LoopxError, OSError, ValidationError) as e:
            # A damaged goal file is reported (doctor, `goal show`); the rest still run.
            log.warning("goal_file_unreadable", goal_id=goal_id, error=str(e))
            self._forget(goal_id)
            return True
        if goal.id != goal_id:
            log.warning("goal_file_misnamed", goal_id=goal_id, names=goal.id)
            self._forget(goal_id)
            return True
        self._put(goal_id, goal, fp)
        return True

    def _put(self, goal_id: str, goal: Goal, fp: Fingerprint) -> None:
        if self._index is not None:
            self._staged[goal_id] = goal
        else:
            self._goals[goal_id] = goal
        self._fps[goal_id] = fp

    def _forget(self, goal_id: str) -> None:
        if self._index is not None:
            self._staged[goal_id] = None
        else:
            self._goals.pop(goal_id, None)
        self._fps.pop(goal_id, None)

    def _save(self) -> None:
        with collector_paused():
            if self._index is not None:
                entries = self._writer.entries_changing(self._staged, self._fps)
            else:
                entries = self._writer.entries(self._goals, self._fps)
        index = GoalIndex.model_construct(
            hint_inode=self._cursor.inode,
            hint_offset=self._cursor.offset,
            goals_dir_fp=self._dir_fp,
            verified_at=self._verified_at or utcnow(),
            shapes=self._writer.shapes,
            goals=entries,
        )
        try:
            ensure_dir(self.layout.projections_dir)
            # A cache: not fsynced; a lost or torn one is rebuilt from the goal files.
            atomic_write_model(self.layout.goal_index_file, index, durable=False, indent=None)
        except (LoopxError, OSError) as e:
            log.warning("goal_index_unwritable", error=str(e))

    # --- reading -------------------------------------------------------------------------------

    def registry(self) -> Registry:
        """Every goal as a :class:`Registry` view, sorted by id."""
        if self._view is None:
            settings = read_settings(self.layout)
            self._view = Registry.model_construct(
                common_runtime_root=settings.common_runtime_root,
                goals={g: self.goals[g] for g in sorted(self.goals)},
            )
        return self._view


def _report_unusable(path: Path, data: bytes, error: LoopxError) -> None:
    """Log why the index file is not used: a warning when damaged, a note when of another version."""
    try:
        version: int | None = _Versioned.model_validate_json(data).schema_version
    except ValidationError:
        version = None
    if version is not None and version != INDEX_VERSION:
        # Written by an older (or newer) LoopX: rebuilding it is routine, not a problem.
        log.info("goal_index_rebuilt", path=str(path), schema_version=version)
    else:
        log.warning("goal_index_unreadable", path=str(path), error=str(error))


# One catalog per root per process: a long-lived process keeps its memory.
_CATALOGS: dict[tuple[Path, Path], GoalCatalog] = {}


def goal_catalog(layout: Layout, *, persist: bool = True) -> GoalCatalog:
    """The catalog of ``layout``'s root, one per process."""
    key = (layout.root, layout.registry)
    catalog = _CATALOGS.get(key)
    if catalog is None:
        catalog = _CATALOGS[key] = GoalCatalog(layout, persist=persist)
    return catalog


def load_registry(layout: Layout, *, now: datetime | None = None) -> Registry:
    """Every registered goal (archived ones included), from the goal index kept current.

    Raises:
        NewerRootError: a newer LoopX wrote the registry.
        CorruptFileError: the registry settings are damaged.
    """
    catalog = goal_catalog(layout)
    catalog.refresh(now=now)
    return catalog.registry()


def own_workdirs(layout: Layout) -> list[tuple[str, str]]:
    """``(workdir, id)`` of every goal turning in its own workdir, from the goal index kept current.

    What :func:`loopx.turn.sharedworkdirs.shared_workdirs` compares a new goal with,
    without putting every goal together.

    Raises:
        NewerRootError: a newer LoopX wrote the registry.
        CorruptFileError: the registry settings are damaged.
    """
    catalog = goal_catalog(layout)
    catalog.refresh()
    return catalog.own_workdirs()


def init_registry(layout: Layout) -> tuple[bool, Registry]:
    """Create the registry's settings file if it is missing; idempotent.

    Returns:
        Whether this call created it, and the registry now.

    Raises:
        CorruptFileError: an existing registry is damaged.
        NewerRootError: a newer LoopX wrote it.

    """
    created = create_settings(layout.registry, layout.root)
    return created, load_registry(layout)


def drop_goal_index(layout: Layout) -> None:
    """Delete the index file and this process's copy; the next read rebuilds it."""
    with contextlib.suppress(FileNotFoundError):
        layout.goal_index_file.unlink()
    _CATALOGS.pop((layout.root, layout.registry), None)
