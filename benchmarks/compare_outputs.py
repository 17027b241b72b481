"""Byte-for-byte: the status document and the ``--json`` outputs of this tree against another's.

Builds one 40-goal root with every kind of goal (never ran, ran, done, gate
open, paused, quota exhausted, failing, quarantined, crash loop, waiting,
running, damaged state), then, for each of two LoopX installs, restores that
root, runs the same commands with the clock frozen at one instant (Debian's
``faketime``) and a fresh host cache, and compares what each printed with
``cmp``. Issue 25: the SQLite cache changes no output. The host's memory
and load, measured afresh by every quota decision, are masked (``N``)
before comparing, as ``tests/test_quota_snapshot.py`` does.

    python benchmarks/compare_outputs.py --other /work/wt/base811/.venv/bin/python

Exits 0 when every output is the same, 1 otherwise (naming the differing ones).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

from loopx.fleet import AgentSlot, FleetRecord
from loopx.registry.model import GoalStatus
from loopx.registry.quota_policy import QuotaPolicy
from loopx.root import Layout
from loopx.state import GoalState
from loopx.storage.files import atomic_write_bytes
from loopx.testing.status_fixtures import (
    append_history,
    append_spend,
    history_line,
    make_goal,
    make_root,
    open_gate_state,
    register_goals,
    write_lease,
    write_state,
)

AT = datetime(2030, 1, 1, 12, 0, 0, tzinfo=UTC)
FROZEN = AT.strftime("%Y-%m-%d %H:%M:%S")
HOST_NUMBERS = re.compile(rb'("available_memory_mb"|"load_1m"): [-+.e0-9]+')
# (name, argv after `loopx --root ROOT`): run in this order on each side.
COMMANDS: list[tuple[str, list[str]]] = [
    ("status-cold", ["status", "--json", "--clear-cache"]),
    ("status-warm", ["status", "--json"]),
    ("status-ttl0", ["status", "--json", "--ttl", "0"]),
    ("status-human", ["status", "--json", "--actor", "human"]),
    ("status-limit", ["status", "--json", "--limit", "5"]),
    ("refresh", ["refresh", "--json"]),
    ("refresh-full", ["refresh", "--full", "--json"]),
    ("goal-list", ["goal", "list", "--json"]),
    ("goal-show", ["goal", "show", "ran-00", "--json"]),
    ("quota-show", ["quota", "show", "spent-00", "--json"]),
    *[
        (f"should-run-{g}", ["quota", "should-run", g, "--json"])
        for g in ("never-00", "spent-00", "paused-00", "gate-00", "waiting-00")
    ],
    ("should-run-warm", ["quota", "should-run", "never-00", "--json"]),
    ("should-run-line", ["quota", "should-run", "spent-00"]),
    ("doctor", ["doctor", "--json"]),
]


def write_files(layout: Layout, kinds: dict[str, list[str]], *, now: datetime) -> None:
    """The goals' state, history, spend, lease and quarantine files, by kind."""
    for goal_id in [*kinds["ran"], *kinds["done"], *kinds["failing"], *kinds["spent"]]:
        lines = [
            history_line(goal_id, seq, ended_at=now - timedelta(minutes=60 - seq))
            for seq in range(1, 4)
        ]
        append_history(layout, lines)
        failures = 4 if goal_id in kinds["failing"] else 0
        state = GoalState(
            goal_id=goal_id, turn_seq=3, consecutive_failures=failures, updated_at=now
        )
        write_state(layout, state)
    for goal_id in kinds["gate"]:
        write_state(layout, open_gate_state(goal_id, "which API: v2 or v3?", now=now))
    for goal_id in kinds["spent"]:
        append_spend(layout, goal_id, 4, wall_s=200.0, ended_at=now - timedelta(minutes=10))
    for goal_id in kinds["waiting"]:
        state = GoalState(goal_id=goal_id, next_eligible_at=AT + timedelta(hours=1), updated_at=now)
        write_state(layout, state)
    for goal_id in kinds["running"]:
        write_lease(layout, goal_id, now=AT - timedelta(seconds=10), ttl_s=3600)
    for goal_id in kinds["quar"]:
        (layout.quarantine_dir / goal_id).mkdir(parents=True, exist_ok=True)
        (layout.quarantine_dir / goal_id / "000001.json").write_text("{torn")
    for goal_id in kinds["damaged"]:
        atomic_write_bytes(layout.state_file(goal_id), b"{not json")


