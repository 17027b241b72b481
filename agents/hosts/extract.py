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

from loopx.failures import FailureReason, TurnFailure
from loopx.files import describe_validation_error
from loopx.protocol import HostResult

# Each failed decode attempt may scan far; bound them so a pathological
# message costs milliseconds, not minutes. The result comes last, so the
# attempts go to the last braces of the text.
MAX_DECODE_ATTEMPTS: Final = 2000
_FENCE = re.compile(r"```[ \t]*(?:json|JSON)?[ \t]*\n(.*?)```", re.DOTALL)


def _top_level_objects(text: str) -> list[dict[str, Any]]:
    decoder = json.JSONDecoder()
    found: list[dict[str, Any]] = []
    braces = [m.start() for m in re.finditer(r"\{", text)]
    index = braces[-MAX_DECODE_ATTEMPTS] if len(braces) > MAX_DECODE_ATTEMPTS else text.find("{")
    attempts = 0
    while index != -1 and attempts < MAX_DECODE_ATTEMPTS:
        attempts += 1
        try:
            value, end = decoder.raw_decode(text, index)
        except ValueError:
            index = text.find("{", index + 1)
            continue
        if isinstance(value, dict):
            found.append(value)
        index = text.find("{", end)
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
