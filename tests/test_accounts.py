"""Accounts: the pure rules, budgets, the files, and bad input refused with exit 2."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from loopx import exitcodes
from loopx.accounts import observation, rules
from loopx.accounts.envfile import parse_env_text
from loopx.accounts.records import (
    AccountBudget,
    AccountState,
    Condition,
    OnLimit,
    Signal,
    TurnSignal,
)
from loopx.accounts.rollingbudget import AccountSpend, added, breach, raised, totals
from loopx.errors import AccountEnvFileError

NOW = datetime(2026, 12, 1, 19, 3, 34, tzinfo=UTC)


def _turn(signal: Signal, key: str = "g1-1-1#1", goal: str = "g1", **extra: object) -> TurnSignal:
    return TurnSignal.model_validate(
        {"account": "plan", "goal_id": goal, "turn_key": key, "signal": signal, "at": NOW} | extra
    )


def _proven() -> AccountState:
    return AccountState(name="plan", proven=True)


# --- the rules ------------------------------------------------------------------------------------


def test_a_limit_parks_the_account_until_its_reset_and_names_who_saw_it():
    """Until the reset every goal is refused with the limit's words and the reset time."""
    reset = NOW + timedelta(minutes=2)
    state = observation.observe(_proven(), _turn(Signal.LIMIT, reset_at=reset))
    refusal = rules.admit(state, "g2", now=NOW + timedelta(seconds=30))
    assert (state.condition, refusal.allowed, refusal.until) == (Condition.LIMITED, False, reset)
    assert refusal.message == (
        "account plan limited until 19:05:34 UTC (seen by goal g1, turn g1-1-1#1)"
    )


def test_a_replayed_turn_changes_nothing():
    """The same turn applied twice (recovery, a second finisher) is one change."""
    turn = _turn(Signal.LIMIT, reset_at=NOW + timedelta(minutes=2))
    once = observation.observe(_proven(), turn)
    assert observation.observe(once, turn) == once


def test_at_the_reset_one_goal_probes_and_the_others_wait_for_it():
    """The first goal after the reset takes the probe; another is refused until its turn ends."""
    state = observation.observe(_proven(), _turn(Signal.LIMIT, reset_at=NOW + timedelta(minutes=2)))
    after = NOW + timedelta(minutes=3)
    first = rules.admit(state, "g2", now=after)
    assert (first.allowed, first.take_probe) == (True, True)
    held = rules.taken(state, first, "g2", now=after, turn_timeout_s=600)
    second = rules.admit(held, "g3", now=after)
    assert not second.allowed
    assert second.message == "account plan: goal g2 goes first as a probe"


def test_a_probe_through_lets_the_others_follow_staggered():
    """A probe that got through opens the account; the others start one every STAGGER_S."""
    state = observation.observe(_proven(), _turn(Signal.LIMIT, reset_at=NOW))
    probe = rules.taken(state, rules.admit(state, "g2", now=NOW), "g2", now=NOW, turn_timeout_s=60)
    through = observation.observe(probe, _turn(Signal.THROUGH, key="g2-1-1#1", goal="g2"))
    assert (through.condition, through.probe_goal, through.proven) == (Condition.OK, None, True)
    first = rules.admit(through, "g3", now=NOW)
    assert first.allowed
    moved = rules.taken(through, first, "g3", now=NOW, turn_timeout_s=60)
    second = rules.admit(moved, "g1", now=NOW + timedelta(seconds=1))
    assert (second.allowed, second.until) == (False, NOW + timedelta(seconds=rules.STAGGER_S))


def test_a_probe_meeting_the_limit_again_parks_with_a_backoff():
    """A limit hit twice in a row waits at least the backoff, even if the reset said sooner."""
    first = observation.observe(_proven(), _turn(Signal.LIMIT, reset_at=NOW))
    probe = rules.taken(first, rules.admit(first, "g2", now=NOW), "g2", now=NOW, turn_timeout_s=60)
    again = observation.observe(probe, _turn(Signal.LIMIT, key="g2-1-1#1", goal="g2", reset_at=NOW))
    assert again.limit_hits == 2
    assert again.until == NOW + timedelta(seconds=observation.LIMIT_BACKOFF_BASE_S)
    assert again.probe_goal is None