def write_fleet(layout: Layout, crash_goal: str, *, now: datetime) -> None:
    """A supervisor of another host whose agent-0 crash-loops holding ``crash_goal``'s lease."""
    write_lease(layout, crash_goal, now=AT - timedelta(seconds=10), agent_id="agent-0", ttl_s=3600)
    slot = AgentSlot(index=0, agent_id="agent-0", crash_loop=True, restarts=6, recent_restarts=5)
    record = FleetRecord(
        pid=1,
        pid_started_at=0.0,
        hostname=f"not-{socket.gethostname()}",
        agents_wanted=2,
        started_at=now,
        updated_at=now,
        slots=[slot, AgentSlot(index=1, agent_id="agent-1")],
    )
    atomic_write_bytes(layout.supervisor_file, record.model_dump_json(indent=2).encode())


# kind -> (how many, the goal's own fields)
KINDS: dict[str, tuple[int, dict[str, object]]] = {
    "never": (8, {}),
    "prio": (3, {"priority": 5}),
    "ran": (4, {}),
    "done": (3, {"status": GoalStatus.DONE}),
    "paused": (3, {"status": GoalStatus.PAUSED}),
    "gate": (3, {}),
    "spent": (3, {"quota": QuotaPolicy(compute=0.001)}),
    "failing": (3, {}),
    "waiting": (3, {}),
    "running": (2, {}),
    "quar": (2, {}),
    "damaged": (2, {}),
    "crash": (1, {}),
}


def build(base: Path) -> Layout:
    """The 40-goal root, every file dated at or before ``AT``."""
    layout = make_root(base)
    wd = base / "wd"
    wd.mkdir()
    now = AT - timedelta(minutes=5)
    kinds = {k: [f"{k}-{i:02d}" for i in range(n)] for k, (n, _) in KINDS.items()}
    goals = [
        make_goal(goal_id, now=now, workdir=wd, **KINDS[kind][1])
        for kind, ids in kinds.items()
        for goal_id in ids
    ]
    for goal in goals:
        layout.ensure_goal_dirs(goal.id)
    register_goals(layout, goals)
    write_files(layout, kinds, now=now)
    write_fleet(layout, kinds["crash"][0], now=now)
    return layout


def run_side(python: str, pristine: Path, root: Path, out: Path) -> None:
    """Restore ``root`` from ``pristine`` and record each command's exit code and stdout."""
    if root.exists():
        shutil.rmtree(root)
    shutil.copytree(pristine, root, symlinks=True)
    out.mkdir(parents=True)
    cache = out / "xdg-cache"
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPX_")}
    env |= {
        "TZ": "UTC",
        "XDG_CACHE_HOME": str(cache),
        "NO_FAKE_STAT": "1",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
    }
    for name, argv in COMMANDS:
        done = subprocess.run(
            # -P and a neutral cwd: the install's own loopx, never one in the current folder.
            ["faketime", "-f", FROZEN, python, "-P", "-m", "loopx", "--root", str(root), *argv],
            capture_output=True,
            cwd=out,
            env=env,
            timeout=120,
            check=False,
        )
        stdout = HOST_NUMBERS.sub(rb"\1: N", done.stdout)
        (out / name).write_bytes(f"exit {done.returncode}\n".encode() + stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--other", required=True, help="the other install's python")
    parser.add_argument("--this", default=sys.executable, help="this install's python")
    parser.add_argument("--keep", action="store_true", help="keep the outputs (printed path)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="loopx-compare-"))
    try:
        layout = build(work / "build")
        pristine = work / "pristine"
        shutil.copytree(layout.root, pristine, symlinks=True)
        root = layout.root  # the same path on both sides: outputs name it
        shutil.rmtree(root)
        run_side(args.this, pristine, root, work / "this")
        run_side(args.other, pristine, root, work / "other")
        differ = []
        for name, _argv in COMMANDS:
            same = subprocess.run(
                ["cmp", "-s", work / "this" / name, work / "other" / name], check=False
            )
            print(f"{'same' if same.returncode == 0 else 'DIFFERS'}  {name}")
            if same.returncode != 0:
                differ.append(name)
        print(f"{len(COMMANDS) - len(differ)} of {len(COMMANDS)} outputs byte-identical")
        return 1 if differ else 0
    finally:
        if args.keep:
            print(f"outputs kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
