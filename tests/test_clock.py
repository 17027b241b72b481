"""Clock jumps: a turn whose process clock runs a day ahead does not keep its goal waiting a day.

The turn dates what it records by the filesystem's clock when its own
disagrees (:mod:`loopx.clock`). The offset clock is Debian's ``faketime``
(``.ci/setup.d/debian.sh`` installs it); without it the test is skipped.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from loopx.clock import MAX_SKEW_S, skew
from loopx.model import utcnow
from tests.faketime import faketime_env, needs_faketime
from tests.turnkit import cli_env, demo_goal, loopx_here, make_root

T0 = datetime(2030, 1, 1, tzinfo=UTC)


def test_skew_within_tolerance_is_ignored() -> None:
    """A second apart is coarse mtimes; a day apart is a wrong clock."""
    assert skew(T0 + timedelta(seconds=MAX_SKEW_S / 2), T0) == timedelta(0)
    assert skew(T0 + timedelta(days=1), T0) == timedelta(days=1)
    assert skew(T0 - timedelta(hours=3), T0) == timedelta(hours=-3)


@needs_faketime
def test_a_turn_a_day_ahead_waits_what_its_result_asked(tmp_path: Path) -> None:
    """`wait 60` under a clock one day ahead: eligible about 60 s from now, window not exhausted."""
    layout = make_root(tmp_path / "root")
    demo_goal(layout, "g", tmp_path / "work", "--kind", "wait", "--wait-seconds", "60")
    # Only this process's clock is off; the file times it reads stay the kernel's
    # (NO_FAKE_STAT), like an agent on a machine whose clock runs ahead.
    env = cli_env(NO_FAKE_STAT="1", FAKETIME_DONT_FAKE_MONOTONIC="1", **faketime_env("+1d"))
    before = utcnow()
    done = subprocess.run(
        [
            *(sys.executable, "-m", "loopx"),
            *("--root", str(layout.root), "turn", "run-once", "g", "--json"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "clock_skew" in done.stderr  # the offset was noticed and logged
    state = json.loads((layout.goal_dir("g") / "state.json").read_text())
    eligible = datetime.fromisoformat(state["next_eligible_at"])
    assert before + timedelta(seconds=55) <= eligible <= utcnow() + timedelta(seconds=60 + 10)
    decision = json.loads(loopx_here(layout.root, "quota", "should-run", "g", "--json").stdout)
    assert decision["reason"] != "window_exhausted", decision
    assert os.environ.get("FAKETIME") is None  # this process was never offset


def test_doctor_flags_a_future_dated_state_and_repair_clamps_it(tmp_path: Path) -> None:
    """A state dated a day ahead is a finding; `doctor --repair` keeps its wait, dated now."""
    layout = make_root(tmp_path / "root")
    demo_goal(layout, "g", tmp_path / "work")
    ahead = utcnow() + timedelta(days=1)
    state = {
        "goal_id": "g",
        "updated_at": ahead.isoformat(),
        "next_eligible_at": (ahead + timedelta(seconds=60)).isoformat(),
    }
    (layout.goal_dir("g") / "state.json").write_text(json.dumps(state))
    report = json.loads(loopx_here(layout.root, "doctor", "--json").stdout)
    assert "future_dated" in {f["code"] for f in report["findings"]}
    repaired = loopx_here(layout.root, "doctor", "--repair")
    assert "repaired:" in repaired.stdout, repaired.stderr
    after = json.loads((layout.goal_dir("g") / "state.json").read_text())
    eligible = datetime.fromisoformat(after["next_eligible_at"])
    assert eligible <= utcnow() + timedelta(seconds=61)
    report = json.loads(loopx_here(layout.root, "doctor", "--json").stdout)
    assert "future_dated" not in {f["code"] for f in report["findings"]}
