"""A hostile result path (FIFO, sparse file, device node, directory) ends its turn, never the agent.

Once, a FIFO blocked the agent for ever in ``open()``, a
sparse 100 GiB file crashed it with ``MemoryError``, a device node was read
without end. Each is now a typed ``invalid_result`` naming what was found, the
turn ends, and the next turn (of another goal) runs.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from loopx.agents.turn import attempt_turn
from loopx.errors import FileTooLargeError, NotRegularFileError
from loopx.registry.goalrecords import HostKind
from loopx.root.dropbox import result_path
from loopx.storage.files import MAX_READ_BYTES, read_bytes
from loopx.turn.failures import FailureReason
from tests.turnkit import cli_env, demo_goal, make_root

FIFO_HOST = """
import os
os.mkfifo(os.environ["LOOPX_RESULT_FILE"])
"""
SPARSE_HOST = """
import os
with open(os.environ["LOOPX_RESULT_FILE"], "wb") as f:
    f.truncate(100 * 1024**3)
"""
DEVICE_HOST = """
import os, stat
os.mknod(os.environ["LOOPX_RESULT_FILE"], stat.S_IFCHR | 0o600, os.makedev(1, 5))
"""
DIRECTORY_HOST = """
import os
path = os.environ["LOOPX_RESULT_FILE"]
os.makedirs(os.path.join(path, "inner"))
open(os.path.join(path, "inner", "x"), "w").write("x")
"""
GOOD_HOST = """
import json, os
open(os.environ["LOOPX_RESULT_FILE"], "w").write(json.dumps({"kind": "progress", "summary": "ok"}))
"""


def _can_mknod(tmp_path: Path) -> bool:
    try:
        os.mknod(tmp_path / "probe", stat.S_IFCHR | 0o600, os.makedev(1, 5))
    except (PermissionError, OSError):
        return False
    (tmp_path / "probe").unlink()
    return True


def _hostile_then_good(tmp_path: Path, code: str):
    """Given a hostile goal and a good one, when an agent runs both in turn, both end."""
    layout = make_root(tmp_path / "root")
    demo_goal(layout, "bad", tmp_path / "w1", sys.executable, "-c", code, kind=HostKind.COMMAND)
    demo_goal(
        layout, "good", tmp_path / "w2", sys.executable, "-c", GOOD_HOST, kind=HostKind.COMMAND
    )
    bad = attempt_turn(layout, "bad", agent_id="a")
    good = attempt_turn(layout, "good", agent_id="a")
    assert bad.report is not None
    assert good.report is not None
    assert good.report.failure is None, good.report.failure
    return layout, bad.report


@pytest.mark.timeout(60)
def test_a_fifo_at_the_result_path_fails_the_turn_naming_it(tmp_path: Path) -> None:
    """The open does not block: the turn fails 'the result path is a FIFO'."""
    _, report = _hostile_then_good(tmp_path, FIFO_HOST)
    assert report.failure is not None
    assert report.failure.reason is FailureReason.INVALID_RESULT
    assert "the result path is a FIFO" in report.failure.message


@pytest.mark.timeout(60)
def test_a_sparse_100_gib_result_is_read_to_its_cap_only(tmp_path: Path) -> None:
    """st_size is not trusted: at most the cap is read, and the size check reports it."""
    _, report = _hostile_then_good(tmp_path, SPARSE_HOST)
    assert report.failure is not None
    assert report.failure.reason is FailureReason.INVALID_RESULT


@pytest.mark.timeout(60)
def test_a_device_node_at_the_result_path_is_refused(tmp_path: Path) -> None:
    """A real character device (/dev/zero's numbers) is named, never read."""
    if not _can_mknod(tmp_path):
        pytest.skip("making a device node is not permitted here")
    _, report = _hostile_then_good(tmp_path, DEVICE_HOST)
    assert report.failure is not None
    assert report.failure.reason is FailureReason.INVALID_RESULT
    assert "the result path is a character device" in report.failure.message


@pytest.mark.timeout(60)
def test_a_directory_at_the_result_path_is_reported_and_removed(tmp_path: Path) -> None:
    """The turn says what was found, and no directory is left in the drop box."""
    layout, report = _hostile_then_good(tmp_path, DIRECTORY_HOST)
    assert report.failure is not None
    assert "the result path is a directory" in report.failure.message
    assert list(result_path(layout, "bad", "x").parent.iterdir()) == []


def test_read_bytes_refuses_a_fifo_without_blocking(tmp_path: Path) -> None:
    """The primitive itself: O_NONBLOCK, then fstat."""
    fifo = tmp_path / "d" / "f"
    fifo.parent.mkdir()
    os.mkfifo(fifo)
    with pytest.raises(NotRegularFileError, match="a FIFO"):
        read_bytes(fifo)


def test_read_bytes_refuses_a_sparse_file_past_its_cap(tmp_path: Path) -> None:
    """With no limit, a file claiming more than the cap is a typed error, not an allocation."""
    sparse = tmp_path / "d" / "f"
    sparse.parent.mkdir()
    with sparse.open("wb") as f:
        f.truncate(100 * 1024**3)
    with pytest.raises(FileTooLargeError):
        read_bytes(sparse)
    assert len(read_bytes(sparse, limit=10)) == 10
    assert MAX_READ_BYTES < 1024**3


def test_read_bytes_refuses_a_symlink_to_a_device(tmp_path: Path) -> None:
    """/dev/zero through a symlink is refused by O_NOFOLLOW."""
    link = tmp_path / "d" / "f"
    link.parent.mkdir()
    link.symlink_to("/dev/zero")
    with pytest.raises(Exception, match="symlink"):
        read_bytes(link)


@pytest.mark.timeout(120)
def test_turn_run_once_with_a_fifo_result_returns(tmp_path: Path) -> None:
    """`loopx turn run-once` ends with the failure instead of hanging."""
    layout = make_root(tmp_path / "root")
    demo_goal(layout, "bad", tmp_path / "w", sys.executable, "-c", FIFO_HOST, kind=HostKind.COMMAND)
    proc = subprocess.run(
        [sys.executable, "-m", "loopx", "--root", str(layout.root), "turn", "run-once", "bad"],
        capture_output=True,
        text=True,
        timeout=90,
        env=cli_env(),
        check=False,
    )
    assert "FIFO" in proc.stdout + proc.stderr, proc.stdout + proc.stderr
