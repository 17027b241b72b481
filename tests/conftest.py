"""Shared fixtures: a private runtime root and a way to run the real `loopx` CLI."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import loopx.log
from loopx.root import Layout, ResolvedRoot, RootSource, open_root

# The tests press Ctrl-C as a terminal does. Run from a script's background job (`pytest &`
# without job control), this process and every child it starts would inherit SIGINT ignored,
# and a CLI would not see it until it installs its own handler. A handler is reset on exec.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: three workers a core, since most tests wait on processes, signals and deadlines.

    ``LOOPX_TEST_WORKERS`` overrides the count (``-n N`` on the command line does too).
    """
    wanted = os.environ.get("LOOPX_TEST_WORKERS")
    if wanted:
        return int(wanted)
    return max(2, 3 * len(os.sched_getaffinity(0)))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``serial`` share one xdist worker, so they never run beside each other.

    So do the ``ray`` tests: each starts a Ray cluster of several processes and a gigabyte or
    more, which two workers' clusters at once would starve on a 2-core machine.
    """
    for item in items:
        for group in ("serial", "ray"):
            if item.get_closest_marker(group) is not None:
                item.add_marker(pytest.mark.xdist_group(group))
                break


@pytest.fixture(autouse=True)
def _logging_as_it_was() -> Iterator[None]:
    """Undo the logging set-up of a test that ran the CLI's ``main`` in this process.

    A configuration left pending at warning level drops the info events a later
    test captures (``structlog.testing.capture_logs``): whether it passed hung
    on which tests ran before it.
    """
    saved = (loopx.log._configured, loopx.log._pending, loopx.log._pending_level)
    structlog = sys.modules.get("structlog")
    config = structlog.get_config() if structlog is not None else None
    yield
    loopx.log._configured, loopx.log._pending, loopx.log._pending_level = saved
    structlog = sys.modules.get("structlog")
    if structlog is not None:
        if config is not None:
            structlog.configure(**config)
        else:
            structlog.reset_defaults()


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A fresh, not yet created runtime root path."""
    return tmp_path / "root"


@pytest.fixture
def layout(root: Path) -> Layout:
    """A created runtime root's layout."""
    return open_root(ResolvedRoot(root, root / "registry.json", RootSource.FLAG), create=True)


class Cli:
    """Runs `python -m loopx` as a real subprocess against one root.

    ``in_process()`` gives one that calls the CLI's ``main`` in this process
    instead (for modules whose tests are about what commands print and
    decide); a call with LOOPX_* variables still starts a real process.
    """

    def __init__(self, root: Path, cwd: Path, *, here: bool = False) -> None:
        self.root = root
        self.cwd = cwd
        self.here = here

    def in_process(self) -> Cli:
        return Cli(self.root, self.cwd, here=True)

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPX_")}
        env.update(extra)
        return env

    def run(
        self, *args: str, check: bool = False, timeout: float = 60, **env: str
    ) -> subprocess.CompletedProcess[str]:
        if self.here and not env:
            from tests.turnkit import loopx_here

            proc = loopx_here(self.root, *args, cwd=self.cwd)
        else:
            proc = self._spawn(*args, timeout=timeout, **env)
        if check and proc.returncode != 0:
            msg = f"loopx {' '.join(args)} exited {proc.returncode}: {proc.stderr}"
            raise AssertionError(msg)
        return proc

    def _spawn(self, *args: str, timeout: float, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "loopx", "--root", str(self.root), *args],
            capture_output=True,
            text=True,
            cwd=self.cwd,
            env=self.env(**env),
            timeout=timeout,
            check=False,
        )

    def json(self, *args: str, **env: str) -> Any:
        return json.loads(self.run(*args, "--json", check=True, **env).stdout)


@pytest.fixture
def cli(root: Path, tmp_path: Path) -> Iterator[Cli]:
    """The real CLI on a private, initialised root, run from a private working directory."""
    work = tmp_path / "cwd"
    work.mkdir()
    open_root(ResolvedRoot(root, root / "registry.json", RootSource.FLAG), create=True)
    return Cli(root, work)


@pytest.fixture(autouse=True, scope="session")
def _private_cache_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Host-local caches (the status database, memos) under this run's temp dir, not ~/.cache."""
    saved = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("xdg-cache"))
    yield
    if saved is None:
        os.environ.pop("XDG_CACHE_HOME", None)
    else:
        os.environ["XDG_CACHE_HOME"] = saved
