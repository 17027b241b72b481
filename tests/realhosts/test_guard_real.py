"""The real CLIs do not outlive a SIGKILLed fleet.

SIGKILL the supervisor and its agents together while the real Codex CLI or
Claude Code waits on the model (the mock hangs): the host guard ends the
CLI's whole tree (node, the native codex binary), and 10 s later no process
carrying the root's turn key is alive.
"""

from __future__ import annotations

import contextlib
import signal
from pathlib import Path

import psutil
import pytest

from tests.fleet_helpers import alive, kill_everything, start_supervisor, wait_for
from tests.realhosts.conftest import add_goal

pytestmark = [pytest.mark.realhosts, pytest.mark.timeout(240)]


def _turn_processes(root: Path) -> list[psutil.Process]:
    out = []
    for proc in psutil.process_iter():
        try:
            env = proc.environ()
        except psutil.Error:
            continue
        if env.get("LOOPX_ROOT") == str(root) and "LOOPX_TURN_KEY" in env and alive(proc):
            out.append(proc)
    return out


def _is_fleet(proc: psutil.Process) -> bool:
    try:
        line = " ".join(proc.cmdline())
    except psutil.Error:
        return False
    return "loopx.agents" in line or "supervisor" in line


@pytest.mark.parametrize("kind", ["codex", "claude"])
def test_sigkill_of_the_fleet_mid_turn_leaves_no_cli(cli, request, mock, tmp_path, kind):
    """Given a real CLI mid-turn, SIGKILL supervisor and agents: nothing of the turn is left."""
    env = request.getfixturevalue(f"{kind}_env")
    mock.model.mode = "hang"
    add_goal(cli, env, "g", kind, tmp_path / "work", "--turn-timeout", "600")
    sup = start_supervisor(cli.root, "--agents", "1", **env)
    try:
        wait_for("the CLI to ask the model", lambda: mock.model.requests, timeout=120)
        running = _turn_processes(cli.root)
        assert running, "the CLI runs"
        fleet = [psutil.Process(sup.pid)]
        fleet += [p for p in fleet[0].children(recursive=True) if _is_fleet(p)]
        for proc in fleet:
            with contextlib.suppress(psutil.Error):
                proc.send_signal(signal.SIGKILL)
        sup.wait()
        wait_for("no CLI process left", lambda: not _turn_processes(cli.root), timeout=10)
    finally:
        kill_everything(cli.root, sup)
        for proc in _turn_processes(cli.root):
            with contextlib.suppress(psutil.Error):
                proc.kill()
