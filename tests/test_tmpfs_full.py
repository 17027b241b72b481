"""A real disk that fills mid-run: a small tmpfs under the root, filled while a fleet works.

The fleet must keep every committed turn, run no host twice, show
``degraded`` while the disk is full, and finish the goals by itself once
space is freed. Mounting needs root (CAP_SYS_ADMIN): elsewhere
the test is skipped with the reason.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fleet_helpers import (
    add_demo_goal,
    assert_fleet_invariants,
    cli,
    kill_everything,
    start_supervisor,
    wait_for,
)
from tests.turnkit import demo_runs, loopx_here

GOALS = ("a", "b")


@contextlib.contextmanager
def small_tmpfs(path: Path, size: str) -> Iterator[Path]:
    """``path`` with a tmpfs of ``size`` mounted on it, unmounted afterwards; skip if not allowed."""
    path.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip() or done.returncode}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)


def fill(path: Path) -> int:
    """Write ``path`` until the disk refuses; return the bytes written."""
    written = 0
    chunk = b"\0" * 65536
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            try:
                written += os.write(fd, chunk)
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
                if len(chunk) == 1:
                    return written
                chunk = chunk[: len(chunk) // 16] or b"\0"
    finally:
        os.close(fd)


def run_through_a_full_disk(tmp_path: Path, *, full_s: float, steps: int) -> None:
    """The scenario, shared with the soak: goals run, the disk fills for ``full_s``, then frees."""
    with small_tmpfs(tmp_path / "mnt", "16m") as mnt:
        root = mnt / "root"
        assert cli(root, "init").returncode == 0
        for goal in GOALS:
            # The result goes to stdout: the host needs no space on the full disk,
            # only LoopX's own writes are refused.
            add_demo_goal(
                root,
                goal,
                tmp_path / goal,
                "--stdout-result",
                "--steps",
                str(steps),
                "--hang",
                "0.3",
            )
        proc = start_supervisor(
            root, "--agents", "2", "--until-idle", log=tmp_path / "supervisor.log"
        )
        try:
            wait_for("a first turn", lambda: any(demo_runs(tmp_path / g) for g in GOALS))
            filler = mnt / "filler"
            fill(filler)
            try:
                doc = wait_for(
                    "status to say degraded",
                    lambda: (
                        (d := json.loads(loopx_here(root, "status", "--json").stdout))["fleet"][
                            "degraded"
                        ]
                        and d
                    ),
                )
                assert "disk full" in doc["fleet"]["degraded"]
                end = time.monotonic() + full_s
                while time.monotonic() < end:
                    assert proc.poll() is None, "the supervisor died on a full disk"
                    time.sleep(0.2)
            finally:
                filler.unlink()
            code = proc.wait(timeout=120 + steps * 10)
        finally:
            kill_everything(root, proc)
        agent_logs = "".join(
            p.read_text(errors="replace") for p in (root / "logs").glob("agent-*.log")
        )
        # The fault was met and left behind (its own lines were lost to the full disk).
        assert "agent_recovered" in agent_logs
        assert "Traceback" not in agent_logs
        log = (tmp_path / "supervisor.log").read_text(errors="replace")
        assert "Traceback" not in log
        assert code == 0, log[-3000:]
        for goal in GOALS:
            assert_fleet_invariants(root, goal)
            keys = [line.split()[0] for line in demo_runs(tmp_path / goal)]
            assert len(keys) == len(set(keys)), f"{goal}: a host ran twice: {keys}"
            ledger = (root / "goals" / goal / "quota.jsonl").read_text().splitlines()
            charged = [json.loads(x)["turn_key"] for x in ledger]
            assert sorted(charged) == sorted(keys), f"{goal}: charged {charged}, ran {keys}"
            state = json.loads(loopx_here(root, "goal", "show", goal, "--json").stdout)
            assert state["goal"]["status"] == "done", state["goal"]
        assert json.loads(loopx_here(root, "status", "--json").stdout)["fleet"]["degraded"] is None


def test_a_fleet_weathers_a_disk_that_fills_and_frees(tmp_path: Path) -> None:
    """Full for 3 s mid-run: nothing lost, nothing run twice, degraded shown, goals finished."""
    run_through_a_full_disk(tmp_path, full_s=3.0, steps=4)
