"""Chaos: SIGKILL the supervisor, an agent or a host at seeded random moments, then let it finish.

A fleet of 4 agents works on demo goals while this test kills, at random
(seeded) moments, the supervisor (then starts a new one, as systemd would), one
agent (the supervisor restarts it) or one host (the agent's turn sees it die).
A keeper goal, whose host waits for the kills to end, keeps the fleet from going
idle mid-phase. When the kills are done the fleet runs until idle, and an invariant checker
confirms, from the files alone:

* no two leases of a goal overlapped: journals ordered by epoch have disjoint
  ``[created_at, ended_at]`` spans and strictly rising epochs;
* every journal is terminal, and nothing was quarantined;
* history has exactly one line per finished turn (unique ``turn_key``);
* the quota ledger has exactly one line per journal whose host ran;
* no process carrying this root's ``LOOPX_ROOT`` is left;
* every goal ends in the same final state as an undisturbed run of it;
* ``loopx replay GOAL --verify`` is clean for every goal;
* ``loopx doctor`` finds no error anywhere in the root.

The default run is small (4 goals, a dozen kills). ``@pytest.mark.soak`` runs
the full size: 20 goals, 200 kills, within about ten minutes on two
cores. ``LOOPX_CHAOS_SEED`` replays a run.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest

from loopx.agents.turn import TurnConfig, run_one_turn
from loopx.doctor import diagnose
from loopx.model import utcnow
from loopx.registry.catalog import load_registry
from loopx.registry.goalrecords import HostKind, HostSpec
from loopx.registry.goals import GoalChanges, add_goal
from loopx.root import Layout
from loopx.turn.replay import replay
from tests.faketime import LIBFAKETIME, faketime_env
from tests.turnkit import cli_env, loopx, make_root

SEED = int(os.environ.get("LOOPX_CHAOS_SEED", "20261129"))
TIMING = {"LOOPX_LEASE_TTL_S": "3", "LOOPX_LEASE_GRACE_S": "2", "LOOPX_KILL_GRACE_S": "0.5"}


@dataclass(frozen=True, slots=True)
class Plan:
    goals: int
    steps: int
    hang_s: float
    kills: int
    gap_s: tuple[float, float]  # seconds between two kills
    budget_s: float  # the whole test must finish within this


SMALL = Plan(goals=4, steps=10, hang_s=0.3, kills=12, gap_s=(0.2, 1.0), budget_s=240)
SOAK = Plan(goals=20, steps=40, hang_s=0.3, kills=200, gap_s=(0.2, 1.0), budget_s=600)


@dataclass(slots=True)
class Fleet:
    """The supervisor under test, restarted after each kill of it."""

    root: Path
    agents: int = 4
    timing: dict[str, str] = field(default_factory=lambda: dict(TIMING))
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0
    log: Path = field(init=False)

    def __post_init__(self) -> None:
        self.log = self.root.parent / "supervisor.log"

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "loopx",
                    "--root",
                    str(self.root),
                    "supervisor",
                    "run",
                    "--agents",
                    str(self.agents),
                    "--until-idle",
                    "--idle-horizon-seconds",
                    "120",
                    "--stall-seconds",
                    "30",
                    "--crash-loop-restarts",
                    "100000",
                    "--restart-max-seconds",
                    "0.5",
                    "--stop-grace-seconds",
                    "5",
                    "--refresh-interval-seconds",
                    "60",
                ],
                env=cli_env(**self.timing),
                stdout=out,
                stderr=out,
            )
        self.starts += 1

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


def marked(root: Path) -> list[tuple[psutil.Process, dict[str, str]]]:
    """Live processes whose environment names this root, with their environment."""
    out = []
    for proc in psutil.process_iter():
        try:
            env = proc.environ()
            if env.get("LOOPX_ROOT") == str(root) and proc.status() != psutil.STATUS_ZOMBIE:
                out.append((proc, env))
        except psutil.Error:
            continue
    return out


def kill_one(fleet: Fleet, what: str, rng: random.Random) -> bool:
    """SIGKILL one supervisor, agent or host; False when there is none to kill right now."""
    if what == "supervisor":
        if not fleet.alive():
            return False
        assert fleet.proc is not None
        fleet.proc.kill()
        fleet.proc.wait()
        fleet.start()  # as systemd's Restart=always would
        return True
    deadline = time.monotonic() + 2.0  # a host lives for a moment: look for one a little while
    while True:
        procs = marked(fleet.root)
        if what == "agent":
            targets = [
                p for p, env in procs if "LOOPX_AGENT_ID" in env and "LOOPX_TURN_KEY" not in env
            ]
        else:
            targets = [p for p, env in procs if "LOOPX_TURN_KEY" in env]
        if targets:
            break
        if time.monotonic() > deadline or not fleet.alive():
            return False
        time.sleep(0.02)
    victim = rng.choice(sorted(targets, key=lambda p: p.pid))
    try:
        victim.send_signal(signal.SIGKILL)
    except psutil.Error:
        return False
    return True


def add_demo_goals(layout: Layout, plan: Plan, base: Path, prefix: str, count: int) -> list[str]:
    ids = []
    for index in range(count):
        goal_id = f"{prefix}{index:02d}"
        workdir = base / "work" / goal_id
        workdir.mkdir(parents=True)
        host = HostSpec(
            kind=HostKind.DEMO, argv=["--steps", str(plan.steps), "--hang", str(plan.hang_s)]
        )
        changes = GoalChanges(
            objective=f"count to {plan.steps}",
            workdir=str(workdir),
            host=host,
            max_host_attempts=100,
        )
        add_goal(layout, goal_id, changes, update=False, default_workdir=workdir, now=utcnow())
        ids.append(goal_id)
    return ids


# A goal whose host runs until the kill phase is over, so the fleet cannot go idle while the
# test is still killing, however the machine's load splits time between fleet and test.
KEEPER = (
    "import os, sys, time\n"
    "while not os.path.exists(sys.argv[1]):\n"
    "    time.sleep(0.05)\n"
    "os.execv(sys.executable, [sys.executable, '-m', 'loopx.agents.demo', '--steps', '1'])\n"
)


def add_keeper(layout: Layout, base: Path, release: Path) -> str:
    workdir = base / "work" / "keeper"
    workdir.mkdir(parents=True)
    host = HostSpec(kind=HostKind.COMMAND, argv=[sys.executable, "-c", KEEPER, str(release)])
    changes = GoalChanges(
        objective="hold the fleet busy", workdir=str(workdir), host=host, max_host_attempts=100
    )
    add_goal(layout, "keeper", changes, update=False, default_workdir=workdir, now=utcnow())
    return "keeper"


def final_state(layout: Layout, goal_id: str) -> dict[str, Any]:
    """What an undisturbed run and a disturbed one must agree on (turn-level history may differ)."""
    goal_dir = layout.goal_dir(goal_id)
    state = json.loads((goal_dir / "state.json").read_text())
    history = [json.loads(x) for x in (goal_dir / "history.jsonl").read_text().splitlines()]
    committed = [h for h in history if h["status"] == "committed"]
    workdir = Path(load_registry(layout).goals[goal_id].workdir)
    counter = json.loads((workdir / ".loopx-demo" / "counter.json").read_text())["count"]
    return {
        "goal_status": load_registry(layout).goals[goal_id].status,
        "todos": state["todos"],
        "next_action": state["next_action"],
        "last_belief": state["beliefs"][-1],
        "open_gates": [g for g in state["gates"] if g["answer"] is None],
        "consecutive_failures": state["consecutive_failures"],
        "next_eligible_at": state["next_eligible_at"],
        "last_kind": committed[-1]["kind"],
        "last_summary": committed[-1]["summary"],
        "counter": counter,
    }


# --- the invariant checker ---------------------------------------------------------------------


def check_invariants(layout: Layout, goal_id: str) -> dict[str, int]:
    """Assert every invariant of the module docstring for one goal; return its turn counts."""
    goal_dir = layout.goal_dir(goal_id)
    journals = [json.loads(p.read_text()) for p in sorted((goal_dir / "turns").glob("*.json"))]
    # every journal terminal
    assert all(j["status"] in {"committed", "failed", "stopped"} for j in journals), [
        (j["turn_key"], j["status"]) for j in journals if j["status"] == "in_progress"
    ]
    # no two overlapping leases: by epoch, spans are disjoint and epochs strictly rise
    spans = sorted((j["epoch"], j["created_at"], j["ended_at"], j["turn_key"]) for j in journals)
    for (e1, _s1, end1, k1), (e2, start2, _end2, k2) in itertools.pairwise(spans):
        assert e1 < e2, f"{k1} and {k2} share epoch {e1}"
        assert end1 <= start2, f"{k1} (epoch {e1}, ended {end1}) overlaps {k2} (started {start2})"
    # history: one line per finished turn, unique by turn_key
    history = [
        json.loads(x)["turn_key"] for x in (goal_dir / "history.jsonl").read_text().splitlines()
    ]
    assert len(history) == len(set(history)), (
        f"duplicate history lines: {Counter(history).most_common(3)}"
    )
    assert set(history) == {j["turn_key"] for j in journals}
    # ledger: one line per journal whose host ran
    ledger = [
        json.loads(x)["turn_key"] for x in (goal_dir / "quota.jsonl").read_text().splitlines()
    ]
    assert len(ledger) == len(set(ledger)), (
        f"duplicate ledger lines: {Counter(ledger).most_common(3)}"
    )
    assert set(ledger) == {j["turn_key"] for j in journals if j["outcome"] is not None}
    return {
        "journals": len(journals),
        "retried": sum(1 for j in journals if j["attempt"] > 1),
        "stopped": sum(1 for j in journals if j["status"] == "stopped"),
        "failed": sum(1 for j in journals if j["status"] == "failed"),
    }


def wait_gone(root: Path, timeout: float = 15.0) -> list[psutil.Process]:
    deadline = time.monotonic() + timeout
    while (left := [p for p, _ in marked(root)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def kill_phase(fleet: Fleet, plan: Plan, rng: random.Random, started: float) -> Counter[str]:
    """Kill until the plan's count, or until 70% of the budget is spent on a loaded machine;
    then at least half the planned kills must have landed for the run to count."""
    kills: Counter[str] = Counter()
    while sum(kills.values()) < plan.kills and time.monotonic() - started < plan.budget_s * 0.7:
        time.sleep(rng.uniform(*plan.gap_s))
        if not fleet.alive() and fleet.proc is not None and fleet.proc.returncode is not None:
            pytest.fail(
                f"the supervisor exited {fleet.proc.returncode} while the keeper goal "
                f"still had work, after {dict(kills)} kills; see {fleet.log}"
            )
        what = rng.choice(["supervisor", "agent", "host", "host"])
        if kill_one(fleet, what, rng):
            kills[what] += 1
    assert sum(kills.values()) >= plan.kills // 2, f"too few kills in the budget: {kills}"
    return kills


def run_chaos(tmp_path: Path, plan: Plan) -> dict[str, Any]:
    started = time.monotonic()
    rng = random.Random(SEED)
    layout = make_root(tmp_path / "root")
    goals = add_demo_goals(layout, plan, tmp_path, "g", plan.goals)
    release = tmp_path / "kills-done"
    keeper = add_keeper(layout, tmp_path, release)
    fleet = Fleet(layout.root)
    try:
        fleet.start()
        kills = kill_phase(fleet, plan, rng, started)
        release.touch()
        if not fleet.alive() and (fleet.proc is None or fleet.proc.returncode != 0):
            fleet.start()
        assert fleet.proc is not None
        code = fleet.proc.wait(timeout=max(plan.budget_s - (time.monotonic() - started) - 60, 30))
        assert code == 0, f"supervisor exited {code}; see {fleet.log}"
        left = wait_gone(layout.root)
        assert not left, f"processes left: {[(p.pid, p.name()) for p in left]}"
    finally:
        if fleet.alive():
            assert fleet.proc is not None
            fleet.proc.kill()
            fleet.proc.wait()
        for proc, _ in marked(layout.root):
            proc.kill()

    # Undisturbed reference: the same goal, turn by turn, nothing killed.
    reference = add_demo_goals(layout, plan, tmp_path, "ref", 1)[0]
    for _ in range(plan.steps + 2):
        if run_one_turn(layout, reference, agent_id="reference", config=TurnConfig()) is None:
            break
    expected = final_state(layout, reference)
    assert expected["goal_status"] == "done" and expected["counter"] == plan.steps

    totals: Counter[str] = Counter()
    assert not any(layout.quarantine_dir.rglob("*")), "something was quarantined"
    check_invariants(layout, keeper)
    assert load_registry(layout).goals[keeper].status == "done"
    for goal_id in goals:
        totals.update(check_invariants(layout, goal_id))
        assert final_state(layout, goal_id) == expected, goal_id
        # `loopx replay --verify`'s check, called in this process (the CLI is tested elsewhere).
        verify = replay(layout, goal_id, verify=True)
        assert verify.clean, (
            [d.line() for d in verify.differences] + verify.pending + verify.invalid
        )
    # doctor: no damage anywhere (warnings such as a dead agent's leftover lease are allowed)
    report = diagnose(layout)
    errors = [f for f in report.findings if f.severity == "error"]
    assert not errors, errors
    warnings = Counter(str(f.code) for f in report.findings if f.severity == "warning")
    figures = {
        "seed": SEED,
        "goals": plan.goals,
        "agents": fleet.agents,
        "kills": dict(kills),
        "supervisor_starts": fleet.starts,
        "doctor_warnings": dict(warnings),
        **totals,
        "seconds": round(time.monotonic() - started),
    }
    print(f"chaos figures: {json.dumps(figures)}")  # quoted in docs/reliability.md
    return figures


@pytest.mark.timeout(SMALL.budget_s + 60)
def test_chaos_small(tmp_path: Path) -> None:
    """A dozen random SIGKILLs on 4 agents and 4 goals: every invariant holds afterwards."""
    run_chaos(tmp_path, SMALL)


@pytest.mark.soak
@pytest.mark.timeout(SOAK.budget_s + 120)
def test_chaos_soak(tmp_path: Path) -> None:
    """200 random SIGKILLs of supervisor, agents and hosts on 4 agents and 20 goals."""
    run_chaos(tmp_path, SOAK)


# --- resource faults: a full disk, damaged leases, daemonising hosts, a clock a day ahead -------

RESOURCE_SOAK = Plan(goals=6, steps=12, hang_s=0.2, kills=0, gap_s=(0.5, 2.0), budget_s=300)
FAULT_PHASE_S = 60.0
# The default lease timing (30 s + 30 s), longer than fills in a row last: a holder
# whose finished host waits out the full disk keeps its lease (past ttl + grace a
# live holder is taken over, and its host runs again under the same turn key,
# recorded once: docs/reliability.md).
RESOURCE_TIMING = {"LOOPX_KILL_GRACE_S": "0.5"}


def add_resource_goals(layout: Layout, plan: Plan, base: Path) -> list[str]:
    """Demo goals answering on stdout (a full root must not fail the host); half daemonise."""
    ids = []
    for index in range(plan.goals):
        goal_id = f"r{index:02d}"
        workdir = base / "work" / goal_id
        workdir.mkdir(parents=True)
        argv = ["--steps", str(plan.steps), "--hang", str(plan.hang_s), "--stdout-result"]
        argv += ["--daemon", "120"] if index % 2 else []
        changes = GoalChanges(
            objective=f"count to {plan.steps}",
            workdir=str(workdir),
            host=HostSpec(kind=HostKind.DEMO, argv=argv),
            max_host_attempts=100,
        )
        add_goal(layout, goal_id, changes, update=False, default_workdir=workdir, now=utcnow())
        ids.append(goal_id)
    return ids


def plant_lease(layout: Layout, goal_id: str, data: bytes) -> bool:
    """Create a damaged lease where none is held (never over a live holder's)."""
    try:
        fd = os.open(layout.lease_file(goal_id), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except (FileExistsError, OSError):
        return False
    try:
        os.write(fd, data)
    except OSError:  # the disk may be full right now: an empty lease then
        pass
    finally:
        os.close(fd)
    return True


def offset_turn(layout: Layout, goal_id: str) -> bool:
    """One `turn run-once` whose process clock runs a day ahead (Debian's faketime)."""
    if LIBFAKETIME is None:
        return False
    subprocess.run(
        [
            *(sys.executable, "-m", "loopx"),
            *("--root", str(layout.root), "turn", "run-once", goal_id),
        ],
        capture_output=True,
        env=cli_env(
            NO_FAKE_STAT="1",
            FAKETIME_DONT_FAKE_MONOTONIC="1",
            **faketime_env("+1d"),
            **RESOURCE_TIMING,
        ),
        timeout=120,
        check=False,
    )
    return True


def run_resource_chaos(tmp_path: Path, plan: Plan) -> dict[str, Any]:  # noqa: PLR0915 - one scenario read top to bottom
    """Faults at seeded moments for FAULT_PHASE_S, then the fleet finishes by itself."""
    from tests.test_tmpfs_full import fill, small_tmpfs

    started = time.monotonic()
    rng = random.Random(SEED)
    faults: Counter[str] = Counter()
    timeline: list[tuple[float, str, str, bool]] = []
    degraded_seen = False
    with small_tmpfs(tmp_path / "mnt", "32m") as mnt:
        layout = make_root(mnt / "root")
        goals = add_resource_goals(layout, plan, tmp_path)
        fleet = Fleet(layout.root, agents=3, timing=RESOURCE_TIMING)
        fleet.log = tmp_path / "supervisor.log"  # off the disk that fills
        try:
            fleet.start()
            while time.monotonic() - started < FAULT_PHASE_S and fleet.alive():
                time.sleep(rng.uniform(*plan.gap_s))
                what = rng.choice(["disk_full", "garbage_lease", "empty_lease", "clock"])
                goal_id = rng.choice(goals)
                if what == "disk_full":
                    filler = mnt / "filler"
                    fill(filler)
                    try:
                        doc = json.loads(loopx(layout.root, "status", "--json").stdout or "{}")
                        degraded_seen |= bool(doc.get("fleet", {}).get("degraded"))
                        time.sleep(rng.uniform(1.0, 4.0))
                        assert fleet.alive() or fleet.proc.returncode == 0, "supervisor died"  # type: ignore[union-attr]
                    finally:
                        filler.unlink()
                    done = True
                elif what == "garbage_lease":
                    done = plant_lease(layout, goal_id, b"\x00not a lease{")
                elif what == "empty_lease":
                    done = plant_lease(layout, goal_id, b"")
                else:
                    done = offset_turn(layout, goal_id)
                faults[what] += done
                timeline.append((round(time.monotonic() - started, 1), what, goal_id, done))
            assert fleet.proc is not None
            left_s = plan.budget_s - (time.monotonic() - started) - 30
            code = fleet.proc.wait(timeout=max(left_s, 30))
            assert code == 0, f"supervisor exited {code}; see {fleet.log}"
            left = wait_gone(layout.root)
            assert not left, f"processes left: {[(p.pid, p.cmdline()) for p in left]}"
        finally:
            if fleet.alive():
                assert fleet.proc is not None
                fleet.proc.kill()
                fleet.proc.wait()
            for proc, _ in marked(layout.root):
                proc.kill()
            # Kept for a post-mortem: the tmpfs goes with the test.
            shutil.copytree(layout.root, tmp_path / "root-copy", symlinks=True)
            (tmp_path / "timeline.json").write_text(json.dumps(timeline))
        assert "Traceback" not in fleet.log.read_text(errors="replace")
        totals: Counter[str] = Counter()
        for goal_id in goals:
            totals.update(check_invariants(layout, goal_id))
            workdir = tmp_path / "work" / goal_id
            runs = [
                line.split()[0]
                for line in (workdir / ".loopx-demo" / "runs.log").read_text().splitlines()
            ]
            assert len(runs) == len(set(runs)), f"{goal_id}: a host ran twice"
            final = final_state(layout, goal_id)
            assert (final["goal_status"], final["counter"]) == ("done", plan.steps), final
        report = diagnose(layout)
        bad = [f for f in report.findings if f.severity == "error" or f.code == "leftover_process"]
        assert not bad, bad
    if faults["disk_full"]:
        assert degraded_seen, "status never said degraded while the disk was full"
    figures = {
        "seed": SEED,
        "faults": dict(faults),
        **totals,
        "seconds": round(time.monotonic() - started),
    }
    print(f"resource chaos figures: {json.dumps(figures)}")
    return figures


@pytest.mark.soak
@pytest.mark.timeout(RESOURCE_SOAK.budget_s + 60)
def test_chaos_resource_faults_soak(tmp_path: Path) -> None:
    """A minute of full disks, damaged leases and a day-ahead clock on daemonising hosts."""
    run_resource_chaos(tmp_path, RESOURCE_SOAK)
