"""File primitives under real crashes: atomic writes, keyed appends, exclusive create, locks."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from loopx.errors import CorruptFileError, LockTimeoutError, UnsafePathError
from loopx.model import Record
from loopx.storage.files import (
    atomic_write_bytes,
    exclusive_create,
    open_dir,
    read_bytes,
    read_bytes_at,
)
from loopx.storage.jsonl import DEDUP_SCAN_RECORDS, append_record, iter_jsonl, read_records
from loopx.storage.locks import locked


class Rec(Record):
    turn_key: str
    writer: int
    n: int
    pad: str = ""


def _spawn(code: str, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), *args])


def _wait_for(predicate, timeout: float = 20.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail("condition not reached before the deadline")
        time.sleep(0.01)


WRITER = """
import sys
from pathlib import Path
from loopx.storage.files import atomic_write_bytes
path = Path(sys.argv[1])
payloads = [b'{"v": "' + bytes([c]) * 300_000 + b'"}' for c in b"AB"]
i = 0
while True:
    atomic_write_bytes(path, payloads[i % 2])
    i += 1
"""


def test_readers_never_see_a_partial_file_while_writers_are_killed(tmp_path: Path) -> None:
    """SIGKILLing a writer in a loop leaves only whole old or new contents."""
    target = tmp_path / "f.json"
    atomic_write_bytes(target, b'{"v": "' + b"A" * 300_000 + b'"}')
    rng = random.Random(7)
    seen = 0
    for _ in range(15):
        child = _spawn(WRITER, str(target))
        try:
            deadline = time.monotonic() + rng.uniform(0.05, 0.3)
            while time.monotonic() < deadline:
                value = json.loads(read_bytes(target))["v"]
                assert len(value) == 300_000
                assert value in {"A" * 300_000, "B" * 300_000}
                seen += 1
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait()
    assert json.loads(read_bytes(target))["v"][0] in "AB"
    assert seen > 0


APPENDER = """
import sys
from pathlib import Path
from loopx.storage.jsonl import append_record
from loopx.model import Record
class Rec(Record):
    turn_key: str
    writer: int
    n: int
    pad: str = ""
path, writer, start, stop = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
for n in range(start, stop):
    append_record(path, Rec(turn_key=f"w{writer}-{n}", writer=writer, n=n, pad="x" * (n % 97) * 50))
"""
STEADY_RECORDS = 80  # per steady writer
VICTIM_RECORDS = 300


def _written(ledger: Path, writer: int) -> list[int]:
    return [r.n for r in read_records(ledger, Rec) if r.writer == writer]


def test_concurrent_appends_never_interleave_and_replays_are_skipped(tmp_path: Path) -> None:
    """Four appenders, one SIGKILLed mid-append and restarted, give whole unique lines in order.

    A restarted writer replays the record it may have been appending (as a turn
    does); the dedup scan looks back DEDUP_SCAN_RECORDS lines, which the steady
    writers' records alone can never push a replayed record past, whatever the
    scheduling.
    """
    assert 3 * STEADY_RECORDS < DEDUP_SCAN_RECORDS
    ledger = tmp_path / "ledger.jsonl"
    rng = random.Random(11)
    steady = [_spawn(APPENDER, str(ledger), str(w), "0", str(STEADY_RECORDS)) for w in range(3)]
    victim = None
    try:
        start = 0
        for _ in range(3):
            victim = _spawn(APPENDER, str(ledger), "9", str(start), str(VICTIM_RECORDS))
            # Kill it mid-run: after it appended a few more records (not before it started).
            goal = min(start + rng.randint(2, 30), VICTIM_RECORDS - 1)
            _wait_for(lambda goal=goal: len(_written(ledger, 9)) >= goal, timeout=60)
            victim.send_signal(signal.SIGKILL)
            victim.wait()
            start = max(_written(ledger, 9))  # replay the newest record, and go on
        victim = _spawn(APPENDER, str(ledger), "9", str(start), str(VICTIM_RECORDS))
        assert victim.wait(timeout=120) == 0
        for p in steady:
            assert p.wait(timeout=120) == 0
    finally:
        for p in [*steady, *([victim] if victim else [])]:
            if p.poll() is None:
                p.kill()
                p.wait()
    records = read_records(ledger, Rec)
    keys = [r.turn_key for r in records]
    assert len(keys) == len(set(keys)), "a replayed append was written twice"
    for writer, count in ((0, STEADY_RECORDS), (1, STEADY_RECORDS), (2, STEADY_RECORDS)):
        assert [r.n for r in records if r.writer == writer] == list(range(count)), (
            f"writer {writer} lost or reordered records"
        )
    assert [r.n for r in records if r.writer == 9] == list(range(VICTIM_RECORDS)), (
        "the killed writer lost or reordered records"
    )


def test_a_torn_last_line_is_ignored_by_readers_and_cut_by_the_next_append(tmp_path: Path) -> None:
    """A record without its newline is invisible, and the next append starts a clean line."""
    ledger = tmp_path / "l.jsonl"
    append_record(ledger, Rec(turn_key="a", writer=0, n=0))
    with ledger.open("ab") as f:
        f.write(b'{"turn_key": "b", "wri')
    assert [r.turn_key for r in read_records(ledger, Rec)] == ["a"]
    assert append_record(ledger, Rec(turn_key="c", writer=0, n=1))
    assert [r.turn_key for r in read_records(ledger, Rec)] == ["a", "c"]


def test_damage_in_the_middle_of_a_ledger_is_reported_with_its_line(tmp_path: Path) -> None:
    """A complete line that is not JSON is damage, reported with the path and line number."""
    ledger = tmp_path / "l.jsonl"
    ledger.write_bytes(b'{"turn_key": "a", "writer": 0, "n": 0}\nnot json\n')
    with pytest.raises(CorruptFileError, match="line 2"):
        list(iter_jsonl(ledger))


RACER = """
import sys, time
from pathlib import Path
from loopx.storage.files import exclusive_create
path, me, go = Path(sys.argv[1]), sys.argv[2], float(sys.argv[3])
while time.time() < go:
    pass
