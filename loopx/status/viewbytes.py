"""Goal views as the bytes of the status document: serialized in one call, and shared.

A never-ran goal's view differs from its neighbours' only in its id, so the bytes of one
serve every such view with the id put in (``_after_id``).
"""

from __future__ import annotations

import functools
import json
import operator
from collections.abc import Callable, Sequence
from typing import Final

from pydantic import TypeAdapter
from pydantic_core import SchemaSerializer

from loopx.errors import LoopxError
from loopx.status.view import GoalStatusView, serializer

_EMPTY_GOALS: Final = b"[]\n}"  # how a document without goals ends
_GOAL_START: Final = b"    {\n"
_BETWEEN: Final = b",\n" + _GOAL_START  # between two goals of the document: nothing deeper


def view_bytes(views: list[GoalStatusView]) -> list[bytes]:
    r"""Each view as it stands in ``loopx status --json``: indent 2, moved right by four spaces.

    Views that hold the very same value objects but their goal id (goals that
    never ran, of one policy: :func:`loopx.status.projection.project_unrun`
    builds them from one set of values) are serialized once and the others'
    bytes made from it: at 10,000 such goals that was most of a cold status's
    serialization. The rest are serialized in one call as a list, then cut
    between the goals: a JSON string never holds a raw newline, so
    ``},\n    {`` at the start of a line, four spaces in, is only ever
    between two goals.
    """
    first_of: dict[tuple[int, ...], int] = {}
    alike: list[tuple[int, int]] = []  # (a view, the first view holding its values)
    for at, view in enumerate(views):
        fields = view.__dict__
        # Ids are only compared while the views (and so their values) live: none is reused.
        # A view with warnings or quarantined journals holds lists of its own: keyed alone.
        key = (
            (-1, at)
            if fields["warnings"] or fields["quarantined"]
            else tuple(map(id, _ALL_BUT_ID(fields)))
        )
        first = first_of.setdefault(key, at)
        if first != at:
            alike.append((at, first))
    distinct = list(first_of.values())
    out = dict(zip(distinct, _serialized([views[i] for i in distinct]), strict=True))
    tails: dict[int, bytes] = {}
    for at, first in alike:
        tail = tails.get(first)
        if tail is None:
            tail = tails[first] = _after_id(out[first], views[first].goal_id)
        out[at] = _ID_AT + _json_id(views[at].goal_id) + tail
    return [out[at] for at in range(len(views))]


# A view's values but its goal id and its two lists (empty where this is used: they print []).
_ALL_BUT_ID: Final = operator.itemgetter(
    *(n for n in GoalStatusView.model_fields if n not in {"goal_id", "warnings", "quarantined"})
)


_ID_AT: Final = b'    {\n      "goal_id": '  # a view's bytes begin so, its id next


def _json_id(goal_id: str) -> bytes:
    """``goal_id`` as a JSON string (a valid id has nothing to escape)."""
    if goal_id.isprintable() and '"' not in goal_id and "\\" not in goal_id:
        return b'"' + goal_id.encode() + b'"'
    return json.dumps(goal_id, ensure_ascii=False).encode()  # pragma: no cover - ids are checked


def _after_id(piece: bytes, goal_id: str) -> bytes:
    """What follows the goal id in ``piece``, the view of ``goal_id``."""
    head = _ID_AT + _json_id(goal_id)
    if not piece.startswith(head):  # pragma: no cover - a view's first field is its id
        msg = f"status cache: the view of {goal_id!r} does not begin with its id"
        raise LoopxError(msg)
    return piece[len(head) :]


def _serialized(views: list[GoalStatusView]) -> list[bytes]:
    """Each of ``views`` serialized in one call (see :func:`view_bytes`)."""
    if not views:
        return []
    blob = _list_serializer().to_json(views, indent=2).replace(b"\n", b"\n  ")
    inner = blob[len(b"[\n") : -len(b"\n  ]")]  # "    {" ... "    }"
    parts = inner.split(_BETWEEN)
    if len(parts) != len(views):  # pragma: no cover - see view_bytes
        to_json = serializer(GoalStatusView).to_json
        return [b"    " + to_json(v, indent=2).replace(b"\n", b"\n    ") for v in views]
    return [parts[0], *(_GOAL_START + p for p in parts[1:])]


@functools.cache
def _list_serializer() -> SchemaSerializer:
    adapter = TypeAdapter(list[GoalStatusView])
    adapter.rebuild(_types_namespace={})  # built here, as loopx.status.view.serializer does
    return adapter.serializer


def document_bytes(
    head: bytes, views: Sequence[GoalStatusView], known: Callable[[GoalStatusView], bytes | None]
) -> bytes:
    """The status document: ``head`` (its goals empty), then each view's bytes, in order.

    ``known`` gives the bytes a view has stored already; the rest are serialized here, in
    one call.
    """
    pieces: list[bytes] = []
    missing: list[int] = []
    for view in views:
        piece = known(view)
        if piece is None:
            missing.append(len(pieces))
            piece = b""
        pieces.append(piece)
    for at, piece in zip(missing, view_bytes([views[i] for i in missing]), strict=True):
        pieces[at] = piece
    return head[: -len(_EMPTY_GOALS)] + b"[\n" + b",\n".join(pieces) + b"\n  ]\n}\n"
