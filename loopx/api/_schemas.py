"""Every document `loopx schema` names: the kernel's kinds and the web front end's, joined here.

The kernel lists its own (:mod:`loopx.schemas`) and never imports the web;
the web lists its own (:mod:`loopx.web.schemalist`); the API, the
composition root, is the one place that sees both.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from loopx import schemas
from loopx.web import schemalist

# Files under a runtime root, and what commands print with --json and `loopx serve` replies.
FILES: dict[str, type[BaseModel]] = schemas.FILES | schemalist.FILES
OUTPUTS: dict[str, type[BaseModel]] = schemas.OUTPUTS | schemalist.OUTPUTS
SCHEMAS: dict[str, type[BaseModel]] = FILES | OUTPUTS


def schema_names() -> list[str]:
    """Every name `loopx schema NAME` knows, sorted."""
    return sorted(SCHEMAS)


def json_schema(name: str) -> dict[str, Any]:
    """The JSON Schema of the document named ``name``.

    Raises:
        UsageError: unknown name (the hint lists the known ones).
    """
    return schemas.schema_model(name, SCHEMAS).model_json_schema()