def test_a_limit_without_a_reset_backs_off_briefly_growing_to_a_cap_with_a_probe_each_time():
    """A bare 429: 60 s, doubling per probe that meets it again, at most 15 min; one probe each."""
    state, waits = _proven(), []
    for n in range(1, 8):
        goal = f"g{n}"
        at = state.until or NOW
        if n > 1:  # the backoff ran out: one goal goes first, the others wait for it
            first = rules.admit(state, goal, now=at)
            assert first.take_probe, first
            state = rules.taken(state, first, goal, now=at, turn_timeout_s=60)
            held = rules.admit(state, "other", now=at)
            assert not held.allowed
            assert held.message == f"account plan: goal {goal} goes first as a probe"
        state = observation.observe(
            state, _turn(Signal.LIMIT, key=f"{goal}-1-1#1", goal=goal, at=at)
        )
        assert state.until is not None
        waits.append((state.until - at).total_seconds())
        refusal = rules.admit(state, "other", now=at)
        assert refusal.message == (
            f"account plan rate limited, retry at {state.until:%H:%M:%S} UTC "
            f"(seen by goal {goal}, turn {goal}-1-1#1)"
        )
    assert waits == [60, 120, 240, 480, 900, 900, 900]
    # The provider answering again ends the backoff: the next 429 starts at 60 s once more.
    at = state.until
    state = rules.taken(state, rules.admit(state, "g9", now=at), "g9", now=at, turn_timeout_s=60)
    state = observation.observe(state, _turn(Signal.THROUGH, key="g9-1-1#1", goal="g9", at=at))
    assert (state.condition, state.reset_unknown, state.limit_hits) == (Condition.OK, False, 0)
    again = observation.observe(state, _turn(Signal.LIMIT, key="g9-2-1#1", goal="g9", at=at))
    assert again.until == at + timedelta(seconds=observation.RATE_LIMIT_BASE_S)


def test_a_turn_in_flight_when_the_account_parked_does_not_reopen_it():
    """A turn that got through before the limit, or met it too, leaves the account parked."""
    reset = NOW + timedelta(minutes=2)
    parked = observation.observe(_proven(), _turn(Signal.LIMIT, reset_at=reset))
    through = observation.observe(parked, _turn(Signal.THROUGH, key="g2-1-1#1", goal="g2"))
    assert (through.condition, through.until) == (Condition.LIMITED, reset)
    also = observation.observe(
        parked, _turn(Signal.LIMIT, key="g3-1-1#1", goal="g3", reset_at=reset)
    )
    assert (also.condition, also.limit_hits, also.until) == (Condition.LIMITED, 1, reset)


def test_another_goals_turn_leaves_the_probe_held():
    """Only the probe's own turn releases the probe."""
    state = observation.observe(_proven(), _turn(Signal.LIMIT, reset_at=NOW))
    held = rules.taken(state, rules.admit(state, "g2", now=NOW), "g2", now=NOW, turn_timeout_s=60)
    other = observation.observe(held, _turn(Signal.NONE, key="g3-1-1#1", goal="g3"))
    assert other.probe_goal == "g2"


def test_overload_backs_off_briefly_and_the_fifth_in_a_row_opens_a_gate():
    """Overloads back the account off, bounded, and after N in a row ask a human."""
    state = _proven()
    for n in range(1, observation.OVERLOADS_FOR_GATE + 1):
        state = observation.observe(
            state, _turn(Signal.OVERLOAD, key=f"g1-{n}-1#1", message="high demand")
        )
        if n < observation.OVERLOADS_FOR_GATE:
            assert state.condition is Condition.OVERLOADED
            assert state.until is not None
            assert state.until - NOW <= timedelta(seconds=observation.OVERLOAD_MAX_S)
    assert state.condition is Condition.NEEDS_HUMAN
    assert state.gate is not None
    assert "overloaded 5 turns in a row" in state.gate.question


def test_an_auth_failure_gates_the_account_at_once_with_the_cli_advice():
    """One auth failure parks the account as login_refused, with the CLI's words and the fix."""
    advice = "codex is not authenticated: 401; run `codex login` (or set OPENAI_API_KEY)"
    state = observation.observe(_proven(), _turn(Signal.AUTH, message=advice))
    refusal = rules.admit(state, "g2", now=NOW)
    expected = (Condition.LOGIN_REFUSED, True, False, None)
    assert (state.condition, state.login_refused, refusal.allowed, refusal.until) == expected
    assert "run `codex login`" in refusal.message
    assert state.reason.startswith("login refused: ")
    resolved = observation.resolved(state, now=NOW)
    assert rules.admit(resolved, "g2", now=NOW).take_probe


@pytest.mark.parametrize(
    ("policy", "waits", "gated"),
    [(OnLimit.WAIT, None, False), (OnLimit.GATE, None, True), (OnLimit.WAIT, 0, True)],
)
def test_the_resume_policy_decides_whether_a_limit_waits_or_asks(policy, waits, gated):
    """--on-limit gate, or more limit waits than --max-limit-waits, opens a gate instead."""
    turn = _turn(Signal.LIMIT, reset_at=NOW, on_limit=policy, max_limit_waits=waits)
    state = observation.observe(_proven(), turn)
    assert (state.gate is not None) is gated


