"""``projections/goals.json``: the goal index's file, one compact entry per goal.

Most goals share most of their policy (host, quota, resources, attempts),
so the file stores each distinct combination of those once, as a *shape*,
and each goal as an ``IndexEntry`` array: its goal file's fingerprint, its
shape's number and the fields goals rarely share (objective, workdir,
priority, status, probe, timestamps). At 10,000 goals that is ~130 bytes a
goal instead of ~700, and loading it validates the shapes once rather than
every goal's host and quota (a cold ``status`` loads this file).

The entries are validated by pydantic as the file is parsed, and what
pydantic leaves (shape numbers, timestamps) when it is read
(:func:`fingerprints_of`). Each goal is put together from its shape and its
entry without validating again (:func:`built_goals`), only when a reader asks
for the goals: ``goal add`` reads the workdirs in use straight from the
entries (:func:`own_workdirs_of`). What it hands out equals what validating
the goal file gives.
"""

from __future__ import annotations

import functools
import operator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Final, Literal

from pydantic import Field

from loopx.errors import CorruptFileError
from loopx.ids import GOAL_ID_RULE
from loopx.model import Record, UtcDatetime
from loopx.registry.goalrecords import Goal, GoalStatus

if TYPE_CHECKING:
    from collections.abc import Container, Mapping
    from pathlib import Path

    from pydantic import TypeAdapter

Fingerprint = tuple[int, int, int]  # (inode, mtime_ns, size) of a goal file
ABSENT: Final[Fingerprint] = (0, 0, -1)
VERSION: Final = 2  # 2: compact entries and shared shapes (1: a whole Goal per goal)

# The Goal fields an entry holds; every other one (host, quota, ...) comes from its shape.
ENTRY_FIELDS: Final = frozenset(
    {"id", "objective", "workdir", "priority", "status", "next_probe", "created_at", "updated_at"}
)
SHAPE_FIELDS: Final = tuple(name for name in Goal.model_fields if name not in ENTRY_FIELDS)
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
# What a shape holds in the fields its goals' entries give: it is a valid Goal of no one.
_PLACEHOLDERS: Final = {
    "id": "shape",
    "objective": "shape",
    "workdir": "/",
    "priority": 0,
    "status": GoalStatus.ACTIVE,
    "next_probe": None,
    "created_at": _EPOCH,
    "updated_at": _EPOCH,
}

GoalId = Annotated[str, Field(pattern=f"^{GOAL_ID_RULE}$")]


# One goal in the index: a JSON array of its goal file's fingerprint, its shape's number and
# its own fields. A plain tuple, not a NamedTuple: pydantic builds it without calling Python,
# a third of the file's parse time at 10,000 goals.
IndexEntry = tuple[
    Annotated[int, Field(description="the goal file's inode")],
    Annotated[int, Field(description="the goal file's mtime_ns")],
    Annotated[int, Field(description="the goal file's size")],
    Annotated[int, Field(ge=0, description="the goal's shape: an index into shapes")],
    Annotated[str, Field(min_length=1, max_length=20_000, description="objective")],
    Annotated[str, Field(pattern="^/", description="workdir (absolute, as Goal requires)")],
    Annotated[str, Field(description="created_at, ISO 8601 with a zone")],
    Annotated[str | None, Field(description="updated_at; null: the same as created_at")],
    Annotated[int, Field(description="priority")],
    Annotated[GoalStatus, Field(description="status")],
    Annotated[str | None, Field(description="next_probe")],
]
_SHAPE: Final = 3  # the position of an entry's shape number
_shape_parts: Final = operator.itemgetter(*SHAPE_FIELDS)  # a goal's __dict__ -> its shape fields


class GoalIndex(Record):
    """``projections/goals.json``: the derived index of every goal's policy."""

    schema_version: Literal[2] = VERSION
    hint_inode: int = 0
    hint_offset: int = 0
    goals_dir_fp: tuple[int, int, int] = ABSENT  # (inode, mtime_ns, size) of goals/
    verified_at: UtcDatetime  # when every goal file was last checked
    # The policy parts entries share: each a Goal whose entry fields are placeholders.
    shapes: list[Goal] = Field(default_factory=list)
    goals: dict[GoalId, IndexEntry] = Field(default_factory=dict)


