"""Killed at the hand-off row's points (and after), a handed-off turn recovers to the same files.

Goal ``g`` runs on account ``a``, parked by a usage limit, with ``b`` as its
fallback (both run the same command host). Each turn is a real ``loopx turn
run-once`` process that dies at the point; ``loopx recover`` runs, and the
next claim finishes a turn that was cut short: the root's files then equal
an undisturbed hand-off's, the turn ran on ``b`` exactly as if never killed,
and its host ran once whenever its outcome was durable.
"""

from __future__ import annotations

import json
import re
import shlex
from datetime import UTC, datetime
from pathlib import Path

import pytest

from loopx.accounts.accountstore import update_state
from loopx.accounts.records import Condition
from tests.turnkit import durable_snapshot, loopx, loopx_here, make_root

pytestmark = pytest.mark.timeout(120)

HOST = """\
cat > /dev/null
echo "$LOOPX_TURN_KEY" >> "$LOOPX_ROOT/../host-runs.log"
printf '{"kind": "progress", "summary": "went on"}' > "$LOOPX_RESULT_FILE"
"""
POINTS = [
    "before:handoff",
    "after:handoff",
    "after:account",
    "after:journal",
    "after:settle",
    "after:writeback",
]
TURN_EPOCH = re.compile(r"(-t\d{6}-e)\d+\b")
EPOCH_FIELD = re.compile(r"(epoch\\*\": )\d+")
RESET = datetime(2099, 1, 1, tzinfo=UTC)  # fixed: the hand-off's words name it


def _goal(base: Path) -> Path:
    """A root whose goal `g` must hand off from `a` to `b`; returns the root."""
    layout = make_root(base / "root")
    work = base / "work"
    work.mkdir()
    for name in ("a", "b"):
        added = loopx_here(layout.root, "account", "add", name, "--host-kind", "command")
        assert added.returncode == 0, added.stderr
    added = loopx_here(
        layout.root, "goal", "add", "g", "--objective", "go on", "--workdir", str(work),
        "--host", shlex.join(["sh", "-c", HOST]), "--account", "a", "--fallback-account", "b",
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    update_state(
        layout,
        "a",
        lambda s: s.model_copy(
            update={"condition": Condition.LIMITED, "until": RESET, "proven": True}
        ),
    )
    return layout.root


def _host_runs(base: Path) -> list[str]:
    path = base / "host-runs.log"
    return path.read_text().splitlines() if path.exists() else []


def _snapshot(root: Path) -> object:
    layout = make_root(root)
    text = json.dumps(durable_snapshot(layout, "g", root.parent / "work"))
    return json.loads(EPOCH_FIELD.sub(r"\g<1>0", TURN_EPOCH.sub(r"\g<1>0", text)))


def _turn_finished(root: Path) -> bool:
    turns = sorted((root / "goals" / "g" / "turns").glob("*.json"))
    return any(json.loads(p.read_text())["status"] != "in_progress" for p in turns)


@pytest.fixture(scope="module")
def undisturbed(tmp_path_factory: pytest.TempPathFactory) -> object:
    base = tmp_path_factory.mktemp("undisturbed")
    root = _goal(base)
    done = loopx(root, "turn", "run-once", "g", timeout=60)
    assert done.returncode == 0, done.stderr
    assert len(_host_runs(base)) == 1
    history = (root / "goals" / "g" / "history.jsonl").read_text().splitlines()
    assert json.loads(history[-1])["account"] == "b"
    return _snapshot(root)


@pytest.mark.parametrize("point", POINTS)
def test_killed_at_the_handoff_recovered_gives_the_undisturbed_files(
    tmp_path: Path, point: str, undisturbed: object
) -> None:
    """Killed at `point`, `loopx recover`, the next claim: the same handed-off turn's files."""
    root = _goal(tmp_path)
    crashed = loopx(root, "turn", "run-once", "g", timeout=60, LOOPX_FAULT=point)
    assert crashed.returncode == 137, crashed.stderr
    assert f"fault point {point} reached" in crashed.stderr
    recovered = loopx_here(root, "recover")
    assert recovered.returncode == 0, recovered.stdout + recovered.stderr
    if not _turn_finished(root):
        again = loopx(root, "turn", "run-once", "g", timeout=60)
        assert again.returncode == 0, again.stderr
    assert _snapshot(root) == undisturbed
    if point == "after:writeback":  # the host's outcome is durable: it never runs again
        assert len(_host_runs(tmp_path)) == 1


def test_a_host_retried_after_a_crash_stays_on_the_account_its_journal_planned(
    tmp_path: Path,
) -> None:
    """Planned on `a`, killed before its host; `a` limited meanwhile: the retry waits for `a`."""
    root = _goal(tmp_path)
    layout = make_root(root)
    update_state(layout, "a", lambda s: s.model_copy(update={"condition": Condition.OK}))
    crashed = loopx(root, "turn", "run-once", "g", timeout=60, LOOPX_FAULT="after:journal")
    assert crashed.returncode == 137, crashed.stderr
    limited = {"condition": Condition.LIMITED, "until": RESET}
    update_state(layout, "a", lambda s: s.model_copy(update=limited))
    again = loopx(root, "turn", "run-once", "g", "--json", timeout=60)
    assert json.loads(again.stdout)["report"] is None, again.stdout
    (journal,) = (root / "goals" / "g" / "turns").glob("*.json")
    plan = json.loads(journal.read_text())["plan"]
    assert (plan["account"], plan["handoff"]) == ("a", None)
    assert _host_runs(tmp_path) == []
