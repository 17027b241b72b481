"""Retention: the fold decision, gc with checkpoints that replay honestly, and crash safety."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import loopx
from loopx.agents.turn import attempt_turn
from loopx.errors import CorruptFileError
from loopx.model import utcnow
from loopx.quota.warmanswer import memo_path
from loopx.retention.foldplan import TurnMeta, plan_fold
from loopx.retention.policy import (
    KeepPolicy,
    RetentionChange,
    RetentionSettings,
    apply_change,
    update_settings,
)
from loopx.root import Layout
from loopx.turn.checkpoint import read_checkpoint

pytestmark = pytest.mark.timeout(300)

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def meta(seq: int, *, days_ago: float = 30, terminal: bool = True, notable: bool = False):
    return TurnMeta(
        seq=seq,
        turn_key=f"g-t{seq:06d}-e{seq}",
        terminal=terminal,
        ended_at=NOW - timedelta(days=days_ago),
        notable=notable,
    )


# --- the decision (pure) ------------------------------------------------------------------------


def test_the_last_keep_turns_turns_are_never_folded() -> None:
    """Of ten old turns under keep_turns=4, the first six fold."""
    plan = plan_fold(
        [meta(i) for i in range(1, 11)], {}, KeepPolicy(keep_turns=4), now=NOW, limit=99
    )
    assert (plan.through_seq, len(plan.folded)) == (6, 6)


def test_turns_of_the_last_keep_days_days_are_never_folded() -> None:
    """The fold stops at the first turn younger than keep_days."""
    turns = [meta(1, days_ago=20), meta(2, days_ago=10), meta(3, days_ago=2), meta(4, days_ago=1)]
    plan = plan_fold(turns, {}, KeepPolicy(keep_turns=1, keep_days=7), now=NOW, limit=99)
    assert plan.through_seq == 2


def test_a_turn_that_is_not_terminal_ends_the_fold() -> None:
    """Recovery must finish a journal before anything after it folds."""
    turns = [meta(1), meta(2, terminal=False), meta(3), meta(4)]
    plan = plan_fold(turns, {}, KeepPolicy(keep_turns=1, keep_days=0), now=NOW, limit=99)
    assert plan.through_seq == 1


def test_a_pass_folds_at_most_limit_turns() -> None:
    """gc works a bounded amount at a time."""
    plan = plan_fold(
        [meta(i) for i in range(1, 11)], {}, KeepPolicy(keep_turns=1, keep_days=0), now=NOW, limit=3
    )
    assert plan.through_seq == 3


def test_failed_or_gated_turns_keep_their_record_longer_then_expire() -> None:
    """A notable turn folds but keeps its record for keep_failed_days; older kept ones expire."""
    turns = [meta(1, days_ago=40, notable=True), meta(2, days_ago=20, notable=True), meta(3)]
    kept = {"g-t000001-e1": NOW - timedelta(days=40), "old": NOW - timedelta(days=100)}
    policy = KeepPolicy(keep_turns=1, keep_days=0, keep_failed_days=30)
    plan = plan_fold(turns, kept, policy, now=NOW, limit=99)
    assert (plan.kept, plan.expired) == (("g-t000002-e2",), ("g-t000001-e1", "old"))


def test_a_goal_override_replaces_only_the_fields_it_sets() -> None:
    """retention set --goal changes that goal's keep fields; the rest stay the root's."""
    settings = apply_change(RetentionSettings(), RetentionChange(keep_days=3))
    settings = apply_change(settings, RetentionChange(goal_id="g", keep_turns=9))
    assert (settings.for_goal("g"), settings.for_goal("other").keep_turns) == (
        KeepPolicy(keep_turns=9, keep_days=3),
        200,
    )


# --- gc on real turns -----------------------------------------------------------------------------


def run_turns(layout: Layout, goal_id: str, count: int) -> None:
    for _ in range(count):
        attempt = attempt_turn(layout, goal_id, agent_id="a1", stop=threading.Event())
        assert attempt.report is not None


@pytest.fixture
def api(tmp_path: Path) -> loopx.Root:
    loopx.Root.init(tmp_path / "root")
    root = loopx.Root.open(tmp_path / "root")
    (tmp_path / "w").mkdir()
    root.goals.add("g", objective="count", workdir=tmp_path / "w", host_kind="demo",
                   host=["--steps", "1000"])  # fmt: skip
    return root


def keep(layout: Layout, **fields: float) -> None:
    update_settings(layout, lambda s: s.model_copy(update={"keep": KeepPolicy(**fields)}))  # type: ignore[arg-type]


def names(directory: Path) -> list[str]:
    return sorted(n for n in os.listdir(directory) if not n.startswith("."))


def test_gc_folds_old_turns_and_replay_verifies_from_the_checkpoint(api: loopx.Root) -> None:
    """Ten turns under keep_turns=3: seven fold, three journals and run logs stay, verify is clean."""
    layout = api.layout
    run_turns(layout, "g", 10)
    keep(layout, keep_turns=3, keep_days=0)
    report = api.retention.gc()
    goal_dir = layout.goal_dir("g")
    history = (goal_dir / "history.jsonl").read_text().splitlines()
    verified = api.turns.replay("g", verify=True)
    assert (
        report.folded,
        names(goal_dir / "turns"),
        names(goal_dir / "runs"),
        len(history),
        verified.clean,
        verified.checkpoint,
    ) == (
        7,
        ["g-t000008-e8.json", "g-t000009-e9.json", "g-t000010-e10.json"],
        ["10.json", "10.md", "8.json", "8.md", "9.json", "9.md"],
        3,
        True,
        "g-t000007-e7",
    )


def test_checkpoints_chain_across_passes_and_turns_go_on(api: loopx.Root) -> None:
    """A second pass after more turns folds on top of the first checkpoint; state stays whole."""
    layout = api.layout
    run_turns(layout, "g", 6)
    keep(layout, keep_turns=2, keep_days=0)
    api.retention.gc()
    first = read_checkpoint(layout, "g")
    run_turns(layout, "g", 5)
    api.retention.gc()
    second = read_checkpoint(layout, "g")
    state = api.goals.show("g").state
    verified = api.turns.replay("g", verify=True)
    assert first is not None and second is not None
    assert (
        first.through_seq,
        second.through_seq,
        second.folded.turns,
        second.journals_digest != first.journals_digest,
        state.turn_seq,
        verified.clean,
    ) == (4, 9, 9, True, 11, True)


def test_a_damaged_checkpoint_is_refused_not_trusted(api: loopx.Root) -> None:
    """An edited checkpoint fails its digest: replay says so, gc leaves the goal alone."""
    layout = api.layout
    run_turns(layout, "g", 4)
    keep(layout, keep_turns=1, keep_days=0)
    api.retention.gc()
    path = layout.goal_dir("g") / "checkpoint.json"
    path.write_text(path.read_text().replace('"through_seq": 3', '"through_seq": 2'))
    with pytest.raises(CorruptFileError, match="digest"):
        api.turns.replay("g", verify=True)
    assert api.retention.gc().goals[0].skipped is not None


def test_a_leased_goal_is_skipped(api: loopx.Root) -> None:
    """gc never touches a goal whose lease a live process holds."""
    from loopx.turn.lease import claim, release

    layout = api.layout
    run_turns(layout, "g", 4)
    keep(layout, keep_turns=1, keep_days=0)
    held = claim(layout, "g", agent_id="someone", now=utcnow())
    assert held.lease is not None
    try:
        report = api.retention.gc()
    finally:
        release(layout, held.lease)
    assert (report.goals[0].skipped, len(names(layout.turns_dir("g")))) == (
        "leased by someone",
        4,
    )


def test_dry_run_reports_and_changes_nothing(api: loopx.Root) -> None:
    """gc --dry-run counts what would go and leaves every file."""
    layout = api.layout
    run_turns(layout, "g", 5)
    keep(layout, keep_turns=2, keep_days=0)
    before = sorted(p.name for p in layout.goal_dir("g").rglob("*"))
    report = api.retention.gc(dry_run=True)
    after = sorted(p.name for p in layout.goal_dir("g").rglob("*"))
    assert (report.folded, report.files, before == after) == (3, 9, True)


def test_failed_turns_keep_their_record_in_kept(tmp_path: Path) -> None:
    """Folded turns that failed move their journal and run logs to kept/, outside replay."""
    loopx.Root.init(tmp_path / "root")
    root = loopx.Root.open(tmp_path / "root")
    (tmp_path / "w").mkdir()
    root.goals.add("f", objective="fail", workdir=tmp_path / "w", host_kind="demo",
                   host=["--fail"], max_host_attempts=1)  # fmt: skip
    layout = root.layout
    for _ in range(3):
        attempt_turn(layout, "f", agent_id="a1", stop=threading.Event())
        # A failing goal backs off; make it eligible again (set-up, not what is tested).
        doc = json.loads(layout.state_file("f").read_text())
        layout.state_file("f").write_text(json.dumps({**doc, "next_eligible_at": None}))
    keep(layout, keep_turns=1, keep_days=0, keep_failed_days=30)
    root.retention.gc()
    assert (
        names(layout.goal_dir("f") / "kept"),
        names(layout.turns_dir("f")),
        names(layout.runs_dir("f")),
    ) == (
        ["1.json", "1.md", "2.json", "2.md", "f-t000001-e1.json", "f-t000002-e2.json"],
        ["f-t000003-e3.json"],
        ["3.json", "3.md"],
    )


# --- crash safety -------------------------------------------------------------------------------

FAULTS = [
    "gc:before_checkpoint",
    "gc:checkpoint_written",
    "gc:journals_removed",
    "gc:runs_removed",
    "gc:history_rewritten",
]


def goal_files(goal_dir: Path) -> dict[str, bytes]:
    """Every file of the goal that a fold writes or removes (not locks, lease or epoch)."""
    out = {}
    for path in sorted(goal_dir.rglob("*")):
        name = path.relative_to(goal_dir).as_posix()
        if path.is_file() and not name.endswith(".lock") and name not in {"lease.json", "epoch"}:
            out[name] = path.read_bytes()
    return out


def loopx_gc(root: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "loopx", "--root", str(root), "gc"],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A root with one goal of eight turns, under keep_turns=2 (gc folds six)."""
    base = tmp_path_factory.mktemp("prepared")
    loopx.Root.init(base / "root")
    root = loopx.Root.open(base / "root")
    (base / "w").mkdir()
    root.goals.add("g", objective="count", workdir=base / "w", host_kind="demo",
                   host=["--steps", "1000"])  # fmt: skip
    run_turns(root.layout, "g", 8)
    keep(root.layout, keep_turns=2, keep_days=0)
    return base


