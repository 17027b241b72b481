"""The aggregate cache stays correct when its writer dies: fault points and real SIGKILL."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from loopx.environ import FAULT as FAULT_ENV
from loopx.faults import FAULT_EXIT_CODE
from loopx.quota.aggregate import SpendAggregate
from loopx.quota.ledger import read_spend, window_spend
from loopx.root import Layout

pytestmark = pytest.mark.timeout(120)

T0 = datetime(2025, 5, 1, tzinfo=UTC)
GOAL = "crashy"

# A writer like the turn engine's quota_spend phase: append a turn's spend,
# then decide (which reads the window and refreshes the cache), forever.
# A restarted writer replays the turn it may have been appending.
CHILD = """
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from loopx.quota.ledger import SpendRecord, append_spend, read_spend, window_spend
from loopx.root import Layout
from loopx.usage import Usage

layout = Layout.at(Path(sys.argv[1]))
count = int(sys.argv[2])
t0 = datetime(2025, 5, 1, tzinfo=UTC)
start = len(read_spend(layout, "crashy"))
for i in range(max(0, start - 1), count):
    end = t0 + timedelta(seconds=37 * i)
    append_spend(layout, SpendRecord(
        turn_key=f"crashy-{i:06d}-1", goal_id="crashy", seq=i,
        usage=Usage(wall_s=1.0 + i % 7, cpu_s=0.5 * (i % 3), input_tokens=i),
        started_at=end - timedelta(seconds=1), ended_at=end,
    ))
    window_spend(layout, "crashy", window_start=end - timedelta(hours=1))
"""


def run_child(root: Path, count: int, *, fault: str | None = None) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k != FAULT_ENV}
    if fault:
        env[FAULT_ENV] = fault
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, str(root), str(count)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def reap(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=30)
    if proc.stderr:
        proc.stderr.close()


def line_count(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def assert_consistent(layout: Layout) -> None:
    """Every window equals a re-read of the ledger, and the cache ends up covering it."""
    records = read_spend(layout, GOAL)
    keys = [r.turn_key for r in records]
    assert len(keys) == len(set(keys)), "a replayed spend was written twice"
    last = records[-1].ended_at
    for hours in (0.5, 1.0):
        start = last - timedelta(hours=hours)
        w = window_spend(layout, GOAL, window_start=start)
        minutes: dict[int, list] = {}
        for r in records:
            minutes.setdefault(math.floor(r.ended_at.timestamp() / 60), []).append(r)
        inside = [r for g in minutes.values() if max(x.ended_at for x in g) > start for r in g]
        assert w.turns == len(inside)
        assert math.isclose(w.wall_s, math.fsum(r.usage.wall_s for r in inside))
        assert w.lifetime.turns == len(records)
    agg = SpendAggregate.model_validate_json(layout.quota_aggregate_file(GOAL).read_bytes())
    # A SIGKILL can tear the last line (the kernel stops a write at a page
    # boundary for a fatal signal); the cache covers every complete line, never
    # the torn tail, which the next append cuts off.
    ledger = layout.quota_file(GOAL).read_bytes()
    complete = ledger.rfind(b"\n") + 1
    assert agg.ledger_offset == complete
    assert b"\n" not in ledger[complete:]


def test_death_between_ledger_append_and_cache_update_leaves_a_stale_cache(tmp_path):
    """Killed right after the ledger line is durable: the cache lags, and the next read fixes it."""
    layout = Layout.at(tmp_path)
    first = run_child(tmp_path, 5)
    try:
        assert first.wait(timeout=60) == 0
    finally:
        reap(first)
    size_before = layout.quota_file(GOAL).stat().st_size
    assert (
        SpendAggregate.model_validate_json(
            layout.quota_aggregate_file(GOAL).read_bytes()
        ).ledger_offset
        == size_before
    )

    crashed = run_child(tmp_path, 10, fault="quota_spend_appended")
    try:
        assert crashed.wait(timeout=60) == FAULT_EXIT_CODE
    finally:
        reap(crashed)
    stale = SpendAggregate.model_validate_json(layout.quota_aggregate_file(GOAL).read_bytes())
    assert (line_count(layout.quota_file(GOAL)), stale.ledger_offset) == (6, size_before)
    assert_consistent(layout)


def test_sigkill_at_random_moments_never_corrupts_the_window(tmp_path):
    """A writer SIGKILLed again and again, then restarted: windows always equal a re-read."""
    layout = Layout.at(tmp_path)
    ledger = layout.quota_file(GOAL)
    target = 0
    for round_ in range(4):
        proc = run_child(tmp_path, 10_000)
        try:
            target += 15 + 7 * round_
            deadline = time.monotonic() + 60
            while line_count(ledger) < target:
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else b""
                assert time.monotonic() < deadline, "the writer made no progress"
                time.sleep(0.005)
            os.kill(proc.pid, signal.SIGKILL)
            assert proc.wait(timeout=30) == -signal.SIGKILL
        finally:
            reap(proc)
        assert_consistent(layout)
    finisher = run_child(tmp_path, line_count(ledger) + 3)
    try:
        assert finisher.wait(timeout=60) == 0
    finally:
        reap(finisher)
    assert_consistent(layout)
    # A writer that finished cleanly leaves no torn tail: the cache covers the file.
    agg = SpendAggregate.model_validate_json(layout.quota_aggregate_file(GOAL).read_bytes())
    assert agg.ledger_offset == ledger.stat().st_size
