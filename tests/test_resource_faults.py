"""Resource faults (disk full, I/O errors): injected at the Nth write, weathered, never fatal.

The injection layer is in the file primitives (``LOOPX_FAULT=io:ENOSPC@N``
in a child process, :func:`loopx.faults.inject_io_errors` in this one); a
real full disk is a small tmpfs in ``test_tmpfs.py``.
"""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest

from loopx.agents.turn import attempt_turn
from loopx.errors import UsageError, resource_fault
from loopx.faults import IoFault, inject_io_errors, parse_io_fault
from loopx.storage.files import atomic_write_bytes, exclusive_create
from loopx.storage.resources import retry_delay
from loopx.turn.outcome import TurnStatus
from tests.turnkit import demo_goal, demo_runs, loopx, make_root


@pytest.mark.parametrize(
    ("text", "fault"),
    [
        ("io:ENOSPC@3", IoFault(errno.ENOSPC, 3, 3)),
        ("io:EIO@1-", IoFault(errno.EIO, 1, None)),
        ("io:ENOSPC@2-4:lease.json", IoFault(errno.ENOSPC, 2, 4, "lease.json")),
    ],
)
def test_io_fault_specs_parse(text: str, fault: IoFault) -> None:
    """The documented spellings parse to the faults they name."""
    assert parse_io_fault(text) == fault


def test_a_malformed_io_fault_is_a_usage_error() -> None:
    """A typo in the spec says how to write it instead of being ignored."""
    with pytest.raises(UsageError, match="not an I/O fault") as caught:
        parse_io_fault("io:ENOSPACE@x")
    assert "io:ENOSPC@3" in (caught.value.hint or "")


def test_the_nth_write_fails_and_the_others_pass(tmp_path: Path) -> None:
    """io:ENOSPC@2 fails the second write only."""
    with inject_io_errors("io:ENOSPC@2"):
        atomic_write_bytes(tmp_path / "a", b"1")
        with pytest.raises(OSError, match="injected") as caught:
            atomic_write_bytes(tmp_path / "b", b"2")
        atomic_write_bytes(tmp_path / "c", b"3")
    assert caught.value.errno == errno.ENOSPC
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "c"]  # no temp file left


def test_exclusive_create_leaves_no_partial_file(tmp_path: Path) -> None:
    """A create whose write fails removes the file, so the next creator can win."""
    lease = tmp_path / "lease.json"
    with inject_io_errors("io:ENOSPC@1:lease.json"), pytest.raises(OSError):
        exclusive_create(lease, b"{}")
    assert not lease.exists()
    assert exclusive_create(lease, b"{}")


def test_resource_faults_are_told_apart_from_bugs() -> None:
    """ENOSPC, EDQUOT, EROFS and EIO are resource faults; EACCES is not."""
    for code in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO):
        assert resource_fault(OSError(code, "x")) is not None
    assert resource_fault(OSError(errno.EACCES, "x")) is None
    assert [retry_delay(n) for n in (1, 2, 3, 10)] == [0.5, 1.0, 2.0, 10.0]


def test_a_host_that_finished_during_a_full_disk_runs_once_and_is_charged_once(
    tmp_path: Path,
) -> None:
    """Writes after the host fail three times, then pass: one host run, one ledger line."""
    layout = make_root(tmp_path / "root")
    work = tmp_path / "work"
    demo_goal(layout, "g", work)
    # The 1st journal write creates it; the 2nd to 4th (the outcome) are refused.
    with inject_io_errors("io:ENOSPC@2-4:turns"):
        attempt = attempt_turn(layout, "g", agent_id="a")
    assert attempt.report is not None
    assert attempt.report.status is TurnStatus.COMMITTED
    assert len(demo_runs(work)) == 1
    ledger = (layout.goal_dir("g") / "quota.jsonl").read_text().splitlines()
    assert [json.loads(x)["turn_key"] for x in ledger] == [attempt.report.turn_key]


def test_run_once_on_a_full_disk_prints_one_line(tmp_path: Path) -> None:
    """`turn run-once` with every write refused exits non-zero with one line and a hint."""
    layout = make_root(tmp_path / "root")
    demo_goal(layout, "g", tmp_path / "work")
    done = loopx(layout.root, "turn", "run-once", "g", LOOPX_FAULT="io:ENOSPC@1-")
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    assert "disk full" in done.stderr
    assert "hint:" in done.stderr
    assert demo_runs(tmp_path / "work") == []  # nothing ran that could not be recorded


@pytest.mark.parametrize("code", ["EMFILE", "ENFILE", "ENOMEM"])
def test_descriptor_and_memory_exhaustion_are_weathered_by_a_turn(
    tmp_path: Path, code: str
) -> None:
    """EMFILE, ENFILE and ENOMEM at the outcome's writes wait like a full disk."""
    assert resource_fault(OSError(getattr(errno, code), "x")) is not None
    layout = make_root(tmp_path / "root")
    work = tmp_path / "work"
    demo_goal(layout, "g", work)
    with inject_io_errors(f"io:{code}@2-4:turns"):
        attempt = attempt_turn(layout, "g", agent_id="a")
    assert attempt.report is not None
    assert attempt.report.status is TurnStatus.COMMITTED
    assert len(demo_runs(work)) == 1


@pytest.mark.timeout(120)
def test_an_agent_loop_survives_descriptor_exhaustion(tmp_path: Path) -> None:
    """An agent whose first writes fail with EMFILE (heartbeat, claim) keeps going and commits."""
    import subprocess
    import sys

    from tests.turnkit import cli_env

    layout = make_root(tmp_path / "root")
    work = tmp_path / "work"
    demo_goal(layout, "g", work)
    done = subprocess.run(
        [sys.executable, "-m", "loopx.agents", "run", "--root", str(layout.root),
         "--agent-id", "a", "--max-turns", "2", "--idle-max-seconds", "0.5"],
        env=cli_env(LOOPX_FAULT="io:EMFILE@1-6"),
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert len(demo_runs(work)) == 2
    assert "agent_degraded" in done.stdout + done.stderr