@pytest.fixture(scope="module")
def undisturbed(prepared: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    copy = tmp_path_factory.mktemp("undisturbed") / "root"
    shutil.copytree(prepared / "root", copy, symlinks=True)
    assert loopx_gc(copy).returncode == 0
    return goal_files(copy / "goals" / "g")


@pytest.mark.parametrize("point", FAULTS)
def test_a_gc_killed_at_each_step_converges_to_the_undisturbed_files(
    point: str, prepared: Path, undisturbed: dict[str, bytes], tmp_path: Path
) -> None:
    """Killed at a fault point, then run again: the goal's files equal an undisturbed gc's."""
    copy = tmp_path / "root"
    shutil.copytree(prepared / "root", copy, symlinks=True)
    crashed = loopx_gc(copy, LOOPX_FAULT=point)
    replay_between = subprocess.run(
        [sys.executable, "-m", "loopx", "--root", str(copy), "replay", "g", "--verify"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    again = loopx_gc(copy)
    files = goal_files(copy / "goals" / "g")
    assert (crashed.returncode, replay_between.returncode, again.returncode) == (137, 0, 0), (
        replay_between.stdout + again.stderr
    )
    assert sorted(files) == sorted(undisturbed)
    assert files == undisturbed


# --- disk limits ----------------------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 32 MiB tmpfs (skipped where mounting is not permitted)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=32m,mode=0700", "tmpfs", str(disk)],
        capture_output=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def test_below_the_free_space_floor_no_turn_starts_and_turns_resume_when_freed(
    small_disk: Path, tmp_path: Path
) -> None:
    """On a small tmpfs past the floor the agent idles and status says why; freed, it runs again."""
    from loopx.agents.loop import Agent, Step
    from loopx.fleet import AgentConfig

    loopx.Root.init(small_disk / "root")
    root = loopx.Root.open(small_disk / "root")
    (tmp_path / "w").mkdir()
    root.goals.add("g", objective="count", workdir=tmp_path / "w", host_kind="demo",
                   host=["--steps", "1000"])  # fmt: skip
    root.retention.set(min_free_disk_mb=20)
    filler = small_disk / "filler"
    filler.write_bytes(b"\0" * (16 * 1024 * 1024))
    agent = Agent(root.layout, AgentConfig(agent_id="a1"))
    held = agent.run_once()
    journals_held = names(root.layout.turns_dir("g"))
    degraded = root.status.project().fleet.degraded
    filler.unlink()
    resumed = agent.run_once()
    assert (held, journals_held, resumed, agent.space_blocked) == (Step.IDLE, [], Step.RAN, None)
    assert degraded is not None
    assert "below the floor of 20 MB" in degraded


def test_over_the_root_size_quota_no_turn_starts(api: loopx.Root) -> None:
    """A root holding more than --max-root-mb takes no new turn until gc brings it under."""
    from loopx.agents.loop import Agent, Step
    from loopx.fleet import AgentConfig

    run_turns(api.layout, "g", 2)
    api.retention.set(max_root_mb=1)
    (api.layout.root / "logs" / "big.log").write_bytes(b"x" * (2 * 1024 * 1024))
    agent = Agent(api.layout, AgentConfig(agent_id="a1"))
    step = agent.run_once()
    assert (step, len(names(api.layout.turns_dir("g")))) == (Step.IDLE, 2)
    assert agent.space_blocked is not None
    assert "over its quota of 1 MB" in agent.space_blocked


def _beat(layout: Layout, agent_id: str, phase: str) -> None:
    from loopx.fleet import AgentHeartbeat, AgentPhase
    from loopx.storage.files import atomic_write_model

    now = utcnow()
    beat = AgentHeartbeat(agent_id=agent_id, pid=os.getpid(), pid_started_at=0.0, hostname="h",
                          phase=AgentPhase(phase), started_at=now, beat_at=now)  # fmt: skip
    atomic_write_model(layout.agent_file(agent_id), beat)


def test_the_supervisors_gc_duty_waits_for_an_idle_agent(api: loopx.Root) -> None:
    """The duty folds nothing while every agent runs a turn, and folds once one is idle."""
    from loopx.supervisor.gcduty import GcDuty

    layout = api.layout
    run_turns(layout, "g", 5)
    keep(layout, keep_turns=2, keep_days=0)
    duty = GcDuty(layout, interval_s=30)
    _beat(layout, "a1", "running")
    busy = duty.step(0.0, wall=utcnow(), agents=["a1"])
    _beat(layout, "a1", "idle")
    idle = duty.step(30.0, wall=utcnow(), agents=["a1"])
    assert (busy, idle, duty.next_at) == (0, 3, 60.0)


def test_the_gc_duty_runs_at_once_when_disk_limits_hold_turns(api: loopx.Root) -> None:
    """Past the root size quota the duty folds even while every agent is busy."""
    from loopx.supervisor.gcduty import GcDuty

    layout = api.layout
    run_turns(layout, "g", 5)
    keep(layout, keep_turns=2, keep_days=0)
    api.retention.set(max_root_mb=1)
    (layout.root / "logs" / "big.log").write_bytes(b"x" * (2 * 1024 * 1024))
    _beat(layout, "a1", "running")
    assert GcDuty(layout).step(0.0, wall=utcnow(), agents=["a1"]) == 3


def test_doctor_names_a_damaged_checkpoint(api: loopx.Root) -> None:
    """doctor reports a checkpoint whose digest fails, and says to restore it."""
    layout = api.layout
    run_turns(layout, "g", 3)
    keep(layout, keep_turns=1, keep_days=0)
    api.retention.gc()
    path = layout.goal_dir("g") / "checkpoint.json"
    path.write_text(path.read_text().replace('"turns": 2', '"turns": 5'))
    findings = [f for f in loopx.Root.diagnose(layout.root).findings if f.path == str(path)]
    assert [(f.severity, "digest" in f.problem) for f in findings] == [("error", True)]


def test_the_folded_state_equals_a_replay_of_the_same_journals(api: loopx.Root) -> None:
    """build_checkpoint's pure fold gives the state and ledger a scratch-root replay writes."""
    from loopx.retention.gc import fold_state
    from loopx.state import GoalState
    from loopx.turn.journal import journal_files, read_journal
    from loopx.turn.phases import spend_record
    from loopx.turn.replay import rebuild_from

    layout = api.layout
    run_turns(layout, "g", 4)
    api.gates.open("g", question="ok?")  # a human field the next turn's plan snapshots
    api.gates.resolve("g", answer="yes")
    run_turns(layout, "g", 2)
    journals = [read_journal(p) for p in journal_files(layout, "g")]
    rebuilt = rebuild_from(None, journals, goal_id="g")
    spent = [r.model_dump_json() for j in journals if (r := spend_record(j)) is not None]
    assert fold_state(None, journals) == GoalState.model_validate_json(rebuilt.files["state.json"])
    assert spent == rebuilt.files["quota.jsonl"].decode().splitlines()


def test_the_default_floor_is_64_mb_or_a_tenth_of_a_small_disk() -> None:
    """No floor set: 64 MB on a big disk, a tenth of a small one; a set floor is taken as given."""
    from loopx.retention.space import floor_bytes

    mib = 1024 * 1024
    assert (
        floor_bytes(RetentionSettings(), 100_000 * mib),
        floor_bytes(RetentionSettings(), 32 * mib),
        floor_bytes(RetentionSettings(min_free_disk_mb=5), 32 * mib),
    ) == (64 * mib, 32 * mib // 10, 5 * mib)


def test_an_old_goals_warm_should_run_replays_after_a_gc_fold(
    api: loopx.Root, tmp_path: Path
) -> None:
    """After gc folds a goal's turns and rewrites its ledger, the next decision is stored and replayed.

    The goal's quota window (0.1 s, set after its turns) is shorter than its turns, so the fold drops
    ledger lines and rewrites the ledger (and removes its aggregate). The first
    `quota should-run` after it decides and stores; the second replays (its
    memo is not rewritten and the process never imports pydantic), as for a
    young goal: the checkpoint and the rewritten ledger cost the warm answer
    nothing (the figure at the end of months equals the start's).
    """
    layout = api.layout
    api.goals.add("s", objective="count", workdir=tmp_path / "w", host_kind="demo",
                  host=["--steps", "1000"])  # fmt: skip
    run_turns(layout, "s", 12)
    api.goals.update("s", quota={"window_hours": 0.1 / 3600})
    argv = [sys.executable, "-X", "importtime", "-m", "loopx", "--root", str(layout.root)]
    argv += ["quota", "should-run", "s", "--json"]
    memo = Path(memo_path(layout, "s", as_json=True))

    def ask() -> tuple[str, bool, float]:
        done = subprocess.run(argv, capture_output=True, check=False, timeout=60)
        assert done.returncode == 0, done.stderr[-2000:]
        stored = json.loads(memo.read_bytes().split(b"\n", 1)[0])["computed_at"]
        return json.loads(done.stdout)["reason"], b"pydantic" in done.stderr, stored

    assert ask()[0] == "ok"
    ledger = layout.quota_file("s")
    lines = len(ledger.read_bytes().splitlines())
    keep(layout, keep_turns=3, keep_days=0)
    assert api.retention.gc(goals=["s"]).folded == 9
    assert read_checkpoint(layout, "s") is not None
    assert len(ledger.read_bytes().splitlines()) < lines  # rewritten without the folded lines
    first = ask()
    second = ask()
    assert (first[:2], second) == (("ok", True), ("ok", False, first[2]))


def test_after_a_fold_the_next_decision_reads_the_aggregate_not_the_whole_ledger(
    api: loopx.Root, tmp_path: Path
) -> None:
    """gc rebuilds the aggregate its ledger rewrite removed, for the ledger's own window.

    Run on a clock 14 days ahead (as benchmarks/retention.py runs it), the
    aggregate still serves the real clock's decisions: the next one neither
    rebuilds nor rewrites it (a rebuild reads every line retention keeps), and
    sums the window as a rebuild from the ledger does.
    """
    layout = api.layout
    api.goals.add("s", objective="count", workdir=tmp_path / "w", host_kind="demo",
                  host=["--steps", "1000"])  # fmt: skip
    run_turns(layout, "s", 12)
    api.goals.update("s", quota={"window_hours": 0.1 / 3600})
    keep(layout, keep_turns=3, keep_days=0)
    ledger, aggregate = layout.quota_file("s"), layout.quota_aggregate_file("s")
    before = ledger.stat().st_ino
    assert api.retention.gc(goals=["s"], now=utcnow() + timedelta(days=14)).folded == 9
    assert ledger.stat().st_ino != before  # rewritten without the folded lines
    agg = json.loads(aggregate.read_bytes())
    assert (agg["ledger_inode"], agg["ledger_offset"]) == (
        ledger.stat().st_ino,
        ledger.stat().st_size,
    )
    built = aggregate.stat().st_ino
    decision = api.quota.should_run("s")
    assert aggregate.stat().st_ino == built
    served = decision.model_dump(include={"spent_wall_s", "spent_turns", "spent_cpu_s"})
    aggregate.unlink()
    rebuilt = api.quota.should_run("s", now=decision.decided_at)
    assert rebuilt.model_dump(include={"spent_wall_s", "spent_turns", "spent_cpu_s"}) == served
