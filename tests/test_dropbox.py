"""A host's result survives a root fault: the drop box is outside the root.

A host that finishes while the root is read-only writes its result to the
private tmpfs drop box (``loopx.root.dropbox``); the agent keeps it in memory,
waits out the refused journal writes, and commits the turn when the root
takes writes again. Mounting needs root (CAP_SYS_ADMIN): elsewhere skipped.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from loopx.registry.goalrecords import HostKind
from loopx.root.dropbox import drop_box_base, result_path
from tests.fleet_helpers import wait_for
from tests.turnkit import cli_env, demo_goal, make_root

HOST = """
import json, os, sys, time
side = sys.argv[1]
open(os.path.join(side, "started"), "w").close()
while not os.path.exists(os.path.join(side, "go")):
    time.sleep(0.05)
with open(os.path.join(side, "runs"), "a") as f:
    f.write("x")
open(os.environ["LOOPX_RESULT_FILE"], "w").write(json.dumps({"kind": "progress", "summary": "done during the fault"}))
open(os.path.join(side, "exited"), "w").close()
"""


def test_the_drop_box_is_private_and_outside_the_root(tmp_path: Path) -> None:
    """0700, ours, not under the root."""
    base = drop_box_base()
    if base is None:
        pytest.skip("no tmpfs drop box on this machine (no XDG_RUNTIME_DIR, no /dev/shm)")
    layout = make_root(tmp_path / "root")
    path = result_path(layout, "g", "g-t000001-e1")
    assert layout.root not in path.parents
    st = base.lstat()
    assert (stat.S_IMODE(st.st_mode), st.st_uid) == (0o700, os.getuid())


def _fill_inodes(mnt: Path) -> Path:
    filler = mnt / "filler"
    filler.mkdir()
    n = 0
    while True:
        try:
            (filler / str(n)).touch()
        except OSError:
            return filler
        n += 1


def _start_fault(mnt: Path, fault: str) -> Path | None:
    if fault == "read-only":
        subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
        return None
    return _fill_inodes(mnt)


def _end_fault(mnt: Path, filler: Path | None) -> None:
    if filler is None:
        subprocess.run(["mount", "-o", "remount,rw", str(mnt)], check=True)
        return
    for entry in filler.iterdir():
        entry.unlink()


@pytest.mark.timeout(180)
@pytest.mark.parametrize("fault", ["read-only", "no-inodes"])
def test_a_host_that_finished_during_a_root_fault_commits_when_it_passes(
    tmp_path: Path, fault: str
) -> None:
    """Given a host running, the root read-only or out of inodes, the host finishing: the turn
    waits, then commits once the root takes writes again; the host ran once."""
    if drop_box_base() is None:
        pytest.skip("no tmpfs drop box on this machine")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=32m,nr_inodes=4096,mode=0700", "tmpfs", str(mnt)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    side = tmp_path / "side"
    side.mkdir()
    log = tmp_path / "agent.log"
    try:
        layout = make_root(mnt / "root")
        argv = [sys.executable, "-c", HOST, str(side)]
        demo_goal(layout, "g", tmp_path / "work", *argv, kind=HostKind.COMMAND)
        with log.open("w") as out:
            agent = subprocess.Popen(
                [sys.executable, "-m", "loopx", "--root", str(layout.root), "turn", "run-once",
                 "g", "--json"],
                env=cli_env(), stdout=subprocess.PIPE, stderr=out, text=True,
            )  # fmt: skip
        try:
            wait_for("the host to start", (side / "started").exists, timeout=60)
            filler = _start_fault(mnt, fault)
            (side / "go").touch()
            wait_for("the host to finish", (side / "exited").exists, timeout=30)
            wait_for(
                "the agent to defer its writes",
                lambda: "turn_writes_deferred" in log.read_text(),
                timeout=30,
            )
            _end_fault(mnt, filler)
            stdout, _ = agent.communicate(timeout=90)
        finally:
            if agent.poll() is None:
                agent.kill()
                agent.wait()
        report = json.loads(stdout)["report"]
        assert report["status"] == "committed", report
        assert report["summary"] == "done during the fault"
        assert (side / "runs").read_text() == "x"
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(mnt)], capture_output=True, check=False)
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True, check=False)
