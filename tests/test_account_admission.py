"""Admission before the wall: usage windows read from each CLI, kept per account, and the mark."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from loopx import exitcodes
from loopx.accounts import observation, rules
from loopx.accounts.accountstore import update_state
from loopx.accounts.records import AccountState, Condition, Signal, TurnSignal
from loopx.accounts.windows import AdmissionPolicy, UsageWindow, merged, parse_mark, with_marks
from loopx.agents.hosts.base import Interpretation
from loopx.agents.hosts.codex import CodexHost
from loopx.agents.hosts.reportedwindows import claude_windows, codex_windows
from loopx.root import Layout
from loopx.state import HostSession
from loopx.testing import install_fake_host

CAPTURES = Path(__file__).parent / "realhosts" / "captures"
NOW = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
RESET = datetime(2026, 12, 6, 14, 5, tzinfo=UTC)


def _window(used: float, name: str = "primary", **extra: object) -> UsageWindow:
    values = {"name": name, "used_percent": used, "window_minutes": 300, "resets_at": RESET}
    return UsageWindow.model_validate(values | extra)


def _state(*windows: UsageWindow) -> AccountState:
    seen = [w.model_copy(update={"seen_at": NOW - timedelta(minutes=1)}) for w in windows]
    return AccountState(name="work", proven=True, windows=seen)


def _turn(*windows: UsageWindow, key: str = "g1-t000001-e1#1", at: datetime = NOW) -> TurnSignal:
    return TurnSignal(
        account="work", goal_id="g1", turn_key=key, signal=Signal.THROUGH, at=at,
        windows=list(windows),
    )  # fmt: skip


# --- what each CLI reports ------------------------------------------------------------------------


def test_codex_windows_are_read_from_its_recorded_session_file():
    """codex 0.171's token_count record: primary 96% of 300 min, secondary 40.5% of a week."""
    text = (CAPTURES / "codex-0.171.0-session-windows.jsonl").read_text()
    got = {w.name: (w.used_percent, w.window_minutes, w.resets_at) for w in codex_windows(text)}
    assert got == {
        "primary": (96.0, 300, datetime.fromtimestamp(1796555809, UTC)),
        "secondary": (40.5, 10080, datetime.fromtimestamp(1796811409, UTC)),
    }
    assert {w.seen_at for w in codex_windows(text)} == {
        datetime(2026, 12, 6, 10, 16, 49, 909000, tzinfo=UTC)
    }


def test_claude_windows_are_read_from_its_recorded_rate_limit_event():
    """claude 2.1.197 stream-json: rate_limit_event five_hour at utilization 0.96."""
    text = (CAPTURES / "claude-2.1.197-stream-windows.jsonl").read_text()
    (five,) = claude_windows(text)
    assert (five.name, five.used_percent, five.resets_at) == (
        "five_hour",
        96.0,
        datetime.fromtimestamp(1796556232, UTC),
    )


def test_a_rejected_claude_window_is_full_and_junk_is_skipped():
    """status rejected is 100%; lines that are not rate_limit_event (or not JSON) are skipped."""
    lines = [
        "not json",
        (
            '{"type":"rate_limit_event","rate_limit_info":{"status":"rejected",'
            '"rateLimitType":"seven_day_opus","resetsAt":1796556232}}'
        ),
        '{"type":"rate_limit_event","rate_limit_info":{"status":"allowed"}}',
    ]
    assert [(w.name, w.used_percent) for w in claude_windows("\n".join(lines))] == [
        ("seven_day_opus", 100.0)
    ]


def test_codex_finds_the_threads_session_file_under_codex_home(tmp_path):
    """``$CODEX_HOME/sessions/Y/M/D/rollout-...-<thread>.jsonl``; an unsafe thread id finds none."""
    thread = "01a24adb-3562-74b1-b6c3-68bf485fd047"
    day = tmp_path / "sessions" / "2026" / "12" / "06"
    day.mkdir(parents=True)
    path = day / f"rollout-2026-12-06T10-16-49-{thread}.jsonl"
    path.write_text("{}\n")
    env = {"CODEX_HOME": str(tmp_path)}

    def reading(session_id: str) -> Interpretation:
        return Interpretation(session=HostSession(kind="codex", session_id=session_id))

    assert CodexHost().records_file(env, reading(thread)) == path
    assert CodexHost().records_file(env, reading("../../etc")) is None


