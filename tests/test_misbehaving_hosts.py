"""Misbehaving hosts: each is contained with a typed reason, memory stays bounded, nothing is left.

Hosts that hang, ignore SIGTERM, leave setsid'd grandchildren, print 1 GB,
allocate past the memory cap, write into the runtime root, or exit 0 without
a result. After every turn no process carrying this root's ``LOOPX_ROOT`` is
alive, and the journal is terminal with the expected failure reason.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from loopx.agents.turn import TurnConfig, run_one_turn
from loopx.registry.goalrecords import HostKind
from loopx.root import Layout
from loopx.turn.journal import journal_files, read_journal
from tests.fleet_helpers import alive
from tests.turnkit import cli_env, demo_goal, loopx, make_root

FAST = TurnConfig(lease_ttl_s=5.0, lease_grace_s=5.0, kill_grace_s=0.3)
GIB = 1024 * 1024 * 1024


def leftovers(root: Path) -> list[psutil.Process]:
    """Live processes (not zombies) whose environment names this runtime root."""
    out = []
    for proc in psutil.process_iter():
        try:
            if (
                proc.environ().get("LOOPX_ROOT") == str(root)
                and proc.status() != psutil.STATUS_ZOMBIE
            ):
                out.append(proc)
        except psutil.Error:
            continue
    return out


def wait_no_leftovers(root: Path, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while (left := leftovers(root)) and time.monotonic() < deadline:
        time.sleep(0.05)
    for proc in left:  # reap what the assertion below reports, so no test leaks it
        proc.kill()
    assert not left, [p.info if hasattr(p, "info") else p.pid for p in left]


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    return make_root(tmp_path / "root")


def turn(layout: Layout, goal_id: str = "g") -> Any:
    report = run_one_turn(layout, goal_id, agent_id="test", config=FAST)
    assert report is not None
    journal = read_journal(journal_files(layout, goal_id)[-1])
    assert journal.status.terminal
    return journal


@pytest.mark.parametrize(
    ("switches", "quota", "reason"),
    [
        (["--hang", "60"], {"turn_timeout_s": 1.0}, "turn_timeout"),
        (["--hang", "60", "--ignore-term"], {"turn_timeout_s": 1.0}, "turn_timeout"),
        (["--grandchild", "60", "--hang", "60"], {"turn_timeout_s": 1.0}, "turn_timeout"),
        (["--alloc", "400", "--hold", "60"], {"max_rss_mb": 120}, "quota_memory_exceeded"),
        (["--no-result"], {}, "no_result"),
        (["--invalid-json"], {}, "invalid_result"),
        (["--oversized"], {}, "invalid_result"),
        (["--fail"], {}, "host_exit"),
    ],
    ids=[
        "hang",
        "ignores-sigterm",
        "setsid-grandchild-hang",
        "memory-hog",
        "no-result",
        "invalid-json",
        "oversized-result",
        "exit-nonzero",
    ],
)
def test_misbehaviour_is_contained_with_a_typed_reason(
    layout: Layout, tmp_path: Path, switches: list[str], quota: dict[str, Any], reason: str
) -> None:
    """The turn fails with the typed reason, the journal is terminal, no process is left."""
    demo_goal(layout, "g", tmp_path / "wd", *switches, **quota)
    journal = turn(layout)
    assert (journal.status, journal.failure.reason if journal.failure else None) == (
        "failed",
        reason,
    )
    wait_no_leftovers(layout.root)


def test_sigterm_ignoring_host_is_sigkilled(layout: Layout, tmp_path: Path) -> None:
    """A host that ignores SIGTERM is SIGKILLed after the kill grace."""
    demo_goal(layout, "g", tmp_path / "wd", "--hang", "60", "--ignore-term", turn_timeout_s=1.0)
    journal = turn(layout)
    assert journal.outcome is not None and journal.outcome.signal == 9
    wait_no_leftovers(layout.root)


def test_setsid_grandchild_of_a_finished_host_is_killed(layout: Layout, tmp_path: Path) -> None:
    """A grandchild that setsid()s away and ignores SIGTERM does not outlive its turn."""
    wd = tmp_path / "wd"
    demo_goal(layout, "g", wd, "--grandchild", "60")
    journal = turn(layout)
    assert journal.status == "committed"
    pid = int((wd / ".loopx-demo" / "grandchild.pid").read_text())
    deadline = time.monotonic() + 10
    while alive(pid):
        assert time.monotonic() < deadline, f"grandchild {pid} survived its turn"
        time.sleep(0.05)
    wait_no_leftovers(layout.root)


def test_one_gib_of_stdout_keeps_memory_bounded(layout: Layout, tmp_path: Path) -> None:
    """1 GiB on stdout: 1 MiB is kept, the rest counted, and the agent's RSS stays small."""
    demo_goal(layout, "g", tmp_path / "wd", "--huge-output", str(GIB))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "loopx",
            "--root",
            str(layout.root),
            "turn",
            "run-once",
            "g",
            "--json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=cli_env(),
    )
    peak = [0]

    def sample() -> None:
        agent = psutil.Process(proc.pid)
        while proc.poll() is None:
            try:
                peak[0] = max(peak[0], agent.memory_info().rss)
            except psutil.Error:
                return
            time.sleep(0.02)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        _out, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        sampler.join()
    assert proc.returncode == 0, err
    journal = read_journal(journal_files(layout, "g")[-1])
    assert journal.outcome is not None
    assert len(journal.outcome.stdout.encode()) <= 1024 * 1024
    assert journal.outcome.stdout_dropped >= GIB - 1024 * 1024
    assert peak[0] < 200 * 1024 * 1024, f"agent peak RSS {peak[0] / 2**20:.0f} MiB"
    print(
        f"1 GiB stdout: agent peak RSS {peak[0] / 2**20:.1f} MiB"
    )  # figure for docs/reliability.md
    wait_no_leftovers(layout.root)


