"""Runtime root resolution order, and the root's permissions."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from loopx.errors import RootError
from loopx.root import ResolvedRoot, RootSource, open_root, resolve_root


def test_flag_wins_over_everything(tmp_path: Path) -> None:
    """--root beats LOOPX_ROOT, the registry and XDG."""
    got = resolve_root(flag=tmp_path / "a", registry=None, env={"LOOPX_ROOT": "/x"}, home=tmp_path)
    assert (got.root, got.source) == ((tmp_path / "a").resolve(), RootSource.FLAG)


def test_env_wins_over_registry_and_xdg(tmp_path: Path) -> None:
    """LOOPX_ROOT beats the registry's common_runtime_root and XDG."""
    reg = tmp_path / "proj" / "registry.json"
    reg.parent.mkdir()
    reg.write_text(json.dumps({"schema_version": 1, "common_runtime_root": "state"}))
    got = resolve_root(
        flag=None, registry=reg, env={"LOOPX_ROOT": str(tmp_path / "e")}, home=tmp_path
    )
    assert (got.root, got.source, got.registry) == ((tmp_path / "e").resolve(), RootSource.ENV, reg)


def test_registry_common_root_is_relative_to_the_registry_file(tmp_path: Path) -> None:
    """common_runtime_root resolves against the registry's directory, not the cwd."""
    reg = tmp_path / "proj" / "registry.json"
    reg.parent.mkdir()
    reg.write_text(json.dumps({"schema_version": 1, "common_runtime_root": "../state"}))
    got = resolve_root(flag=None, registry=reg, env={}, home=tmp_path / "home")
    assert (got.root, got.source) == ((tmp_path / "state").resolve(), RootSource.REGISTRY)


def test_xdg_then_home_default(tmp_path: Path) -> None:
    """Without anything else: $XDG_STATE_HOME/loopx, else ~/.local/state/loopx."""
    xdg = resolve_root(
        flag=None, registry=None, env={"XDG_STATE_HOME": str(tmp_path / "x")}, home=tmp_path
    )
    assert (xdg.root, xdg.source) == ((tmp_path / "x" / "loopx").resolve(), RootSource.DEFAULT)
    home = resolve_root(flag=None, registry=None, env={}, home=tmp_path)
    assert home.root == (tmp_path / ".local" / "state" / "loopx").resolve()
    assert home.registry == home.root / "registry.json"


def test_root_and_subdirectories_are_0700(tmp_path: Path) -> None:
    """A created root and every layer directory are private."""
    root = tmp_path / "r"
    layout = open_root(ResolvedRoot(root, root / "registry.json", RootSource.FLAG), create=True)
    for d in (
        layout.root,
        layout.goals_dir,
        layout.agents_dir,
        layout.quarantine_dir,
        layout.logs_dir,
    ):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700, d


def test_a_root_writable_by_others_is_refused(tmp_path: Path) -> None:
    """LoopX refuses to run on a root that other users can write into."""
    root = tmp_path / "shared"
    root.mkdir()
    root.chmod(0o777)
    with pytest.raises(RootError, match="writable by other users"):
        open_root(ResolvedRoot(root, root / "registry.json", RootSource.FLAG), create=True)


def test_a_missing_root_is_not_created_by_readers(tmp_path: Path) -> None:
    """Without create, a missing root is a clear error that says how to make one."""
    root = tmp_path / "none"
    with pytest.raises(RootError) as info:
        open_root(ResolvedRoot(root, root / "registry.json", RootSource.ENV), create=False)
    assert "loopx init" in (info.value.hint or "")
    assert not root.exists()
