"""The canary: a host kind's CLI probed before the fleet trusts it, quarantined on drift.

The CLIs here are the fakes of ``loopx.testing`` (they answer ``--version``,
``--help`` and two resumed turns as the real ones do), and wrappers around
them that drift: one renames a flag the adapter passes, one prints another
version. The real CLIs pass the same probe in tests/realhosts/test_canary_real.py.
"""

from __future__ import annotations

import json
import os
import urllib.request
from datetime import timedelta
from pathlib import Path

import pytest

from loopx.agents.canary.echo import ANSWER, EchoServer
from loopx.agents.canary.probe import probe
from loopx.hostcanary import (
    Fingerprint,
    HostsFile,
    ProbeOutcome,
    ProbeResult,
    TrustStatus,
    accept,
    accept_version,
    apply_probe,
    quarantine_reason,
    read_hosts,
    record_probe,
    stale_kinds,
    within_range,
)
from loopx.model import utcnow
from loopx.notify.deliver import run_notify
from loopx.root import Layout
from loopx.supervisor.canary import CanaryDuty
from loopx.testing import install_fake_host
from tests.fleet_helpers import (
    kill_everything,
    leftovers,
    sigterm_and_wait,
    start_supervisor,
    wait_for,
)
from tests.test_notify_delivery import Receiver, _projection
from tests.turnkit import loopx_here

pytestmark = pytest.mark.timeout(60)


def _fakes(tmp_path: Path, *kinds: str) -> Path:
    bin_dir = tmp_path / "bin"
    for kind in kinds:
        install_fake_host(bin_dir, kind)
    return bin_dir


def _path(bin_dir: Path) -> str:
    return f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}"


def _wrap(bin_dir: Path, kind: str, *scripts: str) -> None:
    """Put a shell wrapper in front of the fake ``bin_dir/kind``: the drifted CLI."""
    real = bin_dir / "real" / kind
    real.parent.mkdir(exist_ok=True)
    if not real.exists():
        (bin_dir / kind).rename(real)
    wrapper = bin_dir / kind
    body = "\n".join(scripts)
    wrapper.write_text(f'#!/bin/sh\nREAL="{real}"\n{body}\nexec "$REAL" "$@"\n')
    wrapper.chmod(0o755)


# claude whose --output-format is now --output-fmt: refused, and so named in --help.
RENAME_FLAG = (
    'for a in "$@"; do [ "$a" = --output-format ] && '
    "{ echo \"error: unknown option '--output-format'\" >&2; exit 1; }; done\n"
    '[ "$1" = --help ] && { "$REAL" --help | sed s/--output-format/--output-fmt/; exit 0; }'
)
# claude that prints another version and otherwise behaves as before.
OTHER_VERSION = '[ "$1" = --version ] && { echo "2.1.340 (Claude Code)"; exit 0; }'


def _failed(kind: str, version: str = "9.9.9", detail: str = "--x missing") -> ProbeResult:
    fingerprint = Fingerprint(path=f"/bin/{kind}", size=1, mtime_ns=1, version=version)
    return ProbeResult(
        kind=kind,
        outcome=ProbeOutcome.FLAG_MISSING,
        detail=detail,
        fingerprint=fingerprint,
        checked_at=utcnow(),
    )


# --- the rules ----------------------------------------------------------------------------------


def test_a_failed_probe_quarantines_and_a_passed_one_or_an_accepted_version_lifts_it():
    """Quarantined with the reason; trusted again by a pass, or by accepting that version."""
    hosts = apply_probe(HostsFile(), _failed("claude"))
    assert quarantine_reason(hosts, "claude") == "host claude: 9.9.9 untested: --x missing"
    assert quarantine_reason(hosts, "codex") is None
    passed = _failed("claude").model_copy(update={"outcome": ProbeOutcome.PASSED, "detail": ""})
    assert quarantine_reason(apply_probe(hosts, passed), "claude") is None
    accepted = accept(hosts, "claude", "9.9.9")
    assert accepted.kinds["claude"].status is TrustStatus.TRUSTED
    # The accepted version failing again stays trusted; another version does not.
    assert quarantine_reason(apply_probe(accepted, _failed("claude")), "claude") is None
    assert quarantine_reason(apply_probe(accepted, _failed("claude", "9.9.10")), "claude")


def test_a_binary_whose_size_or_mtime_moved_is_probed_again():
    """stale_kinds compares each binary's stat with the fingerprint last probed."""
    hosts = apply_probe(HostsFile(), _failed("claude"))
    assert stale_kinds(hosts, {"claude": (1, 1)}) == []
    assert stale_kinds(hosts, {"claude": (2, 1), "codex": (5, 5)}) == ["claude", "codex"]
    assert within_range("2.1.300", ["2.1.197", "2.1.332"]) is True
    assert within_range("2.1.340", ["2.1.197", "2.1.332"]) is False
    assert within_range("1.0.0", []) is None


