"""The warm `loopx quota should-run`: a stored decision (a memo) printed only while it still holds.

The CLI runs for real under Debian's ``faketime`` (a frozen clock), so a warm
answer can be compared byte for byte with what the validated path prints at
the same instant. The host's measured memory and load are the only numbers
that differ between two runs; they are masked before comparing.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from loopx.api import Root
from loopx.quota.ledger import SpendRecord, append_spend
from loopx.quota.warmanswer import memo_path, print_decision
from loopx.registry.goalrecords import GoalStatus
from loopx.registry.goals import open_gate, set_status
from loopx.root import Layout
from loopx.state import update_state
from loopx.turn.lease import claim
from loopx.usage import Usage
from tests.faketime import faketime_env, needs_faketime
from tests.turnkit import cli_env

T1 = datetime(2030, 1, 1, 12, 0, 0, tzinfo=UTC)
T2 = T1 + timedelta(seconds=95)
GOAL = "g"
HOST_NUMBERS = re.compile(rb'("available_memory_mb"|"load_1m"): [-+.e0-9]+')


def add_goal(root: Path, *flags: str) -> Layout:
    env = cli_env()
    base = [sys.executable, "-m", "loopx", "--root", str(root)]
    subprocess.run([*base, "init"], check=True, env=env, capture_output=True)
    subprocess.run(
        [*base, "goal", "add", GOAL, "--objective", "x", *flags],
        check=True, env=env, capture_output=True,
    )  # fmt: skip
    return Layout.at(root)


def should_run(root: Path, *flags: str, at: datetime) -> subprocess.CompletedProcess[bytes]:
    """`loopx quota should-run g` with the clock frozen at ``at``."""
    clock = at.strftime("%Y-%m-%d %H:%M:%S")
    argv = [sys.executable, "-m", "loopx", "--root", str(root), "quota", "should-run", GOAL]
    return subprocess.run(
        [*argv, *flags],
        capture_output=True,
        timeout=60,
        env=cli_env(
            TZ="UTC", NO_FAKE_STAT="1", FAKETIME_DONT_FAKE_MONOTONIC="1", **faketime_env(clock)
        ),
        check=False,
    )


def spend(layout: Layout, wall_s: float, ended_at: datetime, seq: int = 1) -> None:
    append_spend(
        layout,
        SpendRecord(
            turn_key=f"{GOAL}-{seq:06d}-1",
            goal_id=GOAL,
            seq=seq,
            usage=Usage(wall_s=wall_s, cpu_s=1.0),
            started_at=ended_at - timedelta(seconds=wall_s),
            ended_at=ended_at,
        ),
    )


def inode(path: Path) -> int:
    return path.stat().st_ino


def memo_file(layout: Layout, *, as_json: bool = False) -> Path:
    return Path(memo_path(layout, GOAL, as_json=as_json))


def header(path: Path) -> dict[str, object]:
    """A memo's header line."""
    data: dict[str, object] = json.loads(path.read_bytes().split(b"\n", 1)[0])
    return data


# case -> (goal add flags, set-up, expected exit code, expected reason)
CASES: dict[str, tuple[tuple[str, ...], Callable[[Layout], None], int, str]] = {
    "allowed": ((), lambda layout: spend(layout, 30.0, T1 - timedelta(hours=2)), 0, "ok"),
    "paused": ((), lambda layout: set_status(layout, GOAL, GoalStatus.PAUSED, now=T1), 3, "paused"),
    "gate": (
        (),
        lambda layout: open_gate(layout, GOAL, "which API — v2 or v3?", now=T1),
        3,
        "gate_pending",
    ),
    "leased": (
        (),
        lambda layout: claim(layout, GOAL, agent_id="other", now=T1, ttl_s=3600),
        3,
        "leased",
    ),
    "not_yet_eligible": (
        (),
        lambda layout: update_state(
            layout,
            GOAL,
            lambda s: s.model_copy(update={"next_eligible_at": T1 + timedelta(minutes=30)}),
        ),
        3,
        "not_yet_eligible",
    ),
    "window_exhausted": (
        ("--quota-compute", "0.001"),  # 86.4 s of a 24 h window
        lambda layout: spend(layout, 100.0, T1 - timedelta(minutes=10)),
        3,
        "window_exhausted",
    ),
}


