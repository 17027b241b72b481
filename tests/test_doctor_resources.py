"""Doctor and resource faults: 0 free inodes is not healthy and is named as such."""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

import pytest

from loopx.doctor.diagnose import diagnose
from loopx.doctor.findings import FindingCode
from loopx.errors import resource_fault
from loopx.storage.resources import root_health
from tests.turnkit import make_root


@pytest.fixture
def inode_starved(tmp_path: Path):
    """A root on a tmpfs of 64 inodes, every one of them used; skip where mounting is refused."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16m,nr_inodes=64,mode=0700", "tmpfs", str(mnt)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip() or done.returncode}")
    try:
        layout = make_root(mnt / "root")
        filler = mnt / "filler"
        filler.mkdir()
        n = 0
        while True:
            try:
                (filler / str(n)).touch()
            except OSError as e:
                assert e.errno == errno.ENOSPC
                break
            n += 1
        yield layout
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True, check=False)


def test_doctor_at_zero_free_inodes_is_not_healthy(inode_starved) -> None:
    """The finding is no_free_inodes, an error; space is plentiful."""
    report = diagnose(inode_starved)
    codes = {f.code for f in report.findings}
    assert FindingCode.NO_FREE_INODES in codes
    assert not report.healthy


def test_a_refused_create_at_zero_inodes_says_no_free_inodes(inode_starved) -> None:
    """ENOSPC from a create is read as 'no free inodes', not 'disk full'."""
    target = inode_starved.root / "x"
    with pytest.raises(OSError) as caught:
        os.open(target, os.O_CREAT | os.O_WRONLY, 0o600)
    reason = resource_fault(caught.value)
    assert reason is not None
    assert reason.startswith("no free inodes")
    assert root_health(inode_starved.root) == "no free inodes"


def test_after_recover_sets_retry_host_doctor_does_not_advise_recover_again(
    tmp_path: Path,
) -> None:
    """An agent killed before its host ran; `recover` leaves a retry pending; doctor is healthy."""
    import json
    import sys

    from tests.turnkit import cli_env, demo_goal

    layout = make_root(tmp_path / "root")
    demo_goal(layout, "g", tmp_path / "work")
    base = [sys.executable, "-m", "loopx", "--root", str(layout.root)]
    killed = subprocess.run(
        [*base, "turn", "run-once", "g"],
        env=cli_env(LOOPX_FAULT="before:host_execute"),
        capture_output=True,
        check=False,
    )
    assert killed.returncode == 137
    subprocess.run([*base, "recover"], env=cli_env(), capture_output=True, check=True)
    doctor = subprocess.run(
        [*base, "doctor", "--json"], env=cli_env(), capture_output=True, text=True, check=False
    )
    report = json.loads(doctor.stdout)
    repairs = [f["repair"] for f in report["findings"]]
    assert not any(r.startswith("loopx recover") for r in repairs), repairs
    assert report["healthy"], report["findings"]
