"""A retried turn's prompt says the previous attempt was interrupted."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from loopx.agents.hosts import host_for
from loopx.agents.hosts.prompt import build_prompt
from loopx.registry.goalrecords import HostKind
from tests.hostkit import make_envelope, make_goal
from tests.turnkit import demo_goal, make_root


def test_the_prompt_of_attempt_2_says_attempt_1_was_interrupted(tmp_path: Path) -> None:
    """The envelope's `interrupted` becomes the prompt's first section after the intro."""
    goal = make_goal(tmp_path, HostKind.CODEX)
    envelope = make_envelope(tmp_path, goal).model_copy(
        update={"attempt": 2, "interrupted": "Attempt 1 of this turn was interrupted."}
    )
    prompt = build_prompt(envelope)
    assert "## Attempt 2: the previous attempt was interrupted" in prompt
    assert "Attempt 1 of this turn was interrupted." in prompt
    assert "interrupted" not in build_prompt(make_envelope(tmp_path, goal))


@pytest.mark.parametrize("kind", [HostKind.CODEX, HostKind.CLAUDE, HostKind.GEMINI])
def test_each_cli_adapter_shows_it(tmp_path: Path, kind: HostKind, monkeypatch) -> None:
    """codex, claude and gemini all pass the section on (their prompt is build_prompt's)."""
    from tests.hostkit import use_fake_cli

    use_fake_cli(tmp_path, monkeypatch, kind.value)
    goal = make_goal(tmp_path, kind)
    envelope = make_envelope(tmp_path, goal).model_copy(
        update={"attempt": 2, "interrupted": "Attempt 1 of this turn was interrupted."}
    )
    invocation = host_for(kind).prepare(goal, envelope)
    shown = invocation.stdin.decode() + " ".join(invocation.argv)
    assert "the previous attempt was interrupted" in shown


def test_a_host_killed_from_outside_gets_the_section_on_its_retry(tmp_path: Path) -> None:
    """A command host SIGKILLed once sees `interrupted` in the envelope of attempt 2."""
    layout = make_root(tmp_path / "root")
    code = (
        "import json, os, signal, sys\n"
        "env = json.load(sys.stdin)\n"
        "if env['attempt'] == 1:\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
        "open(os.environ['LOOPX_RESULT_FILE'], 'w').write(json.dumps("
        "{'kind': 'progress', 'summary': env['interrupted'][:60]}))\n"
    )
    demo_goal(layout, "g", tmp_path / "w", sys.executable, "-c", code, kind=HostKind.COMMAND)
    from loopx.agents.turn import attempt_turn

    report = attempt_turn(layout, "g", agent_id="a").report
    assert report is not None
    assert report.failure is None, report.failure
    assert report.attempt == 2
    assert report.summary.startswith("Attempt 1 of this turn")
