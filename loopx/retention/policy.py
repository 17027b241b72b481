"""``retention.json``: how much of each goal's past the root keeps, and how full it may get.

One file at the root: the root's policy and per-goal overrides of its keep
fields. A turn's full record (journal, run logs) is kept while it is one of
the goal's last ``keep_turns`` turns or ended less than ``keep_days`` ago; a
turn that failed or opened a gate is kept ``keep_failed_days``. Older records
are folded into the goal's checkpoint by ``loopx gc``. ``max_root_mb`` and
``min_free_disk_mb`` stop new turns before the disk fills.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Final, Literal

from pydantic import Field, ValidationError

from loopx.errors import UsageError
from loopx.ids import validate_goal_id
from loopx.model import Record
from loopx.root import Layout
from loopx.storage.files import atomic_write_model, read_model_or_none
from loopx.storage.locks import locked

RETENTION_FILE: Final = "retention.json"

# A goal turning every five minutes runs ~2,000 turns a week at about 9 KB of
# record each: the defaults keep a busy goal's year of records near 20 MB.
DEFAULT_KEEP_TURNS: Final = 200
DEFAULT_KEEP_DAYS: Final = 7.0
DEFAULT_KEEP_FAILED_DAYS: Final = 30.0
# Below this much free space on the root's filesystem no new turn starts (or below a tenth of
# the filesystem, if that is less): room for the turns in flight to commit and for the logs.
DEFAULT_MIN_FREE_DISK_MB: Final = 64

KeepTurns = Annotated[int, Field(ge=1, le=10_000_000)]
Days = Annotated[float, Field(ge=0, le=36_500)]


class KeepPolicy(Record):
    """Which turns keep their full record (the effective policy of one goal)."""

    keep_turns: KeepTurns = DEFAULT_KEEP_TURNS
    keep_days: Days = DEFAULT_KEEP_DAYS
    keep_failed_days: Days = DEFAULT_KEEP_FAILED_DAYS


class GoalOverride(Record):
    """A goal's own keep fields; None: the root's."""

    keep_turns: KeepTurns | None = None
    keep_days: Days | None = None
    keep_failed_days: Days | None = None


class RetentionSettings(Record):
    """``retention.json``: the root's retention policy and space limits."""

    schema_version: Literal[1] = 1
    keep: KeepPolicy = Field(default_factory=KeepPolicy)
    max_root_mb: Annotated[int, Field(ge=1)] | None = None  # no size quota by default
    # None: 64 MB, or a tenth of the filesystem if that is less (loopx.retention.space).
    min_free_disk_mb: Annotated[int, Field(ge=0)] | None = None
    goals: dict[str, GoalOverride] = Field(default_factory=dict)

    def for_goal(self, goal_id: str) -> KeepPolicy:
        """The keep policy of ``goal_id``: its overrides over the root's. Pure."""
        override = self.goals.get(goal_id)
        if override is None:
            return self.keep
        return self.keep.model_copy(update=override.model_dump(exclude_none=True))


class RetentionChange(Record):
    """What ``loopx retention set`` changes; None leaves a field as it is."""

    goal_id: str | None = None
    keep_turns: KeepTurns | None = None
    keep_days: Days | None = None
    keep_failed_days: Days | None = None
    max_root_mb: Annotated[int, Field(ge=0)] | None = None  # 0: no size quota
    min_free_disk_mb: Annotated[int, Field(ge=0)] | None = None


def retention_change(**fields: object) -> RetentionChange:
    """A checked :class:`RetentionChange` from the command's fields.

    Raises:
        UsageError: a field is out of range or of the wrong type.
    """
    try:
        return RetentionChange.model_validate(fields)
    except ValidationError as e:
        first = e.errors()[0]
        name = "--" + ".".join(str(p) for p in first["loc"]).replace("_", "-")
        raise UsageError(
            f"invalid value for {name}: {first['msg']} (got {first['input']!r})",
            hint="see `loopx retention set --help`",
        ) from e


def apply_change(settings: RetentionSettings, change: RetentionChange) -> RetentionSettings:
    """``settings`` with ``change`` applied. Pure.

    Raises:
        InvalidGoalIdError: ``change.goal_id`` is not a safe id.
    """
    keep = change.model_dump(include={"keep_turns", "keep_days", "keep_failed_days"})
    keep = {k: v for k, v in keep.items() if v is not None}
    update: dict[str, object] = {}
    if change.goal_id is not None:
        goal_id = validate_goal_id(change.goal_id)
        current = settings.goals.get(goal_id, GoalOverride())
        update["goals"] = {**settings.goals, goal_id: current.model_copy(update=keep)}
    elif keep:
        update["keep"] = settings.keep.model_copy(update=keep)
    if change.max_root_mb is not None:
        update["max_root_mb"] = change.max_root_mb or None
    if change.min_free_disk_mb is not None:
        update["min_free_disk_mb"] = change.min_free_disk_mb
    return RetentionSettings.model_validate({**settings.model_dump(), **_dumped(update)})


def _dumped(update: dict[str, object]) -> dict[str, object]:
    out: dict[str, object] = {}
    for key, value in update.items():
        if isinstance(value, Record):
            out[key] = value.model_dump()
        elif isinstance(value, dict):
            out[key] = {k: v.model_dump() for k, v in value.items()}
        else:
            out[key] = value
    return out


def retention_file(layout: Layout) -> str:
    """The path of ``retention.json`` (as a string, for messages)."""
    return str(layout.root / RETENTION_FILE)


def load_settings(layout: Layout) -> RetentionSettings:
    """The root's retention settings; the defaults when the file is absent.

    Raises:
        CorruptFileError: the file is not valid JSON or not the schema.
    """
    return read_model_or_none(layout.root / RETENTION_FILE, RetentionSettings) or (
        RetentionSettings()
    )


def update_settings(
    layout: Layout, change: Callable[[RetentionSettings], RetentionSettings]
) -> RetentionSettings:
    """Read-modify-write ``retention.json`` under its lock; returns the new settings."""
    path = layout.root / RETENTION_FILE
    with locked(path):
        new = change(load_settings(layout))
        atomic_write_model(path, new)
    return new


__all__ = [
    "DEFAULT_KEEP_DAYS",
    "DEFAULT_KEEP_FAILED_DAYS",
    "DEFAULT_KEEP_TURNS",
    "DEFAULT_MIN_FREE_DISK_MB",
    "GoalOverride",
    "KeepPolicy",
    "RetentionChange",
    "RetentionSettings",
    "apply_change",
    "load_settings",
    "retention_change",
    "update_settings",
]