@needs_faketime
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_the_warm_answer_is_the_validated_one_byte_for_byte(
    tmp_path: Path, case: str, as_json: bool
) -> None:
    """Stored at T1, printed at T2 from the snapshot: the bytes the validated path prints at T2."""
    flags, set_up, code, reason = CASES[case]
    layout = add_goal(tmp_path / "root", *flags)
    set_up(layout)
    json_flag = ("--json",) if as_json else ()
    stored = memo_file(layout, as_json=as_json)

    first = should_run(layout.root, *json_flag, at=T1)
    assert (first.returncode, first.stderr) == (code, b"")
    assert stored.is_file()
    written = inode(stored)

    warm = should_run(layout.root, *json_flag, at=T2)
    assert inode(stored) == written  # printed from the snapshot, not decided again

    stored.unlink()
    validated = should_run(layout.root, *json_flag, at=T2)
    assert (warm.returncode, warm.stderr) == (validated.returncode, validated.stderr) == (code, b"")
    assert HOST_NUMBERS.sub(rb"\1: N", warm.stdout) == HOST_NUMBERS.sub(rb"\1: N", validated.stdout)
    if as_json:
        document = json.loads(warm.stdout)
        assert (document["reason"], document["decided_at"]) == (reason, "2030-01-01T12:01:35Z")
    else:
        assert warm.stdout.startswith(f"{'yes' if code == 0 else 'no'} ({reason}): ".encode())
    if case in ("not_yet_eligible", "window_exhausted"):
        assert b"(in " in warm.stdout and first.stdout != warm.stdout  # re-rendered for T2


@needs_faketime
def test_time_passing_valid_until_decides_again(tmp_path: Path) -> None:
    """Once the window's spend slides out, the warm path steps aside and the answer changes."""
    layout = add_goal(tmp_path / "root", "--quota-compute", "0.001")
    spend(layout, 100.0, T1 - timedelta(minutes=10))
    assert should_run(layout.root, at=T1).returncode == 3
    stored = memo_file(layout)
    until = header(stored)["valid_until"]
    assert isinstance(until, float)
    assert until == pytest.approx(
        (T1 - timedelta(minutes=10) + timedelta(days=1)).timestamp(), abs=0.01
    )
    before = inode(stored)
    still = should_run(layout.root, at=datetime.fromtimestamp(until - 1, UTC))
    assert (still.returncode, inode(stored)) == (3, before)
    later = should_run(layout.root, at=datetime.fromtimestamp(until + 1, UTC))
    assert later.returncode == 0, later.stdout
    assert later.stdout.startswith(b"yes (ok): ") and inode(stored) != before


def _store(layout: Layout) -> dict[str, object]:
    Root.open(layout.root).quota.should_run(GOAL)
    return header(memo_file(layout))


def _warm(layout: Layout, *, now: datetime | None = None, as_json: bool = False) -> int | None:
    at = (now or datetime.now(UTC)).timestamp()
    return print_decision(layout, GOAL, as_json=as_json, now=at, out=io.BytesIO())


