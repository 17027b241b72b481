"""The wanted agent count: ``supervisor.scale.json``, written by `loopx supervisor scale N`.

The running supervisor reads it when it gets SIGHUP (``systemctl reload``),
so a scale change survives the supervisor's restart only when the unit's
``--agents`` is changed too; the file is consulted on SIGHUP only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from loopx.errors import CorruptFileError
from loopx.fleet import ScaleRequest
from loopx.root import Layout
from loopx.storage.files import atomic_write_model, read_model_or_none

SCALE_FILE: Final = "supervisor.scale.json"


def scale_file(layout: Layout) -> Path:
    """Where the wanted count is kept."""
    return layout.root / SCALE_FILE


def read_scale(layout: Layout) -> int | None:
    """The wanted agent count, or None when none was requested (or the file is damaged)."""
    try:
        request = read_model_or_none(scale_file(layout), ScaleRequest)
    except CorruptFileError:
        return None
    return request.agents if request is not None else None


def write_scale(layout: Layout, request: ScaleRequest) -> None:
    """Record a wanted agent count (the supervisor applies it on SIGHUP)."""
    atomic_write_model(scale_file(layout), request)