# --- the account keeps the newest report of each window --------------------------------------------


def test_a_turns_windows_are_kept_and_an_older_replay_changes_nothing():
    """Each window keeps its newest report, whatever the turn's signal; a replay is a no-op."""
    first = observation.observe(_state(), _turn(_window(90.0), _window(40.0, "secondary")))
    later = observation.observe(
        first, _turn(_window(96.0), key="g1-t000002-e1#1", at=NOW + timedelta(1))
    )
    replayed = observation.observe(later, _turn(_window(90.0)))
    assert [(w.name, w.used_percent) for w in later.windows] == [
        ("primary", 96.0),
        ("secondary", 40.0),
    ]
    assert replayed == later
    assert merged(later.windows, [], at=NOW) == later.windows


# --- the mark ---------------------------------------------------------------------------------------


def test_past_the_mark_no_goal_is_admitted_until_the_window_resets_and_says_why():
    """96% of the 5-hour window against the default 95%: refused until the reset, in words."""
    state = _state(_window(96.0), _window(40.0, "secondary", window_minutes=10080))
    refusal = rules.admit(state, "g1", now=NOW)
    assert (refusal.allowed, refusal.until) == (False, RESET)
    assert refusal.message == "account work: 5-hour window at 96%, resets 14:05 UTC"
    assert not rules.account_admits(state, "g1", now=NOW)  # a hand-off's reason to go elsewhere
    assert rules.admit(state, "g1", now=RESET).allowed  # the window reset: nothing known is held


@pytest.mark.parametrize(
    ("policy", "priority", "allowed"),
    [
        (AdmissionPolicy(), 10, False),
        (AdmissionPolicy(past_priority=5), 6, True),
        (AdmissionPolicy(past_priority=5), 5, False),
        (AdmissionPolicy(past_priority=5), None, False),
        (AdmissionPolicy(until_percent=None), 0, True),
        (AdmissionPolicy(windows={"primary": None}), 0, True),
        (AdmissionPolicy(until_percent=97.0), 0, True),
        (AdmissionPolicy(until_percent=None, windows={"primary": 90.0}), 0, False),
    ],
)
def test_the_policy_says_where_admission_stops_and_who_still_starts(policy, priority, allowed):
    """The mark per window, off, and goals above --admit-past-priority."""
    state = _state(_window(96.0))
    assert rules.admit(state, "g1", now=NOW, policy=policy, priority=priority).allowed is allowed


def test_without_a_window_report_admission_is_as_before():
    """No window known: every earlier rule decides alone (a probe, a limit)."""
    assert rules.admit(AccountState(name="work", proven=True), "g1", now=NOW).allowed
    limited = AccountState(name="work", proven=True, condition=Condition.LIMITED, until=RESET)
    assert rules.admit(limited, "g1", now=NOW).message.startswith("account work limited until")


def test_a_window_without_a_reset_counts_for_its_length_only():
    """A report that is never renewed holds the account at most its window's length."""
    state = _state(_window(99.0, resets_at=None, window_minutes=60))
    assert not rules.admit(state, "g1", now=NOW).allowed
    assert rules.admit(state, "g1", now=NOW + timedelta(minutes=60)).allowed


def test_a_new_report_below_the_mark_leaves_every_goals_admission_as_it_was():
    """The scheduler looks at an account's goals again only when a report crosses the mark."""
    policy = AdmissionPolicy()
    before = observation.observe(_state(), _turn(_window(80.0)))
    below = observation.observe(
        before, _turn(_window(90.0), key="g1-t000002-e1#1", at=NOW + timedelta(1))
    )
    over = observation.observe(
        below, _turn(_window(96.0), key="g1-t000003-e1#1", at=NOW + timedelta(2))
    )
    assert rules.same_admission((before, policy), (below, policy), now=NOW)
    assert not rules.same_admission((below, policy), (over, policy), now=NOW)
    assert not rules.same_admission(
        (over, policy), (over, AdmissionPolicy(past_priority=1)), now=NOW
    )