def _rewrite(path: Path) -> None:
    """The same bytes, atomically replaced: a new inode, as every LoopX write makes."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(path.read_bytes())
    os.replace(tmp, path)


CHANGES: dict[str, Callable[[Layout], object]] = {
    "registry.json": lambda layout: _rewrite(layout.registry),
    "goal.json": lambda layout: set_status(layout, GOAL, GoalStatus.PAUSED, now=datetime.now(UTC)),
    "state.json (a gate)": lambda layout: open_gate(layout, GOAL, "ok?", now=datetime.now(UTC)),
    "lease.json": lambda layout: claim(layout, GOAL, agent_id="a", now=datetime.now(UTC)),
    "quota.jsonl": lambda layout: spend(layout, 5.0, datetime.now(UTC), seq=2),
    "quota.agg.json": lambda layout: _rewrite(layout.quota_aggregate_file(GOAL)),
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_each_input_file_change_invalidates_the_snapshot(tmp_path: Path, change: str) -> None:
    layout = add_goal(tmp_path / "root")
    spend(layout, 5.0, datetime.now(UTC) - timedelta(hours=1))
    _store(layout)
    assert _warm(layout) == 0
    assert _warm(layout, as_json=True) == 0
    CHANGES[change](layout)
    assert _warm(layout) is None
    assert _warm(layout, as_json=True) is None


@pytest.mark.parametrize(
    ("set_up", "key"),
    [
        (
            lambda layout: claim(layout, GOAL, agent_id="a", now=datetime.now(UTC), ttl_s=600),
            "lease",
        ),
        (
            lambda layout: update_state(
                layout,
                GOAL,
                lambda s: s.model_copy(
                    update={"next_eligible_at": datetime.now(UTC) + timedelta(minutes=5)}
                ),
            ),
            "next_eligible_at",
        ),
        (lambda layout: spend(layout, 5.0, datetime.now(UTC) - timedelta(hours=3)), "spend"),
    ],
    ids=["lease", "next_eligible_at", "spend"],
)
def test_valid_until_is_the_first_instant_the_answer_may_change(
    tmp_path: Path, set_up: Callable[[Layout], object], key: str
) -> None:
    layout = add_goal(tmp_path / "root")
    set_up(layout)
    until = _store(layout)["valid_until"]
    assert isinstance(until, float)
    expected = {
        "lease": lambda: json.loads(layout.lease_file(GOAL).read_bytes())["expires_at"],
        "next_eligible_at": lambda: json.loads(layout.state_file(GOAL).read_bytes())[
            "next_eligible_at"
        ],
        "spend": lambda: None,
    }[key]()
    if expected is not None:
        at = datetime.fromisoformat(expected).timestamp()
        assert at - 0.01 < until < at
    else:  # the turn ended 3 h ago and leaves the 24 h window 21 h from now
        assert until == pytest.approx(datetime.now(UTC).timestamp() + 21 * 3600, abs=60)
    assert _warm(layout, now=datetime.fromtimestamp(until - 0.5, UTC)) is not None
    assert _warm(layout, now=datetime.fromtimestamp(until, UTC)) is None


@pytest.mark.parametrize(
    "damage",
    [
        b"",
        b"{not json",
        b"[]",
        b'{"schema_version": 1}',
        None,  # stored for another registry
        "version",
    ],
    ids=["empty", "torn", "not-an-object", "partial", "foreign", "other-release"],
)
def test_a_damaged_or_foreign_snapshot_means_the_validated_path(
    tmp_path: Path, damage: bytes | str | None
) -> None:
    layout = add_goal(tmp_path / "root")
    stored = _store(layout)
    path = memo_file(layout)
    body = path.read_bytes().split(b"\n", 1)[1]
    if damage is None or damage == "version":
        version, registry = str(stored["key"]).split("\0")
        key = f"{version}\0/elsewhere/registry.json" if damage is None else f"0.0.1\0{registry}"
        path.write_bytes(json.dumps(stored | {"key": key}).encode() + b"\n" + body)
    else:
        assert isinstance(damage, bytes)
        path.write_bytes(damage)
    assert _warm(layout) is None
    done = subprocess.run(
        [sys.executable, "-m", "loopx", "--root", str(layout.root), "quota", "should-run", GOAL],
        capture_output=True, env=cli_env(), check=False,
    )  # fmt: skip
    assert (done.returncode, done.stderr) == (0, b"")
    assert done.stdout.startswith(b"yes (ok): ")
    assert _warm(layout) == 0  # the validated path stored a good one again


def test_a_goal_with_a_host_guard_is_always_decided_live(tmp_path: Path) -> None:
    layout = add_goal(tmp_path / "root", "--min-free-memory-mb", "1")
    assert Root.open(layout.root).quota.should_run(GOAL).allowed
    assert not memo_file(layout).exists()


def test_a_decision_for_another_instant_is_not_stored(tmp_path: Path) -> None:
    """`should_run(now=...)` answers a what-if; only the real clock's answer is kept."""
    layout = add_goal(tmp_path / "root")
    Root.open(layout.root).quota.should_run(GOAL, now=datetime.now(UTC) + timedelta(days=3))
    assert not memo_file(layout).exists()