def fingerprints_of(index: GoalIndex, path: Path) -> dict[str, Fingerprint]:
    """Every goal file's fingerprint, by id, once the entries :func:`built_goals` reads are sound.

    Raises:
        CorruptFileError: an entry names a shape the index lacks, or a timestamp
            is not ISO 8601 with a zone.
    """
    shapes = len(index.shapes)
    fps: dict[str, Fingerprint] = {}
    for goal_id, entry in index.goals.items():
        if entry[_SHAPE] >= shapes:
            detail = (
                f"goal {goal_id!r}: shape {entry[_SHAPE]} is not in the index ({shapes} shapes)"
            )
            raise CorruptFileError(path, detail)
        try:
            _utc(entry[6])
            if entry[7] is not None:
                _utc(entry[7])
        except ValueError as e:
            raise CorruptFileError(path, f"goal {goal_id!r}: {e}") from e
        fps[goal_id] = entry[:3]
    return fps


def built_goals(index: GoalIndex) -> dict[str, Goal]:
    """Every goal of an index :func:`fingerprints_of` checked, put together from shape and entry."""
    shapes = [shape.__dict__ for shape in index.shapes]
    goals: dict[str, Goal] = {}
    for goal_id, entry in index.goals.items():
        _, _, _, shape, objective, workdir, created, updated, priority, status, probe = entry
        values = shapes[shape].copy()  # in field order, as validation leaves them
        created_at = _utc(created)
        values["id"] = goal_id
        values["objective"] = objective
        values["workdir"] = workdir
        values["priority"] = priority
        values["status"] = status
        values["next_probe"] = probe
        values["created_at"] = created_at
        values["updated_at"] = created_at if updated is None else _utc(updated)
        goals[goal_id] = _validated_goal(values)
    return goals


def own_workdirs_of(index: GoalIndex, skip: Container[str]) -> list[tuple[str, str]]:
    """``(workdir, id)`` of each goal but ``skip`` that turns in its own workdir, built from no goal.

    Its own workdir: not archived, and no worktree (:func:`loopx.turn.sharedworkdirs.has_worktree`).
    """
    archived = GoalStatus.ARCHIVED
    own = [shape.worktree is None for shape in index.shapes]
    return [
        (entry[5], goal_id)
        for goal_id, entry in index.goals.items()
        if own[entry[_SHAPE]] and entry[9] is not archived and goal_id not in skip
    ]


def _utc(text: str) -> datetime:
    """An index timestamp as the goal's ``UtcDatetime`` field holds it."""
    at = datetime.fromisoformat(text)
    if at.tzinfo is UTC:
        return at
    if at.tzinfo is None:
        msg = f"timestamp {text!r} has no timezone"
        raise ValueError(msg)
    return at.astimezone(UTC)


# Every field counts as set, as in a goal validated from its file. One set serves every goal:
# a frozen model never adds to its own, and model_copy adds to a copy (41 ms instead of
# 17 ms for 10,000 goals with a set each).
_ALL_SET: Final = set(Goal.model_fields)
_new = object.__new__
_set = object.__setattr__


def _validated_goal(values: dict[str, object]) -> Goal:
    """A Goal of ``values`` (every field, each already validated), as ``model_construct`` makes it.

    Without its per-field loop: 17 ms instead of 69 ms for 10,000 goals.
    """
    goal: Goal = _new(Goal)
    _set(goal, "__dict__", values)
    _set(goal, "__pydantic_fields_set__", _ALL_SET)
    _set(goal, "__pydantic_extra__", None)
    _set(goal, "__pydantic_private__", None)
    return goal