# --- the probe ----------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["codex", "claude", "gemini"])
def test_the_fake_clis_pass_the_probe(tmp_path, kind):
    """Version, flags and the two-turn smoke pass for a CLI that behaves as its adapter expects."""
    bin_dir = _fakes(tmp_path, kind)
    result = probe(kind, now=utcnow(), path=str(bin_dir))
    assert (result.outcome, result.detail, result.tested, result.smoke) == (
        ProbeOutcome.PASSED,
        "",
        True,
        True,
    )


def test_a_renamed_flag_quarantines_the_kind_and_accept_trusts_it(tmp_path, layout, monkeypatch):
    """`hosts check` finds --output-format gone from --help: quarantined; --accept lifts it."""
    bin_dir = _fakes(tmp_path, "claude")
    _wrap(bin_dir, "claude", RENAME_FLAG)
    monkeypatch.setenv("PATH", _path(bin_dir))
    done = loopx_here(layout.root, "hosts", "check", "claude", "--json")
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert (report["probe"]["outcome"], report["host"]["status"]) == ("flag_missing", "quarantined")
    assert report["host"]["reason"] == (
        "host claude: 2.1.197 tested: --output-format missing from `claude --help`"
    )
    accepted = loopx_here(layout.root, "hosts", "check", "claude", "--accept", "--json")
    assert accepted.returncode == 0, accepted.stderr
    host = json.loads(accepted.stdout)["host"]
    assert (host["status"], host["accepted_versions"]) == ("trusted", ["2.1.197"])


def _probed(duty: CanaryDuty, now: float, kinds: list[str]) -> None:
    assert duty.step(now) == kinds
    assert duty.probe is not None
    wait_for(
        "the probe to finish", lambda: duty.probe is not None and duty.probe.poll() is not None
    )
    assert duty.probe.returncode == 0


def test_another_version_is_probed_when_the_binary_changes(tmp_path, layout, monkeypatch):
    """The duty probes at start, not again while nothing moves, and again once claude changed."""
    bin_dir = _fakes(tmp_path, "claude")
    monkeypatch.setenv("PATH", _path(bin_dir))
    duty = CanaryDuty(layout, os.environ)
    try:
        _probed(duty, 0.0, ["claude"])  # at start
        assert read_hosts(layout).kinds["claude"].last.fingerprint.version == "2.1.197"
        assert duty.step(20.0) == []  # nothing moved
        _wrap(bin_dir, "claude", OTHER_VERSION)
        _probed(duty, 40.0, ["claude"])
    finally:
        duty.stop()
    record = read_hosts(layout).kinds["claude"]
    assert (record.status, record.last.fingerprint.version, record.last.tested) == (
        TrustStatus.TRUSTED,
        "2.1.340",
        False,
    )
    listing = loopx_here(layout.root, "hosts", "--json")
    views = {h["kind"]: h for h in json.loads(listing.stdout)["hosts"]}
    assert (views["claude"]["version"], views["claude"]["within_tested_range"]) == (
        "2.1.340",
        False,
    )


def test_a_drifted_binary_quarantines_its_kind_within_one_probe(tmp_path, layout, monkeypatch):
    """claude replaced by a 2.1.340 without --output-format: quarantined, codex still trusted."""
    bin_dir = _fakes(tmp_path, "claude", "codex")
    monkeypatch.setenv("PATH", _path(bin_dir))
    duty = CanaryDuty(layout, os.environ)
    try:
        _probed(duty, 0.0, ["claude", "codex"])
        _wrap(bin_dir, "claude", OTHER_VERSION, RENAME_FLAG)
        _probed(duty, 20.0, ["claude"])
    finally:
        duty.stop()
    hosts = read_hosts(layout)
    assert quarantine_reason(hosts, "claude") == (
        "host claude: 2.1.340 untested: --output-format missing from `claude --help`"
    )
    assert quarantine_reason(hosts, "codex") is None


def test_the_supervisor_probes_the_host_clis_when_it_starts(tmp_path, root):
    """A supervisor with a drifted claude on PATH quarantines it at start, and leaves no probe."""
    bin_dir = _fakes(tmp_path, "claude")
    _wrap(bin_dir, "claude", RENAME_FLAG)
    proc = start_supervisor(root, "--agents", "1", PATH=f"{bin_dir}:/usr/bin:/bin")
    try:
        layout = Layout.at(root)
        reason = wait_for("claude probed", lambda: quarantine_reason(read_hosts(layout), "claude"))
        assert reason == "host claude: 2.1.197 tested: --output-format missing from `claude --help`"
        assert sigterm_and_wait(proc) == 0
        assert leftovers(root) == []
    finally:
        kill_everything(root, proc)


