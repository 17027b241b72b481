"""Replay folds in memory: the same bytes as the scratch-root replay, and tampering is a DIFF.

A root with every kind of turn (committed progress, a host failure, a failed
result, a gate answered by a human, a wait, CPU charged to the quota, a
failing then passing done-check, a usage limit met by an account), replayed
before and after ``loopx gc`` folded part of it into a checkpoint: the
in-memory fold gives exactly the files (bytes and order) and chain differences
that running the live turn's phases through a scratch root gives
(:mod:`tests.scratchreplay`).
"""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

import pytest

import loopx
from loopx.accounts.records import Signal
from loopx.agents.turn import attempt_turn
from loopx.registry.goalrecords import GoalStatus
from loopx.registry.goals import get_goal
from loopx.retention.policy import KeepPolicy, update_settings
from loopx.root import Layout
from loopx.turn.accounting import turn_signal
from loopx.turn.checkpoint import read_checkpoint
from loopx.turn.journal import TurnJournal, journal_files, parse_turn_key, read_journal
from loopx.turn.outcome import ResultKind
from loopx.turn.replay import rebuild
from tests.scratchreplay import scratch_replay
from tests.turnkit import loopx_here

pytestmark = pytest.mark.timeout(300)

# Goals of the demo host and the switches of each turn (LOOPX_DEMO_ARGS), in order. A turn
# that makes its goal wait (a failure's backoff, a wait) is its goal's last.
DEMO_GOALS = {
    "g": (
        "",  # progress
        "--burn 0.3",  # CPU the quota ledger charges
        "--kind needs_human --question 'go on?'",  # opens a gate (a human answers it)
        "--kind completed",  # the done-check fails: progress, with its evidence
        "--kind completed",  # the done-check passes (its file is there): the goal is done
    ),
    "f": ("", "--fail"),  # a host failure: a backoff, a failure streak
    "k": ("", "--kind failed"),  # a failed result
    "w": ("", "--kind wait --wait-seconds 5"),
}
# A command host meeting its account's usage limit on its second turn.
LIMITED_HOST = """
import json, os, pathlib
turn = pathlib.Path("turns.count")
n = int(turn.read_text()) + 1 if turn.exists() else 1
turn.write_text(str(n))
evidence = ["host_rate_limited"] if n == 2 else []
result = {"schema_version": 1, "kind": "wait" if evidence else "progress", "wait_seconds": 60,
          "summary": f"turn {n}", "evidence": evidence}
pathlib.Path(os.environ["LOOPX_RESULT_FILE"]).write_text(json.dumps(result))
"""


def _turn(layout: Layout, goal_id: str) -> None:
    attempt = attempt_turn(layout, goal_id, agent_id="a1", stop=threading.Event())
    assert attempt.report is not None, attempt.model_dump_json(indent=1)


@pytest.fixture
def every_kind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> loopx.Root:
    """A root whose goals ran every kind of turn (module docstring)."""
    loopx.Root.init(tmp_path / "root")
    api = loopx.Root.open(tmp_path / "root")
    check = f"{sys.executable} -c \"import os, sys; sys.exit(not os.path.exists('ok'))\""
    for goal_id, turns in DEMO_GOALS.items():
        work = tmp_path / "work" / goal_id
        work.mkdir(parents=True)
        api.goals.add(goal_id, objective="count", workdir=work, host_kind="demo",
                      host=["--steps", "1000"], done_check=check)  # fmt: skip
        for number, switches in enumerate(turns, start=1):
            monkeypatch.setenv("LOOPX_DEMO_ARGS", switches)
            if goal_id == "g" and number == len(turns):
                (work / "ok").write_text("")
            _turn(api.layout, goal_id)
            if "needs_human" in switches:
                api.gates.resolve(goal_id, answer="yes")
    (tmp_path / "acct").mkdir()
    (tmp_path / "limited.py").write_text(LIMITED_HOST)
    api.accounts.add("plan", host_kind="command")
    api.goals.add("a", objective="spend", workdir=tmp_path / "acct", host_kind="command",
                  host=[sys.executable, str(tmp_path / "limited.py")], account="plan")  # fmt: skip
    for _ in range(2):
        _turn(api.layout, "a")
    _assert_every_kind(api.layout)
    return api


