"""The host-local cache (``$XDG_CACHE_HOME/loopx``) is this user's alone, whatever the umask.

Under ``umask 000`` the real CLI fills it (the status database, its lock and
memo, quota memos, remembered command lines): every directory it makes is
0700 and every file 0600, the cache base ``loopx`` included, where
``os.makedirs`` used to leave it 0755 (0777 under this umask).
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from loopx.memo import private_dir
from tests.turnkit import cli_env

pytestmark = pytest.mark.timeout(120)


def _loopx(root: Path, xdg: Path, *args: str) -> None:
    """The real CLI, in a process whose umask lets everyone read and write what it creates."""
    done = subprocess.run(
        [sys.executable, "-m", "loopx", "--root", str(root), *args],
        capture_output=True,
        text=True,
        env=cli_env(XDG_CACHE_HOME=str(xdg)),
        umask=0,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def _modes(top: Path) -> dict[str, str]:
    """``{relative path: octal mode}`` of ``top`` and everything under it."""
    out = {".": oct(stat.S_IMODE(top.stat().st_mode))}
    for path in sorted(top.rglob("*")):
        out[path.relative_to(top).as_posix()] = oct(stat.S_IMODE(path.lstat().st_mode))
    return out


def test_the_cache_the_cli_fills_under_umask_000_is_private(tmp_path: Path) -> None:
    """Status, quota and goal commands twice each (cold, then warm): 0700 dirs, 0600 files."""
    root, xdg, work = tmp_path / "root", tmp_path / "xdg", tmp_path / "work"
    work.mkdir()
    _loopx(root, xdg, "init")
    _loopx(root, xdg, "goal", "add", "g", "--objective", "x", "--workdir", str(work),
           "--host-kind", "demo")  # fmt: skip
    _loopx(root, xdg, "turn", "run-once", "g")
    for _ in range(2):
        for args in (
            ("status", "--json"),
            ("status",),
            ("quota", "should-run", "g"),
            ("goal", "list"),
        ):
            _loopx(root, xdg, *args)
    modes = _modes(xdg)
    assert "loopx" in modes and any(name.endswith("status.db") for name in modes), modes
    dirs = {n for n in modes if (xdg / n).is_dir()}
    assert {n: m for n, m in modes.items() if n in dirs and m != "0o700"} == {}
    assert {n: m for n, m in modes.items() if n not in dirs and m != "0o600"} == {}


def test_a_cache_home_that_exists_keeps_its_mode(tmp_path: Path) -> None:
    """The user's own ~/.cache is not LoopX's to change; what LoopX makes inside it is private."""
    xdg = tmp_path / "xdg"
    xdg.mkdir(mode=0o755)
    xdg.chmod(0o755)
    saved = os.umask(0)
    try:
        private_dir(xdg / "loopx" / "digest")
    finally:
        os.umask(saved)
    assert _modes(xdg) == {".": "0o755", "loopx": "0o700", "loopx/digest": "0o700"}


def test_private_dir_refuses_a_file_in_its_way(tmp_path: Path) -> None:
    """A file where a directory belongs is an error, not a silent pass."""
    (tmp_path / "loopx").write_text("")
    with pytest.raises(FileExistsError):
        private_dir(tmp_path / "loopx")
    with pytest.raises(FileExistsError):
        private_dir(tmp_path / "loopx" / "digest")
