"""Each adapter reads a run's own tokens and cost from recorded sessions of every tested version.

The recordings (tests/realhosts/captures/sessions/, made by
``python -m tests.realhosts.capture --sessions``) hold one session of three runs
of a real CLI against the mock model: a turn, the same session resumed, and
resumed into a usage limit. The mock answers every request with the same usage,
so each billed run's figures are equal and the limited run's are zero, whether
the CLI printed them per run or for the whole session.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loopx.agents.hosts import host_for
from loopx.agents.hosts.base import HostOutput, Interpretation
from loopx.registry.goalrecords import HostKind
from loopx.state import HostSession
from tests.hostkit import make_envelope, make_goal
from tests.realhosts.mockmodel import USAGE_IN, USAGE_OUT

SESSIONS = Path(__file__).parent / "realhosts" / "captures" / "sessions"
RECORDINGS = sorted(SESSIONS.glob("*.json"))


def _interpret_session(tmp_path: Path, record: dict) -> list[Interpretation]:
    """Each recorded run read by the adapter, the session carried from run to run as a turn does."""
    kind = HostKind(record["cli"])
    goal = make_goal(tmp_path, kind)
    host = host_for(kind)
    session: HostSession | None = None
    out = []
    for seq, run in enumerate(record["runs"], start=1):
        envelope = make_envelope(tmp_path, goal, session=session, seq=seq)
        output = HostOutput(exit_code=run["exit_code"], stdout=run["stdout"], stderr=run["stderr"])
        seen = host.interpret(envelope, output)
        session = seen.session or session
        out.append(seen)
    return out


def test_every_tested_version_has_a_recording():
    """Each CLI's tested versions (the pinned and the newest) have a recorded session."""
    recorded = {p.stem for p in RECORDINGS}
    wanted = {
        f"{kind}-{version}"
        for kind in (HostKind.CODEX, HostKind.CLAUDE, HostKind.GEMINI)
        for version in host_for(kind).tested_versions
    }
    assert wanted <= recorded


@pytest.mark.parametrize("path", RECORDINGS, ids=[p.stem for p in RECORDINGS])
def test_each_run_reports_its_own_usage(tmp_path, path):
    """Run two (resumed) costs what run one did; the usage-limited run costs nothing."""
    record = json.loads(path.read_text())
    first, second, limited = _interpret_session(tmp_path, record)
    assert first.result is not None, first.failure
    assert second.result is not None, second.failure
    assert first.session is not None
    assert second.session is not None
    assert second.session.session_id == first.session.session_id  # resumed
    assert second.session.turns == 2
    assert (first.input_tokens, first.output_tokens) == (USAGE_IN, USAGE_OUT)
    assert (second.input_tokens, second.output_tokens) == (USAGE_IN, USAGE_OUT)
    assert second.cost_usd == pytest.approx(first.cost_usd)
    assert (limited.input_tokens, limited.output_tokens, limited.cost_usd) == (0, 0, 0.0)
    assert limited.result is not None
    assert "host_rate_limited" in limited.result.evidence


def test_claude_newest_reports_session_totals_that_the_adapter_turns_into_deltas():
    """Claude Code 2.1.332's second run prints the session's cost; 2.1.197's prints its own."""
    totals = {}
    for version in ("2.1.197", "2.1.332"):
        record = json.loads((SESSIONS / f"claude-{version}.json").read_text())
        second = json.loads(record["runs"][1]["stdout"])
        first = json.loads(record["runs"][0]["stdout"])
        totals[version] = round(second["total_cost_usd"] / first["total_cost_usd"], 3)
    assert totals == {"2.1.197": 1.0, "2.1.332": 2.0}