def test_marks_are_parsed_from_the_command_line():
    """95%, 95, off, NAME=80%, NAME=off; anything else is refused."""
    assert [parse_mark(t) for t in ("95%", "90", "off", "weekly=80%", "primary=off")] == [
        (None, 95.0),
        (None, 90.0),
        (None, None),
        ("weekly", 80.0),
        ("primary", None),
    ]
    policy = with_marks(AdmissionPolicy(), ["90%", "secondary=off"], past_priority=3)
    assert policy == AdmissionPolicy(
        until_percent=90.0, windows={"secondary": None}, past_priority=3
    )
    assert with_marks(policy, no_past=True).past_priority is None
    for bad in ("0%", "ninety", "2000%"):
        with pytest.raises(ValueError, match="not a percentage"):
            parse_mark(bad)


# --- the CLI, status ------------------------------------------------------------------------------


@pytest.fixture
def work_account(cli, tmp_path):
    """Account `work` (demo hosts) with goals low (priority 0) and high (priority 9) on it."""
    cli = cli.in_process()
    cli.run("account", "add", "work", "--host-kind", "demo", check=True)
    for goal_id, priority in (("low", "0"), ("high", "9")):
        workdir = tmp_path / goal_id
        workdir.mkdir()
        cli.run("goal", "add", goal_id, "--objective", "x", "--workdir", str(workdir),
                "--host-kind", "demo", "--account", "work", "--priority", priority,
                check=True)  # fmt: skip
    return cli


def _report(cli, used: float) -> None:
    soon = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=2)
    window = _window(used, resets_at=soon)
    turn = _turn(window, at=datetime.now(UTC))
    proven = AccountState(name="work", proven=True)
    update_state(Layout.at(cli.root), "work", lambda s: observation.observe(proven, turn))


def test_account_edit_sets_the_mark_and_show_draws_each_window(work_account):
    """--admit-until and --admit-past-priority land in account.json; show has the bars."""
    cli = work_account
    cli.run("account", "edit", "work", "--admit-until", "90%", "--admit-until", "secondary=off",
            "--admit-past-priority", "5", check=True)  # fmt: skip
    _report(cli, 93.0)
    shown = cli.json("account", "show", "work")
    assert shown["account"]["admission"] == {
        "until_percent": 90.0,
        "windows": {"secondary": None},
        "past_priority": 5,
    }
    (bar,) = shown["summary"]["windows"]
    assert (bar["label"], bar["used_percent"], bar["mark"], bar["past_mark"]) == (
        "5-hour",
        93.0,
        90.0,
        True,
    )
    text = cli.run("account", "show", "work", check=True).stdout
    assert "5-hour [###################-] 93% (mark 90%), resets " in text
    assert "goals above priority 5 still start" in text
    proc = cli.run("account", "edit", "work", "--admit-until", "lots")
    assert proc.returncode == exitcodes.USAGE, proc.stderr
    assert "--admit-until: 'lots' is not a percentage" in proc.stderr


def test_status_holds_the_goals_below_the_priority_and_says_why(work_account):
    """Past the mark the low goal waits with the window in words; the high one is let past."""
    cli = work_account
    cli.run("account", "edit", "work", "--admit-past-priority", "5", check=True)
    _report(cli, 96.0)
    status = cli.json("status")
    goals = {g["goal_id"]: g for g in status["goals"]}
    assert [a["waiting"] for a in status["accounts"] if a["name"] == "work"] == [["low"]]
    assert cli.json("account", "show", "work")["summary"]["waiting"] == ["low"]
    assert goals["low"]["reason"] == "waiting"
    assert goals["low"]["explanation"].startswith("account work: 5-hour window at 96%, resets ")
    assert goals["high"]["reason"] == "ready"
    refused = cli.run("turn", "run-once", "low", "--json")
    assert refused.returncode == exitcodes.NOT_ALLOWED, refused.stdout


