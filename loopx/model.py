"""The base of every record LoopX stores or sends: frozen, strict about extra keys."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import UnionType
from typing import Annotated, Any, Literal, TypeVar, Union, get_args, get_origin

from pydantic import AfterValidator, BaseModel, ConfigDict


def as_utc(value: datetime) -> datetime:
    """``value`` as a :data:`UtcDatetime` field holds it (for records built without validation).

    Raises:
        ValueError: ``value`` is naive.
    """
    if value.tzinfo is UTC:  # already normalised: most values are, and this runs per field
        return value
    if value.tzinfo is None:
        msg = "timestamp must carry a timezone (UTC)"
        raise ValueError(msg)
    return value.astimezone(UTC)


UtcDatetime = Annotated[datetime, AfterValidator(as_utc)]
"""A timezone-aware timestamp, normalised to UTC."""


# One set of field names per distinct set, shared by every record that set those fields.
_FIELDS_SETS: dict[frozenset[str], set[str]] = {}


def shared_fields_set(fields: set[str]) -> set[str]:
    """The one set equal to ``fields`` that records share (``fields`` itself the first time).

    Pydantic keeps a set of the fields given per instance; for a long-lived
    process holding 100,000 goals' cached views that was 43% of its memory.
    A frozen record never adds to its own set and ``model_copy``
    adds to a copy, so one set serves them all.
    """
    return _FIELDS_SETS.setdefault(frozenset(fields), fields)


class Record(BaseModel):
    """A frozen pydantic model that rejects unknown keys.

    Every file kind subclasses this and adds ``schema_version: Literal[N] = N``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", validate_default=True, defer_build=True)

    def model_post_init(self, context: Any, /) -> None:  # noqa: ANN401 - pydantic's signature
        """Share the set of fields given with every record that was given the same ones."""
        del context
        object.__setattr__(
            self, "__pydantic_fields_set__", shared_fields_set(self.__pydantic_fields_set__)
        )


_M = TypeVar("_M", bound=BaseModel)
_EVERY_FIELD: dict[type[BaseModel], set[str]] = {}  # trusted's fields set of each class
_new = object.__new__
_set = object.__setattr__


def trusted(cls: type[_M], fields: dict[str, Any]) -> _M:
    """An instance of ``cls`` holding ``fields`` as given, without validating them again.

    For records assembled in bulk from values that are validated already (a
    cold status builds one view and one cache entry per goal, and validation
    was most of their cost). ``fields`` names every field of ``cls`` once, each
    with a value of its type; tests compare such records with validated twins.
    """
    record = _new(cls)
    _set(record, "__dict__", fields)
    every = _EVERY_FIELD.get(cls)
    if every is None:
        every = _EVERY_FIELD[cls] = shared_fields_set(set(cls.model_fields))
    # Every field given, as the contract says: the class's one set (a set per call cost 3 us).
    _set(
        record,
        "__pydantic_fields_set__",
        every if len(fields) == len(every) else shared_fields_set(set(fields)),
    )
    _set(record, "__pydantic_extra__", None)
    _set(record, "__pydantic_private__", None)
    return record


# How far this process's clock runs ahead of the filesystem's, once measured
# (loopx.clock.calibrate); zero until then and within the tolerance.
_clock_offset = timedelta(0)


def utcnow() -> datetime:
    """The current time in UTC; pass it down instead of calling the clock deep inside.

    Corrected by the offset :func:`loopx.clock.calibrate` measured, so a
    process whose clock is wrong dates what it writes like the others do.
    """
    return datetime.now(UTC) - _clock_offset


def current_offset() -> timedelta:
    """The correction :func:`utcnow` applies now."""
    return _clock_offset


def set_clock_offset(offset: timedelta) -> None:
    """Set the correction :func:`utcnow` applies (only :mod:`loopx.clock` calls this)."""
    global _clock_offset  # noqa: PLW0603 - one clock per process by design
    _clock_offset = offset


def iso_utc(at: datetime, timespec: str = "auto") -> str:
    """``at`` as ISO 8601 in UTC with a ``Z``, the form every JSON document uses.

    Text outputs use it too, so one run never mixes ``Z`` and ``+00:00``.
    """
    return at.astimezone(UTC).isoformat(timespec=timespec).replace("+00:00", "Z")


def model_shape(model: type[BaseModel]) -> str:
    """Every field of ``model`` and of the models nested in it, with its type, as one text. Pure.

    Two models store and read the same JSON when their shapes are equal; a cache
    of a model's bytes keys on it, so a new field rebuilds the cache by itself.
    The text is the same in every process (no addresses, no validators).
    """
    seen: set[type[BaseModel]] = set()
    lines: list[str] = []

    def walk(model: type[BaseModel]) -> None:
        seen.add(model)
        for name, field in model.model_fields.items():
            lines.append(f"{model.__qualname__}.{name}: {type_text(field.annotation)}")
        for field in model.model_fields.values():
            for nested in _models_in(field.annotation):
                if nested not in seen:
                    walk(nested)

    walk(model)
    return "\n".join(lines)


def type_text(annotation: object) -> str:
    """A type as stable text: classes by name, generics with their arguments, validators left out. Pure."""
    origin, arguments = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        return type_text(arguments[0])
    if origin is Literal:
        return f"Literal{list(arguments)!r}"
    if origin is not None:
        name = (
            "Union"
            if origin in (Union, UnionType)
            else getattr(origin, "__qualname__", str(origin))
        )
        return f"{name}[{', '.join(type_text(a) for a in arguments)}]"
    return getattr(annotation, "__qualname__", repr(annotation))


def _models_in(annotation: object) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for argument in get_args(annotation) for m in _models_in(argument)]
