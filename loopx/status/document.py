r"""The bytes of ``loopx status --json``, assembled from one fragment per goal.

They are exactly ``json_bytes(projection, indent=2) + b"\n"`` (the tests hold
the two equal), built for less: at 10,000 goals the document is 10 MB and
serializing the projection whole was a tenth of a cold status (issue 14).

* The top-level fields are the projection's own serialization with an empty
  ``goals`` list; each goal is its view's indent-2 JSON moved right by four
  spaces (a JSON string never holds a raw newline, so every newline in a
  fragment starts a line), and the pieces are joined once.
* Most goals of a large root never ran, and their views share every field
  value object but ``goal_id`` (:func:`loopx.status.projection.project_unrun`
  builds them from one shared dict), with empty ``warnings`` and
  ``quarantined``. Views whose values are the same objects, in the same field
  order, serialize the same but for the id, so one fragment serves them all
  with each goal's id put in its place. Sharing is decided by object identity,
  never by equality: it cannot pair two views that would print differently
  (the values are immutable records and live as long as the projection).
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from typing import Final

from loopx.status.view import GoalStatusView, StatusProjection, json_bytes, serializer

_INDENT: Final = b"    "  # a goal's depth in the document: inside the object, inside goals
_NEWLINE: Final = b"\n" + _INDENT
_EMPTY_GOALS: Final = b"[]\n}"
_GOALS_TAIL: Final = b'"goals": ' + _EMPTY_GOALS
_ID_HEAD: Final = b'{\n  "goal_id": "'.replace(b"\n", _NEWLINE)  # a goal's start, moved right
_INDENTED_HEAD: Final = _INDENT + _ID_HEAD
# Ids the serializer prints as they are (no escape), one a line: every valid goal id is one.
_PLAIN_IDS: Final = re.compile("[A-Za-z0-9._-]+(?:\n[A-Za-z0-9._-]+)*")
_PER_GOAL: Final = frozenset({"goal_id", "warnings", "quarantined"})
_FIELDS: Final = list(GoalStatusView.model_fields)
_SHARED_FIELDS: Callable[[dict[str, object]], tuple[object, ...]] = operator.itemgetter(
    *(name for name in _FIELDS if name not in _PER_GOAL)
)


def _plain_model() -> bool:
    """Whether a view's JSON is its fields' JSON in order, nothing computed from them.

    A computed field or a custom serializer could print ``goal_id`` elsewhere
    or make another field depend on it: one fragment could then not serve two goals.
    """
    decorators = GoalStatusView.__pydantic_decorators__
    return (
        _FIELDS[0] == "goal_id"
        and not GoalStatusView.model_computed_fields
        and not decorators.field_serializers
        and not decorators.model_serializers
    )


_SHARE_FRAGMENTS: Final = _plain_model()


def status_bytes(projection: StatusProjection) -> bytes:
    r"""``json_bytes(projection, indent=2) + b"\n"``: what ``loopx status --json`` prints."""
    d = projection.__dict__
    goals = d.get("goals")
    if (
        type(projection) is not StatusProjection
        or next(reversed(d)) != "goals"
        or type(goals) is not list
        or any(type(v) is not GoalStatusView for v in goals)
    ):
        # Not the shape this assembly relies on (never so in LoopX): printed whole.
        return json_bytes(projection, indent=2) + b"\n"
    head = json_bytes(projection.model_copy(update={"goals": []}), indent=2)
    if not goals:
        return head + b"\n"
    if not head.endswith(_GOALS_TAIL):  # pragma: no cover - goals is the last field
        return json_bytes(projection, indent=2) + b"\n"
    pieces: list[bytes | memoryview] = [head[: -len(_EMPTY_GOALS)], b"[\n"]
    shared_ids = _goal_pieces(goals, pieces)
    if shared_ids and not _PLAIN_IDS.fullmatch("\n".join(shared_ids)):
        # An id the serializer would escape (no valid goal id is one): printed whole.
        return json_bytes(projection, indent=2) + b"\n"
    pieces[-1] = b"\n  ]\n}\n"  # the last goal's separator
    return b"".join(pieces)


def _goal_pieces(goals: list[GoalStatusView], pieces: list[bytes | memoryview]) -> list[str]:
    r"""Append each goal's fragment and a ``,\n`` to ``pieces``; returns the ids put in shared ones."""
    to_json = serializer(GoalStatusView).to_json
    # What follows the goal id in a shared fragment, by the identities of the shared values.
    shared: dict[tuple[int, ...], memoryview] = {}
    shared_ids: list[str] = []
    fields, shared_fields = _FIELDS, _SHARED_FIELDS
    extend, add_id = pieces.extend, shared_ids.append
    indented_head, head = _INDENTED_HEAD, _ID_HEAD
    for view in goals:
        d = view.__dict__
        key = None
        if (
            _SHARE_FRAGMENTS
            and d.get("last_turn") is None  # a goal that ran has its own values: not worth a key
            and list(d) == fields
            and d["warnings"] == []
            and d["quarantined"] == []
            and type(goal_id := d["goal_id"]) is str
        ):
            # The same value objects in the same field order: the same JSON but for the id.
            key = tuple(map(id, shared_fields(d)))
            rest = shared.get(key)
            if rest is not None:
                extend((indented_head, goal_id.encode(), rest, b",\n"))
                add_id(goal_id)
                continue
        fragment = to_json(view, indent=2).replace(b"\n", _NEWLINE)
        extend((_INDENT, fragment, b",\n"))
        if key is not None:
            start = head + goal_id.encode()
            if fragment.startswith(start):  # goal_id is the first field, printed as it is
                shared[key] = memoryview(fragment)[len(start) :]
    return shared_ids
