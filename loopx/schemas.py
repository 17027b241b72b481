"""The file kinds whose JSON Schema `loopx schema NAME` prints."""

from __future__ import annotations

from pydantic import BaseModel

from loopx.errors import UsageError
from loopx.registry import Registry
from loopx.state import GoalState

SCHEMAS: dict[str, type[BaseModel]] = {
    "registry": Registry,
    "state": GoalState,
}


def schema_model(name: str) -> type[BaseModel]:
    """The model behind schema ``name``.

    Raises:
        UsageError: unknown name.
    """
    try:
        return SCHEMAS[name]
    except KeyError:
        raise UsageError(
            f"unknown schema {name!r}", hint=f"choose one of: {', '.join(sorted(SCHEMAS))}"
        ) from None