def test_a_fresh_named_account_probes_first():
    """Nothing is known of a new account: its first turn goes alone."""
    fresh = AccountState(name="plan")
    probe = rules.admit(fresh, "g1", now=NOW)
    held = rules.taken(fresh, probe, "g1", now=NOW, turn_timeout_s=60)
    assert probe.take_probe
    assert not rules.admit(held, "g2", now=NOW).allowed


# --- budgets --------------------------------------------------------------------------------------


def test_a_budget_breach_says_how_much_and_when_the_window_refills():
    """1,204,000 of 1,000,000 tokens in 24 h: the gate's words, and `raise N` raises the cap."""
    budget = AccountBudget(max_tokens=1_000_000, window_hours=24)
    spend = AccountSpend(name="plan")
    spend = added(spend, "t1#1", at=NOW - timedelta(hours=10), tokens=600_000, cost_usd=0,
                  estimated_usd=0, keep_hours=24)  # fmt: skip
    spend = added(spend, "t2#1", at=NOW, tokens=604_000, cost_usd=0, estimated_usd=0, keep_hours=24)
    found = breach(budget, spend, NOW)
    assert found is not None
    assert found.question("account plan") == (
        "account plan spent 1,204,000 of 1,000,000 tokens in 24 h; answer `raise 2000000`, "
        "or wait until 2026-12-02 09:04 UTC"
    )
    assert raised(budget, found, "raise 2000000") == AccountBudget(max_tokens=2_000_000)
    assert raised(budget, found, "raise 5") is None  # below what was spent
    assert raised(budget, found, "more please") is None


def test_spend_is_fenced_by_turn_key_and_leaves_the_window():
    """A replayed turn adds nothing; spend older than the window is not counted."""
    spend = added(AccountSpend(name="p"), "k#1", at=NOW, tokens=10, cost_usd=1.0,
                  estimated_usd=1.0, keep_hours=1)  # fmt: skip
    assert added(spend, "k#1", at=NOW, tokens=10, cost_usd=1.0, estimated_usd=1.0,
                 keep_hours=1) == spend  # fmt: skip
    assert totals(spend, 1, NOW).tokens == 10
    assert totals(spend, 1, NOW + timedelta(hours=1, minutes=2)).tokens == 0


def test_env_file_lines_are_parsed_and_a_malformed_line_is_named():
    """KEY=VALUE, export, quotes and comments; anything else names its line."""
    text = "# creds\nexport OPENAI_API_KEY='sk-1'\nCODEX_HOME=/x\n"
    assert parse_env_text(text, "f") == {"OPENAI_API_KEY": "sk-1", "CODEX_HOME": "/x"}
    with pytest.raises(AccountEnvFileError, match="line 2 is not KEY=VALUE"):
        parse_env_text("A=1\nnot a line\n", "f")


# --- bad input: one clear line, exit 2, nothing changed --------------------------------------------


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "projections" not in p.parts and not p.name.endswith(".lock")
    }


@pytest.fixture
def with_account(cli, tmp_path):
    """A root with account `plan` (demo hosts) and goal g1 on it."""
    env = tmp_path / "ok.env"
    env.write_text("OPENAI_API_KEY=sk-test-0123456789\n")
    env.chmod(0o600)
    cli.run("account", "add", "plan", "--host-kind", "demo", "--env-file", str(env), check=True)
    work = tmp_path / "w"
    work.mkdir()
    cli.run("goal", "add", "g1", "--objective", "x", "--workdir", str(work), "--host-kind",
            "demo", "--account", "plan", check=True)  # fmt: skip
    return cli


def _refused(cli, *args: str) -> str:
    before = _files(cli.root)
    proc = cli.run(*args)
    assert proc.returncode == exitcodes.USAGE, (args, proc.returncode, proc.stderr)
    assert _files(cli.root) == before, args
    first = proc.stderr.splitlines()[0]
    assert first.startswith("loopx: error: "), proc.stderr
    return first


