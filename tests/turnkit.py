"""Helpers of the turn, journal, recovery and fault tests: goals, CLI runs, durable snapshots."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

from loopx.model import utcnow
from loopx.registry.goalrecords import HostKind, HostSpec
from loopx.registry.goals import GoalChanges, add_goal
from loopx.root import Layout, ResolvedRoot, RootSource, open_root
from loopx.root.dropbox import result_path as dropbox_result_path

_VOLATILE = {
    "pid",
    "usage",
    "attempt",
    "interrupted",
    "cpu_s",
    "wall_s",
    "peak_rss_mb",
    "loopx_version",
}


def make_root(path: Path) -> Layout:
    """A created runtime root."""
    return open_root(ResolvedRoot(path, path / "registry.json", RootSource.FLAG), create=True)


def demo_goal(
    layout: Layout,
    goal_id: str,
    workdir: Path,
    *args: str,
    kind: HostKind = HostKind.DEMO,
    **quota: Any,
) -> None:
    """Register a goal run by the demo host with ``args`` as its switches."""
    workdir.mkdir(parents=True, exist_ok=True)
    host = HostSpec(kind=kind, argv=list(args))
    changes = GoalChanges(objective="count to three", workdir=str(workdir), host=host, quota=quota)
    add_goal(layout, goal_id, changes, update=False, default_workdir=workdir, now=utcnow())


def cli_env(**extra: str) -> dict[str, str]:
    """This environment without any LOOPX_* variable, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPX_")}
    env.update(extra)
    return env


def loopx_here(root: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """The `loopx` CLI's ``main`` called in this process, its output captured.

    For tests of what a command prints or decides; a test whose point is a
    process (a crash, a signal, a lock, a start-up) runs the real CLI with
    :func:`loopx`. No LOOPX_* variable is seen, and the logging set-up the
    command makes is undone afterwards, as if it had run in a child.
    """
    import loopx.log
    from loopx.cli import main

    argv = ["--root", str(root), *args]
    # Text streams over bytes: some commands write bytes to sys.stdout.buffer.
    out, err = (io.TextIOWrapper(io.BytesIO(), encoding="utf-8") for _ in range(2))
    saved_env = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith("LOOPX_")}
    saved_log = (loopx.log._configured, loopx.log._pending)
    structlog = sys.modules.get("structlog")
    saved_structlog = structlog.get_config() if structlog else None
    saved_cwd = os.getcwd()
    try:
        if cwd is not None:
            os.chdir(cwd)
        with redirect_stdout(out), redirect_stderr(err):
            code = main(argv)
    finally:
        os.chdir(saved_cwd)
        os.environ.update(saved_env)
        loopx.log._configured, loopx.log._pending = saved_log
        if saved_structlog is not None:
            sys.modules["structlog"].configure(**saved_structlog)
        elif "structlog" in sys.modules:
            sys.modules["structlog"].reset_defaults()
    texts = []
    for stream in (out, err):
        stream.flush()
        texts.append(stream.buffer.getvalue().decode())  # type: ignore[attr-defined]
    return subprocess.CompletedProcess(["loopx", *argv], code, stdout=texts[0], stderr=texts[1])


def loopx(
    root: Path, *args: str, timeout: float = 60, **env: str
) -> subprocess.CompletedProcess[str]:
    """Run the real `loopx` CLI against ``root``."""
    return subprocess.run(
        [sys.executable, "-m", "loopx", "--root", str(root), *args],
        capture_output=True,
        text=True,
        env=cli_env(**env),
        timeout=timeout,
        check=False,
    )


def demo_runs(workdir: Path) -> list[str]:
    """The demo host's own run log: one ``turn_key attempt pid`` line per run."""
    path = workdir / ".loopx-demo" / "runs.log"
    return path.read_text().splitlines() if path.exists() else []


def _strip(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: _strip(v)
            for k, v in value.items()
            if k not in _VOLATILE and not k.endswith("_at") and k != "window_start"
        }
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


_MD_VOLATILE = re.compile(r"^- (started|usage|agent):.*$", re.MULTILINE)


def durable_snapshot(layout: Layout, goal_id: str, workdir: Path) -> dict[str, Any]:
    """The goal's durable files with timestamps, pids, usage, attempts and paths removed."""
    goal_dir = layout.goal_dir(goal_id)

    # The result drop box is outside the root, one directory per root (loopx.root.dropbox).
    drop_box = str(dropbox_result_path(layout, goal_id, "k").parent.parent)

    def read(path: Path) -> str:
        text = path.read_text().replace(drop_box, "<dropbox>")
        return text.replace(str(layout.root), "<root>").replace(str(workdir), "<wd>")

    def lines(name: str) -> list[Any]:
        path = goal_dir / name
        if not path.exists():
            return []
        return [_strip(json.loads(x)) for x in read(path).splitlines() if x.strip()]

    runs = {}
    for path in sorted((goal_dir / "runs").glob("*")):
        if path.suffix == ".json":
            runs[path.name] = _strip(json.loads(read(path)))
        else:
            runs[path.name] = _MD_VOLATILE.sub("", read(path))
    journals = {
        p.name: (data["status"], data["completed_phases"])
        for p in sorted((goal_dir / "turns").glob("*.json"))
        for data in [json.loads(p.read_text())]
    }
    return {
        "state": _strip(json.loads(read(goal_dir / "state.json"))),
        "history": lines("history.jsonl"),
        "ledger": lines("quota.jsonl"),
        "runs": runs,
        "journals": journals,
        "goal_status": json.loads(layout.goal_file(goal_id).read_text())["status"],
        "lease": (goal_dir / "lease.json").exists(),
    }
