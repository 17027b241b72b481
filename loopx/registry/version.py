"""A registry file's ``schema_version``, read before anything else of it: whether to migrate."""

from __future__ import annotations

import json
from pathlib import Path

from loopx.errors import CorruptFileError
from loopx.storage.files import read_bytes


def registry_version(path: Path) -> int | None:
    """The ``schema_version`` of a registry file, or None when it does not exist.

    Raises:
        CorruptFileError: not JSON, or no integer ``schema_version``.
    """
    try:
        data = read_bytes(path)
    except FileNotFoundError:
        return None
    try:
        document = json.loads(data)
    except ValueError as e:
        raise CorruptFileError(path, f"not valid JSON: {e}") from e
    if not isinstance(document, dict):
        raise CorruptFileError(path, "not a JSON object")
    version = document.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise CorruptFileError(path, f"schema_version: expected an integer, got {version!r}")
    return version
