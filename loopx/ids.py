"""Goal ids: single safe path segments, checked before any path is built."""

from __future__ import annotations

import re

from loopx.errors import InvalidGoalIdError

TYPE_CHECKING = False  # not `typing`: a warm `quota should-run` must not pay for its import
if TYPE_CHECKING:
    from typing import Final

GOAL_ID_RULE: Final = "[A-Za-z0-9][A-Za-z0-9._-]{0,63}"
_GOAL_ID: Final = re.compile(GOAL_ID_RULE)
_MAX_LEN: Final = 64


def validate_goal_id(goal_id: str) -> str:
    """Return ``goal_id`` if it is a safe path segment.

    Raises:
        InvalidGoalIdError: the id is empty, too long, has a path separator,
            a control character, or is ``.``/``..``.
    """
    if not isinstance(goal_id, str):
        raise InvalidGoalIdError(repr(goal_id), "not a string", rule=GOAL_ID_RULE)
    # The rule alone admits only safe ids (it starts alphanumeric, so never '.' or '..'):
    # one match on the common path, which runs for every goal path built.
    if _GOAL_ID.fullmatch(goal_id) is not None:
        return goal_id
    if goal_id == "":
        problem = "empty"
    elif goal_id in {".", ".."}:
        problem = "'.' and '..' are not goal ids"
    elif len(goal_id) > _MAX_LEN:
        problem = f"{len(goal_id)} characters, at most {_MAX_LEN}"
    elif "/" in goal_id or "\\" in goal_id:
        problem = "contains a path separator"
    elif any(ord(c) < 0x20 or ord(c) == 0x7F for c in goal_id):  # noqa: PLR2004 - ASCII control range
        problem = "contains a control character"
    else:
        problem = "contains a character outside [A-Za-z0-9._-] or does not start alphanumeric"
    raise InvalidGoalIdError(goal_id, problem, rule=GOAL_ID_RULE)


def is_valid_goal_id(goal_id: str) -> bool:
    """Whether ``goal_id`` passes :func:`validate_goal_id`.

    The rule alone decides it (it allows no separator, control character, ``.``
    or ``..``, nor more than 64 characters): one regex match, since scans call
    this for every goal directory.
    """
    return isinstance(goal_id, str) and _GOAL_ID.fullmatch(goal_id) is not None