def test_bad_account_input_is_refused_with_exit_2_and_nothing_changed(with_account, tmp_path):
    """Unknown account, bad env files, malformed --env, removing a used account."""
    cli = with_account
    loose = tmp_path / "loose.env"
    loose.write_text("OPENAI_API_KEY=sk-test-0123456789\n")
    loose.chmod(0o644)
    work = tmp_path / "w"
    cases = {
        ("goal", "add", "g2", "--objective", "x", "--workdir", str(work), "--host-kind", "demo",
         "--account", "nope"): "account 'nope' does not exist",
        ("goal", "add", "g1", "--update", "--account", "nope"): "account 'nope' does not exist",
        ("goal", "add", "g3", "--objective", "x", "--workdir", str(work), "--host-kind", "command",
         "--host", "true", "--account", "plan"): "account 'plan' is for demo hosts",
        ("account", "add", "b", "--host-kind", "demo", "--env-file", str(loose)):
            "mode 0644 lets others read it",
        ("account", "add", "b", "--host-kind", "demo", "--env-file", str(tmp_path / "none")):
            "no such file",
        ("account", "add", "b", "--host-kind", "demo", "--env", "NOEQUALS"): "expected NAME=VALUE",
        ("account", "add", "b", "--host-kind", "demo", "--env", "MY_TOKEN=abc"):
            "credentials do not go on the command line",
        ("account", "add", "plan", "--host-kind", "demo"): "account 'plan' already exists",
        ("account", "edit", "nope", "--on-limit", "gate"): "account 'nope' does not exist",
        ("account", "edit", "plan", "--env-file", str(loose)): "mode 0644",
        ("account", "remove", "plan"): "used by 1 goal(s): g1; nothing was removed",
        ("account", "show", "nope"): "account 'nope' does not exist",
        ("account", "add", "default-codex", "--host-kind", "codex"): "default-<kind>",
    }  # fmt: skip
    for args, words in cases.items():
        assert words in _refused(cli, *args), args


def test_an_import_or_plan_naming_an_unknown_account_registers_nothing(with_account, tmp_path):
    """`goal import` and `batch run` check every goal's account before writing any."""
    cli = with_account
    work = tmp_path / "w"
    lines = tmp_path / "goals.jsonl"
    lines.write_text(
        json.dumps({"id": "i1", "objective": "y", "workdir": str(work), "account": "plan"})
        + "\n"
        + json.dumps({"id": "i2", "objective": "y", "workdir": str(work), "account": "nope"})
        + "\n"
    )
    assert "goals.jsonl:2: account 'nope' does not exist" in _refused(
        cli, "goal", "import", str(lines)
    )
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"goals": [
        {"id": "p1", "objective": "x", "host_kind": "demo", "account": "plan"},
        {"id": "p2", "objective": "x", "host_kind": "demo", "account": "nope"},
    ]}))  # fmt: skip
    proc = cli.run("batch", "run", str(plan), "--agents", "1")
    assert proc.returncode == exitcodes.USAGE, proc.stderr
    assert not (cli.root / "goals" / "p1").exists()


def test_account_list_and_show_never_print_the_credentials(with_account):
    """The env file's values stay in the env file: list, show and status show none of them."""
    cli = with_account
    for args in (("account", "list"), ("account", "show", "plan"), ("status",)):
        out = cli.run(*args, "--json", check=True).stdout
        assert "sk-test-0123456789" not in out
    shown = cli.json("account", "show", "plan")
    assert shown["summary"]["goals"] == ["g1"]
    assert shown["summary"]["state"] == "ok"
    assert os.stat(cli.root / "accounts" / "plan" / "account.json").st_mode & 0o077 == 0


def test_status_shows_an_account_change_at_once_even_warm(with_account):
    """A parked account shows in the next `status --json`, also when its document was stored."""
    from loopx.accounts.accountstore import update_state
    from loopx.root import Layout

    cli = with_account
    before = cli.json("status")
    assert [a["state"] for a in before["accounts"] if a["name"] == "plan"] == ["ok"]
    reset = datetime.now(UTC) + timedelta(minutes=5)
    turn = _turn(Signal.LIMIT, key="g1-9-1#1", reset_at=reset)
    update_state(Layout.at(cli.root), "plan", lambda s: observation.observe(s, turn))
    after = cli.json("status")
    (plan,) = [a for a in after["accounts"] if a["name"] == "plan"]
    assert (plan["state"], plan["waiting"]) == ("limited", ["g1"])
    (g1,) = after["goals"]
    assert (g1["reason"], g1["account"]) == ("waiting", "plan")
    assert g1["explanation"].startswith("account plan limited until ")


def test_max_overloads_sets_how_many_in_a_row_ask_a_human():
    """--max-overloads 2: the second overload in a row opens the gate."""
    state = _proven()
    for n in (1, 2):
        state = observation.observe(state, _turn(Signal.OVERLOAD, key=f"k{n}#1", max_overloads=2))
    assert state.condition is Condition.NEEDS_HUMAN