@dataclass(slots=True)
class IndexWriter:
    """Turns goals into index entries, keeping each unchanged goal's entry from the last time.

    A process that loaded the index and changed a few goals writes it again
    at the cost of those few (formatting two timestamps costs more than the
    rest of an entry).
    """

    shapes: list[Goal] = field(default_factory=list)
    _numbers: dict[str, int] = field(default_factory=dict)  # a shape's JSON -> its number
    # The goals the last entries were made from (or read with), and those entries.
    _goals: dict[str, Goal] = field(default_factory=dict)
    _entries: dict[str, IndexEntry] = field(default_factory=dict)

    @classmethod
    def of(cls, index: GoalIndex, goals: Mapping[str, Goal] | None = None) -> IndexWriter:
        """The writer of an index just read, with the goals :func:`built_goals` made of it, if any."""
        writer = cls(list(index.shapes))
        for number, shape in enumerate(writer.shapes):
            writer._numbers.setdefault(_shape_key(shape), number)
        writer._goals, writer._entries = dict(goals or {}), index.goals
        return writer

    def entries(
        self, goals: Mapping[str, Goal], fps: Mapping[str, Fingerprint]
    ) -> dict[str, IndexEntry]:
        """The entry of every goal of ``goals`` (ids as in ``fps``), sharing :attr:`shapes`."""
        known, known_goals = self._entries, self._goals
        out: dict[str, IndexEntry] = {}
        fresh: list[str] = []
        for goal_id, goal in goals.items():
            hit = known.get(goal_id)
            if hit is not None and known_goals.get(goal_id) is goal and hit[:3] == fps[goal_id]:
                out[goal_id] = hit
            else:
                fresh.append(goal_id)
        if fresh:
            made = self._entries_of(goals, fps, fresh)
            out = {g: out[g] if g in out else made[g] for g in goals}
        if len({entry[_SHAPE] for entry in out.values()}) < len(self.shapes):
            out = self._drop_unused(out)
        self._goals, self._entries = dict(goals), out
        return out

    def entries_changing(
        self, changed: Mapping[str, Goal | None], fps: Mapping[str, Fingerprint]
    ) -> dict[str, IndexEntry]:
        """The last entries, with those of ``changed`` made again (``None``: the goal is gone).

        For a catalog that has not built its goals: the others' entries are kept as they are.
        """
        live = {g: goal for g, goal in changed.items() if goal is not None}
        made = self._entries_of(live, fps, list(live))
        out = {g: e for g, e in self._entries.items() if changed.get(g, e) is not None}
        out |= made
        if len({entry[_SHAPE] for entry in out.values()}) < len(self.shapes):
            out = self._drop_unused(out)
        self._goals = {g: goal for g, goal in self._goals.items() if g not in changed} | live
        self._entries = out
        return out

    def _entries_of(
        self, goals: Mapping[str, Goal], fps: Mapping[str, Fingerprint], ids: list[str]
    ) -> dict[str, IndexEntry]:
        # Goals read from one index share their shape's objects: one dict lookup finds the
        # shape. The ids stay valid while this call runs, since every goal is referenced.
        by_parts: dict[tuple[int, ...], int] = {}
        stamps = iter(_iso([t for g in ids for t in (goals[g].created_at, goals[g].updated_at)]))
        made: dict[str, IndexEntry] = {}
        for goal_id in ids:
            goal = goals[goal_id]
            parts = tuple(map(id, _shape_parts(goal.__dict__)))
            shape = by_parts.get(parts)
            if shape is None:
                shape = by_parts[parts] = self._shape_number(goal)
            created, updated = next(stamps), next(stamps)
            made[goal_id] = (
                *fps[goal_id],
                shape,
                goal.objective,
                goal.workdir,
                created,
                None if updated == created else updated,
                goal.priority,
                goal.status,
                goal.next_probe,
            )
        return made

    def _shape_number(self, goal: Goal) -> int:
        key = _shape_key(goal)
        number = self._numbers.get(key)
        if number is None:
            number = self._numbers[key] = len(self.shapes)
            self.shapes.append(goal.model_copy(update=_PLACEHOLDERS))
        return number

    def _drop_unused(self, entries: dict[str, IndexEntry]) -> dict[str, IndexEntry]:
        """Renumber the shapes some entry still uses, forgetting the others."""
        used = sorted({entry[_SHAPE] for entry in entries.values()})
        renumber = {old: new for new, old in enumerate(used)}
        self.shapes = [self.shapes[old] for old in used]
        self._numbers = {_shape_key(shape): number for number, shape in enumerate(self.shapes)}
        return {g: _with_shape(e, renumber[e[_SHAPE]]) for g, e in entries.items()}


def _with_shape(entry: IndexEntry, shape: int) -> IndexEntry:
    return entry[:3] + (shape,) + entry[4:]  # noqa: RUF005 - mypy types this, not a star unpacking


def _shape_key(goal: Goal) -> str:
    """What makes two goals' shapes the same: their shape fields, as JSON."""
    return goal.model_dump_json(include=set(SHAPE_FIELDS))


@functools.cache
def _timestamps() -> TypeAdapter[list[datetime]]:
    from pydantic import TypeAdapter  # noqa: PLC0415 - 5 ms of imports, for a save of new goals only

    return TypeAdapter(list[datetime])


def _iso(times: list[datetime]) -> list[str]:
    """``times`` as ISO 8601 (``Z`` for UTC), formatted by pydantic: 4x faster than isoformat()."""
    iso: list[str] = _timestamps().dump_python(times, mode="json")
    return iso