def test_a_codex_turn_reporting_96_percent_stops_the_accounts_next_turn(cli, tmp_path, monkeypatch):
    """Fake codex records 80% then 96% in its session file; the third turn does not start."""
    bin_dir = tmp_path / "bin"
    install_fake_host(bin_dir, "codex")
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv("FAKE_CODEX_HOME", str(tmp_path / "fake-codex"))
    monkeypatch.setenv("FAKE_CODEX_LOG", str(tmp_path / "codex.log"))
    monkeypatch.setenv("FAKE_CODEX_USED_PERCENT", "80,96")
    cli = cli.in_process()
    cli.run("account", "add", "work", "--host-kind", "codex", check=True)  # its own CODEX_HOME
    workdir = tmp_path / "w"
    workdir.mkdir()
    cli.run("goal", "add", "c1", "--objective", "x", "--workdir", str(workdir),
            "--host-kind", "codex", "--account", "work", check=True)  # fmt: skip
    runs = [cli.run("turn", "run-once", "c1", "--json") for _ in range(3)]
    assert [p.returncode for p in runs] == [exitcodes.OK, exitcodes.OK, exitcodes.NOT_ALLOWED]
    assert len((tmp_path / "codex.log").read_text().splitlines()) == 2  # no third codex run
    message = json.loads(runs[2].stdout)["quota"]["message"]
    assert message.startswith("account work: 5-hour window at 96%, resets ")
    journal = max((cli.root / "goals" / "c1" / "turns").glob("*.json"))
    reported = json.loads(journal.read_text())["outcome"]["windows"]
    assert [(w["name"], w["used_percent"]) for w in reported] == [
        ("primary", 96.0),
        ("secondary", 40.0),
    ]


# --- the provider's headers, as a sandboxed turn's proxy saw them ----------------------------------


def test_the_proxy_s_headers_become_the_windows_the_clis_name():
    """Codex's x-codex-* and Anthropic's unified headers, in the names the CLIs report."""
    from loopx.accounts.headerwindows import header_windows

    reset = int(RESET.timestamp())
    seen = {
        "x-codex-primary-used-percent": ("96.0", NOW),
        "x-codex-primary-window-minutes": ("300", NOW),
        "x-codex-primary-reset-at": (str(reset), NOW),
        "x-codex-secondary-used-percent": ("40", NOW),
        "x-codex-secondary-reset-after-seconds": ("3600", NOW),
        "anthropic-ratelimit-unified-5h-utilization": ("0.9712", NOW),
        "anthropic-ratelimit-unified-5h-reset": (str(reset), NOW),
        "anthropic-ratelimit-unified-7d_opus-utilization": ("0.1", NOW),
        "anthropic-ratelimit-unified-7d-utilization": ("not a number", NOW),
        "retry-after": ("30", NOW),
    }
    windows = {w.name: w for w in header_windows(seen)}
    assert sorted(windows) == ["five_hour", "primary", "secondary", "seven_day_opus"]
    primary = windows["primary"]
    assert (primary.used_percent, primary.window_minutes, primary.resets_at) == (96.0, 300, RESET)
    assert windows["secondary"].resets_at == NOW + timedelta(hours=1)
    assert round(windows["five_hour"].used_percent, 2) == 97.12
    assert windows["five_hour"].seen_at == NOW


def test_headers_a_sandboxed_turn_recorded_hold_the_account_past_its_mark(tmp_path):
    """The proxy's record of a 96% window refuses the next turn, as a CLI's report would."""
    import loopx
    from loopx.accounts.accountfiles import held_account
    from loopx.accounts.headers import record_headers
    from loopx.model import utcnow

    root = loopx.Root.open(tmp_path / "root", create=True)
    root.accounts.add("work", host_kind="codex")
    layout = Layout.at(tmp_path / "root")
    held = held_account(layout, "work")
    assert rules.account_admits(held.state, "g1", now=utcnow(), policy=held.policy)
    later = int((utcnow() + timedelta(hours=2)).timestamp())
    record_headers(layout, "work", {
        "x-codex-primary-used-percent": "96.0",
        "x-codex-primary-window-minutes": "300",
        "x-codex-primary-reset-at": str(later),
    })  # fmt: skip
    held = held_account(layout, "work")
    refusal = rules.admit(held.state, "g1", now=utcnow(), policy=held.policy)
    assert not refusal.allowed
    assert refusal.message.startswith("account work: 5-hour window at 96%, resets ")
