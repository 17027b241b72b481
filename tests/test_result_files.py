"""A result file LoopX cannot use says why: a refused symlink, bytes that are not UTF-8."""

from __future__ import annotations

import sys
from pathlib import Path

from loopx.agents.turn import attempt_turn
from loopx.registry.goalrecords import HostKind
from loopx.turn.failures import FailureReason
from tests.turnkit import demo_goal, make_root

SYMLINK_HOST = """
import json, os
decoy = os.path.join(os.environ["LOOPX_WORKDIR"], "decoy.json")
open(decoy, "w").write(json.dumps({"kind": "completed", "summary": "x"}))
os.symlink(decoy, os.environ["LOOPX_RESULT_FILE"])
"""
LATIN1_HOST = """
import os
open(os.environ["LOOPX_RESULT_FILE"], "wb").write(b'{"kind": "progress", "summary": "caf\\xe9"}')
"""


def _turn(tmp_path: Path, code: str):
    layout = make_root(tmp_path / "root")
    demo_goal(layout, "g", tmp_path / "work", sys.executable, "-c", code, kind=HostKind.COMMAND)
    attempt = attempt_turn(layout, "g", agent_id="a")
    assert attempt.report is not None
    return attempt.report


def test_a_symlinked_result_file_is_refused_with_the_reason(tmp_path: Path) -> None:
    """The refusal is the failure's message, not an 'invalid JSON' that hides it."""
    report = _turn(tmp_path, SYMLINK_HOST)
    assert report.failure is not None
    assert report.failure.reason is FailureReason.INVALID_RESULT
    assert "refused" in report.failure.message
    assert "symlink" in report.failure.message


def test_a_result_that_is_not_utf8_is_invalid(tmp_path: Path) -> None:
    """Latin-1 bytes are not silently replaced by U+FFFD and accepted."""
    report = _turn(tmp_path, LATIN1_HOST)
    assert report.failure is not None
    assert report.failure.reason is FailureReason.INVALID_RESULT
    assert "not UTF-8" in report.failure.message
