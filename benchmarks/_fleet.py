"""What the fleet benchmarks share: the real CLI, goals, a fleet's start and stop, its turns and CPU.

Every benchmark runs as a script (``python benchmarks/x.py``), so this
folder is on ``sys.path`` and they import it as ``from _fleet import ...``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO

import psutil

# The caller's LOOPX_* (a root, an agent id) must not leak into the measured processes.
ENV = {k: v for k, v in os.environ.items() if not k.startswith("LOOPX_")}
# A one-line shell host that writes a `progress` result: the cheapest turn, so the control plane shows.
SH_SCRIPT = 'echo "{\\"schema_version\\":1,\\"kind\\":\\"progress\\"}" > "$LOOPX_RESULT_FILE"'
DEMO_STEPS = "100000000"  # a demo goal with this many steps never completes during a run
DEMO_HOST = ["--host-kind", "demo", f"--host=--steps {DEMO_STEPS}"]


def compile_package() -> None:
    """Write loopx's bytecode (``__pycache__``), as an installed wheel ships it.

    An editable install run under ``PYTHONDONTWRITEBYTECODE=1`` would compile every
    module from source in every process it starts: about a third of a cold CLI's
    import time, which no user pays.
    """
    import compileall

    import loopx

    compileall.compile_dir(Path(loopx.__file__).parent, quiet=1)


def loopx(root: Path, *args: str, env: Mapping[str, str] = ENV) -> None:
    """Run the real CLI once on ``root``; a failure raises."""
    subprocess.run(
        [sys.executable, "-m", "loopx", "--root", str(root), *args],
        check=True,
        capture_output=True,
        env=env,
    )


def init_root(root: Path, workdirs: Path, count: int, host_options: Sequence[str]) -> None:
    """``loopx init``, then ``loopx goal add g0 .. g<count-1>``, each with a workdir ``workdirs/w<i>``."""
    loopx(root, "init")
    for i in range(count):
        work = workdirs / f"w{i}"
        work.mkdir(parents=True)
        loopx(
            root,
            "goal",
            "add",
            f"g{i}",
            "--objective",
            "bench",
            "--workdir",
            str(work),
            *host_options,
        )


def turns(root: Path) -> int:
    """Turn journals on ``root``, over every goal."""
    total = 0
    with os.scandir(root / "goals") as goals:
        for goal in goals:
            try:
                total += len(os.listdir(os.path.join(goal.path, "turns")))
            except FileNotFoundError:
                continue
    return total


def start_fleet(
    root: Path,
    agents: int,
    *options: str,
    env: Mapping[str, str] = ENV,
    output: IO[bytes] | int = subprocess.DEVNULL,
) -> tuple[subprocess.Popen[bytes], psutil.Process]:
    """``loopx supervisor run --agents N [options]`` as a real subprocess (not waited for)."""
    argv = [sys.executable, "-m", "loopx", "--root", str(root), "supervisor", "run"]
    proc = subprocess.Popen(
        [*argv, "--agents", str(agents), *options], env=env, stdout=output, stderr=output
    )
    return proc, psutil.Process(proc.pid)


def wait_for_agents(root: Path, sup: psutil.Process, agents: int, timeout_s: float = 60.0) -> None:
    """Until the supervisor has ``agents`` agent children and each wrote its heartbeat file."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        beats = [root / "agents" / f"agent-{i}.json" for i in range(1, agents + 1)]
        if len(agents_of(sup)) == agents and all(b.exists() for b in beats):
            return
        time.sleep(0.1)
    raise SystemExit("fleet did not start")


def agents_of(sup: psutil.Process) -> list[psutil.Process]:
    """The supervisor's agent processes (``python -m loopx.agents``)."""
    out = []
    for kid in sup.children():
        try:
            if "loopx.agents" in " ".join(kid.cmdline()):
                out.append(kid)
        except psutil.Error:
            continue
    return out


def stop_fleet(proc: subprocess.Popen[bytes], timeout_s: float = 120.0) -> None:
    """SIGTERM the supervisor (a graceful stop); SIGKILL it past ``timeout_s``."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def cpu_seconds(procs: Iterable[psutil.Process]) -> dict[int, float]:
    """CPU seconds (user + system) of each process still there, by pid."""
    out: dict[int, float] = {}
    for p in procs:
        try:
            t = p.cpu_times()
        except psutil.Error:
            continue
        out[p.pid] = t.user + t.system
    return out
