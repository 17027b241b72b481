"""A root moved away under a running LoopX is never recreated at its old path."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from loopx.errors import RootMovedError
from loopx.storage.dirs import ensure_dir
from tests.turnkit import make_root


def test_ensure_dir_does_not_recreate_a_moved_root(tmp_path: Path) -> None:
    """Given an opened root renamed away, making goals/<id>/results under it is refused."""
    layout = make_root(tmp_path / "root")
    os.rename(layout.root, tmp_path / "moved")
    with pytest.raises(RootMovedError, match="gone from its path"):
        ensure_dir(layout.root / "goals" / "g" / "results")
    assert not layout.root.exists()
    os.rename(tmp_path / "moved", layout.root)  # moving it back is not blocked
    assert (layout.root / "registry.json").exists()


def test_ensure_dir_does_not_recreate_a_directory_above_a_root(tmp_path: Path) -> None:
    """A moved parent of the root is not recreated either."""
    layout = make_root(tmp_path / "parent" / "root")
    os.rename(tmp_path / "parent", tmp_path / "elsewhere")
    with pytest.raises(RootMovedError):
        ensure_dir(layout.root / "logs")
    assert not (tmp_path / "parent").exists()


def test_every_directory_ensure_dir_creates_is_0700(tmp_path: Path) -> None:
    """Parents included, whatever the umask."""
    old = os.umask(0o022)
    try:
        ensure_dir(tmp_path / "a" / "b" / "c")
    finally:
        os.umask(old)
    for sub in ("a", "a/b", "a/b/c"):
        assert stat.S_IMODE((tmp_path / sub).stat().st_mode) == 0o700, sub