print("won" if exclusive_create(path, me.encode()) else "lost")
"""


def test_exactly_one_exclusive_creator_wins(tmp_path: Path) -> None:
    """Ten processes racing to create one file: one winner, whose bytes are the file."""
    for round_ in range(3):
        target = tmp_path / f"lease-{round_}.json"
        go = time.time() + 0.5
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", textwrap.dedent(RACER), str(target), f"p{i}", str(go)],
                stdout=subprocess.PIPE,
                text=True,
            )
            for i in range(10)
        ]
        outs = [p.communicate(timeout=60)[0].strip() for p in procs]
        assert outs.count("won") == 1
        winner = f"p{outs.index('won')}"
        assert target.read_text() == winner
        assert (target.stat().st_mode & 0o777) == 0o600


HOLDER = """
import sys, time
from pathlib import Path
from loopx.storage.locks import locked
with locked(Path(sys.argv[1])):
    Path(sys.argv[2]).write_text("held")
    time.sleep(60)
"""


def test_a_busy_lock_ends_in_a_clear_timeout(tmp_path: Path) -> None:
    """While another process holds the lock, a short timeout raises LockTimeoutError naming it."""
    target, flag = tmp_path / "registry.json", tmp_path / "held"
    holder = _spawn(HOLDER, str(target), str(flag))
    try:
        _wait_for(flag.exists)
        with pytest.raises(LockTimeoutError) as info, locked(target, timeout=0.5):
            pass
        assert "registry.json.lock" in info.value.message
    finally:
        holder.kill()
        holder.wait()
    with locked(target, timeout=5):  # the dead holder's lock is free again
        pass


def test_files_are_private_and_symlinks_are_refused(tmp_path: Path) -> None:
    """Atomic writes create 0600 files and refuse to write through a symlink."""
    target = tmp_path / "f"
    atomic_write_bytes(target, b"x")
    assert (target.stat().st_mode & 0o777) == 0o600
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("keep")
    link = tmp_path / "link"
    link.symlink_to(elsewhere)
    with pytest.raises(UnsafePathError):
        atomic_write_bytes(link, b"evil")
    with pytest.raises(UnsafePathError):
        read_bytes(link)
    assert not exclusive_create(link, b"evil")
    assert elsewhere.read_text() == "keep"
    os.unlink(link)


def _read_in_dir(directory: Path, name: str) -> bytes:
    fd = open_dir(str(directory))
    try:
        return read_bytes_at(fd, name, str(directory / name))
    finally:
        os.close(fd)


@pytest.mark.parametrize("planted", ["dir", "parent", "file"])
def test_reads_relative_to_an_open_directory_follow_no_symlink(
    tmp_path: Path, planted: str
) -> None:
    """open_dir refuses a symlinked directory or parent; read_bytes_at a symlinked file."""
    decoy = tmp_path / "decoy"
    (decoy / "g").mkdir(parents=True)
    (decoy / "g" / "state.json").write_text("secret")
    (decoy / "state.json").write_text("secret")
    goals = tmp_path / "root" / "goals"
    goal_dir = goals / "g"
    if planted == "parent":
        goals.parent.mkdir()
        goals.symlink_to(decoy)
    else:
        goals.mkdir(parents=True)
        if planted == "dir":
            goal_dir.symlink_to(decoy)
        else:
            goal_dir.mkdir()
            (goal_dir / "state.json").symlink_to(decoy / "state.json")
    with pytest.raises(UnsafePathError, match="symlink") as info:
        _read_in_dir(goal_dir, "state.json")
    where = {"dir": goal_dir, "parent": goals, "file": goal_dir / "state.json"}[planted]
    assert info.value.path == where


def test_a_file_read_relative_to_its_directory_is_read_whole(tmp_path: Path) -> None:
    """read_bytes_at reads every byte; a missing file is FileNotFoundError naming the path."""
    (tmp_path / "g").mkdir()
    (tmp_path / "g" / "f").write_bytes(b"x" * 100_000)
    fd = open_dir(str(tmp_path / "g"))
    try:
        assert read_bytes_at(fd, "f", "unused") == b"x" * 100_000
        with pytest.raises(FileNotFoundError) as info:
            read_bytes_at(fd, "missing", str(tmp_path / "g" / "missing"))
    finally:
        os.close(fd)
    assert info.value.filename == str(tmp_path / "g" / "missing")
