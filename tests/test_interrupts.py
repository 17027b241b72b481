"""Ctrl-C (SIGINT) ends a long-running command within its grace, whatever it is doing.

The signal goes at many moments of the command's loop: mid-refresh, mid-write, asleep.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.turnkit import cli_env, demo_goal, make_root

MOMENTS = [i * 0.037 for i in range(12)]  # spread over two 0.2 s frames of the watch


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Twenty demo goals, registered in this process: what is under test is the watch's signal."""
    base = tmp_path_factory.mktemp("interrupts")
    layout = make_root(base / "root")
    for i in range(20):
        demo_goal(layout, f"g{i}", base / "w")
    return layout.root


@pytest.mark.parametrize("moment", MOMENTS)
@pytest.mark.parametrize("mode", [[], ["--json"]], ids=["plain", "json"])
def test_ctrl_c_ends_status_watch(
    root: Path, tmp_path: Path, moment: float, mode: list[str]
) -> None:
    """SIGINT at ``moment`` after the first frame: `status --watch` exits 0 within its grace."""
    out = tmp_path / "out"
    with out.open("wb") as sink:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "loopx",
                "--root",
                str(root),
                "status",
                "--watch",
                "0.2",
                "--ttl",
                "0",
                *mode,
            ],
            stdout=sink,
            stderr=subprocess.PIPE,
            env=cli_env(),
        )
    try:
        deadline = time.monotonic() + 60
        while out.stat().st_size == 0:
            assert time.monotonic() < deadline, "no first frame"
            time.sleep(0.01)
        time.sleep(moment)  # the moment of the signal, not a synchronisation
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=5.0 + 5.0)  # WATCH_GRACE_S, plus a busy machine
        assert proc.returncode == 0, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_a_watch_nobody_reads_still_ends(root: Path) -> None:
    """With its stdout a pipe no one reads (full), Ctrl-C still ends the watch within its grace."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "loopx", "--root", str(root), "status", "--watch", "0.2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=cli_env(),
    )
    try:
        time.sleep(8)  # let the unread pipe fill: the point of the test, not a synchronisation
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


@pytest.mark.parametrize("moment", [0.0, 0.3, 0.7, 1.5, 3.0])
def test_ctrl_c_ends_supervisor_run(tmp_path: Path, moment: float) -> None:
    """SIGINT at ``moment`` after READY: `supervisor run` stops its fleet and exits 0 in its grace."""
    root, work = tmp_path / "root", tmp_path / "w"
    work.mkdir()
    run = [sys.executable, "-m", "loopx", "--root", str(root)]
    subprocess.run([*run, "init"], check=True, capture_output=True, env=cli_env())
    subprocess.run(
        [
            *run,
            "goal",
            "add",
            "g",
            "--objective",
            "x",
            "--workdir",
            str(work),
            "--host-kind",
            "demo",
            "--host",
            "--steps 100 --hang 0.3",
        ],
        check=True,
        capture_output=True,
        env=cli_env(),
    )
    proc = subprocess.Popen(
        [*run, "supervisor", "run", "--agents", "2", "--stop-grace-seconds", "5"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=cli_env(),
    )
    try:
        deadline = time.monotonic() + 60
        while not (root / "agents").exists() or not any((root / "agents").glob("*.json")):
            assert time.monotonic() < deadline, "no agent started"
            time.sleep(0.02)
        time.sleep(moment)  # the moment of the signal, not a synchronisation
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=5 + 25) == 0  # --stop-grace-seconds, plus a busy machine
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_ctrl_c_wrapped_by_an_import_is_still_an_interruption():
    """pydantic's class set-up wraps a KeyboardInterrupt in a RuntimeError: still exit 130."""
    from loopx.cli._app import _caused_by_interrupt

    def interrupted() -> None:
        raise KeyboardInterrupt

    def import_cut_short() -> None:
        try:
            interrupted()
        except KeyboardInterrupt as e:
            raise RuntimeError("Error calling __set_name__ on ...") from e

    with pytest.raises(RuntimeError) as wrapped:
        import_cut_short()
    assert _caused_by_interrupt(wrapped.value)
    assert not _caused_by_interrupt(RuntimeError("a plain error"))


LOST_CTRL_C = """
import gc, os, signal, weakref
from loopx import cli, process

cli._note_ctrl_c()

class Thing:
    pass

# SIGINT raised while a weakref callback runs: CPython drops the KeyboardInterrupt and goes on.
ref = weakref.ref(Thing(), lambda _: (os.kill(os.getpid(), signal.SIGINT), sum(range(10**5))))
gc.collect()
seen = []
process.own_sigint(lambda signum, _frame: seen.append(int(signum)))
process.own_sigint(lambda signum, _frame: seen.append(-int(signum)))
print(seen)
"""


def test_a_ctrl_c_cpython_drops_before_a_command_owns_sigint_is_handed_to_its_handler() -> None:
    """A Ctrl-C swallowed in a weakref callback (as at import) still stops a later server, once."""
    done = subprocess.run(
        [sys.executable, "-c", LOST_CTRL_C],
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=60,
        check=True,
    )
    assert done.stderr == ""  # nothing printed of the dropped KeyboardInterrupt
    assert done.stdout.strip() == f"[{int(signal.SIGINT)}]", done.stdout
