"""Helpers for the fleet tests: start real supervisors, wait on conditions, leave nothing behind."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, TypeVar

import psutil

from loopx.supervisor.process import fleet_processes
from tests.turnkit import loopx_here

T = TypeVar("T")


def clean_env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("LOOPX_") and k not in ("NOTIFY_SOCKET", "WATCHDOG_USEC")
    }
    env.update(extra)
    return env


def wait_for(what: str, check: Callable[[], T], *, timeout: float = 30.0, every: float = 0.05) -> T:
    """Poll ``check`` until it returns a truthy value; fail with ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(every)


def record(root: Path) -> dict[str, Any] | None:
    try:
        return json.loads((root / "supervisor.json").read_text())
    except (FileNotFoundError, ValueError):
        return None


def running_record(root: Path, pid: int, agents: int) -> dict[str, Any] | None:
    """supervisor.json once supervisor ``pid`` runs ``agents`` live agents."""
    rec = record(root)
    if not rec or rec["pid"] != pid or rec["state"] != "running":
        return None
    live = [s for s in rec["slots"] if s["pid"] and psutil.pid_exists(s["pid"])]
    return rec if len(live) == agents and len(rec["slots"]) == agents else None


def cli(
    root: Path, *args: str, timeout: float = 60, **env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "loopx", "--root", str(root), *args],
        capture_output=True,
        text=True,
        env=clean_env(**env),
        timeout=timeout,
        check=False,
    )


def start_supervisor(
    root: Path, *args: str, log: Path | None = None, **env: str
) -> subprocess.Popen[bytes]:
    if not (root / "registry.json").exists():  # as the unit's ExecStartPre does
        assert loopx_here(root, "init").returncode == 0
    out = open(log or root.parent / "supervisor.log", "ab")  # noqa: SIM115 - handed to the child
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "loopx", "--root", str(root), "supervisor", "run", *args],
            env=clean_env(**env),
            stdout=out,
            stderr=out,
        )
    finally:
        out.close()


def alive(proc: psutil.Process | int) -> bool:
    """Whether a process (or pid) runs and is not a zombie.

    False once it is gone, also when it exits between two psutil calls (a
    process found a moment ago may have exited and been reaped since).
    """
    try:
        p = proc if isinstance(proc, psutil.Process) else psutil.Process(proc)
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def leftovers(root: Path) -> list[psutil.Process]:
    return [p for p in fleet_processes(root) if alive(p)]


def running_program(root: Path, needle: str) -> bool:
    """Whether a live process of this root's fleet has ``needle`` in its command line."""
    for proc in leftovers(root):
        try:
            if needle in " ".join(proc.cmdline()):
                return True
        except psutil.NoSuchProcess:  # exited since the scan
            continue
    return False


def kill_everything(root: Path, *procs: subprocess.Popen[bytes]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    for p in fleet_processes(root):
        with suppress(psutil.NoSuchProcess):
            p.kill()
    tmux = root / "tmux.sock"
    if tmux.exists():
        subprocess.run(["tmux", "-S", str(tmux), "kill-server"], capture_output=True, check=False)


@contextmanager
def supervisor(
    root: Path, *args: str, agents: int = 1, **env: str
) -> Iterator[tuple[subprocess.Popen[bytes], dict[str, Any]]]:
    """A running supervisor with ``agents`` live agents; everything is killed afterwards."""
    proc = start_supervisor(root, "--agents", str(agents), *args, **env)
    try:
        rec = wait_for(
            "the supervisor to run its agents", lambda: running_record(root, proc.pid, agents)
        )
        yield proc, rec
    finally:
        kill_everything(root, proc)


def sigterm_and_wait(proc: subprocess.Popen[bytes], timeout: float = 30) -> int:
    proc.send_signal(signal.SIGTERM)
    return proc.wait(timeout=timeout)


def add_demo_goal(root: Path, goal_id: str, workdir: Path, *demo_args: str, **quota: str) -> None:
    """Register a goal served by the demo host with ``demo_args``."""
    import shlex

    # Set-up, not what is tested: the CLI runs in this process.
    if not (root / "registry.json").exists():
        assert loopx_here(root, "init").returncode == 0
    workdir.mkdir(parents=True, exist_ok=True)
    args = [
        "goal",
        "add",
        goal_id,
        "--objective",
        f"demo {goal_id}",
        "--workdir",
        str(workdir),
        "--host-kind",
        "demo",
    ]
    if demo_args:
        args += ["--host=" + shlex.join(demo_args)]
    for flag, value in quota.items():
        args += ["--" + flag.replace("_", "-"), value]
    done = loopx_here(root, *args)
    assert done.returncode == 0, done.stderr


def journals(root: Path, goal_id: str) -> list[dict[str, Any]]:
    turns = root / "goals" / goal_id / "turns"
    return [json.loads(p.read_text()) for p in sorted(turns.glob("*.json"))]


def assert_no_overlapping_turns(root: Path, goal_id: str) -> None:
    """No two turns of a goal ran at once: journals sorted by epoch have disjoint time spans."""
    spans = sorted(
        (j["epoch"], j["created_at"], j.get("ended_at") or j["updated_at"], j["status"])
        for j in journals(root, goal_id)
    )
    for (e1, _s1, end1, _), (e2, start2, _end2, _) in itertools.pairwise(spans):
        assert e1 < e2, f"{goal_id}: two journals share epoch {e1}"
        assert end1 <= start2, (
            f"{goal_id}: turn of epoch {e1} (ends {end1}) overlaps epoch {e2} (starts {start2})"
        )


def assert_fleet_invariants(root: Path, goal_id: str) -> None:
    """The local fleet's invariants for one goal: no overlapping leases, no duplicate history, every journal terminal."""
    assert_no_overlapping_turns(root, goal_id)
    history = root / "goals" / goal_id / "history.jsonl"
    lines = (
        [json.loads(line) for line in history.read_text().splitlines() if line.strip()]
        if history.exists()
        else []
    )
    keys = [line["turn_key"] for line in lines]
    seqs = [line["seq"] for line in lines]
    assert len(keys) == len(set(keys)), f"{goal_id}: a turn_key appears twice in history: {keys}"
    assert len(seqs) == len(set(seqs)), f"{goal_id}: a turn seq appears twice in history: {seqs}"
    statuses = [j["status"] for j in journals(root, goal_id)]
    assert statuses, f"{goal_id}: no journal"
    assert all(s in ("committed", "failed", "stopped") for s in statuses), f"{goal_id}: {statuses}"


def running_agent(root: Path, goal_id: str) -> int | None:
    """The pid of an agent whose heartbeat says it runs a turn of ``goal_id``."""
    for path in (root / "agents").glob("*.json"):
        try:
            beat = json.loads(path.read_text())
        except ValueError:
            continue
        if (
            beat["phase"] == "running"
            and beat["goal_id"] == goal_id
            and psutil.pid_exists(beat["pid"])
        ):
            return int(beat["pid"])
    return None


def host_running(root: Path, goal_id: str) -> bool:
    """Whether a turn of ``goal_id`` is in progress with its demo host alive."""
    return any(
        j["status"] == "in_progress" and j["attempt"] >= 1 for j in journals(root, goal_id)
    ) and running_program(root, "loopx.agents.demo")
