"""`loopx status`, `loopx quota should-run` and /metrics agree on a goal's window spend."""

from __future__ import annotations

import math
import re
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loopx.quota.decision import QuotaReason, decide
from loopx.quota.headroom import HostHeadroom
from loopx.quota.ledger import SpendRecord, append_spend, read_spend
from loopx.registry.quota_policy import QuotaPolicy
from loopx.status.current import current_status, refresh_status, status_cache
from loopx.testing.status_fixtures import make_goal, make_root, register_goals
from loopx.usage import Usage
from loopx.web.metrics import render_metrics

T0 = datetime(2025, 5, 1, 12, 0, tzinfo=UTC)
GOAL = "g1"
_BUDGET_REASONS = {
    QuotaReason.WINDOW_EXHAUSTED,
    QuotaReason.CPU_BUDGET_EXHAUSTED,
    QuotaReason.TOKEN_BUDGET_EXHAUSTED,
    QuotaReason.COST_BUDGET_EXHAUSTED,
}


def metric(text: str, name: str) -> float:
    found = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
    assert found is not None, name
    return float(found.group(1))


def by_bucket_rule(records: list[SpendRecord], start: datetime) -> tuple[float, int]:
    """Wall seconds and turns of the window straight from the ledger: a minute's turns
    stay in the window until the minute's last turn has left it."""
    minutes: dict[int, list[SpendRecord]] = {}
    for r in records:
        minutes.setdefault(math.floor(r.ended_at.timestamp() / 60), []).append(r)
    inside = [r for rs in minutes.values() if max(x.ended_at for x in rs) > start for r in rs]
    return math.fsum(r.usage.wall_s for r in inside), len(inside)


turn = st.tuples(
    st.integers(min_value=0, max_value=6 * 3600 * 1000),  # ended_at, ms after T0
    st.floats(min_value=1.0, max_value=500.0),  # wall_s
    st.floats(min_value=0.0, max_value=100.0),  # cpu_s
    st.integers(min_value=0, max_value=50_000),  # tokens
)
# A read's clock: anywhere, or a few ms around the instant a turn's minute leaves the window.
clock = st.one_of(
    st.tuples(st.just(None), st.integers(min_value=0, max_value=8 * 3600 * 1000)),
    st.tuples(st.integers(min_value=0), st.integers(min_value=-1500, max_value=1500)),
)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    turns=st.lists(turn, min_size=1, max_size=30),
    reads=st.lists(st.tuples(st.integers(min_value=0, max_value=8), clock), min_size=1, max_size=6),
    window_hours=st.sampled_from([0.5, 1.0, 3.0]),
    compute=st.sampled_from([0.005, 0.05, 1.0]),
    cpu_seconds=st.sampled_from([None, 30.0, 500.0]),
    max_tokens=st.sampled_from([None, 40_000]),
)
def test_status_should_run_and_metrics_agree_on_window_spend(
    tmp_path: Path, *, turns, reads, window_hours, compute, cpu_seconds, max_tokens
):
    """For any ledger and clock the three readers report the same window spend."""
    # Given a goal whose ledger grows between reads at increasing clocks
    policy = QuotaPolicy(
        compute=compute, window_hours=window_hours, cpu_seconds=cpu_seconds, max_tokens=max_tokens
    )
    records = [
        SpendRecord(
            turn_key=f"{GOAL}-{i:06d}-1",
            goal_id=GOAL,
            seq=i,
            usage=Usage(wall_s=wall, cpu_s=cpu, input_tokens=tokens),
            started_at=T0,
            ended_at=T0 + timedelta(milliseconds=ms),
        )
        for i, (ms, wall, cpu, tokens) in enumerate(turns)
    ]

    def clock_at(spec: tuple[int | None, int]) -> datetime:
        index, ms = spec
        if index is None:
            return T0 + timedelta(milliseconds=ms)
        return records[index % len(records)].ended_at + policy.window + timedelta(milliseconds=ms)

    nows = sorted(clock_at(spec) for _, spec in reads)
    with tempfile.TemporaryDirectory(dir=tmp_path) as tmp:
        layout = make_root(Path(tmp))
        goal = make_goal(GOAL, now=T0, workdir=Path(tmp), quota=policy)
        register_goals(layout, [goal])
        pending = list(records)
        for (count, _), now in zip(reads, nows, strict=True):
            for record in pending[:count]:
                append_spend(layout, record)
            pending = pending[count:]
            room = HostHeadroom(available_memory_mb=8000, load_1m=0, cpu_count=4, measured_at=now)

            # When should-run, status and /metrics each look at the same instant
            decision = decide(layout, goal, now=now, headroom=room)
            refresh_status(layout, now=now, force=True)
            projection = current_status(layout, now=now)
            text = render_metrics(
                status_cache(layout), projection, fleet=None, heartbeats=[], now=now
            )

            # Then they agree exactly, and with the ledger read by the bucket rule.
            # (Not on window_start: a cached view keeps the instant it was projected
            # at until its spend can change, which its recheck_at says.)
            view = projection.goals[0].quota
            assert (
                view.spent_wall_s,
                view.spent_cpu_s,
                view.spent_tokens,
                view.turns_in_window,
            ) == (
                decision.spent_wall_s,
                decision.spent_cpu_s,
                decision.spent_tokens,
                decision.spent_turns,
            )
            assert (view.exhausted is not None) == (decision.reason in _BUDGET_REASONS)
            assert view.refills_at == decision.next_eligible_at
            # /metrics prints 6 significant digits; every turn spends >= 1 s of a
            # total <= 15,000 s, so a turn counted differently would still show.
            shown = metric(text, "loopx_quota_window_spent_wall_seconds")
            assert math.isclose(shown, view.spent_wall_s, rel_tol=1e-5, abs_tol=1e-9)
            wall, count_in = by_bucket_rule(read_spend(layout, GOAL), policy.window_start(now))
            assert view.turns_in_window == count_in
            assert math.isclose(view.spent_wall_s, wall, rel_tol=1e-12, abs_tol=1e-9)
