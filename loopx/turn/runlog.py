"""The Run Log: one full report per turn (``goals/<id>/runs/<seq>.json`` and ``.md``).

Built from a settled journal alone (pure), so a replay after a crash writes
the same bytes again; :mod:`loopx.turn.writeback` writes them.
"""

from __future__ import annotations

from typing import Literal

from loopx.donecheck import CheckResult
from loopx.model import Record, UtcDatetime
from loopx.turn.failures import TurnFailure
from loopx.turn.journal import HostOutcome, TurnJournal, TurnPlan, final_status
from loopx.turn.outcome import ResultKind, TurnStatus
from loopx.turn.protocol import Envelope, HostResult
from loopx.usage import Usage


class RunReport(Record):
    """``goals/<id>/runs/<seq>.json``: the full report of one turn."""

    schema_version: Literal[1] = 1
    goal_id: str
    turn_key: str
    seq: int
    epoch: int
    agent_id: str
    attempt: int
    status: TurnStatus
    kind: ResultKind | None = None
    failure: TurnFailure | None = None
    result: HostResult | None = None
    usage: Usage
    envelope: Envelope
    plan_argv: list[str]
    outcome: HostOutcome | None = None
    check: CheckResult | None = None  # the done-check this turn ran
    started_at: UtcDatetime
    ended_at: UtcDatetime


def run_report(journal: TurnJournal) -> RunReport:
    """The run report of a settled journal. Pure."""
    plan: TurnPlan = journal.plan
    return RunReport(
        goal_id=journal.goal_id,
        turn_key=journal.turn_key,
        seq=journal.seq,
        epoch=journal.epoch,
        agent_id=journal.agent_id,
        attempt=journal.attempt,
        status=final_status(journal),
        kind=journal.good_result.kind if journal.good_result else None,
        failure=journal.failure,
        result=journal.result,
        usage=journal.usage,
        envelope=plan.envelope,
        plan_argv=plan.argv,
        outcome=journal.outcome,
        started_at=journal.created_at,
        ended_at=journal.turn_end,
        check=journal.check,
    )


def render_markdown(report: RunReport) -> str:
    """The human-readable ``runs/<seq>.md``. Pure."""
    lines = [
        f"# {report.goal_id} turn {report.seq} ({report.turn_key})",
        "",
        f"- status: **{report.status}**" + (f" ({report.kind})" if report.kind else ""),
        f"- agent: {report.agent_id}, epoch {report.epoch}, host attempt {report.attempt}",
        f"- started: {report.started_at.isoformat()}, ended: {report.ended_at.isoformat()}",
        (
            f"- usage: cpu {report.usage.cpu_s:.3f}s, wall {report.usage.wall_s:.3f}s, "
            f"peak rss {report.usage.peak_rss_mb:.1f} MB"
        ),
    ]
    if report.failure is not None:
        lines.append(f"- failure: `{report.failure.reason}`: {report.failure.message}")
    if report.check is not None:
        lines.append(f"- done-check: `{' '.join(report.check.argv)}` {report.check.describe()}")
    network = report.outcome.network if report.outcome is not None else None
    if network is not None:
        lines.append(
            f"- sandbox network: {network.bytes_up} bytes up, {network.bytes_down} down, "
            f"allowed {', '.join(network.allowed) or 'nothing'}"
        )
        lines += [f"- {line}" for line in network.lines()]
    if report.result is not None:
        lines += ["", "## Summary", "", report.result.summary or "(none)"]
        if report.result.next_action:
            lines += ["", f"Next action: {report.result.next_action}"]
        if report.result.evidence:
            lines += ["", "## Evidence", "", *(f"- {e}" for e in report.result.evidence)]
        if report.result.question:
            lines += ["", "## Question for a human", "", report.result.question]
    if report.check is not None and not report.check.passed:
        tail = report.check.output_tail.rstrip() or "(nothing)"
        lines += ["", "## Done-check output (tail)", "", "```", tail, "```"]
    if report.outcome is not None and report.outcome.stderr:
        tail = report.outcome.stderr[-2000:]
        lines += ["", "## stderr (tail)", "", "```", tail.rstrip(), "```"]
    return "\n".join(lines) + "\n"