def _assert_every_kind(layout: Layout) -> None:
    journals = [read_journal(p) for g in [*DEMO_GOALS, "a"] for p in journal_files(layout, g)]
    results = [j.result for j in journals if j.result is not None]
    assert (
        {str(j.status) for j in journals},
        {str(r.kind) for r in results},
        sorted({j.check.passed for j in journals if j.check is not None}),
        [j.reported_result.kind for j in journals if j.reported_result is not None],
        any(j.usage.cpu_s >= 0.2 for j in journals),
        [turn_signal(j).signal for j in journals if j.goal_id == "a"],
        get_goal(layout, "g").status,
    ) == (
        {"committed", "failed"},
        {"progress", "needs_human", "completed", "failed", "wait"},
        [False, True],
        [ResultKind.COMPLETED],
        True,
        [Signal.THROUGH, Signal.LIMIT],
        GoalStatus.DONE,
    )


def _journals_after_checkpoint(layout: Layout, goal_id: str) -> list[TurnJournal]:
    checkpoint = read_checkpoint(layout, goal_id)
    through = checkpoint.through_seq if checkpoint else 0
    return [
        read_journal(p)
        for p in journal_files(layout, goal_id)
        if (parse_turn_key(p.name[:-5]) or ("", 0))[1] > through
    ]


@pytest.mark.parametrize("folded", [False, True], ids=["all-journals", "after-gc"])
def test_the_fold_gives_the_bytes_of_a_scratch_root_replay(
    every_kind: loopx.Root, folded: bool
) -> None:
    """Every goal: the same files, in the same order, and the same chain differences."""
    layout = every_kind.layout
    if folded:
        update_settings(layout, lambda s: s.model_copy(update={"keep": KeepPolicy(keep_turns=1, keep_days=0)}))  # fmt: skip
        assert every_kind.retention.gc().folded > 0
    for goal_id in [*DEMO_GOALS, "a"]:
        journals = _journals_after_checkpoint(layout, goal_id)
        files, chain = scratch_replay(read_checkpoint(layout, goal_id), journals, goal_id=goal_id)
        rebuilt = rebuild(layout, goal_id)
        assert (list(rebuilt.files.items()), rebuilt.chain) == (list(files.items()), chain)
        assert every_kind.turns.replay(goal_id, verify=True).clean


def test_a_tampered_state_history_or_ledger_is_a_diff_and_exit_1(every_kind: loopx.Root) -> None:
    """A changed state field, history summary and a ledger line removed: one DIFF each."""
    layout = every_kind.layout
    state = json.loads(layout.state_file("g").read_text())
    state["beliefs"] = ["tampered"]
    layout.state_file("g").write_text(json.dumps(state, indent=2) + "\n")
    history = layout.history_file("g").read_text().replace("counter at 2 of", "counter at 9 of")
    layout.history_file("g").write_text(history)
    ledger = layout.quota_file("g").read_text().splitlines(keepends=True)
    layout.quota_file("g").write_text("".join(ledger[:2] + ledger[3:]))
    verify = loopx_here(layout.root, "replay", "g", "--verify")
    as_json = json.loads(loopx_here(layout.root, "replay", "g", "--verify", "--json").stdout)
    diffs = [line.split(":")[0] for line in verify.stdout.splitlines() if line.startswith("DIFF")]
    assert (verify.returncode, diffs, [d["kind"] for d in as_json["differences"]]) == (
        1,
        [
            "DIFF state.json beliefs",
            "DIFF history.jsonl g-t000002-e2.summary",
            "DIFF quota.jsonl g-t000003-e3",
        ],
        ["differs", "differs", "missing"],
    )
    assert loopx_here(layout.root, "replay", "f", "--verify").returncode == 0