# --- what a quarantine does ---------------------------------------------------------------------


def _goal(root: Path, goal_id: str, kind: str, work: Path) -> None:
    work.mkdir(exist_ok=True)
    done = loopx_here(
        root, "goal", "add", goal_id, "--objective", "x", "--workdir", str(work),
        "--host-kind", kind,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


def test_goals_of_a_quarantined_kind_wait_with_the_reason_while_others_turn(
    tmp_path, layout, monkeypatch
):
    """A claude goal waits (host_quarantined, not failed); a codex goal commits its turn."""
    monkeypatch.setenv("PATH", _path(_fakes(tmp_path, "claude", "codex")))
    _goal(layout.root, "c1", "claude", tmp_path / "w1")
    _goal(layout.root, "x1", "codex", tmp_path / "w2")
    record_probe(layout, _failed("claude", "2.1.340", "--output-format missing"))
    waited = loopx_here(layout.root, "turn", "run-once", "c1", "--json")
    attempt = json.loads(waited.stdout)
    assert attempt["report"] is None, attempt
    assert attempt["quota"]["reason"] == "host_quarantined"
    assert attempt["quota"]["message"] == "host claude: 2.1.340 untested: --output-format missing"
    ran = json.loads(loopx_here(layout.root, "turn", "run-once", "x1", "--json").stdout)
    assert ran["report"]["status"] == "committed", ran
    shown = json.loads(loopx_here(layout.root, "goal", "show", "c1", "--json").stdout)
    assert (shown["goal"]["status"], shown["state"]["turn_seq"]) == ("active", 0)


def test_a_quarantine_is_one_notification_and_its_end_another(layout: Layout):
    """Two passes during the quarantine send one message; trusting the kind again sends one more."""
    receiver = Receiver()
    try:
        done = loopx_here(layout.root, "notify", "add", receiver.url, "--events", "host")
        assert done.returncode == 0, done.stderr
        now = utcnow()
        run_notify(layout, now=now, project=lambda: _projection(now))
        record_probe(layout, _failed("claude", "2.1.340", "--output-format missing"))
        for seconds in (1, 2):
            at = now + timedelta(seconds=seconds)
            run_notify(layout, now=at, project=lambda at=at: _projection(at))
        assert len(receiver.bodies) == 1
        assert "host claude: 2.1.340 untested" in json.dumps(receiver.bodies[0])
        passed = _failed("claude").model_copy(update={"outcome": ProbeOutcome.PASSED})
        record_probe(layout, passed)
        at = now + timedelta(seconds=3)
        run_notify(layout, now=at, project=lambda: _projection(at))
        assert len(receiver.bodies) == 2
        assert "trusted again" in json.dumps(receiver.bodies[1])
    finally:
        receiver.close()


def test_the_echo_endpoint_answers_on_loopback_with_the_fixed_reply():
    """The probe's endpoint listens on 127.0.0.1 and answers a Messages API call with the echo."""
    with EchoServer() as echo:
        assert echo.url.startswith("http://127.0.0.1:")
        body = json.dumps({"model": "m", "messages": []}).encode()
        request = urllib.request.Request(f"{echo.url}/v1/messages", data=body, method="POST")
        with urllib.request.urlopen(request, timeout=10) as reply:
            answer = json.loads(reply.read())
        assert answer["content"][0]["text"] == ANSWER
        assert len(echo.requests) == 1


def test_status_shows_a_quarantined_kinds_goals_waiting_on_a_person_until_accepted(
    tmp_path, layout, monkeypatch
):
    """`status --json` says why (warm or cold); after `--accept` the goal is ready again."""
    monkeypatch.setenv("PATH", _path(_fakes(tmp_path, "claude", "codex")))
    _goal(layout.root, "c1", "claude", tmp_path / "w1")
    _goal(layout.root, "x1", "codex", tmp_path / "w2")

    def views() -> dict[str, dict]:
        done = loopx_here(layout.root, "status", "--json")
        return {g["goal_id"]: g for g in json.loads(done.stdout)["goals"]}

    assert views()["c1"]["reason"] == "ready"  # a status memo exists before the quarantine
    record_probe(layout, _failed("claude", "2.1.340", "--output-format missing"))
    shown = views()
    assert (shown["c1"]["reason"], shown["c1"]["actor"], shown["c1"]["host_kind"]) == (
        "waiting",
        "human",
        "claude",
    )
    assert shown["c1"]["explanation"].startswith(
        "host claude: 2.1.340 untested: --output-format missing (`loopx hosts check claude`"
    )
    assert shown["x1"]["reason"] == "ready"
    accept_version(layout, "claude", "2.1.340", now=utcnow())
    assert views()["c1"]["reason"] == "ready"
