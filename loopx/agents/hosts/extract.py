"""Find the result JSON object in an agent's final message.

Agents do not always answer with bare JSON: they wrap it in a ```json fence,
or put a sentence before it. The object LoopX wants is the last top-level
JSON object in the text that looks like a result (has a ``kind``), else the
last top-level object at all.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

from pydantic import ValidationError

from loopx.storage.files import describe_validation_error
from loopx.turn.failures import FailureReason, TurnFailure
from loopx.turn.protocol import HostResult

# Only a brace followed by a quote or a closing brace can open a JSON object;
# the attempts go to the last such braces (the result comes last), each on a
# bounded slice: a failed decode costs time proportional to its position
# (JSONDecodeError counts lines), so a pathological message stays cheap.
MAX_DECODE_ATTEMPTS: Final = 200
MAX_OBJECT_CHARS: Final = 256 * 1024  # a larger result is refused anyway
_OPENING = re.compile(r"\{\s*[\"}]")
_FENCE = re.compile(r"```[ \t]*(?:json|JSON)?[ \t]*\n(.*?)```", re.DOTALL)


def _top_level_objects(text: str) -> list[dict[str, Any]]:
    decoder = json.JSONDecoder()
    found: list[dict[str, Any]] = []
    starts = [m.start() for m in _OPENING.finditer(text)][-MAX_DECODE_ATTEMPTS:]
    covered = -1  # objects inside an object already found are not top level
    for start in starts:
        if start < covered:
            continue
        try:
            value, length = decoder.raw_decode(text[start : start + MAX_OBJECT_CHARS])
        except ValueError:
            continue
        if isinstance(value, dict):
            found.append(value)
            covered = start + length
    return found


def find_json_object(text: str) -> dict[str, Any] | None:
    """The result-like JSON object in ``text``, or None. Pure.

    Order of preference: the whole text is an object; the last fenced block
    that is an object; the last top-level object with a ``kind`` key; the
    last top-level object.
    """
    stripped = text.strip()
    try:
        whole = json.loads(stripped)
    except ValueError:
        whole = None
    if isinstance(whole, dict):
        return whole
    for block in reversed(_FENCE.findall(text)):
        try:
            fenced = json.loads(block)
        except ValueError:
            continue
        if isinstance(fenced, dict):
            return fenced
    objects = _top_level_objects(text)
    with_kind = [o for o in objects if "kind" in o]
    if with_kind:
        return with_kind[-1]
    return objects[-1] if objects else None


def parse_result(text: str, *, source: str) -> HostResult | TurnFailure:
    """The :class:`HostResult` in an agent's message, or why there is none. Pure.

    A top-level ``null`` is dropped before validation: every nullable field
    defaults to None and agents often spell "not given" as null.

    Args:
        text: the agent's final message.
        source: where the text came from, for the failure message.

    """
    obj = find_json_object(text)
    if obj is None:
        excerpt = text.strip()[:200] or "(empty)"
        return TurnFailure.of(
            FailureReason.INVALID_RESULT,
            f"{source} holds no JSON object; it begins: {excerpt!r}",
        )
    try:
        return HostResult.model_validate({k: v for k, v in obj.items() if v is not None})
    except ValidationError as e:
        return TurnFailure.of(
            FailureReason.INVALID_RESULT,
            f"{source} is not a valid result: {describe_validation_error(e)}",
        )
