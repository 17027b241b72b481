"""`loopx batch run` and `loopx demo`: plans, reports, exit codes, and a SIGKILL mid-run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from loopx import exitcodes
from loopx.storage.jsonl import read_records
from loopx.turn.historyline import HistoryLine
from tests.turnkit import cli_env, demo_runs


def _plan(tmp_path: Path, goals: list[dict[str, object]]) -> Path:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"schema_version": 1, "goals": goals}))
    return path


def _batch(
    root: Path, plan: Path, *extra: str, timeout: float = 180
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "loopx", "--root", str(root), "batch", "run", str(plan), *extra],
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=timeout,
        check=False,
    )


def _fleet(root: Path) -> list[psutil.Process]:
    """Live processes whose environment names this root (agents, hosts, supervisor)."""
    found = []
    for proc in psutil.process_iter():
        try:
            if (
                proc.environ().get("LOOPX_ROOT") == str(root)
                or str(root) in " ".join(proc.cmdline())
            ) and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def _poll(predicate, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_batch_completes_and_writes_reports(tmp_path: Path) -> None:
    """Two finishing goals: exit 0, report.json and report.md with every goal and its cost."""
    plan = _plan(
        tmp_path,
        [
            {"id": "a", "objective": "count", "host_kind": "demo"},
            {"id": "b", "objective": "count", "host_kind": "demo", "host": ["--steps", "2"]},
        ],
    )
    report_dir = tmp_path / "report"
    proc = _batch(tmp_path / "root", plan, "--report", str(report_dir))
    assert proc.returncode == 0, proc.stderr
    report = json.loads((report_dir / "report.json").read_text())
    assert {(g["goal_id"], g["outcome"], g["turns"]) for g in report["goals"]} == {
        ("a", "completed", 3),
        ("b", "completed", 2),
    }
    assert all(g["cpu_s"] > 0 and g["wall_s"] > 0 for g in report["goals"])
    assert "| a | completed | 3 |" in (report_dir / "report.md").read_text()


def test_exit_codes_for_humans_and_failures(tmp_path: Path) -> None:
    """A goal waiting for a human exits NEEDS_HUMAN; a failing goal 1, with its reason reported."""
    human = _plan(
        tmp_path, [{"id": "h", "objective": "ask", "host_kind": "demo", "host": ["--ask", "ok?"]}]
    )
    assert _batch(tmp_path / "r1", human).returncode == exitcodes.NEEDS_HUMAN
    failing = tmp_path / "fail.json"
    failing.write_text(
        json.dumps(
            {
                "goals": [
                    {
                        "id": "f",
                        "objective": "fail",
                        "host_kind": "demo",
                        "host": ["--fail"],
                        "max_host_attempts": 1,
                    },
                ]
            }
        )
    )
    report_dir = tmp_path / "rep"
    # The first retry comes after a 30 s backoff; a 10 s horizon ends the run at the failure.
    proc = _batch(tmp_path / "r2", failing, "--report", str(report_dir), "--idle-horizon", "10")
    assert proc.returncode == 1, proc.stderr
    goal = json.loads((report_dir / "report.json").read_text())["goals"][0]
    assert goal["outcome"] == "failed"
    assert goal["failures"][0]["reason"] == "host_exit"
    # The reason's words reach the report, not an empty summary of a failed turn.
    assert goal["failures"][0]["last_message"].strip()
    assert goal["failures"][0]["last_message"] in (report_dir / "report.md").read_text()


def test_a_malformed_plan_registers_nothing(tmp_path: Path) -> None:
    """A plan with one bad goal is rejected with its field, and no goal is registered."""
    plan = _plan(
        tmp_path,
        [
            {"id": "ok", "objective": "x", "host_kind": "demo"},
            {"id": "bad", "objective": "x", "quota": {"compute": 7}},
        ],
    )
    root = tmp_path / "root"
    proc = _batch(root, plan)
    assert proc.returncode == exitcodes.USAGE
    assert "goals[1] (id 'bad').quota.compute" in proc.stderr
    assert not (root / "registry.json").exists()


def test_batch_resumes_after_sigkill_without_repeating_a_committed_turn(tmp_path: Path) -> None:
    """SIGKILL the batch mid-run: its fleet dies with it, and the same command finishes the work."""
    steps = 5
    plan = _plan(
        tmp_path,
        [
            {
                "id": f"g{i}",
                "objective": "count",
                "host_kind": "demo",
                "host": ["--steps", str(steps), "--hang", "0.2"],
                "workdir": f"w/g{i}",
            }
            for i in range(3)
        ],
    )
    for i in range(3):
        (tmp_path / "w" / f"g{i}").mkdir(parents=True)  # a named workdir must exist
    root = tmp_path / "root"
    first = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "loopx",
            "--root",
            str(root),
            "batch",
            "run",
            str(plan),
            "--agents",
            "2",
        ],
        env=cli_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:

        def committed() -> int:
            return sum(
                len(read_records(root / "goals" / f"g{i}" / "history.jsonl", HistoryLine))
                for i in range(3)
            )

        _poll(lambda: committed() >= 3, 120, "three committed turns")
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
        _poll(lambda: not _fleet(root), 60, "the orphaned fleet to stop")
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    second = _batch(root, plan, "--agents", "2")
    assert second.returncode == 0, second.stderr
    for i in range(3):
        history = read_records(root / "goals" / f"g{i}" / "history.jsonl", HistoryLine)
        keys = [h.turn_key for h in history]
        assert len(keys) == len(set(keys)), "a turn was written twice"
        committed = [h for h in history if h.status == "committed"]
        assert committed[-1].kind == "completed"
        # A turn stopped by the batch's death may have advanced the counter before its host
        # was terminated; the work is kept, never redone: the counter ends at exactly `steps`.
        counter = json.loads(
            (tmp_path / "w" / f"g{i}" / ".loopx-demo" / "counter.json").read_text()
        )
        assert counter["count"] == steps, "the host's work was applied more than once"
        assert len(committed) <= steps
        runs = [line.split()[0] for line in demo_runs(tmp_path / "w" / f"g{i}")]
        for turn in committed:
            assert runs.count(turn.turn_key) == 1, (
                f"committed turn {turn.turn_key} ran its host twice"
            )


def test_demo_runs_as_designed(tmp_path: Path) -> None:
    """`loopx demo` on a given root ends every demo goal as designed and exits 0."""
    root = tmp_path / "demo" / "root"
    proc = subprocess.run(
        [sys.executable, "-m", "loopx", "demo", "--root", str(root)],
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=180,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "ask-a-human" in proc.stdout
    assert "gate resolve ask-a-human" in proc.stdout
    # The demo's files live in a directory of their own, named on the report line.
    (report_md,) = [
        line.removeprefix("report: ")
        for line in proc.stdout.splitlines()
        if line.startswith("report: ")
    ]
    report = json.loads((Path(report_md).parent / "report.json").read_text())
    assert not (tmp_path / "demo" / "report").exists()  # nothing beside the root
    assert {g["goal_id"]: g["outcome"] for g in report["goals"]} == {
        "count-to-three": "completed",
        "count-to-five": "completed",
        "ask-a-human": "needs_human",
        "throttled": "unfinished",
    }
    assert os.stat(root).st_mode & 0o777 == 0o700
