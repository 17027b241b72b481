"""The batch report's outcomes, sums and exit code."""

from __future__ import annotations

from datetime import UTC, datetime

from loopx import exitcodes
from loopx.batch.report import Outcome, build_report, exit_code_for, goal_report, render_markdown
from loopx.quota.ledger import SpendRecord
from loopx.registry.goalrecords import Goal, GoalStatus
from loopx.state import Gate, GoalState
from loopx.turn.historyline import HistoryLine
from loopx.turn.outcome import ResultKind
from loopx.usage import Usage

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def _goal(goal_id: str, status: GoalStatus = GoalStatus.ACTIVE) -> Goal:
    return Goal(
        id=goal_id, objective="o", workdir="/w", status=status, created_at=NOW, updated_at=NOW
    )


def _line(seq: int, status: str = "committed", failure: str | None = None) -> HistoryLine:
    return HistoryLine(
        turn_key=f"k{seq}",
        goal_id="g",
        seq=seq,
        epoch=1,
        agent_id="a",
        status=status,
        kind=ResultKind.PROGRESS if status == "committed" else None,
        failure=failure,
        summary=f"turn {seq}",
        started_at=NOW,
        ended_at=NOW,
    )


def _spend(seq: int, cpu: float, wall: float, rss: float) -> SpendRecord:
    return SpendRecord(
        turn_key=f"k{seq}",
        goal_id="g",
        seq=seq,
        usage=Usage(cpu_s=cpu, wall_s=wall, peak_rss_mb=rss, input_tokens=10, output_tokens=5),
        started_at=NOW,
        ended_at=NOW,
    )


def test_a_failure_names_its_reason() -> None:
    """A failed turn's message, not its empty summary, is the report's last_message."""
    failed = _line(1, "failed", "host_exit").model_copy(
        update={"summary": "", "failure_message": "host exited with status 3"}
    )
    report = goal_report(_goal("g"), GoalState(goal_id="g"), [failed], [])
    assert [f.last_message for f in report.failures] == ["host exited with status 3"]


def test_sums_and_failures() -> None:
    """CPU and wall add up, peak RSS is the max, failures are counted by reason."""
    history = [
        _line(1),
        _line(2, "failed", "turn_timeout"),
        _line(3, "failed", "turn_timeout"),
        _line(4),
    ]
    spend = [_spend(i, 1.0, 2.0, 10.0 * i) for i in range(1, 5)]
    report = goal_report(_goal("g"), GoalState(goal_id="g"), history, spend)
    assert (
        report.turns,
        report.committed_turns,
        report.cpu_s,
        report.wall_s,
        report.peak_rss_mb,
    ) == (4, 2, 4.0, 8.0, 40.0)
    assert report.tokens == 60
    assert [(f.reason, f.turns) for f in report.failures] == [("turn_timeout", 2)]
    assert report.outcome is Outcome.UNFINISHED


def test_outcomes_and_exit_codes() -> None:
    """Done is completed, an open gate needs a human, a failed last turn is failed."""
    gate = Gate(id=1, question="which?", opened_at=NOW)
    done = goal_report(_goal("a", GoalStatus.DONE), GoalState(goal_id="a"), [_line(1)], [])
    human = goal_report(_goal("b"), GoalState(goal_id="b", gates=[gate]), [_line(1)], [])
    failed = goal_report(_goal("c"), GoalState(goal_id="c"), [_line(1, "failed", "host_exit")], [])
    assert (done.outcome, human.outcome, failed.outcome) == (
        Outcome.COMPLETED,
        Outcome.NEEDS_HUMAN,
        Outcome.FAILED,
    )
    assert human.open_question == "which?"
    assert exit_code_for([done]) == 0
    assert exit_code_for([done, human]) == exitcodes.NEEDS_HUMAN
    assert exit_code_for([done, human, failed]) == 1


def test_markdown_lists_every_goal_and_failure() -> None:
    """report.md has a row per goal and a failures section."""
    failed = goal_report(_goal("c"), GoalState(goal_id="c"), [_line(1, "failed", "host_exit")], [])
    done = goal_report(_goal("a", GoalStatus.DONE), GoalState(goal_id="a"), [_line(1)], [])
    text = render_markdown(build_report("/r", [done, failed], now=NOW))
    assert "| a | completed |" in text
    assert "| c | failed |" in text
    assert "**c**: host_exit x1" in text


def test_run_summary_reads_as_a_sentence() -> None:
    """The end-of-run summary names done, waiting and failed goals, turns and time."""
    from loopx.batch.report import Outcome, RunSummary
    from loopx.cli._supervisor import render_summary

    summary = RunSummary(
        root="/r",
        exit_code=2,
        started_at=NOW,
        ended_at=NOW,
        wall_s=125.0,
        turns=7,
        failed_turns=1,
        goals=dict.fromkeys(Outcome, 0) | {Outcome.COMPLETED: 2, Outcome.NEEDS_HUMAN: 1},
        supervisor=None,
    )
    text = render_summary(summary)
    assert "after 2m05s; 7 turns ran (1 failed)" in text
    assert "goals: 2 done, 1 waiting (1 for a human, 0 unfinished, 0 paused), 0 failed" in text
    assert "--actor human" in text