# --- a host writing into the runtime root --------------------------------------------------------


def _command_goal(layout: Layout, tmp_path: Path, script: str) -> None:
    result = json.dumps({"schema_version": 1, "kind": "progress", "summary": "did it"})
    body = f"{script}; printf '%s' {shlex.quote(result)} > \"$LOOPX_RESULT_FILE\""
    demo_goal(layout, "g", tmp_path / "wd", "sh", "-c", body, kind=HostKind.COMMAND)


TAMPERING = {
    "append-history": 'echo "{}" >> "$LOOPX_ROOT/goals/$LOOPX_GOAL_ID/history.jsonl"',
    "rewrite-state": (
        f"{shlex.quote(sys.executable)} -c \"import json,os; p=os.environ['LOOPX_ROOT']+'/goals/'"
        "+os.environ['LOOPX_GOAL_ID']+'/state.json'; d=json.load(open(p)); "
        "d['beliefs']=['I own this goal']; open(p,'w').write(json.dumps(d))\""
    ),
    "edit-old-journal": 'sed -i "s/did it/forged/" "$LOOPX_ROOT"/goals/$LOOPX_GOAL_ID/turns/*-t000001-*.json',
    "truncate-ledger": ': > "$LOOPX_ROOT/goals/$LOOPX_GOAL_ID/quota.jsonl"',
}


@pytest.mark.parametrize("how", sorted(TAMPERING))
def test_host_writing_into_the_root_is_detected(layout: Layout, tmp_path: Path, how: str) -> None:
    """A host that changes LoopX's files fails its turn as root_tampered; doctor/replay show it."""
    _command_goal(layout, tmp_path, "true")
    assert turn(layout).status == "committed"
    _command_goal_update(layout, tmp_path, TAMPERING[how])
    journal = turn(layout)
    assert journal.failure is not None and journal.failure.reason == "root_tampered", (
        journal.failure
    )
    wait_no_leftovers(layout.root)
    verify = loopx(layout.root, "replay", "g", "--verify")
    doctor = loopx(layout.root, "doctor")
    assert verify.returncode == 1 or doctor.returncode == 1, (verify.stdout, doctor.stdout)
    if how != "edit-old-journal":
        # What the host damaged is rebuilt from the journals.
        assert loopx(layout.root, "replay", "g", "--repair").returncode == 0
        assert loopx(layout.root, "replay", "g", "--verify").returncode == 0


def _command_goal_update(layout: Layout, tmp_path: Path, script: str) -> None:
    result = json.dumps({"schema_version": 1, "kind": "progress", "summary": "did it"})
    body = f"{script}; printf '%s' {shlex.quote(result)} > \"$LOOPX_RESULT_FILE\""
    done = loopx(
        layout.root, "goal", "add", "g", "--update", "--host", shlex.join(["sh", "-c", body])
    )
    assert done.returncode == 0, done.stderr


def test_host_that_only_works_in_its_workdir_is_not_flagged(layout: Layout, tmp_path: Path) -> None:
    """Ordinary hosts (and a human answering a gate meanwhile) are never reported as tampering."""
    demo_goal(layout, "g", tmp_path / "wd", "--steps", "3")
    for _ in range(3):
        journal = turn(layout)
        assert journal.failure is None


def test_host_sigkilled_from_outside_runs_again_under_the_same_turn(
    layout: Layout, tmp_path: Path
) -> None:
    """A SIGKILL LoopX did not send (OOM killer, operator) is retried, not failed."""
    result = json.dumps({"schema_version": 1, "kind": "progress", "summary": "second try"})
    body = (
        f"if [ ! -e killed-once ]; then touch killed-once; kill -9 $$; fi; "
        f"printf '%s' {shlex.quote(result)} > \"$LOOPX_RESULT_FILE\""
    )
    demo_goal(layout, "g", tmp_path / "wd", "sh", "-c", body, kind=HostKind.COMMAND)
    journal = turn(layout)
    assert (
        journal.status,
        journal.attempt,
        journal.result.summary if journal.result else None,
    ) == ("committed", 2, "second try")
    wait_no_leftovers(layout.root)
